// RUN: amk-opt %s -p amk-fuse,amk-tile | filecheck %s
// RUN: amk-opt %s -p amk-fuse,amk-tile,amk-stage,amk-emit-triton | filecheck %s --check-prefix=TRITON

// Hugging Face's 4-D attention mask [B, 1, S, T] added to the scaled scores of a batched q @ k^T: one matrix per
// sequence, over the heads. The kernel takes it as [B, S, T] and reads, at its batch index b of B*H, the mask's
// matrix b // H (broadcast_batch: the kernel's batch count, divisor H, period B); H is a dim of q's argument
// [B, H, S, 64], which the kernel reads in place.
func.func @hf_mask(%q : !tensor_op.tensor<[B, H, S, 64], f16>, %k : !tensor_op.tensor<[B, H, T, 64], f16>, %mask : !tensor_op.tensor<[B, 1, S, T], f16>) -> !tensor_op.tensor<[B, H, S, T], f16> {
  %0 = tensor_op.matmul %q, %k {transpose_rhs = true} : (!tensor_op.tensor<[B, H, S, 64], f16>, !tensor_op.tensor<[B, H, T, 64], f16>) -> !tensor_op.tensor<[B, H, S, T], f16>
  %1 = tensor_op.add %0, %mask : (!tensor_op.tensor<[B, H, S, T], f16>, !tensor_op.tensor<[B, 1, S, T], f16>) -> !tensor_op.tensor<[B, H, S, T], f16>
  %2 = tensor_op.softmax %1 {axis = -1 : i64} : !tensor_op.tensor<[B, H, S, T], f16>
  func.return %2 : !tensor_op.tensor<[B, H, S, T], f16>
}

// CHECK:       tiled_loop.kernel @fused_0
// CHECK-NEXT:  ^bb0(%q: !tensor_op.tensor<[B, H, S, 64], f16>, %k: !tensor_op.tensor<[B, H, 64, T], f16>, %mask: !tensor_op.tensor<[B, S, T], f16>,
// CHECK:           %mask_tile = tiled_loop.load %mask <[pid_b, BLOCK_M*pid_m, n]> {broadcast_batch = #tiled_loop.exprs<[B*H, H, B]>} : !tensor_op.tensor<[B, S, T], f16> -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f16>

// TRITON: mask_tile = tl.load(mask_ptr + (((pid_b // (H)) % (B))).to(tl.int64) * stride_mask_0

// -----

// T5's relative position bias [1, H, S, T], one matrix per head over the batch: the matrix b % H.
func.func @t5_bias(%q : !tensor_op.tensor<[B, H, S, 64], f16>, %k : !tensor_op.tensor<[B, H, T, 64], f16>, %bias : !tensor_op.tensor<[1, H, S, T], f16>) -> !tensor_op.tensor<[B, H, S, T], f16> {
  %0 = tensor_op.matmul %q, %k {transpose_rhs = true} : (!tensor_op.tensor<[B, H, S, 64], f16>, !tensor_op.tensor<[B, H, T, 64], f16>) -> !tensor_op.tensor<[B, H, S, T], f16>
  %1 = tensor_op.add %0, %bias : (!tensor_op.tensor<[B, H, S, T], f16>, !tensor_op.tensor<[1, H, S, T], f16>) -> !tensor_op.tensor<[B, H, S, T], f16>
  %2 = tensor_op.softmax %1 {axis = -1 : i64} : !tensor_op.tensor<[B, H, S, T], f16>
  func.return %2 : !tensor_op.tensor<[B, H, S, T], f16>
}

// CHECK:           %bias_tile = tiled_loop.load %bias <[pid_b, BLOCK_M*pid_m, n]> {broadcast_batch = #tiled_loop.exprs<[B*H, 1, H]>} : !tensor_op.tensor<[H, S, T], f16> -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f16>

// BERT's padding mask [B, 1, 1, T]: a row vector per sequence, the kernel's [B, 1, T] argument, read as a row tile
// at row 0 of the matrix b // H.
// CHECK:       tiled_loop.kernel @fused_2
// CHECK-NEXT:  ^bb0({{.*}}%mask: !tensor_op.tensor<[B, 1, T], f16>,
// CHECK:           %mask_tile = tiled_loop.load %mask <[pid_b, 0, n]> {broadcast_batch = #tiled_loop.exprs<[B*H, H, B]>} : !tensor_op.tensor<[B, 1, T], f16> -> !tiled_loop.tile<[1, BLOCK_N], f16>

// CHECK:       func.func @hf_mask(
// CHECK-NEXT:    tiled_loop.launch @fused_0(%q, %k, %mask)

func.func @bert_mask(%q : !tensor_op.tensor<[B, H, S, 64], f16>, %k : !tensor_op.tensor<[B, H, T, 64], f16>, %mask : !tensor_op.tensor<[B, 1, 1, T], f16>) -> !tensor_op.tensor<[B, H, S, T], f16> {
  %0 = tensor_op.matmul %q, %k {transpose_rhs = true} : (!tensor_op.tensor<[B, H, S, 64], f16>, !tensor_op.tensor<[B, H, T, 64], f16>) -> !tensor_op.tensor<[B, H, S, T], f16>
  %1 = tensor_op.add %0, %mask : (!tensor_op.tensor<[B, H, S, T], f16>, !tensor_op.tensor<[B, 1, 1, T], f16>) -> !tensor_op.tensor<[B, H, S, T], f16>
  %2 = tensor_op.softmax %1 {axis = -1 : i64} : !tensor_op.tensor<[B, H, S, T], f16>
  func.return %2 : !tensor_op.tensor<[B, H, S, T], f16>
}
