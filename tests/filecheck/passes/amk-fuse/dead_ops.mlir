// Regression test (fixed in 1d96d3f): amk-fuse leaves ops whose results nobody uses out of fused groups. It once
// grouped them into a result-less `tensor_op.fused ... -> ()` (with an empty `tensor_op.yield :`), which amk-tile
// lowered to a kernel without outputs, on which amk-stage crashed (see ../amk-stage/no_outputs.mlir).
// RUN: amk-opt %s -p amk-fuse | filecheck %s

func.func @dead_reduction(%x : !tensor_op.tensor<[M, 32], f16>) -> !tensor_op.tensor<[M, 32], f16> {
  %0 = tensor_op.relu %x : !tensor_op.tensor<[M, 32], f16>
  %1 = tensor_op.reduce_sum %0 {axis = -1 : i64} : !tensor_op.tensor<[M, 32], f16> -> !tensor_op.tensor<[M], f16>
  func.return %x : !tensor_op.tensor<[M, 32], f16>
}

// CHECK-LABEL: func.func @dead_reduction(
// CHECK-NOT:     -> () {
// CHECK-NOT:     tensor_op.yield :
// CHECK:         func.return %x
