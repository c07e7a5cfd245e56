// RUN: amk-opt %s -p amk-fuse,amk-tile,amk-fold-exponent-scales | filecheck %s

// torch.where(keep, (q @ k) * 0.125, -inf) before the softmax, fp16: the number in the false branch is the
// masked_fill's literal (fill_where_false), so the select has -inf in its false branch; the mask moves before the scale
// and the exponent is exp2 with the scale folded in, as for masked_fill(mask, -inf) (masked_fill.mlir).

func.func @kept(%q : !tensor_op.tensor<[M, 64], f16>, %k : !tensor_op.tensor<[64, 1000], f16>, %keep : !tensor_op.tensor<[M, 1000], i1>) -> !tensor_op.tensor<[M, 1000], f16> {
  %0 = tensor_op.matmul %q, %k : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64, 1000], f16>) -> !tensor_op.tensor<[M, 1000], f16>
  %1 = tensor_op.scale %0 {factor = 0.125 : f64} : !tensor_op.tensor<[M, 1000], f16>
  %2 = tensor_op.masked_fill %1, %keep {value = 0xfff0000000000000 : f64, fill_where_false} : (!tensor_op.tensor<[M, 1000], f16>, !tensor_op.tensor<[M, 1000], i1>) -> !tensor_op.tensor<[M, 1000], f16>
  %3 = tensor_op.softmax %2 {axis = -1 : i64} : !tensor_op.tensor<[M, 1000], f16>
  func.return %3 : !tensor_op.tensor<[M, 1000], f16>
}

// CHECK:         %[[ACC:[a-z0-9_]+]] = tiled_loop.dot
// CHECK:         %[[FILL:[0-9]+]] = tiled_loop.full -inf {origin = "masked_fill"}
// CHECK-NEXT:    %{{[0-9]+}} = tiled_loop.select %{{[0-9]+}}, %[[ACC]], %[[FILL]] {origin = "masked_fill"}
// CHECK:         tiled_loop.unary "exp2"
