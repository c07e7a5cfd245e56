// RUN: amk-opt %s -p 'amk-fuse,amk-tile,amk-stage{block_m=128 block_n=256 block_k=64 num_warps=8 num_stages=4 persistent=1 tma=1},amk-emit-gluon' -t gluon | filecheck %s

// Workload B's chain with 4 stages: the ring of operand tiles takes 4 x (128 x 64 + 64 x 256) fp16 = 196608 bytes,
// so the whole 128 x 256 output tile (65536 more) no longer fits in Hopper's 232448 bytes of shared memory beside
// it. The tile is stored in 4 pieces of 64 columns, cut from the registers in halves (reshape, permute, split),
// through two staging buffers of 128 x 64: a piece is written to one while the store of the other is in flight.

func.func @linear_relu(%x : !tensor_op.tensor<[M, 4096], f16>, %w : !tensor_op.tensor<[4096, 4096], f16>, %b : !tensor_op.tensor<[4096], f16>) -> !tensor_op.tensor<[M, 4096], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 4096], f16>, !tensor_op.tensor<[4096, 4096], f16>) -> !tensor_op.tensor<[M, 4096], f16>
  %1 = tensor_op.add %0, %b : (!tensor_op.tensor<[M, 4096], f16>, !tensor_op.tensor<[4096], f16>) -> !tensor_op.tensor<[M, 4096], f16>
  %2 = tensor_op.relu %1 : !tensor_op.tensor<[M, 4096], f16>
  func.return %2 : !tensor_op.tensor<[M, 4096], f16>
}

// CHECK:       def fused_0_mma_partition(
// CHECK:           out0_desc = tma.make_tensor_descriptor(out0_ptr, {{.*}}, [128, 64], gl.NVMMASharedLayout.get_default_for([128, 64], gl.float16))
// CHECK:               relu = gl.maximum(add, 0.0, propagate_nan=tl.PropagateNan.ALL)
// CHECK-NEXT:          piece = relu.to(gl.float16)
// CHECK-NEXT:          # stored in 4 pieces of 64 columns
// CHECK-NEXT:          piece_0, piece_1 = piece.reshape([128, 2, 128]).permute(0, 2, 1).split()
// CHECK-NEXT:          piece_0_0, piece_0_1 = piece_0.reshape([128, 2, 64]).permute(0, 2, 1).split()
// CHECK-NEXT:          piece_1_0, piece_1_1 = piece_1.reshape([128, 2, 64]).permute(0, 2, 1).split()
// CHECK-NEXT:          # the pieces alternate between two buffers
// CHECK-NEXT:          tma.store_wait(1)
// CHECK-NEXT:          gl.{{thread_barrier|barrier}}()
// CHECK-NEXT:          output_tile.index(0).store(piece_0_0)
// CHECK-NEXT:          fence_async_shared()
// CHECK-NEXT:          tma.{{async_copy_shared_to_global|async_store}}(out0_desc, [BLOCK_M*pid_m, BLOCK_N*pid_n], output_tile.index(0))
// CHECK-NEXT:          tma.store_wait(1)
// CHECK-NEXT:          gl.{{thread_barrier|barrier}}()
// CHECK-NEXT:          output_tile.index(1).store(piece_0_1)
// CHECK-NEXT:          fence_async_shared()
// CHECK-NEXT:          tma.{{async_copy_shared_to_global|async_store}}(out0_desc, [BLOCK_M*pid_m, BLOCK_N*pid_n + 64], output_tile.index(1))
// CHECK:               output_tile.index(0).store(piece_1_0)
// CHECK:               tma.{{async_copy_shared_to_global|async_store}}(out0_desc, [BLOCK_M*pid_m, BLOCK_N*pid_n + 128], output_tile.index(0))
// CHECK:               output_tile.index(1).store(piece_1_1)
// CHECK:               tma.{{async_copy_shared_to_global|async_store}}(out0_desc, [BLOCK_M*pid_m, BLOCK_N*pid_n + 192], output_tile.index(1))
// CHECK-NEXT:      tma.store_wait(0)

// CHECK:       def fused_0_kernel(
// CHECK-NOT:       out0_desc = tma.make_tensor_descriptor
// CHECK:           output_tile = gl.allocate_shared_memory(gl.float16, [2, 128, 64], gl.NVMMASharedLayout.get_default_for([128, 64], gl.float16))

// CHECK:       def launch(x, w, b, out0):
// CHECK:           out0 = _tma_operand(out0, output=True)
