// RUN: amk-opt %s -p amk-fuse,amk-tile | filecheck %s

// Rotary embeddings as Llama applies them, in memory order ([T, heads, head_dim]; amk.frontend.layouts moves the
// heads' transpose after them): q * cos + rotate_half(q) * sin. rotate_half reads q again, at the rotated columns
// (the tiled_loop.load's rotate_half, of groups of the whole row), so the whole rotation is one kernel; cos and sin broadcast over the heads.

func.func @rope(%q : !tensor_op.tensor<[T, 8, 64], f16>, %cos : !tensor_op.tensor<[T, 1, 64], f16>, %sin : !tensor_op.tensor<[T, 1, 64], f16>) -> !tensor_op.tensor<[T, 8, 64], f16> {
  %0 = tensor_op.mul %q, %cos : (!tensor_op.tensor<[T, 8, 64], f16>, !tensor_op.tensor<[T, 1, 64], f16>) -> !tensor_op.tensor<[T, 8, 64], f16>
  %1 = tensor_op.rotate_half %q : !tensor_op.tensor<[T, 8, 64], f16>
  %2 = tensor_op.mul %1, %sin : (!tensor_op.tensor<[T, 8, 64], f16>, !tensor_op.tensor<[T, 1, 64], f16>) -> !tensor_op.tensor<[T, 8, 64], f16>
  %3 = tensor_op.add %0, %2 : (!tensor_op.tensor<[T, 8, 64], f16>, !tensor_op.tensor<[T, 8, 64], f16>) -> !tensor_op.tensor<[T, 8, 64], f16>
  func.return %3 : !tensor_op.tensor<[T, 8, 64], f16>
}

// CHECK-LABEL: tiled_loop.kernel @fused_0
// CHECK:         %q_tile = tiled_loop.load %q <[BLOCK_M*pid_m, BLOCK_N*pid_n]> : !tensor_op.tensor<[8*T, 64], f16>
// CHECK:         %cos_tile = tiled_loop.load %cos <[BLOCK_M*pid_m, BLOCK_N*pid_n]> {broadcast_rows = #tiled_loop.exprs<[8*T, 8, T, 1]>}
// CHECK:         %q_rotated = tiled_loop.load %q <[BLOCK_M*pid_m, BLOCK_N*pid_n]> {rotate_half = 64 : i64} : !tensor_op.tensor<[8*T, 64], f16>
// CHECK-NEXT:    %q_rotated_f32 = tiled_loop.cast %q_rotated
// CHECK:         tiled_loop.binary "mul" %q_rotated_f32, %sin_f32
// CHECK:         tiled_loop.store

// A rotation of a value computed in registers permutes the tile's registers (tiled_loop.rotate_half, the column
// tiles holding whole groups); with group = 64 each group of 64 columns (a projection's heads side by side) is
// rotated within itself, and a table of one head (repeat_columns) is read at the columns modulo its 64.

func.func @scaled_then_rotated(%x : !tensor_op.tensor<[M, 128], f32>) -> !tensor_op.tensor<[M, 128], f32> {
  %0 = tensor_op.scale %x {factor = 2.000000e+00 : f64} : !tensor_op.tensor<[M, 128], f32>
  %1 = tensor_op.rotate_half %0 : !tensor_op.tensor<[M, 128], f32>
  func.return %1 : !tensor_op.tensor<[M, 128], f32>
}

func.func @projection_heads(%x : !tensor_op.tensor<[B, T, 256], f16>, %w : !tensor_op.tensor<[256, 512], f16>, %sin : !tensor_op.tensor<[B, T, 64], f16>) -> !tensor_op.tensor<[B, T, 512], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[B, T, 256], f16>, !tensor_op.tensor<[256, 512], f16>) -> !tensor_op.tensor<[B, T, 512], f16>
  %1 = tensor_op.rotate_half %0 {group = 64 : i64} : !tensor_op.tensor<[B, T, 512], f16>
  %2 = tensor_op.repeat_columns %sin {times = 8 : i64} : !tensor_op.tensor<[B, T, 64], f16> -> !tensor_op.tensor<[B, T, 512], f16>
  %3 = tensor_op.mul %1, %2 : (!tensor_op.tensor<[B, T, 512], f16>, !tensor_op.tensor<[B, T, 512], f16>) -> !tensor_op.tensor<[B, T, 512], f16>
  func.return %3 : !tensor_op.tensor<[B, T, 512], f16>
}

// CHECK-LABEL: tiled_loop.kernel @fused_1
// CHECK:         %[[SCALED:.*]] = tiled_loop.binary "mul" %{{.*}}, {{.*}} {origin = "scale"}
// CHECK-NEXT:    %rotated = tiled_loop.rotate_half %[[SCALED]] {origin = "rotate_half", group = 128 : i64}
// CHECK-NEXT:    tiled_loop.store %rotated
// CHECK-LABEL: tiled_loop.kernel @fused_2
// CHECK:         ^bb0(%x: !tensor_op.tensor<[B*T, 256], f16>, %w: !tensor_op.tensor<[256, 512], f16>, %sin: !tensor_op.tensor<[B*T, 64], f16>
// CHECK:         tiled_loop.dot
// CHECK:         %rotated = tiled_loop.rotate_half %{{.*}} {origin = "rotate_half", group = 64 : i64}
// CHECK:         %sin_tile = tiled_loop.load %sin <[BLOCK_M*pid_m, BLOCK_N*pid_n]> {column_period = 64 : i64} : !tensor_op.tensor<[B*T, 64], f16> -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f16>
// CHECK:         tiled_loop.binary "mul" %rotated, %sin_f32
// CHECK-LABEL: func.func @rope
// CHECK-NEXT:    tiled_loop.launch @fused_0(%q, %cos, %sin)
// CHECK-LABEL: func.func @scaled_then_rotated
// CHECK-NEXT:    %[[ROTATED:.*]] = tiled_loop.launch @fused_1(%x)
// CHECK-NEXT:    func.return %[[ROTATED]]
// CHECK-LABEL: func.func @projection_heads
// CHECK-NEXT:    tiled_loop.launch @fused_2(%x, %w, %sin)
