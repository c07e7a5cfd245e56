// RUN: amk-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Verifier failures of every memory_staged op and of the buffer type.

func.func @bad_space(%x: !memory_staged.buffer<local, [64, 32], f16>) {
  func.return
}

// CHECK: {{^}}memory space must be one of global, shared, got 'local'

// -----

memory_staged.kernel @constants attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64 : i64, BLOCK_N = 48 : i64}, num_warps = 4 : i64, num_stages = 2 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
}

// CHECK: {{^}}'memory_staged.kernel' tile size BLOCK_N = 48 must be a power of two

// -----

memory_staged.kernel @constants_zero attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_K = 0 : i64}, num_warps = 4 : i64, num_stages = 2 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
}

// CHECK: {{^}}'memory_staged.kernel' tile size BLOCK_K = 0 must be a power of two

// -----

memory_staged.kernel @warps attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {}, num_warps = 3 : i64, num_stages = 2 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
}

// CHECK: {{^}}'memory_staged.kernel' num_warps must be one of 1, 2, 4, 8, 16, 32, got 3

// -----

memory_staged.kernel @stages attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {}, num_warps = 4 : i64, num_stages = 0 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
}

// CHECK: {{^}}'memory_staged.kernel' num_stages must be >= 1, got 0

// -----

memory_staged.kernel @grid_ids attributes {grid = #tiled_loop.exprs<[1, 2]>, program_ids = ["pid"], constants = {}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
}

// CHECK: {{^}}'memory_staged.kernel' has 2 grid axes but 1 program ids

// -----

memory_staged.kernel @shared_arg attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<shared, [64, 64], f32>):
}

// CHECK: {{^}}'memory_staged.kernel' argument 0: expected a global buffer, got !memory_staged.buffer<shared, [64, 64], f32>

// -----

memory_staged.kernel @tensor_arg attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !tensor_op.tensor<[M, 64], f32>):
}

// CHECK: {{^}}'memory_staged.kernel' argument 0: expected a global buffer, got !tensor_op.tensor<[M, 64], f32>

// -----

memory_staged.kernel @load_index_bits attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64 : i64}, num_warps = 4 : i64, num_stages = 2 : i64, num_inputs = 1 : i64, strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f16>, %out: !memory_staged.buffer<global, [M, 64], f32>):
  %t = memory_staged.load %x <[0, 0]> {mask = [true, false], index_bits = 48 : i64} : !memory_staged.buffer<global, [M, 64], f16> -> !tiled_loop.tile<[64, 64], f16>
}

// CHECK: {{^}}'memory_staged.load' index_bits must be 32 or 64, got 48

// -----

memory_staged.kernel @load_mask attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64 : i64}, num_warps = 4 : i64, num_stages = 2 : i64, num_inputs = 1 : i64, strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f16>, %out: !memory_staged.buffer<global, [M, 64], f32>):
  %t = memory_staged.load %x <[0, 0]> {mask = [true], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f16> -> !tiled_loop.tile<[64, 64], f16>
}

// CHECK: {{^}}'memory_staged.load' needs one mask flag per buffer dim (2)

// -----

memory_staged.kernel @load_offsets attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64 : i64}, num_warps = 4 : i64, num_stages = 2 : i64, num_inputs = 1 : i64, strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f16>, %out: !memory_staged.buffer<global, [M, 64], f32>):
  %t = memory_staged.load %x <[0]> {mask = [true, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f16> -> !tiled_loop.tile<[64, 64], f16>
}

// CHECK: {{^}}'memory_staged.load': 1 offsets for a rank-2 tensor

// -----

memory_staged.kernel @load_shared attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64 : i64}, num_warps = 4 : i64, num_stages = 2 : i64, num_inputs = 1 : i64, strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f16>, %out: !memory_staged.buffer<global, [M, 64], f32>):
  %s = memory_staged.stage %x <[0, 0]> {depth = 2 : i64, mask = [true, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f16> -> !memory_staged.buffer<shared, [64, 64], f16>
  %t = memory_staged.load %s <[0, 0]> {mask = [false, false], index_bits = 32 : i64} : !memory_staged.buffer<shared, [64, 64], f16> -> !tiled_loop.tile<[64, 64], f16>
}

// CHECK: {{^}}'memory_staged.load': expected a global buffer, got !memory_staged.buffer<shared, [64, 64], f16>

// -----

memory_staged.kernel @stage_result_space attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64 : i64}, num_warps = 4 : i64, num_stages = 2 : i64, num_inputs = 1 : i64, strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f16>, %out: !memory_staged.buffer<global, [M, 64], f32>):
  %s = memory_staged.stage %x <[0, 0]> {depth = 2 : i64, mask = [true, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f16> -> !memory_staged.buffer<global, [64, 64], f16>
}

// CHECK: {{^}}'memory_staged.stage' result: expected a shared buffer, got !memory_staged.buffer<global, [64, 64], f16>

// -----

memory_staged.kernel @stage_dtype attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64 : i64}, num_warps = 4 : i64, num_stages = 2 : i64, num_inputs = 1 : i64, strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f16>, %out: !memory_staged.buffer<global, [M, 64], f32>):
  %s = memory_staged.stage %x <[0, 0]> {depth = 2 : i64, mask = [true, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f16> -> !memory_staged.buffer<shared, [64, 64], f32>
}

// CHECK: {{^}}'memory_staged.stage' changes the element type (f16 -> f32)

// -----

memory_staged.kernel @stage_depth attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64 : i64}, num_warps = 4 : i64, num_stages = 2 : i64, num_inputs = 1 : i64, strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f16>, %out: !memory_staged.buffer<global, [M, 64], f32>):
  %s = memory_staged.stage %x <[0, 0]> {depth = 0 : i64, mask = [true, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f16> -> !memory_staged.buffer<shared, [64, 64], f16>
}

// CHECK: {{^}}'memory_staged.stage' depth must be >= 1, got 0

// -----

memory_staged.kernel @stage_index_bits attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64 : i64}, num_warps = 4 : i64, num_stages = 2 : i64, num_inputs = 1 : i64, strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f16>, %out: !memory_staged.buffer<global, [M, 64], f32>):
  %s = memory_staged.stage %x <[0, 0]> {depth = 2 : i64, mask = [true, false], index_bits = 16 : i64} : !memory_staged.buffer<global, [M, 64], f16> -> !memory_staged.buffer<shared, [64, 64], f16>
}

// CHECK: {{^}}'memory_staged.stage' index_bits must be 32 or 64, got 16

// -----

memory_staged.kernel @stage_no_mask attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64 : i64}, num_warps = 4 : i64, num_stages = 2 : i64, num_inputs = 1 : i64, strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f16>, %out: !memory_staged.buffer<global, [M, 64], f32>):
  %s = memory_staged.stage %x <[0, 0]> {depth = 2 : i64, index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f16> -> !memory_staged.buffer<shared, [64, 64], f16>
}

// CHECK: {{^}}property 'mask' expected in operation 'memory_staged.stage'

// -----

memory_staged.kernel @store_index_bits attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64 : i64}, num_warps = 4 : i64, num_stages = 2 : i64, num_inputs = 1 : i64, strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f16>, %out: !memory_staged.buffer<global, [M, 64], f32>):
  %a = memory_staged.accumulator : !tiled_loop.tile<[64, 64], f32>
  memory_staged.store %a, %out <[0, 0]> {mask = [true, false], index_bits = 48 : i64} : !tiled_loop.tile<[64, 64], f32> -> !memory_staged.buffer<global, [M, 64], f32>
}

// CHECK: {{^}}'memory_staged.store' index_bits must be 32 or 64, got 48

// -----

memory_staged.kernel @store_shared attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64 : i64}, num_warps = 4 : i64, num_stages = 2 : i64, num_inputs = 1 : i64, strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f16>, %out: !memory_staged.buffer<global, [M, 64], f32>):
  %a = memory_staged.accumulator : !tiled_loop.tile<[64, 64], f32>
  %s = memory_staged.stage %x <[0, 0]> {depth = 2 : i64, mask = [true, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f16> -> !memory_staged.buffer<shared, [64, 64], f16>
  memory_staged.store %a, %s <[0, 0]> {mask = [false, false], index_bits = 32 : i64} : !tiled_loop.tile<[64, 64], f32> -> !memory_staged.buffer<shared, [64, 64], f16>
}

// CHECK: {{^}}'memory_staged.store': expected a global buffer, got !memory_staged.buffer<shared, [64, 64], f16>

// -----

memory_staged.kernel @store_mask attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64 : i64}, num_warps = 4 : i64, num_stages = 2 : i64, num_inputs = 1 : i64, strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f16>, %out: !memory_staged.buffer<global, [M, 64], f32>):
  %a = memory_staged.accumulator : !tiled_loop.tile<[64, 64], f32>
  memory_staged.store %a, %out <[0, 0]> {mask = [true, false, false], index_bits = 32 : i64} : !tiled_loop.tile<[64, 64], f32> -> !memory_staged.buffer<global, [M, 64], f32>
}

// CHECK: {{^}}'memory_staged.store' needs one mask flag per buffer dim (2)

// -----

memory_staged.kernel @accumulator_type attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64 : i64}, num_warps = 4 : i64, num_stages = 2 : i64, num_inputs = 1 : i64, strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f16>, %out: !memory_staged.buffer<global, [M, 64], f32>):
  %a = memory_staged.accumulator : !memory_staged.buffer<shared, [64, 64], f32>
}

// CHECK: {{^}}!memory_staged.buffer<shared, [64, 64], f32> should be of base attribute tiled_loop.tile

// -----

memory_staged.kernel @dot_global attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64 : i64}, num_warps = 4 : i64, num_stages = 2 : i64, num_inputs = 1 : i64, strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f16>, %out: !memory_staged.buffer<global, [M, 64], f32>):
  %a = memory_staged.accumulator : !tiled_loop.tile<[64, 64], f32>
  %s = memory_staged.stage %x <[0, 0]> {depth = 2 : i64, mask = [true, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f16> -> !memory_staged.buffer<shared, [64, 64], f16>
  %d = memory_staged.dot %x, %s, %a : (!memory_staged.buffer<global, [M, 64], f16>, !memory_staged.buffer<shared, [64, 64], f16>, !tiled_loop.tile<[64, 64], f32>) -> !tiled_loop.tile<[64, 64], f32>
}

// CHECK: {{^}}'memory_staged.dot' reads operands from shared memory or registers, not !memory_staged.buffer<global, [M, 64], f16>

// -----

memory_staged.kernel @dot_k attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64 : i64}, num_warps = 4 : i64, num_stages = 2 : i64, num_inputs = 1 : i64, strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f16>, %out: !memory_staged.buffer<global, [M, 64], f32>):
  %a = memory_staged.accumulator : !tiled_loop.tile<[64, 64], f32>
  %s = memory_staged.stage %x <[0, 0]> {depth = 2 : i64, mask = [true, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f16> -> !memory_staged.buffer<shared, [64, 32], f16>
  %t = memory_staged.stage %x <[0, 0]> {depth = 2 : i64, mask = [true, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f16> -> !memory_staged.buffer<shared, [64, 64], f16>
  %d = memory_staged.dot %s, %t, %a : (!memory_staged.buffer<shared, [64, 32], f16>, !memory_staged.buffer<shared, [64, 64], f16>, !tiled_loop.tile<[64, 64], f32>) -> !tiled_loop.tile<[64, 64], f32>
}

// CHECK: {{^}}'memory_staged.dot' contracts lhs axis of size 32 with rhs axis of size 64

// -----

memory_staged.kernel @dot_acc attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64 : i64}, num_warps = 4 : i64, num_stages = 2 : i64, num_inputs = 1 : i64, strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f16>, %out: !memory_staged.buffer<global, [M, 64], f32>):
  %a = memory_staged.accumulator : !tiled_loop.tile<[64, 32], f32>
  %s = memory_staged.stage %x <[0, 0]> {depth = 2 : i64, mask = [true, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f16> -> !memory_staged.buffer<shared, [64, 64], f16>
  %d = memory_staged.dot %s, %s, %a : (!memory_staged.buffer<shared, [64, 64], f16>, !memory_staged.buffer<shared, [64, 64], f16>, !tiled_loop.tile<[64, 32], f32>) -> !tiled_loop.tile<[64, 32], f32>
}

// CHECK: {{^}}'memory_staged.dot' accumulator must be a [64, 64] tile, got !tiled_loop.tile<[64, 32], f32>

// -----

// Regression tests: the malformed kernels below used to make the verifiers raise Python exceptions (ValueError "too
// many values to unpack", AttributeError, TypeError) instead of a VerifyException naming the op.

// A rank-3 shared buffer as a dot operand (check_dot unpacked two dims).
memory_staged.kernel @dot_rank3 attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
  %acc = memory_staged.accumulator : !tiled_loop.tile<[64, 64], f32>
  %s = memory_staged.stage %out <[0, 0]> {depth = 2 : i64, mask = [true, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f32> -> !memory_staged.buffer<shared, [2, 64, 64], f32>
  %d = memory_staged.dot %s, %s, %acc : (!memory_staged.buffer<shared, [2, 64, 64], f32>, !memory_staged.buffer<shared, [2, 64, 64], f32>, !tiled_loop.tile<[64, 64], f32>) -> !tiled_loop.tile<[64, 64], f32>
}

// CHECK: {{^}}'memory_staged.stage' stages 2-D tiles, got a rank-3 slot

// -----

memory_staged.kernel @dot_rank1 attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
  %acc = memory_staged.accumulator : !tiled_loop.tile<[64, 64], f32>
  %s = memory_staged.stage %out <[0, 0]> {depth = 2 : i64, mask = [true, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f32> -> !memory_staged.buffer<shared, [64, 64], f32>
  %t = memory_staged.stage %out <[0, 0]> {depth = 2 : i64, mask = [true, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f32> -> !memory_staged.buffer<shared, [64], f32>
  %d = memory_staged.dot %s, %t, %acc : (!memory_staged.buffer<shared, [64, 64], f32>, !memory_staged.buffer<shared, [64], f32>, !tiled_loop.tile<[64, 64], f32>) -> !tiled_loop.tile<[64, 64], f32>
}

// CHECK: {{^}}'memory_staged.stage' stages 2-D tiles, got a rank-1 slot

// -----

// A string tile-size constant (constant_values read `.value.data` of every entry).
memory_staged.kernel @string_constant attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = "x"}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
}

// CHECK: {{^}}'memory_staged.kernel' constant BLOCK_M must be an integer, got "x"

// -----

// A float tile-size constant (the power-of-two test did `value & (value - 1)` on a float).
memory_staged.kernel @float_constant attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = 64.0 : f64}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
}

// CHECK: {{^}}'memory_staged.kernel' constant BLOCK_M must be an integer, got 6.400000e+01 : f64

// -----

memory_staged.kernel @array_constant attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_N = [64]}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
}

// CHECK: {{^}}'memory_staged.kernel' constant BLOCK_N must be an integer, got [64 : i64]

// -----

memory_staged.kernel @negative_constant attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {BLOCK_M = -64 : i64}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
}

// CHECK: {{^}}'memory_staged.kernel' tile size BLOCK_M = -64 must be a power of two

// -----

// The kernel's strategy is one the emitter knows.
memory_staged.kernel @strategy attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 0 : i64, strategy = "tile3d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
}

// CHECK: {{^}}'memory_staged.kernel' strategy must be one of tile2d, row_strip, skinny_m{{.*}}, got 'tile3d'

// -----

memory_staged.kernel @strategy_empty attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 0 : i64, strategy = ""} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
}

// CHECK: {{^}}'memory_staged.kernel' strategy must be one of tile2d, row_strip, skinny_m{{.*}}, got ''

// -----

// Accumulators are f32.
memory_staged.kernel @accumulator_f16 attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
  %acc = memory_staged.accumulator : !tiled_loop.tile<[64, 64], f16>
}

// CHECK: {{^}}'memory_staged.accumulator' accumulates in f32, got f16

// -----

memory_staged.kernel @accumulator_i32 attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 0 : i64, strategy = "tile2d"} {
^bb0(%out: !memory_staged.buffer<global, [M, 64], f32>):
  %acc = memory_staged.accumulator : !tiled_loop.tile<[64, 64], i32>
}

// CHECK: {{^}}'memory_staged.accumulator' accumulates in f32, got i32

// -----

memory_staged.kernel @workspace_count attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 1 : i64, strategy = "tile_stats", workspace = ["scratch", "scratch", "counter"]} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f32>, %out: !memory_staged.buffer<global, [M, 64], f32>):
}

// CHECK: {{^}}'memory_staged.kernel' has more inputs and workspace buffers than arguments

// -----

memory_staged.kernel @workspace_kind attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], constants = {}, num_warps = 4 : i64, num_stages = 1 : i64, num_inputs = 1 : i64, strategy = "tile_stats", workspace = ["lock"]} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f32>, %out: !memory_staged.buffer<global, [M, 64], f32>):
}

// CHECK: {{^}}'memory_staged.kernel' workspace kinds must be among scratch, counter, got 'lock'
