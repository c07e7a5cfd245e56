// RUN: amk-opt %s -p amk-fuse,amk-tile | filecheck %s

// A decode step's k and v projections (one A, two weights: a dual GEMM), k rotated in heads of 128 columns. Its
// column tiles must hold whole heads, so 1024 columns are 8 tiles: split_k lowers it (each split stores one partial
// tile per matmul; the last to arrive sums each and applies the epilogue), where skinny_m had 8 programs.

func.func @kv(%h : !tensor_op.tensor<[16, 4096], bf16>, %wk : !tensor_op.tensor<[4096, 1024], bf16>, %wv : !tensor_op.tensor<[4096, 1024], bf16>) -> (!tensor_op.tensor<[16, 1024], bf16>, !tensor_op.tensor<[16, 1024], bf16>) {
  %k = tensor_op.matmul %h, %wk : (!tensor_op.tensor<[16, 4096], bf16>, !tensor_op.tensor<[4096, 1024], bf16>) -> !tensor_op.tensor<[16, 1024], bf16>
  %v = tensor_op.matmul %h, %wv : (!tensor_op.tensor<[16, 4096], bf16>, !tensor_op.tensor<[4096, 1024], bf16>) -> !tensor_op.tensor<[16, 1024], bf16>
  %r = tensor_op.rotate_half %k {group = 128 : i64} : !tensor_op.tensor<[16, 1024], bf16>
  func.return %r, %v : !tensor_op.tensor<[16, 1024], bf16>, !tensor_op.tensor<[16, 1024], bf16>
}

// CHECK:       tiled_loop.kernel @fused_0 attributes {{{.*}}strategy = "split_k"
// CHECK-SAME:    workspace = ["scratch", "scratch", "counter"]
// CHECK:         ^bb0(%h: {{.*}}, %wk: {{.*}}, %wv: {{.*}}, %out0: {{.*}}, %out1: {{.*}}, %partial_acc: !tensor_op.tensor<[{{.*}}, 1024], f32>, %partial_acc1: !tensor_op.tensor<[{{.*}}, 1024], f32>, %tile_counters
// CHECK:         tiled_loop.for "k"
// CHECK:           tiled_loop.dot %{{.*}}, %wk_tile
// CHECK:           tiled_loop.dot %{{.*}}, %wv_tile
// CHECK:         tiled_loop.store %{{.*}}, %partial_acc <
// CHECK-NEXT:    tiled_loop.store %{{.*}}, %partial_acc1 <
// CHECK:         tiled_loop.if %last_split {
// CHECK:           tiled_loop.for "split" = <[0, SPLIT_K, 1]> iter_args(%acc_sum, %acc_sum_1)
// CHECK:             tiled_loop.load %partial_acc <
// CHECK-NEXT:        tiled_loop.load %partial_acc1 <
// v's summed partials are stored as they are, k's rotated in registers.
// CHECK:           tiled_loop.store %acc_sum_3, %out0
// CHECK-NEXT:      %rotated = tiled_loop.rotate_half %acc_sum_2 {origin = "rotate_half", group = 128 : i64}
// CHECK-NEXT:      tiled_loop.store %rotated, %out1

// Where skinny_m's narrowest column tiles are already many (gate's and up's 14336 columns: 448 tiles of 32), the dual
// GEMM stays skinny_m.

func.func @gate_up(%h : !tensor_op.tensor<[16, 4096], bf16>, %wg : !tensor_op.tensor<[4096, 14336], bf16>, %wu : !tensor_op.tensor<[4096, 14336], bf16>) -> !tensor_op.tensor<[16, 14336], bf16> {
  %g = tensor_op.matmul %h, %wg : (!tensor_op.tensor<[16, 4096], bf16>, !tensor_op.tensor<[4096, 14336], bf16>) -> !tensor_op.tensor<[16, 14336], bf16>
  %u = tensor_op.matmul %h, %wu : (!tensor_op.tensor<[16, 4096], bf16>, !tensor_op.tensor<[4096, 14336], bf16>) -> !tensor_op.tensor<[16, 14336], bf16>
  %s = tensor_op.silu %g : !tensor_op.tensor<[16, 14336], bf16>
  %y = tensor_op.mul %s, %u : (!tensor_op.tensor<[16, 14336], bf16>, !tensor_op.tensor<[16, 14336], bf16>) -> !tensor_op.tensor<[16, 14336], bf16>
  func.return %y : !tensor_op.tensor<[16, 14336], bf16>
}

// CHECK:       tiled_loop.kernel @fused_1 attributes {{{.*}}strategy = "skinny_m"
