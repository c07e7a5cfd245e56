// Known bug (open): amk-fuse groups ops whose results nobody uses into a result-less `tensor_op.fused ... -> ()`
// (with an empty `tensor_op.yield :`). amk-tile then lowers it to a kernel with no outputs that computes nothing
// observable, and amk-stage crashes on it (IndexError in kernel_problem, see ../amk-stage/no_outputs.mlir).
// Expected: dead ops are erased (or at least left out of fused groups).
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
