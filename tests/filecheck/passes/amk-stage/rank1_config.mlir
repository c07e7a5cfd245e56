// Regression test (fixed in 1d96d3f): for a rank-1 elementwise kernel amk-tile views the [N] tensors as one row of
// N columns (grid [cdiv(1, BLOCK_M), cdiv(N, BLOCK_N)]), and amk-stage's kernel_problem must read it the same way;
// it once read a rank-1 output as N rows by 1 column, giving BLOCK_M = 8, BLOCK_N = 1: one element per program.
// RUN: amk-opt %s -p amk-fuse,amk-tile,amk-stage | filecheck %s

func.func @rank1(%x : !tensor_op.tensor<[N], f32>, %y : !tensor_op.tensor<[N], f32>) -> !tensor_op.tensor<[N], f32> {
  %0 = tensor_op.add %x, %y : (!tensor_op.tensor<[N], f32>, !tensor_op.tensor<[N], f32>) -> !tensor_op.tensor<[N], f32>
  func.return %0 : !tensor_op.tensor<[N], f32>
}

// CHECK:     memory_staged.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(1, BLOCK_M), cdiv(N, BLOCK_N)]>
// CHECK-NOT: BLOCK_N = 1 :
// CHECK-SAME: constants = {BLOCK_M = {{[0-9]+}} : i64, BLOCK_N = {{[0-9]+}} : i64}
