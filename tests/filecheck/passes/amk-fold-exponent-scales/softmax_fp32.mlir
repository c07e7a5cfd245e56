// RUN: amk-opt %s -p amk-fuse,amk-tile,amk-fold-exponent-scales | filecheck %s

// The same scores in fp32: the maximum is taken before the scale, but the exponential stays exp (exp2 of the exponent
// in base 2 rounds x * c * log2(e) as a whole, about 1e-7 of the logit: beyond fp32's 1e-5 at logits of 1000).

func.func @scores(%q : !tensor_op.tensor<[M, 64], f32>, %k : !tensor_op.tensor<[64, 1000], f32>) -> !tensor_op.tensor<[M, 1000], f32> {
  %0 = tensor_op.matmul %q, %k : (!tensor_op.tensor<[M, 64], f32>, !tensor_op.tensor<[64, 1000], f32>) -> !tensor_op.tensor<[M, 1000], f32>
  %1 = tensor_op.scale %0 {factor = 0.125 : f64} : !tensor_op.tensor<[M, 1000], f32>
  %2 = tensor_op.softmax %1 {axis = -1 : i64} : !tensor_op.tensor<[M, 1000], f32>
  func.return %2 : !tensor_op.tensor<[M, 1000], f32>
}

// CHECK:       tiled_loop.for "n"
// CHECK:         %[[MASKED:[0-9]+]] = tiled_loop.select %valid_cols
// CHECK-NEXT:    %[[SCALED:[0-9]+]] = tiled_loop.binary "mul" %[[MASKED]], %{{[0-9]+}} {origin = "softmax"}
// CHECK-NEXT:    tiled_loop.reduce "max" %[[MASKED]]
// CHECK:         %[[D:[0-9]+]] = tiled_loop.binary "sub" %[[SCALED]], %{{[0-9]+}}
// CHECK-NEXT:    tiled_loop.unary "exp" %[[D]] {origin = "softmax"} : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NOT:     "exp2"
// CHECK:         tiled_loop.yield
