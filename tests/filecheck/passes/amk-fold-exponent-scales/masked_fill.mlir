// RUN: amk-opt %s -p amk-fuse,amk-tile,amk-fold-exponent-scales | filecheck %s

// nanoGPT's causal scores, softmax((q @ k) * 0.125 masked_fill(mask, -inf)), fp16: the masked_fill's select has -inf
// as its *true* branch; the scale moves after it as after the ragged columns' select, and the exponent of the scores
// becomes exp2 with the scale folded in, as without the mask (softmax.mlir).

func.func @causal(%q : !tensor_op.tensor<[M, 64], f16>, %k : !tensor_op.tensor<[64, 1000], f16>, %mask : !tensor_op.tensor<[M, 1000], i1>) -> !tensor_op.tensor<[M, 1000], f16> {
  %0 = tensor_op.matmul %q, %k : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64, 1000], f16>) -> !tensor_op.tensor<[M, 1000], f16>
  %1 = tensor_op.scale %0 {factor = 0.125 : f64} : !tensor_op.tensor<[M, 1000], f16>
  %2 = tensor_op.masked_fill %1, %mask {value = 0xfff0000000000000 : f64} : (!tensor_op.tensor<[M, 1000], f16>, !tensor_op.tensor<[M, 1000], i1>) -> !tensor_op.tensor<[M, 1000], f16>
  %3 = tensor_op.softmax %2 {axis = -1 : i64} : !tensor_op.tensor<[M, 1000], f16>
  func.return %3 : !tensor_op.tensor<[M, 1000], f16>
}

// CHECK:       tiled_loop.for "n"
// CHECK:         %[[ACC:[a-z0-9_]+]] = tiled_loop.dot
// CHECK:         %[[FILL:[0-9]+]] = tiled_loop.full -inf {origin = "masked_fill"}
// CHECK-NEXT:    %[[FILLED:[0-9]+]] = tiled_loop.select %{{[0-9]+}}, %[[FILL]], %[[ACC]] {origin = "masked_fill"}
// CHECK:         %[[MASKED:[0-9]+]] = tiled_loop.select %valid_cols, %[[FILLED]], %{{[0-9]+}} {origin = "softmax"}
// CHECK-NEXT:    %[[RAW_MAX:[0-9]+]] = tiled_loop.reduce "max" %[[MASKED]]
// CHECK-NEXT:    %{{[0-9]+}} = tiled_loop.binary "mul" %[[RAW_MAX]], %{{[0-9]+}} {origin = "softmax"}
// CHECK:         %[[SCALED:[0-9]+]] = tiled_loop.binary "mul" %[[MASKED]], %{{[0-9]+}} {origin = "softmax"}
// CHECK:         %[[D:[0-9]+]] = tiled_loop.binary "sub" %[[SCALED]], %{{[0-9]+}}
// CHECK-NEXT:    tiled_loop.unary "exp2" %[[D]] {origin = "softmax"} : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK:         tiled_loop.yield
// CHECK:       tiled_loop.for "n"
// CHECK:         tiled_loop.select %{{[0-9]+}}, %{{[0-9]+}}, %{{[a-z0-9_]+}} {origin = "masked_fill"}
// CHECK:         tiled_loop.unary "exp2"
