// RUN: amk-opt %s -p amk-fuse,amk-tile,amk-fold-exponent-scales | filecheck %s

// softmax(q @ k * 0.125) (attention's scores, workload G), fp16: the row maximum is taken of the raw products and
// scaled once a row; the ragged column tile (1000 = 15 x 64 + 40) is masked to -inf before the scale, which keeps it
// -inf; and, the output being 16-bit, exp(x * 0.125 - m) becomes exp2(x * (0.125 log2 e) - m log2 e): the exponent is
// one FMA, with no multiply by log2(e) before ex2. The running statistics' own exponentials stay exp.

func.func @scores(%q : !tensor_op.tensor<[M, 64], f16>, %k : !tensor_op.tensor<[64, 1000], f16>) -> !tensor_op.tensor<[M, 1000], f16> {
  %0 = tensor_op.matmul %q, %k : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64, 1000], f16>) -> !tensor_op.tensor<[M, 1000], f16>
  %1 = tensor_op.scale %0 {factor = 0.125 : f64} : !tensor_op.tensor<[M, 1000], f16>
  %2 = tensor_op.softmax %1 {axis = -1 : i64} : !tensor_op.tensor<[M, 1000], f16>
  func.return %2 : !tensor_op.tensor<[M, 1000], f16>
}

// CHECK:       tiled_loop.for "n"
// CHECK:         %[[ACC:[a-z0-9_]+]] = tiled_loop.dot
// CHECK-NEXT:    %{{[0-9]+}} = tiled_loop.full 0.125 {origin = "scale"}
// CHECK:         %[[MASKED:[0-9]+]] = tiled_loop.select %valid_cols, %[[ACC]], %{{[0-9]+}} {origin = "softmax"}
// CHECK-NEXT:    %[[RAW_MAX:[0-9]+]] = tiled_loop.reduce "max" %[[MASKED]]
// CHECK-NEXT:    %[[MAX:[0-9]+]] = tiled_loop.binary "mul" %[[RAW_MAX]], %{{[0-9]+}} {origin = "softmax"} : (!tiled_loop.tile<[BLOCK_M, 1], f32>, !tiled_loop.tile<[1, 1], f32>)
// CHECK:         %[[SHIFT:[0-9]+]] = tiled_loop.select %{{[0-9]+}}, %{{[0-9]+}}, %[[MAX]]
// CHECK-NEXT:    %[[SCALE_LOG2E:[0-9]+]] = tiled_loop.full 0.18033687770366
// CHECK-NEXT:    %[[LOG2E:[0-9]+]] = tiled_loop.full 1.4426950408889634
// CHECK-NEXT:    %[[SCALED:[0-9]+]] = tiled_loop.binary "mul" %[[MASKED]], %[[SCALE_LOG2E]] {origin = "softmax"}
// CHECK-NEXT:    %[[SHIFT2:[0-9]+]] = tiled_loop.binary "mul" %[[SHIFT]], %[[LOG2E]] {origin = "softmax"}
// CHECK-NEXT:    %[[D:[0-9]+]] = tiled_loop.binary "sub" %[[SCALED]], %[[SHIFT2]]
// CHECK-NEXT:    tiled_loop.unary "exp2" %[[D]] {origin = "softmax"} : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NOT:     %[[SCALED]]
// CHECK:         tiled_loop.unary "exp" %{{[0-9]+}} {origin = "softmax"} : !tiled_loop.tile<[BLOCK_M, 1], f32>
// CHECK:         tiled_loop.yield
