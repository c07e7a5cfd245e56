// RUN: amk-opt %s -p amk-fuse,amk-tile,amk-fold-exponent-scales | filecheck %s

// An fp32 softmax of scaled logits: the row maximum is still taken of the raw tile and scaled once a row (exact),
// so the scaled product feeds only the subtraction (one FMA on the GPU), but the exponential stays exp: in base 2 the
// shift's rounding (|max| * 2^-24) would exceed fp32's tolerance at large logits.

func.func @scores32(%q : !tensor_op.tensor<[M, 64], f32>, %k : !tensor_op.tensor<[64, 1000], f32>) -> !tensor_op.tensor<[M, 1000], f32> {
  %0 = tensor_op.matmul %q, %k : (!tensor_op.tensor<[M, 64], f32>, !tensor_op.tensor<[64, 1000], f32>) -> !tensor_op.tensor<[M, 1000], f32>
  %1 = tensor_op.scale %0 {factor = 0.125 : f64} : !tensor_op.tensor<[M, 1000], f32>
  %2 = tensor_op.softmax %1 {axis = -1 : i64} : !tensor_op.tensor<[M, 1000], f32>
  func.return %2 : !tensor_op.tensor<[M, 1000], f32>
}

// CHECK:       %[[ACC:[a-z0-9_]+]] = tiled_loop.dot
// CHECK-NEXT:  %[[SCALE:[0-9]+]] = tiled_loop.full 0.125 {origin = "scale"}
// CHECK:       %[[MASKED:[0-9]+]] = tiled_loop.select %valid_cols, %[[ACC]], %{{[0-9]+}}
// CHECK-NEXT:  %[[SCALED:[0-9]+]] = tiled_loop.binary "mul" %[[MASKED]], %[[SCALE]]
// CHECK-NEXT:  %[[RAW_MAX:[0-9]+]] = tiled_loop.reduce "max" %[[MASKED]]
// CHECK-NEXT:  tiled_loop.binary "mul" %[[RAW_MAX]], %[[SCALE]]
// CHECK:       %[[D:[0-9]+]] = tiled_loop.binary "sub" %[[SCALED]], %{{[0-9]+}}
// CHECK-NEXT:  tiled_loop.unary "exp" %[[D]] {origin = "softmax"} : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NOT:   exp2
