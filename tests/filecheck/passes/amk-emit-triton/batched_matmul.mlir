// RUN: amk-opt %s -p 'amk-fuse,amk-tile,amk-stage{block_m=64 block_n=64 block_k=32 num_warps=4 num_stages=3 persistent=1 tma=1},amk-emit-triton' -t triton | filecheck %s

// A batched matmul (attention's probabilities times the values) as a tile2d kernel: the grouped grid of output tiles
// is repeated over the batch (pid_b), both on one flat grid axis (CUDA caps the others at 65535 programs, fewer than
// batch x heads can be), the batch varying slowest. Each rank-3 operand is read at its batch
// index's offset, one scalar term (no index vector, no mask: a program never leaves its batch index), and the masks
// compare rows and columns with one matrix's S and T. A batched kernel's launch is neither persistent nor TMA: the
// switches are ignored (and never searched).
func.func @attention_values(%p : !tensor_op.tensor<[B, S, T], f16>, %v : !tensor_op.tensor<[B, T, 64], f16>) -> !tensor_op.tensor<[B, S, 64], f16> {
  %0 = tensor_op.matmul %p, %v : (!tensor_op.tensor<[B, S, T], f16>, !tensor_op.tensor<[B, T, 64], f16>) -> !tensor_op.tensor<[B, S, 64], f16>
  func.return %0 : !tensor_op.tensor<[B, S, 64], f16>
}

// CHECK:       def fused_0_kernel(
// CHECK:           pid = tl.program_id(0)
// CHECK:           pid_b = pid // (num_pid_m * num_pid_n)  # the batch index
// CHECK-NEXT:      pid = pid % (num_pid_m * num_pid_n)
// CHECK-NOT:       tl.range(tl.program_id(0)
// CHECK:           p_tile = tl.load(p_ptr + (pid_b).to(tl.int64) * stride_p_0 + p_rows.to(tl.int64)[:, None] * stride_p_1 + p_cols.to(tl.int64)[None, :] * stride_p_2, mask=None if EVEN_TILES else (p_rows[:, None] < S) & (p_cols[None, :] < T), other=None if EVEN_TILES else 0.0)
// CHECK:           v_tile = tl.load(v_ptr + (pid_b).to(tl.int64) * stride_v_0 + {{.*}}, mask=None if EVEN_TILES else (v_rows[:, None] < T), other=None if EVEN_TILES else 0.0)
// CHECK:       tl.store(out0_ptr + (pid_b).to(tl.int64) * stride_out0_0 + {{.*}}, mask=None if EVEN_TILES else (out0_rows[:, None] < S))
// CHECK:       def launch(p, v, out0):
// CHECK:           even_tiles = S % 64 == 0 and T % 32 == 0
// CHECK-NOT:       _tma_readable
// CHECK:           grid = (triton.cdiv(S, 64) * triton.cdiv(64, 64) * B,)
