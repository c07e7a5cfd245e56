// RUN: amk-opt %s -p amk-fuse,amk-tile,amk-fold-exponent-scales | filecheck %s

// A scale above 1 / log2(e) (0.75 * log2 e = 1.08): x * c * log2(e) could overflow where x * c does not (a logit
// near fp32's largest), so the exponential stays exp, even in fp16; the maximum is still taken before the scale.

func.func @scores(%q : !tensor_op.tensor<[M, 64], f16>, %k : !tensor_op.tensor<[64, 1000], f16>) -> !tensor_op.tensor<[M, 1000], f16> {
  %0 = tensor_op.matmul %q, %k : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64, 1000], f16>) -> !tensor_op.tensor<[M, 1000], f16>
  %1 = tensor_op.scale %0 {factor = 0.75 : f64} : !tensor_op.tensor<[M, 1000], f16>
  %2 = tensor_op.softmax %1 {axis = -1 : i64} : !tensor_op.tensor<[M, 1000], f16>
  func.return %2 : !tensor_op.tensor<[M, 1000], f16>
}

// CHECK:       tiled_loop.for "n"
// CHECK:         %[[MASKED:[0-9]+]] = tiled_loop.select %valid_cols
// CHECK-NEXT:    %[[SCALED:[0-9]+]] = tiled_loop.binary "mul" %[[MASKED]], %{{[0-9]+}} {origin = "softmax"}
// CHECK-NEXT:    tiled_loop.reduce "max" %[[MASKED]]
// CHECK:         %[[D:[0-9]+]] = tiled_loop.binary "sub" %[[SCALED]], %{{[0-9]+}}
// CHECK-NEXT:    tiled_loop.unary "exp" %[[D]] {origin = "softmax"} : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NOT:     "exp2"
// CHECK:         tiled_loop.yield
