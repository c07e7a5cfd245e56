// RUN: amk-opt %s -p 'amk-fuse,amk-tile,amk-stage{block_m=128 block_n=128 block_k=64 num_warps=4 num_stages=4 persistent=1 tma=1},amk-emit-gluon{schedule=pingpong}' -t gluon | filecheck %s

// The same chain in the ping-pong schedule: two 4-warp consumer warpgroups (the default partition and a worker) take
// every other output tile of the program; each finds its ring position from the tile's place in the walk, waits for
// its turn before its main loop and hands the turn over after it (so the main loops alternate and one consumer's
// epilogue runs under the other's main loop), and stores through its own staging tile.

func.func @linear_relu(%x : !tensor_op.tensor<[M, 4096], f16>, %w : !tensor_op.tensor<[4096, 4096], f16>, %b : !tensor_op.tensor<[4096], f16>) -> !tensor_op.tensor<[M, 4096], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 4096], f16>, !tensor_op.tensor<[4096, 4096], f16>) -> !tensor_op.tensor<[M, 4096], f16>
  %1 = tensor_op.add %0, %b : (!tensor_op.tensor<[M, 4096], f16>, !tensor_op.tensor<[4096], f16>) -> !tensor_op.tensor<[M, 4096], f16>
  %2 = tensor_op.relu %1 : !tensor_op.tensor<[M, 4096], f16>
  func.return %2 : !tensor_op.tensor<[M, 4096], f16>
}

// CHECK:       def fused_0_load_partition(
// CHECK:           step = 0
// CHECK-NEXT:      for tile in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):

// CHECK:       def fused_0_mma_partition(
// CHECK:           turn,
// CHECK:           WARP_GROUP: gl.constexpr,
// CHECK:           out0_desc = tma.make_tensor_descriptor(out0_ptr, [M, 4096], [out0_desc_stride, 1], [128, 128], gl.NVMMASharedLayout.get_default_for([128, 128], gl.float16))
// CHECK:           acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 128, 16])
// CHECK:           k_tiles = gl.cdiv(4096 - 0, BLOCK_K)
// CHECK-NEXT:      program_tiles = gl.cdiv(num_pid_m * num_pid_n - gl.program_id(0), gl.num_programs(0))
// CHECK-NEXT:      for walked in range(WARP_GROUP, program_tiles, 2):
// CHECK-NEXT:          tile = gl.program_id(0) + walked * gl.num_programs(0)
// CHECK-NEXT:          step = walked * k_tiles
// CHECK:               if walked > 0:
// CHECK-NEXT:              mbarrier.wait(turn.index(WARP_GROUP), ((walked - 1) // 2) & 1)
// CHECK-NEXT:          for k in range(0, 4096, BLOCK_K):
// CHECK:                   mbarrier.wait(ready.index(slot), phase)
// CHECK:                   mbarrier.arrive(empty.index((step + STAGES - 1) % STAGES), pred=k > 0)
// CHECK:               mbarrier.arrive(turn.index(1 - WARP_GROUP))
// CHECK-NEXT:          acc_1 = warpgroup_mma_wait(0, deps=(acc_1,))
// CHECK:               output_tile.index(WARP_GROUP).store(relu.to(gl.float16))
// CHECK:               tma.{{async_copy_shared_to_global|async_store}}(out0_desc, [BLOCK_M*pid_m, BLOCK_N*pid_n], output_tile.index(WARP_GROUP))

// CHECK:       def fused_0_kernel(
// CHECK:           output_tile = gl.allocate_shared_memory(gl.float16, [2, 128, 128], gl.NVMMASharedLayout.get_default_for([128, 128], gl.float16))
// CHECK:           turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
// CHECK:           gl.warp_specialize([
// CHECK-NEXT:          (fused_0_mma_partition, ({{.*}}, turn, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, 0)),
// CHECK-NEXT:          (fused_0_mma_partition, ({{.*}}, turn, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, 1)),
// CHECK-NEXT:          (fused_0_load_partition, ({{.*}})),
// CHECK-NEXT:      ], [4, 1], [232, 40])
// CHECK:       num_warps=4,
