// RUN: amk-opt %s -p amk-fuse,amk-tile,amk-fold-exponent-scales | filecheck %s

// softmax(x @ w * -0.5): a negative scale reverses the order, so the maximum is still taken of the scaled tile.

func.func @negated(%x : !tensor_op.tensor<[M, 64], f16>, %w : !tensor_op.tensor<[64, 512], f16>) -> !tensor_op.tensor<[M, 512], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64, 512], f16>) -> !tensor_op.tensor<[M, 512], f16>
  %1 = tensor_op.scale %0 {factor = -0.5 : f64} : !tensor_op.tensor<[M, 512], f16>
  %2 = tensor_op.softmax %1 {axis = -1 : i64} : !tensor_op.tensor<[M, 512], f16>
  func.return %2 : !tensor_op.tensor<[M, 512], f16>
}

// CHECK:       %[[SCALED:[0-9]+]] = tiled_loop.binary "mul" %{{[a-z0-9_]+}}, %{{[0-9]+}} {origin = "scale"}
// CHECK:       %[[MASKED:[0-9]+]] = tiled_loop.select %valid_cols, %[[SCALED]], %{{[0-9]+}}
// CHECK-NEXT:  tiled_loop.reduce "max" %[[MASKED]]
