// RUN: amk-opt %s -p 'amk-fuse,amk-tile{reduction_strategy=strip_sync}' | filecheck %s
// RUN: amk-opt %s -p 'amk-fuse,amk-tile' | filecheck %s --check-prefix=AUTO

// strip_sync (asked for by name; GPU only, the programs of a launch wait for each other): each output tile keeps
// its pre-norm values in registers, writes its rows' partial statistics, waits at a strip barrier for the other
// tiles of its row strip, merges their statistics and stores the normalized tile: the pre-norm values are never
// stored. auto picks tile_stats (faster on the H200 so far, see benchmarks/NOTES.md).

func.func @matmul_rmsnorm(%x : !tensor_op.tensor<[M, 1024], f16>, %w : !tensor_op.tensor<[1024, 512], f16>, %r : !tensor_op.tensor<[M, 512], f16>) -> !tensor_op.tensor<[M, 512], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 1024], f16>, !tensor_op.tensor<[1024, 512], f16>) -> !tensor_op.tensor<[M, 512], f16>
  %1 = tensor_op.add %0, %r : (!tensor_op.tensor<[M, 512], f16>, !tensor_op.tensor<[M, 512], f16>) -> !tensor_op.tensor<[M, 512], f16>
  %2 = tensor_op.rmsnorm %1 {eps = 1.0e-06 : f64} : !tensor_op.tensor<[M, 512], f16> -> !tensor_op.tensor<[M, 512], f16>
  func.return %2 : !tensor_op.tensor<[M, 512], f16>
}

// CHECK-LABEL: tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(512, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"], strategy = "strip_sync", tile_params = ["BLOCK_M", "BLOCK_N", "BLOCK_K"], num_inputs = 3 : i64, {{.*}}workspace = ["scratch", "scratch", "counter"]
// CHECK-NOT:     group_size
// CHECK-NEXT:    ^bb0(%x: !tensor_op.tensor<[M, 1024], f16>, %w: !tensor_op.tensor<[1024, 512], f16>, %r: !tensor_op.tensor<[M, 512], f16>, %out0: !tensor_op.tensor<[M, 512], f16>, %partial0: !tensor_op.tensor<[M, cdiv(512, BLOCK_N)], f32>, %partial1: !tensor_op.tensor<[M, cdiv(512, BLOCK_N)], f32>, %strip_counters: !tensor_op.tensor<[cdiv(M, BLOCK_M)], i32>):
// CHECK:         %acc_1 = tiled_loop.for "k" = <[0, 1024, BLOCK_K]>
// CHECK:         %[[Y:[0-9]+]] = tiled_loop.binary "add" %acc_1, %r_f32 {origin = "add"}
// CHECK-NOT:     tiled_loop.store {{.*}}%out0
// CHECK:         tiled_loop.store %{{[0-9]+}}, %partial0 <[BLOCK_M*pid_m, pid_n]>
// CHECK-NEXT:    tiled_loop.store %{{[0-9]+}}, %partial1 <[BLOCK_M*pid_m, pid_n]>
// CHECK-NEXT:    tiled_loop.strip_barrier %strip_counters <[pid_m]> of <[cdiv(512, BLOCK_N)]> : !tensor_op.tensor<[cdiv(M, BLOCK_M)], i32>
// CHECK:         tiled_loop.for "t" = <[0, cdiv(512, BLOCK_N), 64]>
// CHECK:         %rstd = tiled_loop.unary "rsqrt"
// CHECK-NEXT:    %[[NORM:[0-9]+]] = tiled_loop.binary "mul" %[[Y]], %rstd {origin = "rmsnorm"}
// CHECK-NEXT:    tiled_loop.store %[[NORM]], %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]>
// CHECK-NEXT:  }

// AUTO:          strategy = "tile_stats"
// AUTO:          tiled_loop.relaunch
