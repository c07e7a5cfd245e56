// RUN: amk-opt %s -p amk-fuse,amk-tile | filecheck %s

// chunk_recompute, what amk-tile picks for a matmul with a short K (at most 256) followed by a row reduction and no
// prologue: SPLIT_N programs share each row strip, one chunk of whole column tiles each (the grid's second axis).
// The short K is one tile, padded to a power of two (100 -> 128): each launch loads its rows' A tile once, and every
// column tile is one dot. The first launch folds the chunk's tiles into running statistics (the loop whose loads are
// pipelined) and stores one partial state per row and chunk; the second launch merges the row's states and sweeps the
// same chunk again, computing each tile anew instead of re-reading it (the logits are never stored).
func.func @attention_scores(%q : !tensor_op.tensor<[M, 100], f16>, %k : !tensor_op.tensor<[100, 1000], f16>) -> !tensor_op.tensor<[M, 1000], f16> {
  %0 = tensor_op.matmul %q, %k : (!tensor_op.tensor<[M, 100], f16>, !tensor_op.tensor<[100, 1000], f16>) -> !tensor_op.tensor<[M, 1000], f16>
  %1 = tensor_op.softmax %0 {axis = -1 : i64} : !tensor_op.tensor<[M, 1000], f16>
  func.return %1 : !tensor_op.tensor<[M, 1000], f16>
}

// CHECK:       tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(1000, BLOCK_N*cdiv(cdiv(1000, BLOCK_N), SPLIT_N))]>, program_ids = ["pid_m", "pid_n"], strategy = "chunk_recompute", tile_params = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_N"]
// CHECK-SAME:    workspace = ["scratch", "scratch"]
// CHECK-NEXT:  ^bb0(%q: {{.*}}, %out0: !tensor_op.tensor<[M, 1000], f16>, %partial0: !tensor_op.tensor<[M, cdiv(1000, BLOCK_N*cdiv(cdiv(1000, BLOCK_N), SPLIT_N))], f32>, %partial1: {{.*}}):
// CHECK-NEXT:    %[[Q:[a-z0-9_]+]] = tiled_loop.load %q <[BLOCK_M*pid_m, 0]> : !tensor_op.tensor<[M, 100], f16> -> !tiled_loop.tile<[BLOCK_M, 128], f16>
// CHECK:         %[[MAX:[a-z0-9_]+]], %[[SUM:[a-z0-9_]+]] = tiled_loop.for "n" = <[BLOCK_N*pid_n*cdiv(cdiv(1000, BLOCK_N), SPLIT_N), Min(1000, BLOCK_N*(pid_n + 1)*cdiv(cdiv(1000, BLOCK_N), SPLIT_N)), BLOCK_N]> {{.*}}{note = "row statistics over the N tiles (first sweep)", pipelined}
// CHECK:           %[[K:[a-z0-9_]+]] = tiled_loop.load %k <[0, n]> : !tensor_op.tensor<[100, 1000], f16> -> !tiled_loop.tile<[128, BLOCK_N], f16>
// CHECK-NEXT:      %[[ZERO:[a-z0-9_]+]] = tiled_loop.full 0.0 {origin = "matmul"}
// CHECK-NEXT:      %[[ACC:[a-z0-9_]+]] = tiled_loop.dot %[[Q]], %[[K]], %[[ZERO]] {origin = "matmul"}
// CHECK-NEXT:      %valid_cols = tiled_loop.in_bounds <[0, n]> within <[1, 1000]>
// CHECK-NOT:       tiled_loop.cast
// CHECK:           tiled_loop.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    tiled_loop.store %[[MAX]], %partial0 <[BLOCK_M*pid_m, pid_n]>
// CHECK-NEXT:    tiled_loop.store %[[SUM]], %partial1 <[BLOCK_M*pid_m, pid_n]>
// CHECK-NEXT:    tiled_loop.relaunch {note = "Second launch, after every program of the first has finished: each program merges its rows' partial statistics and finishes its chunk of columns.", grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(1000, BLOCK_N*cdiv(cdiv(1000, BLOCK_N), SPLIT_N))]>, program_ids = ["pid_m", "pid_n"]}
// CHECK-NEXT:    %[[Q2:[a-z0-9_]+]] = tiled_loop.load %q <[BLOCK_M*pid_m, 0]>
// CHECK:         tiled_loop.for "t" = <[0, cdiv(1000, BLOCK_N*cdiv(cdiv(1000, BLOCK_N), SPLIT_N)), 64]> {{.*}}{note = "merge the partial statistics written by every chunk of this row strip", pipelined}
// CHECK:           tiled_loop.load %partial0 <[BLOCK_M*pid_m, t]> {{.*}} -> !tiled_loop.tile<[BLOCK_M, 64], f32>
// CHECK:         %inv_sumexp = tiled_loop.binary "div"
// CHECK-NEXT:    tiled_loop.for "n" = <[BLOCK_N*pid_n*cdiv(cdiv(1000, BLOCK_N), SPLIT_N), {{.*}}, BLOCK_N]> iter_args() {note = "second sweep: compute each tile and finish the ops after the row reduction", pipelined}
// CHECK-NEXT:      %[[K2:[a-z0-9_]+]] = tiled_loop.load %k <[0, n]>
// CHECK-NEXT:      %[[ZERO2:[a-z0-9_]+]] = tiled_loop.full 0.0 {origin = "matmul"}
// CHECK-NEXT:      %[[ACC2:[a-z0-9_]+]] = tiled_loop.dot %[[Q2]], %[[K2]], %[[ZERO2]] {origin = "matmul"}
// CHECK-NEXT:      %[[D:[0-9]+]] = tiled_loop.binary "sub" %[[ACC2]], %{{[a-z0-9_]+}} {origin = "softmax"}
// CHECK-NEXT:      %[[E:[0-9]+]] = tiled_loop.unary "exp" %[[D]] {origin = "softmax"}
// CHECK-NEXT:      %[[P:[0-9]+]] = tiled_loop.binary "mul" %[[E]], %inv_sumexp {origin = "softmax"}
// CHECK-NEXT:      tiled_loop.store %[[P]], %out0 <[BLOCK_M*pid_m, n]>
// CHECK:       func.func @attention_scores(
// CHECK-NEXT:    tiled_loop.launch @fused_0(%q, %k)
