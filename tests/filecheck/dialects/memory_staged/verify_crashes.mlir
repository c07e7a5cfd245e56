// Known bugs: these malformed kernels make the memory_staged verifiers raise Python exceptions (ValueError "too many
// values to unpack", AttributeError, TypeError) instead of a VerifyException naming the op, so
// --verify-diagnostics aborts instead of reporting them.
// XFAIL: *
// RUN: amk-opt %s --split-input-file --verify-diagnostics | filecheck %s

// A rank-3 shared buffer as a dot operand: check_dot unpacks two dims.
memory_staged.kernel @dot_rank3 attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
  %acc = memory_staged.accumulator : !tiled_loop.tile<[64, 64], f32>
  %s = memory_staged.stage %out <[0, 0]> {depth = 2 : i64, mask = [true, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f32> -> !memory_staged.buffer<shared, [2, 64, 64], f32>
  %d = memory_staged.dot %s, %s, %acc : (!memory_staged.buffer<shared, [2, 64, 64], f32>, !memory_staged.buffer<shared, [2, 64, 64], f32>, !tiled_loop.tile<[64, 64], f32>) -> !tiled_loop.tile<[64, 64], f32>
}

// CHECK: 'memory_staged.dot'

// -----

// A string tile-size constant: constant_values reads `.value.data` of every entry.
memory_staged.kernel @string_constant attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = "x"}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
}

// CHECK: 'memory_staged.kernel'{{.*}}BLOCK_M

// -----

// A float tile-size constant: the power-of-two test does `value & (value - 1)` on a float.
memory_staged.kernel @float_constant attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64.0 : f64}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
}

// CHECK: 'memory_staged.kernel'{{.*}}BLOCK_M
