// RUN: amk-opt %s -p 'amk-fuse,amk-tile,amk-stage{block_m=16 block_n=128 block_k=32 num_warps=4 num_stages=2},amk-emit-triton' -t triton | filecheck %s

// RoPE as the epilogue of a projection whose output holds the heads side by side (amk.frontend.layouts.fold_heads):
// each group of 64 columns of the accumulator has its halves swapped in registers (the tile reshaped to
// [rows, groups, 2, 32], the pairs split and joined back swapped, the one moved first negated), and the table of one
// head is read at the columns modulo 64, without a mask on them.

func.func @rotated_heads(%x : !tensor_op.tensor<[M, 256], f16>, %w : !tensor_op.tensor<[256, 512], f16>, %cos : !tensor_op.tensor<[M, 64], f16>) -> !tensor_op.tensor<[M, 512], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 256], f16>, !tensor_op.tensor<[256, 512], f16>) -> !tensor_op.tensor<[M, 512], f16>
  %1 = tensor_op.repeat_columns %cos {times = 8 : i64} : !tensor_op.tensor<[M, 64], f16> -> !tensor_op.tensor<[M, 512], f16>
  %2 = tensor_op.mul %0, %1 : (!tensor_op.tensor<[M, 512], f16>, !tensor_op.tensor<[M, 512], f16>) -> !tensor_op.tensor<[M, 512], f16>
  %3 = tensor_op.rotate_half %0 {group = 64 : i64} : !tensor_op.tensor<[M, 512], f16>
  %4 = tensor_op.add %2, %3 : (!tensor_op.tensor<[M, 512], f16>, !tensor_op.tensor<[M, 512], f16>) -> !tensor_op.tensor<[M, 512], f16>
  func.return %4 : !tensor_op.tensor<[M, 512], f16>
}

// CHECK:       cos_cols = BLOCK_N*pid_n + tl.arange(0, BLOCK_N)
// CHECK-NEXT:  cos_source_cols = cos_cols % 64
// CHECK-NEXT:  cos_tile = tl.load(cos_ptr + cos_rows.to(tl.int64)[:, None] * stride_cos_0 + cos_source_cols.to(tl.int64)[None, :] * stride_cos_1, mask=None if EVEN_TILES else (cos_rows[:, None] < M), other=None if EVEN_TILES else 0.0)
// CHECK:       halves = tl.permute(tl.reshape(acc_1, [BLOCK_M, (BLOCK_N) // 64, 2, 32]), [0, 1, 3, 2])
// CHECK-NEXT:  halves_first, halves_second = tl.split(halves)
// CHECK-NEXT:  rotated = tl.reshape(tl.permute(tl.join(-halves_second, halves_first), [0, 1, 3, 2]), [BLOCK_M, BLOCK_N])
// CHECK:       add = mul + rotated
