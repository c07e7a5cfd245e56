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
// CHECK:         %count = tiled_loop.full 0.0 {origin = "rmsnorm"} : !tiled_loop.tile<[BLOCK_M, 1], f32>
// CHECK-NEXT:    %row_sumsq = tiled_loop.full 0.0 {origin = "rmsnorm"} : !tiled_loop.tile<[BLOCK_M, 1], f32>
// The K loop adds x*x element-wise; each row is summed once after the loop, not across threads every iteration.
// CHECK-NEXT:    %count_terms = tiled_loop.full 0.0 {origin = "rmsnorm"} : !tiled_loop.tile<[1, BLOCK_K], f32>
// CHECK-NEXT:    %sumsq_terms = tiled_loop.full 0.0 {origin = "rmsnorm"} : !tiled_loop.tile<[BLOCK_M, BLOCK_K], f32>
// CHECK-NEXT:    %acc_1, %count_terms_1, %sumsq_terms_1 = tiled_loop.for "k" = <[BLOCK_K*pid_k*{{.*}}]> iter_args(%acc, %count_terms, %sumsq_terms)
// CHECK-NOT:       tiled_loop.reduce
// CHECK:           %{{.*}} = tiled_loop.binary "add" %sumsq_terms_2, %{{.*}} {origin = "rmsnorm"} : (!tiled_loop.tile<[BLOCK_M, BLOCK_K], f32>
// CHECK:           %[[XG:.*]] = tiled_loop.binary "mul" %x_f32, %g_f32 {origin = "rmsnorm"}
// CHECK:           %a_tile = tiled_loop.cast %{{.*}} -> !tiled_loop.tile<[BLOCK_M, BLOCK_K], bf16>
// CHECK:           tiled_loop.dot %a_tile, %w_tile, %acc_2 {origin = "matmul"}
// CHECK:         %[[COUNTS:.*]] = tiled_loop.reduce "sum" %count_terms_1 {origin = "rmsnorm"}
// CHECK-NEXT:    %[[SQUARES:.*]] = tiled_loop.reduce "sum" %sumsq_terms_1 {origin = "rmsnorm"}
// CHECK-NEXT:    %[[COUNT:.*]] = tiled_loop.binary "add" %count, %[[COUNTS]]
// CHECK-NEXT:    %[[SUMSQ:.*]] = tiled_loop.binary "add" %row_sumsq, %[[SQUARES]]
// CHECK:         tiled_loop.store %acc_1, %partial_acc
// CHECK-NEXT:    tiled_loop.store %[[COUNT]], %partial_state0 <[BLOCK_M*pid_k*cdiv(16, BLOCK_M) + BLOCK_M*pid_m, pid_n]>
// CHECK-NEXT:    tiled_loop.store %[[SUMSQ]], %partial_state1
// CHECK:         tiled_loop.if %last_split {
// CHECK:           tiled_loop.for "split" = <[0, SPLIT_K, 1]> iter_args(%acc_sum, %count_1, %row_sumsq_1)
// CHECK:           %rstd = tiled_loop.unary "rsqrt"
// CHECK-NEXT:      %{{.*}} = tiled_loop.binary "mul" %acc_sum_1, %rstd {origin = "rmsnorm"}
