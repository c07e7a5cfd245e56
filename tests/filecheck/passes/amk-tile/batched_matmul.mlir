// RUN: amk-opt %s -p amk-fuse,amk-tile | filecheck %s

// A batched matmul (attention's q @ k^T: one matrix of keys per batch index and head) fused with the scale and
// softmax after it. The kernel repeats over the batch dims: a last grid axis, pid_b, over their product; the output
// and the partial statistics are rank-3 tensors [batch, rows, cols] accessed at [pid_b, row, col], so that a row tile
// never spans two batch indices whatever S is. The operands keep their batch dims (the keys viewed as [B, H, 64, T] by
// strides), read at the batch index written over them, [pid_b // H, pid_b % H], with a stride each: Hugging Face's
// q = x.view(B, S, H, D).transpose(1, 2) is read in place. The strategy is chunk_recompute's, as for one matrix:
// K = 64 is one tile.
func.func @attention_probabilities(%q : !tensor_op.tensor<[B, H, S, 64], f16>, %k : !tensor_op.tensor<[B, H, T, 64], f16>) -> !tensor_op.tensor<[B, H, S, T], f16> {
  %0 = tensor_op.matmul %q, %k {transpose_rhs = true} : (!tensor_op.tensor<[B, H, S, 64], f16>, !tensor_op.tensor<[B, H, T, 64], f16>) -> !tensor_op.tensor<[B, H, S, T], f16>
  %1 = tensor_op.scale %0 {factor = 0.125 : f64} : !tensor_op.tensor<[B, H, S, T], f16>
  %2 = tensor_op.softmax %1 {axis = -1 : i64} : !tensor_op.tensor<[B, H, S, T], f16>
  func.return %2 : !tensor_op.tensor<[B, H, S, T], f16>
}

// CHECK:       tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(S, BLOCK_M), cdiv(T, BLOCK_N*cdiv(cdiv(T, BLOCK_N), SPLIT_N)), B*H]>, program_ids = ["pid_m", "pid_n", "pid_b"], strategy = "chunk_recompute"
// CHECK-SAME:    arg_views = ["", "transpose", "", "", ""]
// CHECK-SAME:    problem = #tiled_loop.exprs<[S, T, 64]>
// CHECK-NEXT:  ^bb0(%q: !tensor_op.tensor<[B, H, S, 64], f16>, %k: !tensor_op.tensor<[B, H, 64, T], f16>, %out0: !tensor_op.tensor<[B*H, S, T], f16>, %partial0: !tensor_op.tensor<[B*H, S, cdiv(T, BLOCK_N*cdiv(cdiv(T, BLOCK_N), SPLIT_N))], f32>
// CHECK-NEXT:    tiled_loop.load %q <[floor(pid_b/H), Mod(pid_b, H), BLOCK_M*pid_m, 0]> : !tensor_op.tensor<[B, H, S, 64], f16> -> !tiled_loop.tile<[BLOCK_M, 64], f16>
// CHECK:           tiled_loop.load %k <[floor(pid_b/H), Mod(pid_b, H), 0, n]> : !tensor_op.tensor<[B, H, 64, T], f16> -> !tiled_loop.tile<[64, BLOCK_N], f16>
// CHECK:         tiled_loop.store %{{.*}}, %partial0 <[pid_b, BLOCK_M*pid_m, pid_n]>
// CHECK:         tiled_loop.relaunch {{.*}}grid = #tiled_loop.exprs<[cdiv(S, BLOCK_M), cdiv(T, BLOCK_N*cdiv(cdiv(T, BLOCK_N), SPLIT_N)), B*H]>, program_ids = ["pid_m", "pid_n", "pid_b"]}
// CHECK:           tiled_loop.load %partial0 <[pid_b, BLOCK_M*pid_m, t]>
// CHECK:           tiled_loop.store %{{.*}}, %out0 <[pid_b, BLOCK_M*pid_m, n]>
// CHECK:       func.func @attention_probabilities(
// CHECK-NEXT:    tiled_loop.launch @fused_0(%q, %k)
