// Regression test (fixed in 1d96d3f): memory_staged.stage checks the rank of its shared-memory slot. The slot holds
// one 2-D tile (multi-buffering is the separate `depth` property); a rank-3 or rank-1 slot once verified, so the error
// surfaced only later (memory_staged.dot's "operands must be 2-D"), or never for a slot that feeds no dot.
// RUN: amk-opt %s --split-input-file --verify-diagnostics | filecheck %s

memory_staged.kernel @stage_rank3 attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
  %s = memory_staged.stage %out <[0, 0]> {depth = 2 : i64, mask = [true, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f32> -> !memory_staged.buffer<shared, [2, 64, 64], f32>
}

// CHECK: {{^}}'memory_staged.stage' stages 2-D tiles, got a rank-3 slot

// -----

memory_staged.kernel @stage_rank1 attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
  %s = memory_staged.stage %out <[0, 0]> {depth = 2 : i64, mask = [true, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f32> -> !memory_staged.buffer<shared, [64], f32>
}

// CHECK: {{^}}'memory_staged.stage' stages 2-D tiles, got a rank-1 slot
