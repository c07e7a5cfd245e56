// RUN: amk-opt %s -p 'amk-fuse,amk-tile' | filecheck %s

// Operands whose leading dims broadcast over the space's: position embeddings [1, T, C] (their row r % T) and a
// per-sequence vector [B, 1, C] (its row r // T) over [B, T, C] rows flattened. Each is a kernel argument of its own
// rows, loaded with the map from the space's rows (broadcast_rows: the space's rows, then divisor, period, stride).

func.func @positions_and_mask(%x : !tensor_op.tensor<[B, T, 64], f16>, %p : !tensor_op.tensor<[1, T, 64], f16>, %m : !tensor_op.tensor<[B, 1, 64], f16>) -> !tensor_op.tensor<[B, T, 64], f16> {
  %0 = tensor_op.add %x, %p : (!tensor_op.tensor<[B, T, 64], f16>, !tensor_op.tensor<[1, T, 64], f16>) -> !tensor_op.tensor<[B, T, 64], f16>
  %1 = tensor_op.add %0, %m : (!tensor_op.tensor<[B, T, 64], f16>, !tensor_op.tensor<[B, 1, 64], f16>) -> !tensor_op.tensor<[B, T, 64], f16>
  %2 = tensor_op.softmax %1 {axis = -1 : i64} : !tensor_op.tensor<[B, T, 64], f16>
  func.return %2 : !tensor_op.tensor<[B, T, 64], f16>
}

// CHECK:       tiled_loop.kernel @fused_0
// CHECK-NEXT:  ^{{.*}}(%x: !tensor_op.tensor<[B*T, 64], f16>, %p: !tensor_op.tensor<[T, 64], f16>, %m: !tensor_op.tensor<[B, 64], f16>, %out0: !tensor_op.tensor<[B*T, 64], f16>):
// CHECK-NEXT:    %x_tile = tiled_loop.load %x <[BLOCK_M*pid_m, 0]> : !tensor_op.tensor<[B*T, 64], f16> -> !tiled_loop.tile<[BLOCK_M, 64], f16>
// CHECK:         %p_tile = tiled_loop.load %p <[BLOCK_M*pid_m, 0]> {broadcast_rows = #tiled_loop.exprs<[B*T, 1, T, 1]>} : !tensor_op.tensor<[T, 64], f16> -> !tiled_loop.tile<[BLOCK_M, 64], f16>
// CHECK:         %m_tile = tiled_loop.load %m <[BLOCK_M*pid_m, 0]> {broadcast_rows = #tiled_loop.exprs<[B*T, T, B, 1]>} : !tensor_op.tensor<[B, 64], f16> -> !tiled_loop.tile<[BLOCK_M, 64], f16>

// -----

// Kept dims in the middle ([1, H, 1, C] over [B, H, T, C]) would need sizes no kernel argument gives: not fused.

func.func @heads_only(%x : !tensor_op.tensor<[B, H, T, 64], f16>, %g : !tensor_op.tensor<[1, H, 1, 64], f16>) -> !tensor_op.tensor<[B, H, T, 64], f16> {
  %0 = tensor_op.mul %x, %g : (!tensor_op.tensor<[B, H, T, 64], f16>, !tensor_op.tensor<[1, H, 1, 64], f16>) -> !tensor_op.tensor<[B, H, T, 64], f16>
  %1 = tensor_op.relu %0 : !tensor_op.tensor<[B, H, T, 64], f16>
  func.return %1 : !tensor_op.tensor<[B, H, T, 64], f16>
}

// CHECK-LABEL: func.func @heads_only
// CHECK-NEXT:    %0 = tensor_op.mul %x, %g
// CHECK-NEXT:    %1 = tiled_loop.launch @fused_1(%0)
