// RUN: amk-opt %s -p amk-fuse,amk-tile | filecheck %s

// torch.std(x, -1, unbiased=False, keepdim=True) of fp16 rows: tensor_op.reduce_var is a row reduction with
// LayerNorm's moments (count, pivot, offset, M2: the corrected two-pass sums of one tile, merged by Chan's formula
// across tiles), all in fp32 registers, and the square root follows in the same kernel. Nothing is stored between
// the mean and the squared deviations: as a composition of mean, sub, mul and sum, the plan split it in two kernels
// and the [M, 256] squares went through memory in fp16.

func.func @std(%x : !tensor_op.tensor<[M, 256], f16>) -> !tensor_op.tensor<[M, 1], f16> {
  %0 = tensor_op.reduce_var %x {axis = -1 : i64, keepdim = true, correction = 0.000000e+00 : f64} : !tensor_op.tensor<[M, 256], f16> -> !tensor_op.tensor<[M, 1], f16>
  %1 = tensor_op.sqrt %0 : !tensor_op.tensor<[M, 1], f16>
  func.return %1 : !tensor_op.tensor<[M, 1], f16>
}

// CHECK:       tiled_loop.kernel @fused_0 attributes {{{.*}}strategy = "row_resident"
// CHECK:         %x_f32 = tiled_loop.cast %x_tile : !tiled_loop.tile<[BLOCK_M, 256], f16> -> !tiled_loop.tile<[BLOCK_M, 256], f32>
// The pivot (the tile's mean), the residuals' mean (the offset) and M2 of the residuals:
// CHECK:         %[[SUM:.*]] = tiled_loop.reduce "sum" %{{.*}} {origin = "reduce_var"} : !tiled_loop.tile<[BLOCK_M, 256], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
// CHECK:         %[[PIVOT:.*]] = tiled_loop.binary "div" %[[SUM]], %[[COUNT:.*]] {origin = "reduce_var"}
// CHECK:         tiled_loop.binary "sub" %x_f32, %[[PIVOT]] {origin = "reduce_var"}
// CHECK:         %[[SQUARES:.*]] = tiled_loop.binary "mul" %[[RESIDUALS:.*]], %[[RESIDUALS]] {origin = "reduce_var"}
// CHECK:         %[[M2:.*]] = tiled_loop.reduce "sum" %[[SQUARES]]
// CHECK:         %[[CLAMPED:.*]] = tiled_loop.binary "max" %{{.*}}, %{{.*}} {origin = "reduce_var"}
// correction = 0: M2 over the count itself
// CHECK-NEXT:    %[[VAR:.*]] = tiled_loop.binary "div" %[[CLAMPED]], %[[COUNT]] {origin = "reduce_var"}
// CHECK-NEXT:    %[[STD:.*]] = tiled_loop.unary "sqrt" %[[VAR]] {origin = "sqrt"}
// CHECK-NEXT:    tiled_loop.store %[[STD]], %out0
// CHECK-NOT:   tiled_loop.kernel
