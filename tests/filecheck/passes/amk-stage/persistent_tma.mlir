// RUN: amk-opt %s -p 'amk-fuse,amk-tile,amk-stage{block_m=128 block_n=128 block_k=64 persistent=1 tma=1 warp_specialize=1}' | filecheck %s
// RUN: amk-opt %s -p 'amk-fuse,amk-tile,amk-stage{block_m=128 block_n=128 block_k=64}' | filecheck %s --check-prefix=PLAIN

// amk-stage's switches for a grid of output tiles in grouped order: persistent=1 marks the kernel persistent (and
// warp_specialize=1 its tile loop warp-specialized), tma=1 marks every staged operand copy as a tensor-descriptor
// copy. Without them (the default) neither attribute appears.

func.func @matmul_relu(%x : !tensor_op.tensor<[M, 256], f16>, %w : !tensor_op.tensor<[256, 512], f16>) -> !tensor_op.tensor<[M, 512], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 256], f16>, !tensor_op.tensor<[256, 512], f16>) -> !tensor_op.tensor<[M, 512], f16>
  %1 = tensor_op.relu %0 : !tensor_op.tensor<[M, 512], f16>
  func.return %1 : !tensor_op.tensor<[M, 512], f16>
}

// CHECK-LABEL: memory_staged.kernel @fused_0 attributes {
// CHECK-SAME:    strategy = "tile2d"
// CHECK-SAME:    group_size = "GROUP_M", persistent, warp_specialize}
// CHECK:         tiled_loop.for "k" = <[0, 256, BLOCK_K]>
// CHECK:           memory_staged.stage %x <[BLOCK_M*pid_m, k]> {mask = [true, false], index_bits = 64 : i64, depth = 3 : i64, descriptor, mask_if_uneven = [true, false]}
// CHECK-NEXT:      memory_staged.stage %w <[k, BLOCK_N*pid_n]> {mask = [false, false], index_bits = 32 : i64, depth = 3 : i64, descriptor}

// PLAIN-LABEL: memory_staged.kernel @fused_0 attributes {
// PLAIN-NOT:     persistent
// PLAIN:         memory_staged.stage %x <[BLOCK_M*pid_m, k]> {mask = [true, false], index_bits = 64 : i64, depth = 3 : i64, mask_if_uneven = [true, false]}
