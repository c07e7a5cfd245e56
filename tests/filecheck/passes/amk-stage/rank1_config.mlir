// Known bug (open, performance): for a rank-1 elementwise kernel amk-tile views the [N] tensors as one row of N
// columns (grid [cdiv(1, BLOCK_M), cdiv(N, BLOCK_N)]), but amk-stage's kernel_problem reads a rank-1 output as N rows
// by 1 column, so the default configuration is BLOCK_M = 8, BLOCK_N = 1: one element per program, N programs.
// Expected: BLOCK_N sized for the N columns (e.g. 256), BLOCK_M for the single row.
// RUN: amk-opt %s -p amk-fuse,amk-tile,amk-stage | filecheck %s

func.func @rank1(%x : !tensor_op.tensor<[N], f32>, %y : !tensor_op.tensor<[N], f32>) -> !tensor_op.tensor<[N], f32> {
  %0 = tensor_op.add %x, %y : (!tensor_op.tensor<[N], f32>, !tensor_op.tensor<[N], f32>) -> !tensor_op.tensor<[N], f32>
  func.return %0 : !tensor_op.tensor<[N], f32>
}

// CHECK:     memory_staged.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(1, BLOCK_M), cdiv(N, BLOCK_N)]>
// CHECK-NOT: BLOCK_N = 1 :
// CHECK-SAME: constants = {BLOCK_M = {{[0-9]+}} : i64, BLOCK_N = {{[0-9]+}} : i64}
