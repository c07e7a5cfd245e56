// RUN: amk-opt %s -p 'amk-fuse,amk-tile,amk-stage{block_m=128 block_n=64 block_k=64 split_n=4 num_warps=4 num_stages=3},amk-emit-gluon' -t gluon | filecheck %s

// chunk_recompute's softmax(q @ k) as a column sweep (the Gluon form of a strategy whose gluon_form is
// "column_sweep"): each of its two launches is warp-specialized. A one-warp producer TMA-loads the lhs rows of each
// consumer once, then the chunk's k tiles into a ring; each 4-warp consumer takes 64 of the program's 128 rows (the
// kernels' BLOCK_M is its own: the launcher passes 64 and counts programs of 128 rows) and issues column tile j + 1's
// wgmma before it folds tile j, the loop unrolled by two. The ragged last column tile (1000 = 15 x 64 + 40) is
// zero-filled by TMA and masked by the IR's own in_bounds; the finishing launch stores each probability tile through
// one of its consumer's two staging tiles and a TMA store.

func.func @attention_scores(%q : !tensor_op.tensor<[M, 64], f16>, %k : !tensor_op.tensor<[64, 1000], f16>) -> !tensor_op.tensor<[M, 1000], f16> {
  %0 = tensor_op.matmul %q, %k : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64, 1000], f16>) -> !tensor_op.tensor<[M, 1000], f16>
  %1 = tensor_op.softmax %0 {axis = -1 : i64} : !tensor_op.tensor<[M, 1000], f16>
  func.return %1 : !tensor_op.tensor<[M, 1000], f16>
}

// CHECK:       def fused_0_kernel_load_partition(
// CHECK:           flat = gl.program_id(0)
// CHECK-NEXT:      strip = flat % (gl.cdiv(M, 128))
// CHECK-NEXT:      pid_n = flat // (gl.cdiv(M, 128))
// CHECK-NEXT:      mbarrier.expect(lhs_ready.index(0), 2 * q_desc.block_type.nbytes)
// CHECK-NEXT:      for consumer in gl.static_range(2):
// CHECK-NEXT:          pid_m = strip * 2 + consumer
// CHECK-NEXT:          tma.{{async_copy_global_to_shared|async_load}}(q_desc, [BLOCK_M*pid_m, 0], lhs_ready.index(0), lhs_tiles.index(consumer))
// CHECK:           for j in range(tiles):
// CHECK-NEXT:          n = lower + j * BLOCK_N
// CHECK:               mbarrier.wait(empty.index(slot), ((j // STAGES) & 1) ^ 1)
// CHECK-NEXT:          mbarrier.expect(ready.index(slot), k_desc.block_type.nbytes)
// CHECK-NEXT:          tma.{{async_copy_global_to_shared|async_load}}(k_desc, [0, n], ready.index(slot), rhs_ring.index(slot))

// CHECK:       def fused_0_kernel_mma_partition(
// CHECK:           WARP_GROUP: gl.constexpr,
// CHECK:           acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 16])
// CHECK:           strip = flat % (gl.cdiv(M, 128))
// CHECK:           pid_m = strip * 2 + WARP_GROUP
// CHECK:           zero = gl.zeros((64, 64), dtype=gl.float32, layout=acc_layout)
// CHECK:           mbarrier.wait(lhs_ready.index(0), 0)
// CHECK:           if tiles > 0:
// CHECK-NEXT:          mbarrier.wait(ready.index((0) % STAGES), ((0) // STAGES) & 1)
// CHECK-NEXT:          product_a = warpgroup_mma(lhs_tiles.index(WARP_GROUP), rhs_ring.index((0) % STAGES), zero, use_acc=False, is_async=True)
// CHECK-NEXT:      for pair in range((tiles - 1) // 2):
// CHECK-NEXT:          j = 1 + 2 * pair
// CHECK-NEXT:          mbarrier.wait(ready.index((j) % STAGES), ((j) // STAGES) & 1)
// CHECK-NEXT:          product_b = warpgroup_mma(lhs_tiles.index(WARP_GROUP), rhs_ring.index((j) % STAGES), zero, use_acc=False, is_async=True)
// CHECK-NEXT:          product = warpgroup_mma_wait(1, deps=(product_a,))
// CHECK-NEXT:          mbarrier.arrive(empty.index((j - 1) % STAGES))
// CHECK-NEXT:          n = lower_1 + (j - 1) * BLOCK_N
// CHECK-NEXT:          valid_cols = (n + gl.arange(0, BLOCK_N, gl.SliceLayout(0, acc_layout)))[None, :] < 1000
// CHECK:               product_a = warpgroup_mma(lhs_tiles.index(WARP_GROUP), rhs_ring.index((j + 1) % STAGES), zero, use_acc=False, is_async=True)
// CHECK-NEXT:          product = warpgroup_mma_wait(1, deps=(product_b,))
// CHECK:           if tiles % 2 == 0:
// CHECK:               product = warpgroup_mma_wait(0, deps=(product_b,))
// CHECK:           else:
// CHECK-NEXT:          product = warpgroup_mma_wait(0, deps=(product_a,))
// CHECK:           gl.store(partial0_ptr + {{.*}}, mask=(partial0_rows[:, None] < M))

// CHECK:       def fused_0_kernel(
// CHECK:           q_desc = tma.make_tensor_descriptor(q_ptr, [M, 64], [q_desc_stride, 1], [64, 64], gl.NVMMASharedLayout.get_default_for([64, 64], gl.float16))
// CHECK-NEXT:      k_desc = tma.make_tensor_descriptor(k_ptr, [64, 1000], [k_desc_stride, 1], [64, 64], gl.NVMMASharedLayout.get_default_for([64, 64], gl.float16))
// CHECK:           mbarrier.init(empty.index(i), count=2)
// CHECK:           gl.warp_specialize([
// CHECK-NEXT:          (fused_0_kernel_mma_partition, ({{.*}}, STAGES, 0)),
// CHECK-NEXT:          (fused_0_kernel_mma_partition, ({{.*}}, STAGES, 1)),
// CHECK-NEXT:          (fused_0_kernel_load_partition, ({{.*}}, STAGES)),
// CHECK-NEXT:      ], [4, 1], [232, 40])

// CHECK:       def fused_0_finish_kernel_mma_partition(
// CHECK:           output_tiles,
// CHECK:           out0_desc = tma.make_tensor_descriptor(out0_ptr, [M, 1000], [out0_desc_stride, 1], [64, 64], gl.NVMMASharedLayout.get_default_for([64, 64], gl.float16))
// CHECK:           for t in range(0, {{.*}}, 64):
// CHECK:               staged = output_tiles.index(WARP_GROUP * 2 + (j - 1) % 2)
// CHECK:               tma.store_wait(1)
// CHECK-NEXT:          gl.{{thread_barrier|barrier}}()
// CHECK-NEXT:          staged.store({{.*}}.to(gl.float16))
// CHECK-NEXT:          fence_async_shared()
// CHECK-NEXT:          tma.{{async_copy_shared_to_global|async_store}}(out0_desc, [BLOCK_M*pid_m, n], staged)
// CHECK:           tma.store_wait(0)

// CHECK:       def fused_0_finish_kernel(
// CHECK:           output_tiles = gl.allocate_shared_memory(gl.float16, [4, 64, 64], gl.NVMMASharedLayout.get_default_for([64, 64], gl.float16))

// CHECK:       def launch(q, k, out0, partial0, partial1):
// CHECK:           out0 = _tma_operand(out0, output=True)
// CHECK:           grid = (triton.cdiv(M, 128) * triton.cdiv(1000, {{.*}}),)
// CHECK-NEXT:      fused_0_kernel[grid](
// CHECK:               BLOCK_M=64,
// CHECK:               STAGES=3,
// CHECK-NEXT:          num_warps=4,
// CHECK:           fused_0_finish_kernel[grid](
