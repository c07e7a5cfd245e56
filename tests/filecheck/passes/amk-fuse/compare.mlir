// RUN: amk-opt %s -p amk-fuse | filecheck %s

// A sum compared with a number, and the comparison's mask read by a masked_fill: the sum's group takes the
// comparison together with its reader (a group of the sum and the comparison alone would write the mask, which no
// kernel does), so the three are one region and the mask never leaves it.

func.func @masked_sum(%x : !tensor_op.tensor<[M, 64], f16>, %y : !tensor_op.tensor<[M, 64], f16>, %z : !tensor_op.tensor<[M, 64], f16>) -> !tensor_op.tensor<[M, 64], f16> {
  %0 = tensor_op.add %x, %y : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[M, 64], f16>) -> !tensor_op.tensor<[M, 64], f16>
  %1 = tensor_op.compare %0 {predicate = "eq", value = 1.0 : f64} : !tensor_op.tensor<[M, 64], f16> -> !tensor_op.tensor<[M, 64], i1>
  %2 = tensor_op.masked_fill %z, %1 {value = 5.0 : f64} : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[M, 64], i1>) -> !tensor_op.tensor<[M, 64], f16>
  func.return %2 : !tensor_op.tensor<[M, 64], f16>
}

// CHECK:       %0 = tensor_op.fused %x, %y, %z
// CHECK:         tensor_op.add
// CHECK-NEXT:    tensor_op.compare
// CHECK-NEXT:    tensor_op.masked_fill
// CHECK-NEXT:    tensor_op.yield
// CHECK-NOT:   tensor_op.fused
