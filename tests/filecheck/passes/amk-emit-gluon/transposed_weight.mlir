// RUN: amk-opt %s -p 'amk-fuse,amk-tile,amk-stage{block_m=128 block_n=256 block_k=64 num_warps=8 num_stages=3 persistent=1 tma=1},amk-emit-gluon' -t gluon | filecheck %s

// nn.Linear's weight W [N, K], read transposed (the kernel's argument is the view W^T [K, N], strides (1, K)): the
// kernel makes the descriptor of W itself ([N, K] with W's row stride, the view's column stride: [BLOCK_N, BLOCK_K]
// tiles); the producer loads them at [n, k] into the ring, and the consumer's wgmma reads each slot permuted, a
// K-major B, as Hopper GEMMs read nn.Linear's weight.

func.func @linear_relu(%x : !tensor_op.tensor<[M, 4096], f16>, %w : !tensor_op.tensor<[2048, 4096], f16>) -> !tensor_op.tensor<[M, 2048], f16> {
  %0 = tensor_op.matmul %x, %w {transpose_rhs = true} : (!tensor_op.tensor<[M, 4096], f16>, !tensor_op.tensor<[2048, 4096], f16>) -> !tensor_op.tensor<[M, 2048], f16>
  %1 = tensor_op.relu %0 : !tensor_op.tensor<[M, 2048], f16>
  func.return %1 : !tensor_op.tensor<[M, 2048], f16>
}

// CHECK:       def fused_0_load_partition(
// CHECK:               mbarrier.expect(ready.index(slot), x_desc.block_type.nbytes + w_desc.block_type.nbytes)
// CHECK-NEXT:          {{.*}}(x_desc, [BLOCK_M*pid_m, k], ready.index(slot), x_ring.index(slot))
// CHECK-NEXT:          {{.*}}(w_desc, [BLOCK_N*pid_n, k], ready.index(slot), w_ring.index(slot))
// CHECK:       def fused_0_mma_partition(
// CHECK:               [[ACC:acc[_0-9]*]] = warpgroup_mma(x_ring.index(slot), w_ring.index(slot).permute((1, 0)), [[ACC]], is_async=True)
// CHECK:       def fused_0_kernel(
// CHECK:           x_desc = tma.make_tensor_descriptor(x_ptr, [M, 4096], [x_desc_stride, 1], [128, 64], gl.NVMMASharedLayout.get_default_for([128, 64], gl.float16))
// CHECK-NEXT:      w_desc = tma.make_tensor_descriptor(w_ptr, [2048, 4096], [w_desc_stride, 1], [256, 64], gl.NVMMASharedLayout.get_default_for([256, 64], gl.float16))
// CHECK:           w_ring = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
// CHECK:       def launch(x, w, out0):
// CHECK:           x = _tma_operand(x)
// CHECK-NEXT:      w = _tma_operand(w, transposed=True)
// CHECK-NEXT:      out0 = _tma_operand(out0, output=True)
// CHECK-NEXT:      triton.set_allocator(_tma_workspace)
// CHECK:               x.stride(0),
// CHECK-NEXT:          w.stride(1),
// CHECK-NEXT:          out0.stride(0),
