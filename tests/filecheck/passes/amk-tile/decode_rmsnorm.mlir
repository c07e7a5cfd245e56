// RUN: amk-opt %s -p amk-fuse,amk-tile | filecheck %s

// A decode step: RMSNorm before a skinny matmul with a long K (split_k). RMSNorm's per-row scale commutes with the
// matmul, rstd * ((x * g) @ W), so each program folds the statistics of its own chunk of K into the K loop (no loop
// over all of K before it), stores them beside its partial tile, and the finisher merges the splits' statistics and
// scales the summed accumulator.

func.func @decode(%x : !tensor_op.tensor<[16, 4096], bf16>, %g : !tensor_op.tensor<[4096], bf16>, %w : !tensor_op.tensor<[4096, 4096], bf16>, %r : !tensor_op.tensor<[16, 4096], bf16>) -> !tensor_op.tensor<[16, 4096], bf16> {
  %0 = tensor_op.rmsnorm %x weight %g {eps = 1.0e-05 : f64} : !tensor_op.tensor<[16, 4096], bf16> weight !tensor_op.tensor<[4096], bf16> -> !tensor_op.tensor<[16, 4096], bf16>
  %1 = tensor_op.matmul %0, %w : (!tensor_op.tensor<[16, 4096], bf16>, !tensor_op.tensor<[4096, 4096], bf16>) -> !tensor_op.tensor<[16, 4096], bf16>
  %2 = tensor_op.add %1, %r : (!tensor_op.tensor<[16, 4096], bf16>, !tensor_op.tensor<[16, 4096], bf16>) -> !tensor_op.tensor<[16, 4096], bf16>
  func.return %2 : !tensor_op.tensor<[16, 4096], bf16>
}

// CHECK:       tiled_loop.kernel @fused_0 attributes {{{.*}}strategy = "split_k"
// CHECK-SAME:    workspace = ["scratch", "scratch", "scratch", "counter"]
// The sums of squares are the diagonal of x @ x^T, accumulated on the tensor cores from the bf16 tile (each product
// exact in fp32) and read once after the loop; the column count is added element-wise and summed once as well.
// CHECK:         %count_terms = tiled_loop.full 0.0 {origin = "rmsnorm"} : !tiled_loop.tile<[1, BLOCK_K], f32>
// CHECK-NEXT:    %gram = tiled_loop.full 0.0 {origin = "rmsnorm"} : !tiled_loop.tile<[BLOCK_M, BLOCK_M], f32>
// CHECK-NEXT:    %acc_1, %count_terms_1, %gram_1 = tiled_loop.for "k" = <[BLOCK_K*pid_k*{{.*}}]> iter_args(%acc, %count_terms, %gram)
// CHECK:           %x_tile = tiled_loop.load %x
// CHECK-NOT:       tiled_loop.reduce
// CHECK:           %x_tile_t = tiled_loop.transpose %x_tile {origin = "rmsnorm"} : !tiled_loop.tile<[BLOCK_M, BLOCK_K], bf16> -> !tiled_loop.tile<[BLOCK_K, BLOCK_M], bf16>
// CHECK-NEXT:      %gram_3 = tiled_loop.dot %x_tile, %x_tile_t, %gram_2 {origin = "rmsnorm"}
// CHECK-NEXT:      %[[XG:.*]] = tiled_loop.binary "mul" %x_f32, %g_f32 {origin = "rmsnorm"}
// CHECK:           %a_tile = tiled_loop.cast %{{.*}} -> !tiled_loop.tile<[BLOCK_M, BLOCK_K], bf16>
// CHECK:           tiled_loop.dot %a_tile, %w_tile, %acc_2 {origin = "matmul"}
// CHECK:         %[[COUNTS:.*]] = tiled_loop.reduce "sum" %count_terms_1 {origin = "rmsnorm"}
// CHECK-NEXT:    %[[SQUARES:.*]] = tiled_loop.diagonal %gram_1 {origin = "rmsnorm"} : !tiled_loop.tile<[BLOCK_M, BLOCK_M], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
// CHECK-NEXT:    tiled_loop.store %acc_1, %partial_acc
// The count, the same for every row, is widened to a column before it is stored.
// CHECK:         %[[COUNT:.*]] = tiled_loop.binary "add" %[[COUNTS]], %{{.*}} : (!tiled_loop.tile<[1, 1], f32>, !tiled_loop.tile<[BLOCK_M, 1], f32>)
// CHECK-NEXT:    tiled_loop.store %[[COUNT]], %partial_state0 <[BLOCK_M*pid_k*cdiv(16, BLOCK_M) + BLOCK_M*pid_m, pid_n]>
// CHECK-NEXT:    tiled_loop.store %[[SQUARES]], %partial_state1
// CHECK:         tiled_loop.if %last_split {
// CHECK:           tiled_loop.for "split" = <[0, SPLIT_K, 1]> iter_args(%acc_sum, %count, %row_sumsq)
// CHECK:           %rstd = tiled_loop.unary "rsqrt"
// CHECK-NEXT:      %{{.*}} = tiled_loop.binary "mul" %acc_sum_1, %rstd {origin = "rmsnorm"}
