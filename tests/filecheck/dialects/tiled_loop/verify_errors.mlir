// RUN: amk-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Verifier failures of every tiled_loop op.

tiled_loop.kernel @bad_strategy attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile3d", tile_params = [], num_inputs = 0 : i64} {
^bb0(%out: !tensor_op.tensor<[M, 64], f32>):
}

// CHECK: {{^}}'tiled_loop.kernel' strategy must be one of tile2d, row_strip, skinny_m{{.*}}, got 'tile3d'

// -----

tiled_loop.kernel @grid_ids attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), 1]>, program_ids = ["pid_m"], strategy = "tile2d", tile_params = ["BLOCK_M"], num_inputs = 0 : i64} {
^bb0(%out: !tensor_op.tensor<[M, 64], f32>):
}

// CHECK: {{^}}'tiled_loop.kernel' has 2 grid axes but 1 program ids

// -----

tiled_loop.kernel @group_1d attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M)]>, program_ids = ["pid_m"], strategy = "tile2d", tile_params = ["BLOCK_M"], num_inputs = 0 : i64, group_size = "GROUP_M"} {
^bb0(%out: !tensor_op.tensor<[M, 64], f32>):
}

// CHECK: {{^}}'tiled_loop.kernel' group_size needs a 2-D grid

// -----

tiled_loop.kernel @num_inputs attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = [], num_inputs = 3 : i64} {
^bb0(%x: !tensor_op.tensor<[M, 64], f32>, %out: !tensor_op.tensor<[M, 64], f32>):
}

// CHECK: {{^}}'tiled_loop.kernel' has more inputs and workspace buffers than arguments

// -----

tiled_loop.kernel @workspace_kind attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile_stats", tile_params = [], num_inputs = 1 : i64, workspace = ["scratch", "semaphore"]} {
^bb0(%x: !tensor_op.tensor<[M, 64], f32>, %out: !tensor_op.tensor<[M, 64], f32>, %s: !tensor_op.tensor<[M, 4], f32>, %c: !tensor_op.tensor<[4], i32>):
}

// CHECK: {{^}}'tiled_loop.kernel' workspace kinds must be among scratch, counter, got 'semaphore'

// -----

// One input and two workspace buffers need at least three arguments.
tiled_loop.kernel @workspace_count attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile_stats", tile_params = [], num_inputs = 1 : i64, workspace = ["scratch", "counter"]} {
^bb0(%x: !tensor_op.tensor<[M, 64], f32>, %c: !tensor_op.tensor<[4], i32>):
}

// CHECK: {{^}}'tiled_loop.kernel' has more inputs and workspace buffers than arguments

// -----

tiled_loop.kernel @last_arrival_rank attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile_stats", tile_params = [], num_inputs = 1 : i64, workspace = ["counter"]} {
^bb0(%x: !tensor_op.tensor<[M, 64], f32>, %out: !tensor_op.tensor<[M, 64], f32>, %c: !tensor_op.tensor<[4, 4], i32>):
  %last = tiled_loop.last_arrival %c <[pid]> of <[4]> : !tensor_op.tensor<[4, 4], i32> -> i1
}

// CHECK: {{^}}'tiled_loop.last_arrival' counters must be a rank-1 tensor, got !tensor_op.tensor<[4, 4], i32>

// -----

tiled_loop.kernel @last_arrival_offsets attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile_stats", tile_params = [], num_inputs = 1 : i64, workspace = ["counter"]} {
^bb0(%x: !tensor_op.tensor<[M, 64], f32>, %out: !tensor_op.tensor<[M, 64], f32>, %c: !tensor_op.tensor<[4], i32>):
  %last = tiled_loop.last_arrival %c <[pid, 0]> of <[4]> : !tensor_op.tensor<[4], i32> -> i1
}

// CHECK: {{^}}'tiled_loop.last_arrival' takes one offset and one count

// -----

tiled_loop.kernel @relaunch_uses_first_launch attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile_stats", tile_params = [], num_inputs = 1 : i64} {
^bb0(%x: !tensor_op.tensor<[M, 64], f32>, %out: !tensor_op.tensor<[M, 64], f32>):
  %t = tiled_loop.load %x <[pid, 0]> : !tensor_op.tensor<[M, 64], f32> -> !tiled_loop.tile<[1, 64], f32>
  tiled_loop.relaunch {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"]}
  tiled_loop.store %t, %out <[pid, 0]> : !tiled_loop.tile<[1, 64], f32> -> !tensor_op.tensor<[M, 64], f32>
}

// CHECK: {{^}}'tiled_loop.relaunch': tiled_loop.store after it uses a value of an earlier launch; pass values through a buffer

// -----

// Three launches: the last may not use a value of the first either.
tiled_loop.kernel @relaunch_twice_uses_first_launch attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile_stats", tile_params = [], num_inputs = 1 : i64} {
^bb0(%x: !tensor_op.tensor<[M, 64], f32>, %out: !tensor_op.tensor<[M, 64], f32>):
  %t = tiled_loop.load %x <[pid, 0]> : !tensor_op.tensor<[M, 64], f32> -> !tiled_loop.tile<[1, 64], f32>
  tiled_loop.relaunch {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], label = "merge"}
  tiled_loop.relaunch {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"]}
  tiled_loop.store %t, %out <[pid, 0]> : !tiled_loop.tile<[1, 64], f32> -> !tensor_op.tensor<[M, 64], f32>
}

// CHECK: {{^}}'tiled_loop.relaunch': tiled_loop.store after it uses a value of an earlier launch; pass values through a buffer

// -----

tiled_loop.kernel @relaunch_label attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile_stats", tile_params = [], num_inputs = 1 : i64} {
^bb0(%x: !tensor_op.tensor<[M, 64], f32>, %out: !tensor_op.tensor<[M, 64], f32>):
  tiled_loop.relaunch {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], label = "merge step"}
}

// CHECK: {{^}}'tiled_loop.relaunch' label must be an identifier, got 'merge step'

// -----

tiled_loop.kernel @relaunch_labels attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile_stats", tile_params = [], num_inputs = 1 : i64} {
^bb0(%x: !tensor_op.tensor<[M, 64], f32>, %out: !tensor_op.tensor<[M, 64], f32>):
  tiled_loop.relaunch {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"]}
  tiled_loop.relaunch {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"]}
}

// CHECK: {{^}}'tiled_loop.relaunch': two launches of one kernel are labelled 'finish'; each becomes a function of that name

// -----

tiled_loop.kernel @relaunch_grid attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile_stats", tile_params = [], num_inputs = 1 : i64} {
^bb0(%x: !tensor_op.tensor<[M, 64], f32>, %out: !tensor_op.tensor<[M, 64], f32>):
  tiled_loop.relaunch {grid = #tiled_loop.exprs<[1, 2]>, program_ids = ["pid"]}
}

// CHECK: {{^}}'tiled_loop.relaunch' needs one program id per grid axis

// -----

tiled_loop.kernel @arg_views attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = [], num_inputs = 1 : i64, arg_views = ["none"]} {
^bb0(%x: !tensor_op.tensor<[M, 64], f32>, %out: !tensor_op.tensor<[M, 64], f32>):
}

// CHECK: {{^}}'tiled_loop.kernel' needs one arg_view per argument (2)

// -----

tiled_loop.kernel @for_bounds attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = [], num_inputs = 0 : i64} {
  tiled_loop.for "k" = <[0, K]> iter_args() : () -> () {
    tiled_loop.yield
  }
}

// CHECK: {{^}}'tiled_loop.for' bounds are [lower, upper, step], got 2 values

// -----

tiled_loop.kernel @for_block_args attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = [], num_inputs = 0 : i64} {
  %z = tiled_loop.full 0.0 : !tiled_loop.tile<[16, 16], f32>
  %r = tiled_loop.for "k" = <[0, K, 16]> iter_args(%z) : (!tiled_loop.tile<[16, 16], f32>) -> (!tiled_loop.tile<[16, 16], f32>) {
  ^bb0(%a: !tiled_loop.tile<[16, 16], f16>):
    tiled_loop.yield %z : !tiled_loop.tile<[16, 16], f32>
  }
}

// CHECK: {{^}}'tiled_loop.for' block arguments must match iter_args types

// -----

tiled_loop.kernel @for_results attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = [], num_inputs = 0 : i64} {
  %z = tiled_loop.full 0.0 : !tiled_loop.tile<[16, 16], f32>
  %r = tiled_loop.for "k" = <[0, K, 16]> iter_args(%z) : (!tiled_loop.tile<[16, 16], f32>) -> (!tiled_loop.tile<[16, 1], f32>) {
  ^bb0(%a: !tiled_loop.tile<[16, 16], f32>):
    tiled_loop.yield %a : !tiled_loop.tile<[16, 16], f32>
  }
}

// CHECK: {{^}}'tiled_loop.for' results must match iter_args types

// -----

tiled_loop.kernel @for_yield attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = [], num_inputs = 0 : i64} {
  %z = tiled_loop.full 0.0 : !tiled_loop.tile<[16, 16], f32>
  %r = tiled_loop.for "k" = <[0, K, 16]> iter_args(%z) : (!tiled_loop.tile<[16, 16], f32>) -> (!tiled_loop.tile<[16, 16], f32>) {
  ^bb0(%a: !tiled_loop.tile<[16, 16], f32>):
    %h = tiled_loop.cast %a : !tiled_loop.tile<[16, 16], f32> -> !tiled_loop.tile<[16, 16], f16>
    tiled_loop.yield %h : !tiled_loop.tile<[16, 16], f16>
  }
}

// CHECK: {{^}}'tiled_loop.for' yields values whose types differ from its iter_args

// -----

tiled_loop.kernel @for_no_yield attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = [], num_inputs = 0 : i64} {
  tiled_loop.for "k" = <[0, K, 16]> iter_args() : () -> () {
    %z = tiled_loop.full 0.0 : !tiled_loop.tile<[16, 16], f32>
  }
}

// CHECK: {{^}}Operation tiled_loop.full terminates block in single-block region but is not a terminator

// -----

tiled_loop.kernel @yield_parent attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = [], num_inputs = 0 : i64} {
  tiled_loop.yield
}

// CHECK: {{^}}'tiled_loop.yield' expects parent op 'tiled_loop.for'

// -----

tiled_loop.kernel @load_offsets attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = [], num_inputs = 1 : i64} {
^bb0(%x: !tensor_op.tensor<[M, 64], f32>):
  %t = tiled_loop.load %x <[0]> : !tensor_op.tensor<[M, 64], f32> -> !tiled_loop.tile<[16, 64], f32>
}

// CHECK: {{^}}'tiled_loop.load': 1 offsets for a rank-2 tensor

// -----

tiled_loop.kernel @load_dtype attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = [], num_inputs = 1 : i64} {
^bb0(%x: !tensor_op.tensor<[M, 64], f32>):
  %t = tiled_loop.load %x <[0, 0]> : !tensor_op.tensor<[M, 64], f32> -> !tiled_loop.tile<[16, 64], f16>
}

// CHECK: {{^}}'tiled_loop.load' tile element type differs from the tensor's f32

// -----

tiled_loop.kernel @load_rank3 attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = [], num_inputs = 1 : i64} {
^bb0(%x: !tensor_op.tensor<[B, M, 64], f32>):
  %t = tiled_loop.load %x <[0, 0, 0]> : !tensor_op.tensor<[B, M, 64], f32> -> !tiled_loop.tile<[16, 64], f32>
}

// CHECK: {{^}}'tiled_loop.load': kernels see tensors of rank 1 or 2 (3 or more in a batched kernel), got rank 3

// -----

tiled_loop.kernel @batch_offset attributes {grid = #tiled_loop.exprs<[1, B]>, program_ids = ["pid_m", "pid_b"], strategy = "row_strip", tile_params = [], num_inputs = 1 : i64} {
^bb0(%x: !tensor_op.tensor<[B, M, 64], f32>):
  %t = tiled_loop.load %x <[0, 0, 0]> : !tensor_op.tensor<[B, M, 64], f32> -> !tiled_loop.tile<[16, 64], f32>
}

// CHECK: {{^}}'tiled_loop.load': a rank-3 tensor is accessed at the batch index pid_b first ([pid_b] over its leading dims), got [0]

// -----

// A matmul operand [B, H, S, 64] read in place: the batch index is written over its two leading dims.
tiled_loop.kernel @batch_offsets_over_two_dims attributes {grid = #tiled_loop.exprs<[1, B*H]>, program_ids = ["pid_m", "pid_b"], strategy = "row_strip", tile_params = [], num_inputs = 1 : i64} {
^bb0(%x: !tensor_op.tensor<[B, H, M, 64], f32>):
  %t = tiled_loop.load %x <[pid_b, 0, 0, 0]> : !tensor_op.tensor<[B, H, M, 64], f32> -> !tiled_loop.tile<[16, 64], f32>
}

// CHECK: {{^}}'tiled_loop.load': a rank-4 tensor is accessed at the batch index pid_b first ([floor(pid_b/H), Mod(pid_b, H)] over its leading dims), got [pid_b, 0]

// -----

tiled_loop.kernel @batch_axis_first attributes {grid = #tiled_loop.exprs<[B, 1]>, program_ids = ["pid_b", "pid_m"], strategy = "row_strip", tile_params = [], num_inputs = 0 : i64} {
^bb0(%out: !tensor_op.tensor<[B, M, 64], f32>):
}

// CHECK: {{^}}'tiled_loop.kernel' batch axis (pid_b) must be the last grid axis

// -----

tiled_loop.kernel @load_vector attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = [], num_inputs = 1 : i64} {
^bb0(%b: !tensor_op.tensor<[64], f32>):
  %t = tiled_loop.load %b <[0]> : !tensor_op.tensor<[64], f32> -> !tiled_loop.tile<[16, 64], f32>
}

// CHECK: {{^}}'tiled_loop.load': a rank-1 tensor moves as a [1, n] or [n, 1] tile, got ['16', '64']

// -----

tiled_loop.kernel @store_offsets attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = [], num_inputs = 0 : i64} {
^bb0(%out: !tensor_op.tensor<[M, 64], f32>):
  %z = tiled_loop.full 0.0 : !tiled_loop.tile<[16, 64], f32>
  tiled_loop.store %z, %out <[0, 0, 0]> : !tiled_loop.tile<[16, 64], f32> -> !tensor_op.tensor<[M, 64], f32>
}

// CHECK: {{^}}'tiled_loop.store': 3 offsets for a rank-2 tensor

// -----

tiled_loop.kernel @store_dest attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = [], num_inputs = 0 : i64} {
  %z = tiled_loop.full 0.0 : !tiled_loop.tile<[16, 64], f32>
  "tiled_loop.store"(%z, %z) <{offsets = #tiled_loop.exprs<[0, 0]>}> : (!tiled_loop.tile<[16, 64], f32>, !tiled_loop.tile<[16, 64], f32>) -> ()
}

// CHECK: {{^}}operand 'dest' at position 1 does not verify:
// CHECK-NEXT: {{^}}!tiled_loop.tile<[16, 64], f32> should be of base attribute tensor_op.tensor

// -----

tiled_loop.kernel @dot_k attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %a = tiled_loop.full 0.0 : !tiled_loop.tile<[BLOCK_M, BLOCK_K], f16>
  %b = tiled_loop.full 0.0 : !tiled_loop.tile<[32, BLOCK_N], f16>
  %c = tiled_loop.full 0.0 : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %d = tiled_loop.dot %a, %b, %c : (!tiled_loop.tile<[BLOCK_M, BLOCK_K], f16>, !tiled_loop.tile<[32, BLOCK_N], f16>, !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
}

// CHECK: {{^}}'tiled_loop.dot' contracts lhs axis of size BLOCK_K with rhs axis of size 32

// -----

tiled_loop.kernel @dot_acc attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %a = tiled_loop.full 0.0 : !tiled_loop.tile<[64, 32], f16>
  %b = tiled_loop.full 0.0 : !tiled_loop.tile<[32, 64], f16>
  %c = tiled_loop.full 0.0 : !tiled_loop.tile<[64, 32], f32>
  %d = tiled_loop.dot %a, %b, %c : (!tiled_loop.tile<[64, 32], f16>, !tiled_loop.tile<[32, 64], f16>, !tiled_loop.tile<[64, 32], f32>) -> !tiled_loop.tile<[64, 32], f32>
}

// CHECK: {{^}}'tiled_loop.dot' accumulator must be a [64, 64] tile, got !tiled_loop.tile<[64, 32], f32>

// -----

tiled_loop.kernel @dot_result attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %a = tiled_loop.full 0.0 : !tiled_loop.tile<[64, 32], f16>
  %b = tiled_loop.full 0.0 : !tiled_loop.tile<[32, 64], f16>
  %c = tiled_loop.full 0.0 : !tiled_loop.tile<[64, 64], f32>
  %d = tiled_loop.dot %a, %b, %c : (!tiled_loop.tile<[64, 32], f16>, !tiled_loop.tile<[32, 64], f16>, !tiled_loop.tile<[64, 64], f32>) -> !tiled_loop.tile<[64, 64], f16>
}

// CHECK: {{^}}'tiled_loop.dot' result type must equal the accumulator type

// -----

tiled_loop.kernel @full_type attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %a = tiled_loop.full 0.0 : f32
}

// CHECK: {{^}}result 'result' at position 0 does not verify:
// CHECK-NEXT: {{^}}f32 should be of base attribute tiled_loop.tile

// -----

tiled_loop.kernel @tile_rank attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %a = tiled_loop.full 0.0 : !tiled_loop.tile<[2, 64, 32], f32>
}

// CHECK: {{^}}tiles are 2-D, got 3 dims

// -----

tiled_loop.kernel @unary_fn attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %a = tiled_loop.full 1.0 : !tiled_loop.tile<[16, 16], f32>
  %b = tiled_loop.unary "tan" %a : !tiled_loop.tile<[16, 16], f32>
}

// CHECK: {{^}}'tiled_loop.unary' function must be one of exp, exp2, log, erf, sqrt, rsqrt, abs, neg, sigmoid, got 'tan'

// -----

tiled_loop.kernel @unary_type attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %a = tiled_loop.full 1.0 : !tiled_loop.tile<[16, 16], f32>
  %b = "tiled_loop.unary"(%a) <{fn = "exp"}> : (!tiled_loop.tile<[16, 16], f32>) -> !tiled_loop.tile<[16, 16], f16>
}

// CHECK: {{^}}result 'result' at position 0 does not verify:
// CHECK-NEXT: {{^}}attribute !tiled_loop.tile<[16, 16], f32> expected from variable 'T', but got !tiled_loop.tile<[16, 16], f16>

// -----

tiled_loop.kernel @binary_broadcast attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %a = tiled_loop.full 1.0 : !tiled_loop.tile<[16, 64], f32>
  %b = tiled_loop.full 1.0 : !tiled_loop.tile<[16, 32], f32>
  %c = tiled_loop.binary "add" %a, %b : (!tiled_loop.tile<[16, 64], f32>, !tiled_loop.tile<[16, 32], f32>) -> !tiled_loop.tile<[16, 64], f32>
}

// CHECK: {{^}}'tiled_loop.binary': tile axis 1 does not broadcast (64 vs 32)

// -----

tiled_loop.kernel @binary_fn attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %a = tiled_loop.full 1.0 : !tiled_loop.tile<[16, 64], f32>
  %c = tiled_loop.binary "pow" %a, %a : (!tiled_loop.tile<[16, 64], f32>, !tiled_loop.tile<[16, 64], f32>) -> !tiled_loop.tile<[16, 64], f32>
}

// CHECK: {{^}}'tiled_loop.binary' function must be one of add, sub, mul, div, max, min, lt, le, gt, ge, eq, ne, got 'pow'

// -----

tiled_loop.kernel @binary_dtype attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %a = tiled_loop.full 1.0 : !tiled_loop.tile<[16, 64], f32>
  %b = tiled_loop.full 1.0 : !tiled_loop.tile<[16, 64], f16>
  %c = tiled_loop.binary "mul" %a, %b : (!tiled_loop.tile<[16, 64], f32>, !tiled_loop.tile<[16, 64], f16>) -> !tiled_loop.tile<[16, 64], f32>
}

// CHECK: {{^}}'tiled_loop.binary' operands have different element types (f32 vs f16)

// -----

tiled_loop.kernel @binary_result attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %a = tiled_loop.full 1.0 : !tiled_loop.tile<[16, 1], f32>
  %b = tiled_loop.full 1.0 : !tiled_loop.tile<[1, 64], f32>
  %c = tiled_loop.binary "lt" %a, %b : (!tiled_loop.tile<[16, 1], f32>, !tiled_loop.tile<[1, 64], f32>) -> !tiled_loop.tile<[16, 1], i1>
}

// CHECK: {{^}}'tiled_loop.binary' result tile is [16, 1], expected [16, 64]

// -----

tiled_loop.kernel @select_cond attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %a = tiled_loop.full 1.0 : !tiled_loop.tile<[16, 64], f32>
  %c = tiled_loop.select %a, %a, %a : (!tiled_loop.tile<[16, 64], f32>, !tiled_loop.tile<[16, 64], f32>, !tiled_loop.tile<[16, 64], f32>) -> !tiled_loop.tile<[16, 64], f32>
}

// CHECK: {{^}}'tiled_loop.select' condition must be an i1 tile, got !tiled_loop.tile<[16, 64], f32>

// -----

tiled_loop.kernel @select_branches attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %v = tiled_loop.in_bounds <[0, 0]> within <[M, 64]> : !tiled_loop.tile<[16, 64], i1>
  %a = tiled_loop.full 1.0 : !tiled_loop.tile<[16, 64], f32>
  %b = tiled_loop.full 1.0 : !tiled_loop.tile<[1, 1], f16>
  %c = tiled_loop.select %v, %a, %b : (!tiled_loop.tile<[16, 64], i1>, !tiled_loop.tile<[16, 64], f32>, !tiled_loop.tile<[1, 1], f16>) -> !tiled_loop.tile<[16, 64], f32>
}

// CHECK: {{^}}'tiled_loop.select' branches have different element types

// -----

tiled_loop.kernel @select_result attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %v = tiled_loop.in_bounds <[0, 0]> within <[M, 64]> : !tiled_loop.tile<[1, 64], i1>
  %a = tiled_loop.full 1.0 : !tiled_loop.tile<[16, 1], f32>
  %c = tiled_loop.select %v, %a, %a : (!tiled_loop.tile<[1, 64], i1>, !tiled_loop.tile<[16, 1], f32>, !tiled_loop.tile<[16, 1], f32>) -> !tiled_loop.tile<[16, 1], f32>
}

// CHECK: {{^}}'tiled_loop.select' result tile is [16, 1], expected [16, 64]

// -----

tiled_loop.kernel @cast_shape attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %a = tiled_loop.full 1.0 : !tiled_loop.tile<[16, 64], f32>
  %c = tiled_loop.cast %a : !tiled_loop.tile<[16, 64], f32> -> !tiled_loop.tile<[64, 16], f16>
}

// CHECK: {{^}}'tiled_loop.cast' changes the element type only, not the tile shape

// -----

tiled_loop.kernel @reduce_result attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %a = tiled_loop.full 1.0 : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %c = tiled_loop.reduce "sum" %a : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[1, BLOCK_N], f32>
}

// CHECK: {{^}}'tiled_loop.reduce' result tile is [1, BLOCK_N], expected [BLOCK_M, 1]

// -----

tiled_loop.kernel @reduce_fn attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %a = tiled_loop.full 1.0 : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %c = tiled_loop.reduce "mean" %a : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
}

// CHECK: {{^}}'tiled_loop.reduce' function must be one of sum, max, min, got 'mean'

// -----

tiled_loop.kernel @in_bounds_count attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %v = tiled_loop.in_bounds <[0, 0, 0]> within <[B, M, 64]> : !tiled_loop.tile<[1, 64], i1>
}

// CHECK: {{^}}'tiled_loop.in_bounds' needs two offsets and two extents

// -----

tiled_loop.kernel @in_bounds_type attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 0 : i64} {
  %v = tiled_loop.in_bounds <[0, 0]> within <[M, 64]> : !tiled_loop.tile<[1, 64], f32>
}

// CHECK: {{^}}'tiled_loop.in_bounds' result must be an i1 tile

// -----

// broadcast_rows holds the space's rows, then triples.
tiled_loop.kernel @broadcast_rows_pairs attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 1 : i64} {
^bb0(%p: !tensor_op.tensor<[T, 64], f32>, %out: !tensor_op.tensor<[M, 64], f32>):
  %t = tiled_loop.load %p <[pid, 0]> {broadcast_rows = #tiled_loop.exprs<[M, 1, T]>} : !tensor_op.tensor<[T, 64], f32> -> !tiled_loop.tile<[16, 64], f32>
  tiled_loop.store %t, %out <[pid, 0]> : !tiled_loop.tile<[16, 64], f32> -> !tensor_op.tensor<[M, 64], f32>
}

// CHECK: {{^}}'tiled_loop.load' broadcast_rows holds the space's rows, then divisor, period and stride triples: got 3 expressions

// -----

tiled_loop.kernel @broadcast_rows_of_a_vector attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 1 : i64} {
^bb0(%p: !tensor_op.tensor<[64], f32>, %out: !tensor_op.tensor<[M, 64], f32>):
  %t = tiled_loop.load %p <[0]> {broadcast_rows = #tiled_loop.exprs<[M, 1, 64, 1]>} : !tensor_op.tensor<[64], f32> -> !tiled_loop.tile<[1, 64], f32>
  tiled_loop.store %t, %out <[pid, 0]> : !tiled_loop.tile<[1, 64], f32> -> !tensor_op.tensor<[M, 64], f32>
}

// CHECK: {{^}}'tiled_loop.load' broadcast_rows reads a rank-2 source, got rank 1

// -----

// broadcast_batch holds the kernel's batch count, a divisor and a period, for a rank-3 source.
tiled_loop.kernel @broadcast_batch_pair attributes {grid = #tiled_loop.exprs<[1, B*H]>, program_ids = ["pid", "pid_b"], strategy = "tile2d", tile_params = [], num_inputs = 1 : i64} {
^bb0(%m: !tensor_op.tensor<[B, S, 64], f32>, %out: !tensor_op.tensor<[B*H, S, 64], f32>):
  %t = tiled_loop.load %m <[pid_b, 0, 0]> {broadcast_batch = #tiled_loop.exprs<[B*H, H]>} : !tensor_op.tensor<[B, S, 64], f32> -> !tiled_loop.tile<[16, 64], f32>
  tiled_loop.store %t, %out <[pid_b, 0, 0]> : !tiled_loop.tile<[16, 64], f32> -> !tensor_op.tensor<[B*H, S, 64], f32>
}

// CHECK: {{^}}'tiled_loop.load' broadcast_batch holds the kernel's batch count, a divisor and a period: got 2 expressions

// -----

tiled_loop.kernel @broadcast_batch_of_a_matrix attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "tile2d", tile_params = [], num_inputs = 1 : i64} {
^bb0(%m: !tensor_op.tensor<[S, 64], f32>, %out: !tensor_op.tensor<[M, 64], f32>):
  %t = tiled_loop.load %m <[pid, 0]> {broadcast_batch = #tiled_loop.exprs<[B*H, H, B]>} : !tensor_op.tensor<[S, 64], f32> -> !tiled_loop.tile<[16, 64], f32>
  tiled_loop.store %t, %out <[pid, 0]> : !tiled_loop.tile<[16, 64], f32> -> !tensor_op.tensor<[M, 64], f32>
}

// CHECK: {{^}}'tiled_loop.load' broadcast_batch reads a rank-3 source, got rank 2
