// RUN: amk-opt %s -p amk-fuse,amk-tile | filecheck %s

// nanoGPT's causal attention: the scores masked where a boolean [1, 1, S, T] mask is false, then the softmax. The
// mask is one matrix for every batch index and head: the batched kernel takes it as a [S, T] argument and reads it
// without the batch index; the where is a select on the mask's tile (compared with 0: loaded tiles are fp32).
func.func @causal_attention(%q : !tensor_op.tensor<[B, H, S, 64], f16>, %k : !tensor_op.tensor<[B, H, T, 64], f16>, %keep : !tensor_op.tensor<[1, 1, S, T], i1>, %fill : !tensor_op.tensor<[1], f16>) -> !tensor_op.tensor<[B, H, S, T], f16> {
  %0 = tensor_op.matmul %q, %k {transpose_rhs = true} : (!tensor_op.tensor<[B, H, S, 64], f16>, !tensor_op.tensor<[B, H, T, 64], f16>) -> !tensor_op.tensor<[B, H, S, T], f16>
  %1 = tensor_op.scale %0 {factor = 0.125 : f64} : !tensor_op.tensor<[B, H, S, T], f16>
  %2 = tensor_op.where %keep, %1, %fill : (!tensor_op.tensor<[1, 1, S, T], i1>, !tensor_op.tensor<[B, H, S, T], f16>, !tensor_op.tensor<[1], f16>) -> !tensor_op.tensor<[B, H, S, T], f16>
  %3 = tensor_op.softmax %2 {axis = -1 : i64} : !tensor_op.tensor<[B, H, S, T], f16>
  func.return %3 : !tensor_op.tensor<[B, H, S, T], f16>
}

// CHECK:       tiled_loop.kernel @fused_0
// CHECK-SAME:    strategy = "chunk_recompute"
// CHECK-NEXT:  ^bb0(%q: !tensor_op.tensor<[B, H, S, 64], f16>, %k: !tensor_op.tensor<[B, H, 64, T], f16>, %keep: !tensor_op.tensor<[S, T], i1>, %fill: !tensor_op.tensor<[1], f16>, %out0: !tensor_op.tensor<[B*H, S, T], f16>
// CHECK:           %keep_tile = tiled_loop.load %keep <[BLOCK_M*pid_m, n]> : !tensor_op.tensor<[S, T], i1> -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], i1>
// CHECK-NEXT:      %keep_f32 = tiled_loop.cast %keep_tile : !tiled_loop.tile<[BLOCK_M, BLOCK_N], i1> -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK:           tiled_loop.binary "ne" %keep_f32
// CHECK:           tiled_loop.select
// CHECK:       func.func @causal_attention(
// CHECK-NEXT:    tiled_loop.launch @fused_0(%q, %k, %keep, %fill)
// CHECK-NOT:     = tensor_op.
