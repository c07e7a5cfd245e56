// RUN: amk-opt %s -p amk-fuse,amk-tile,amk-fold-exponent-scales | filecheck %s

// softmax(q @ k * 0.125) (attention's scores, workload G): the row maximum is taken of the raw products and scaled
// once a row; each element's exponential is exp2 of one multiply-add, x * (0.125 * log2(e)) - max * log2(e); the
// products scaled by 0.125 are no longer computed. The ragged column tile (1000 = 15 x 64 + 40) is masked to -inf
// before the scale, which keeps it -inf. Vectors' own exponentials (rescaling a row's running sum) stay exp.

func.func @scores(%q : !tensor_op.tensor<[M, 64], f16>, %k : !tensor_op.tensor<[64, 1000], f16>) -> !tensor_op.tensor<[M, 1000], f16> {
  %0 = tensor_op.matmul %q, %k : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64, 1000], f16>) -> !tensor_op.tensor<[M, 1000], f16>
  %1 = tensor_op.scale %0 {factor = 0.125 : f64} : !tensor_op.tensor<[M, 1000], f16>
  %2 = tensor_op.softmax %1 {axis = -1 : i64} : !tensor_op.tensor<[M, 1000], f16>
  func.return %2 : !tensor_op.tensor<[M, 1000], f16>
}

// CHECK:       tiled_loop.for "n"
// CHECK:         %[[ACC:[a-z0-9_]+]] = tiled_loop.dot
// CHECK-NEXT:    %[[SCALE:[0-9]+]] = tiled_loop.full 0.125 {origin = "scale"}
// CHECK-NOT:     tiled_loop.binary "mul" %[[ACC]], %[[SCALE]]
// CHECK:         %[[MASKED:[0-9]+]] = tiled_loop.select %valid_cols, %[[ACC]], %{{[0-9]+}} {origin = "softmax"}
// CHECK-NEXT:    %[[RAW_MAX:[0-9]+]] = tiled_loop.reduce "max" %[[MASKED]]
// CHECK-NEXT:    %[[MAX:[0-9]+]] = tiled_loop.binary "mul" %[[RAW_MAX]], %[[SCALE]] {origin = "softmax"} : (!tiled_loop.tile<[BLOCK_M, 1], f32>, !tiled_loop.tile<[1, 1], f32>)
// CHECK:         %[[FACTOR:[0-9]+]] = tiled_loop.full 0.18033688011112042 {origin = "softmax"}
// CHECK-NEXT:    %[[X2:[0-9]+]] = tiled_loop.binary "mul" %[[MASKED]], %[[FACTOR]]
// CHECK-NEXT:    %[[LOG2E:[0-9]+]] = tiled_loop.full 1.4426950408889634
// CHECK-NEXT:    %[[SHIFT2:[0-9]+]] = tiled_loop.binary "mul" %{{[0-9]+}}, %[[LOG2E]] {{.*}} -> !tiled_loop.tile<[BLOCK_M, 1], f32>
// CHECK-NEXT:    %[[D:[0-9]+]] = tiled_loop.binary "sub" %[[X2]], %[[SHIFT2]]
// CHECK-NEXT:    %{{[0-9]+}} = tiled_loop.unary "exp2" %[[D]] {origin = "softmax"} : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK:         tiled_loop.unary "exp" %{{[0-9]+}} {origin = "softmax"} : !tiled_loop.tile<[BLOCK_M, 1], f32>

// The finishing sweep: each probability exp2(x * (0.125 * log2(e)) - max * log2(e)) / sum.
// CHECK:       tiled_loop.relaunch
// CHECK:       tiled_loop.for "n" {{.*}}second sweep
// CHECK:         %[[ACC2:[a-z0-9_]+]] = tiled_loop.dot
// CHECK-NEXT:    %[[F2:[0-9]+]] = tiled_loop.full 0.18033688011112042
// CHECK-NEXT:    %[[Y2:[0-9]+]] = tiled_loop.binary "mul" %[[ACC2]], %[[F2]]
// CHECK:         tiled_loop.binary "sub" %[[Y2]]
// CHECK-NEXT:    %[[E2:[0-9]+]] = tiled_loop.unary "exp2"
// CHECK-NEXT:    tiled_loop.binary "mul" %[[E2]], %inv_sumexp
