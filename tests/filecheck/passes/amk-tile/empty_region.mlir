// RUN: not amk-opt %s -p amk-tile 2>&1 | filecheck %s

// Regions written by hand that amk-fuse never forms: the pass says why instead of raising IndexError, KeyError or
// NotFusable.
func.func @no_ops(%x : !tensor_op.tensor<[M, 16], f32>) -> !tensor_op.tensor<[M, 16], f32> {
  %0 = tensor_op.fused %x : (!tensor_op.tensor<[M, 16], f32>) -> !tensor_op.tensor<[M, 16], f32> {
  ^bb0(%a : !tensor_op.tensor<[M, 16], f32>):
    tensor_op.yield %a : !tensor_op.tensor<[M, 16], f32>
  }
  func.return %0 : !tensor_op.tensor<[M, 16], f32>
}

// CHECK: amk-opt: error: amk-tile: fused_0: a tensor_op.fused region without ops has no kernel to make
