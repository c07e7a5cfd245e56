// RUN: amk-opt %s -p 'amk-fuse,amk-tile,amk-stage{block_m=16 block_n=32 num_warps=4 num_stages=1},amk-emit-triton' -t triton | filecheck %s

// A rotate_half load: the tile's columns c of a row of 64 read column (c + 32) % 64, and the columns below 32 (the
// second half, moved first) are negated. Rotated columns stay in their row: the bounds mask is the rows' alone.
// The table shared by every sequence, [1, T, 1, 64] over heads in memory order [B, T, 8, 64], keeps a run of dims in
// the middle: the space's row r reads its row (r // 8) % T.

func.func @rotated_times_sin(%q : !tensor_op.tensor<[B, T, 8, 64], f16>, %sin : !tensor_op.tensor<[1, T, 1, 64], f16>) -> !tensor_op.tensor<[B, T, 8, 64], f16> {
  %0 = tensor_op.rotate_half %q : !tensor_op.tensor<[B, T, 8, 64], f16>
  %1 = tensor_op.mul %0, %sin : (!tensor_op.tensor<[B, T, 8, 64], f16>, !tensor_op.tensor<[1, T, 1, 64], f16>) -> !tensor_op.tensor<[B, T, 8, 64], f16>
  func.return %1 : !tensor_op.tensor<[B, T, 8, 64], f16>
}

// CHECK:       q_rows = BLOCK_M*pid_m + tl.arange(0, BLOCK_M)
// CHECK-NEXT:  q_cols = BLOCK_N*pid_n + tl.arange(0, BLOCK_N)
// CHECK-NEXT:  q_cols_rotated = (q_cols + 32) % 64
// CHECK-NEXT:  q_cols_negated = q_cols < 32
// CHECK-NEXT:  q_read = tl.load(q_ptr + q_rows.to(tl.int64)[:, None] * stride_q_0 + q_cols_rotated.to(tl.int64)[None, :] * stride_q_1, mask=None if EVEN_TILES else (q_rows[:, None] < dim_0), other=None if EVEN_TILES else 0.0)
// CHECK-NEXT:  q_rotated = tl.where(q_cols_negated[None, :], -q_read, q_read)
// CHECK-NEXT:  q_rotated_f32 = q_rotated.to(tl.float32)
// CHECK:       sin_source_rows = ((sin_rows // (8)) % (T))
// CHECK:       mul = q_rotated_f32 * sin_f32
