// RUN: amk-opt %s -p 'amk-fuse,amk-tile,amk-stage{block_m=16 block_n=64 num_warps=4 num_stages=1},amk-emit-triton' -t triton | filecheck %s

// A load of broadcast rows (position embeddings [1, T, C], a per-sequence vector [B, 1, C] over [B, T, C]): the
// space's rows, masked against their count (dim_0 = B*T), address the operand's rows r % T and r // T.

func.func @positions_and_mask(%x : !tensor_op.tensor<[B, T, 64], f16>, %p : !tensor_op.tensor<[1, T, 64], f16>, %m : !tensor_op.tensor<[B, 1, 64], f16>) -> !tensor_op.tensor<[B, T, 64], f16> {
  %0 = tensor_op.add %x, %p : (!tensor_op.tensor<[B, T, 64], f16>, !tensor_op.tensor<[1, T, 64], f16>) -> !tensor_op.tensor<[B, T, 64], f16>
  %1 = tensor_op.add %0, %m : (!tensor_op.tensor<[B, T, 64], f16>, !tensor_op.tensor<[B, 1, 64], f16>) -> !tensor_op.tensor<[B, T, 64], f16>
  %2 = tensor_op.softmax %1 {axis = -1 : i64} : !tensor_op.tensor<[B, T, 64], f16>
  func.return %2 : !tensor_op.tensor<[B, T, 64], f16>
}

// CHECK:       p_rows = BLOCK_M*pid_m + tl.arange(0, BLOCK_M)
// CHECK-NEXT:  p_source_rows = (p_rows % (T))
// CHECK-NEXT:  p_cols = 0 + tl.arange(0, 64)
// CHECK-NEXT:  p_tile = tl.load(p_ptr + p_source_rows.to(tl.int64)[:, None] * stride_p_0 + p_cols.to(tl.int64)[None, :] * stride_p_1, mask=None if EVEN_TILES else (p_rows[:, None] < dim_0), other=None if EVEN_TILES else 0.0)
// CHECK:       m_source_rows = ((m_rows // (T)) % (B))
// CHECK:       m_tile = tl.load(m_ptr + m_source_rows.to(tl.int64)[:, None] * stride_m_0
