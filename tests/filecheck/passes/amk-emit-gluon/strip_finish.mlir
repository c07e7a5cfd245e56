// RUN: amk-opt %s -p 'amk-fuse,amk-tile{reduction_strategy=strip_finish},amk-stage{block_m=128 block_n=256 block_k=64 num_warps=8 num_stages=3 persistent=1 tma=1},amk-emit-gluon' -t gluon | filecheck %s

// Workload C's chain (matmul, residual, RMSNorm over the 4096-wide row) as a strip_finish kernel in Gluon: after the
// wgmma main loop, the consumer reads the residual tile and stores the pre-normalization tile with pointers in the
// coalesced io_layout (8 values a thread; converted to and from the accumulator's layout), stores its rows' partial
// sums of squares once per row (rows_layout; a TMA store would not be visible to the program that finishes the strip),
// counts the tile in behind a barrier of its own warps, and the strip's last tile merges the partial statistics (a
// [BLOCK_M, 64] tile in a blocked layout, reduced and converted to io_layout) and normalizes the strip, tile by tile,
// all in io_layout.

func.func @residual_rmsnorm(%x : !tensor_op.tensor<[8192, 4096], bf16>, %w : !tensor_op.tensor<[4096, 4096], bf16>, %r : !tensor_op.tensor<[8192, 4096], bf16>) -> !tensor_op.tensor<[8192, 4096], bf16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[8192, 4096], bf16>, !tensor_op.tensor<[4096, 4096], bf16>) -> !tensor_op.tensor<[8192, 4096], bf16>
  %1 = tensor_op.add %0, %r : (!tensor_op.tensor<[8192, 4096], bf16>, !tensor_op.tensor<[8192, 4096], bf16>) -> !tensor_op.tensor<[8192, 4096], bf16>
  %2 = tensor_op.rmsnorm %1 {eps = 1.0e-06 : f64} : !tensor_op.tensor<[8192, 4096], bf16> -> !tensor_op.tensor<[8192, 4096], bf16>
  func.return %2 : !tensor_op.tensor<[8192, 4096], bf16>
}

// CHECK:       def fused_0_mma_partition(
// CHECK:           acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1], instr_shape=[16, 256, 16])
// CHECK-NEXT:      stats_layout: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [8, 1], [1, 0])
// CHECK-NEXT:      rows_layout: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [8, 1], [0, 1])
// CHECK-NEXT:      io_layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [8, 1], [1, 0])
// CHECK:               acc_1 = warpgroup_mma(x_ring.index(slot), w_ring.index(slot), acc_1, is_async=True)
// CHECK:               r_rows = BLOCK_M*pid_m + gl.arange(0, BLOCK_M, gl.SliceLayout(1, io_layout))
// CHECK:               r_tile = gl.load(r_ptr + r_rows[:, None] * stride_r_0 + r_cols[None, :] * stride_r_1)
// CHECK-NEXT:          r_tile = gl.convert_layout(r_tile, acc_layout)
// CHECK:               [[STORED:y_rounded_stored]] = gl.convert_layout(y_rounded.to(gl.bfloat16), io_layout)
// CHECK:               gl.store(out0_ptr + out0_rows[:, None] * stride_out0_0 + out0_cols[None, :] * stride_out0_1, [[STORED]].to(gl.bfloat16))
// CHECK:               rmsnorm_3 = gl.sum(rmsnorm_2, axis=1, keep_dims=True)
// CHECK:               partial0_rows = BLOCK_M*pid_m + gl.arange(0, BLOCK_M, gl.SliceLayout(1, rows_layout))
// CHECK:               gl.store(partial0_ptr + {{.*}})
// CHECK:               gl.{{thread_barrier|barrier}}()
// CHECK-NEXT:          arrived = gl.atomic_add(strip_counters_ptr + (pid_m) * stride_strip_counters_0, 1, sem="acq_rel", scope="gpu")
// CHECK-NEXT:          last_in_strip = arrived == gl.cdiv(4096, BLOCK_N) - 1
// CHECK:               if last_in_strip:
// CHECK:                   for t in range(0, gl.cdiv(4096, BLOCK_N), 64):
// CHECK:                       gl.load({{.*}}, cache_modifier=".cg")
// CHECK:                       [[MERGED:rmsnorm_[0-9]+]] = gl.sum({{.*}}, axis=1, keep_dims=True)
// CHECK-NEXT:                  [[MERGED]] = gl.convert_layout([[MERGED]], io_layout)
// CHECK:                   for n in range(0, 4096, BLOCK_N):
// CHECK-NEXT:                  out0_rows_1 = BLOCK_M*pid_m + gl.arange(0, BLOCK_M, gl.SliceLayout(1, io_layout))
// CHECK:                       gl.load(out0_ptr + {{.*}}, cache_modifier=".cg")
// CHECK-NOT:                   convert_layout
// CHECK:                       gl.store(out0_ptr + {{.*}})
// CHECK-NOT:   tma.store_wait
// CHECK:       def launch(x, w, r, out0, partial0, partial1, strip_counters):
