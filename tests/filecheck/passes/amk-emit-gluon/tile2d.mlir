// RUN: amk-opt %s -p 'amk-fuse,amk-tile,amk-stage{block_m=128 block_n=256 block_k=64 num_warps=8 num_stages=3 persistent=1 tma=1},amk-emit-gluon' -t gluon | filecheck %s

// Workload B's chain (matmul, bias, ReLU) as a persistent tile2d kernel with TMA-staged operands, emitted as a
// warp-specialized Gluon kernel: a one-warp producer partition TMA-loads the operand tiles into a ring guarded by
// ready/empty mbarriers; the default partition issues async wgmma with the accumulator in the wgmma layout, adds
// the bias loaded in a slice of that layout, applies the ReLU, and stores the tile through shared memory and TMA.

func.func @linear_relu(%x : !tensor_op.tensor<[M, 4096], f16>, %w : !tensor_op.tensor<[4096, 4096], f16>, %b : !tensor_op.tensor<[4096], f16>) -> !tensor_op.tensor<[M, 4096], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 4096], f16>, !tensor_op.tensor<[4096, 4096], f16>) -> !tensor_op.tensor<[M, 4096], f16>
  %1 = tensor_op.add %0, %b : (!tensor_op.tensor<[M, 4096], f16>, !tensor_op.tensor<[4096], f16>) -> !tensor_op.tensor<[M, 4096], f16>
  %2 = tensor_op.relu %1 : !tensor_op.tensor<[M, 4096], f16>
  func.return %2 : !tensor_op.tensor<[M, 4096], f16>
}

// CHECK:       from triton.experimental.gluon import language as gl
// CHECK:       def fused_0_load_partition(
// CHECK:           for tile in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
// CHECK:               pid_n = (tile % num_pid_in_group) // group_size_m
// CHECK-NEXT:          for k in range(0, 4096, BLOCK_K):
// CHECK-NEXT:              slot = step % STAGES
// CHECK-NEXT:              phase = (step // STAGES) & 1
// CHECK:                   mbarrier.wait(empty.index(slot), phase ^ 1)
// CHECK-NEXT:              mbarrier.expect(ready.index(slot), x_desc.block_type.nbytes + w_desc.block_type.nbytes)
// CHECK-NEXT:              tma.{{async_copy_global_to_shared|async_load}}(x_desc, [BLOCK_M*pid_m, k], ready.index(slot), x_ring.index(slot))
// CHECK-NEXT:              tma.{{async_copy_global_to_shared|async_load}}(w_desc, [k, BLOCK_N*pid_n], ready.index(slot), w_ring.index(slot))

// CHECK:       def fused_0_mma_partition(
// CHECK:           out0_ptr,
// CHECK-NEXT:      out0_desc_stride,
// CHECK:           """The default partition
// CHECK-NEXT:      out0_desc = tma.make_tensor_descriptor(out0_ptr, [M, 4096], [out0_desc_stride, 1], [128, 256], gl.NVMMASharedLayout.get_default_for([128, 256], gl.float16))
// CHECK:           acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1], instr_shape=[16, 256, 16])
// CHECK:               acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=acc_layout)
// CHECK:                   mbarrier.wait(ready.index(slot), phase)
// CHECK-NEXT:              # matmul
// CHECK-NEXT:              acc_1 = warpgroup_mma(x_ring.index(slot), w_ring.index(slot), acc_1, is_async=True)
// CHECK:                   acc_1, _, _ = warpgroup_mma_wait(1, deps=(acc_1, x_ring.index(slot), w_ring.index(slot)))
// CHECK-NEXT:              mbarrier.arrive(empty.index((step + STAGES - 1) % STAGES), pred=k > 0)
// CHECK:               acc_1 = warpgroup_mma_wait(0, deps=(acc_1,))
// CHECK-NEXT:          mbarrier.arrive(empty.index((step + STAGES - 1) % STAGES))
// CHECK-NEXT:          b_cols = BLOCK_N*pid_n + gl.arange(0, BLOCK_N, gl.SliceLayout(0, acc_layout))
// CHECK-NEXT:          b_tile = gl.load(b_ptr + b_cols[None, :] * stride_b_0)
// CHECK:               add = acc_1 + b_f32
// CHECK:               relu = gl.maximum(add, 0.0, propagate_nan=tl.PropagateNan.ALL)
// CHECK:               tma.store_wait(0)
// CHECK-NEXT:          gl.{{thread_barrier|barrier}}()
// CHECK-NEXT:          output_tile.store(relu.to(gl.float16))
// CHECK-NEXT:          fence_async_shared()
// CHECK-NEXT:          tma.{{async_copy_shared_to_global|async_store}}(out0_desc, [BLOCK_M*pid_m, BLOCK_N*pid_n], output_tile)

// CHECK:       def fused_0_kernel(
// CHECK-NEXT:      x_ptr,
// CHECK-NEXT:      w_ptr,
// CHECK-NEXT:      b_ptr,
// CHECK-NEXT:      out0_ptr,
// CHECK-NEXT:      x_desc_stride,
// CHECK:           x_desc = tma.make_tensor_descriptor(x_ptr, [M, 4096], [x_desc_stride, 1], [128, 64], gl.NVMMASharedLayout.get_default_for([128, 64], gl.float16))
// CHECK-NEXT:      w_desc = tma.make_tensor_descriptor(w_ptr, [4096, 4096], [w_desc_stride, 1], [64, 256], gl.NVMMASharedLayout.get_default_for([64, 256], gl.float16))
// CHECK-NEXT:      x_ring = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
// CHECK-NEXT:      w_ring = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
// CHECK-NEXT:      output_tile = gl.allocate_shared_memory(gl.float16, [128, 256], gl.NVMMASharedLayout.get_default_for([128, 256], gl.float16))
// CHECK:           ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
// CHECK:           gl.warp_specialize([
// CHECK-NEXT:          (fused_0_mma_partition, (x_desc, w_desc, b_ptr, out0_ptr, out0_desc_stride, stride_b_0, M, x_ring, w_ring, ready, empty, output_tile, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES)),
// CHECK-NEXT:          (fused_0_load_partition, ({{.*}})),
// CHECK-NEXT:      ], [1], [40])

// CHECK:       def launch(x, w, b, out0):
// CHECK:           x = _tma_operand(x)
// CHECK-NEXT:      w = _tma_operand(w)
// CHECK-NEXT:      out0 = _tma_operand(out0, output=True)
// CHECK-NEXT:      triton.set_allocator(_tma_workspace)
// CHECK-NEXT:      grid = (min(triton.cdiv(M, 128) * triton.cdiv(4096, 256), _sm_count()),)
// CHECK-NEXT:      fused_0_kernel[grid](
// CHECK-NEXT:          x,
// CHECK-NEXT:          w,
// CHECK-NEXT:          b,
// CHECK-NEXT:          out0,
// CHECK-NEXT:          x.stride(0),
// CHECK-NEXT:          w.stride(0),
// CHECK-NEXT:          out0.stride(0),
// CHECK:               STAGES=3,
// CHECK-NEXT:          num_warps=8,
