// RUN: amk-opt %s -p 'amk-fuse,amk-tile,amk-stage{block_m=32 block_n=128 block_k=64 group_m=4 num_warps=8 num_stages=2}' | filecheck %s
// RUN: amk-opt %s -p amk-fuse,amk-tile,amk-stage | filecheck %s --check-prefix=DEFAULT

// amk-stage's options bind the kernel's tile sizes (constants), num_warps and num_stages; num_stages is also the
// depth of every shared-memory stage. Options left out take the heuristic default of amk.lowering.configs (powers
// of two, whatever their values).

func.func @matmul(%x : !tensor_op.tensor<[512, 256], f16>, %w : !tensor_op.tensor<[256, 128], f16>) -> !tensor_op.tensor<[512, 128], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[512, 256], f16>, !tensor_op.tensor<[256, 128], f16>) -> !tensor_op.tensor<[512, 128], f16>
  func.return %0 : !tensor_op.tensor<[512, 128], f16>
}

// CHECK-LABEL: memory_staged.kernel @fused_0 attributes {
// CHECK-SAME:    constants = {BLOCK_M = 32 : i64, BLOCK_N = 128 : i64, BLOCK_K = 64 : i64, GROUP_M = 4 : i64}, num_warps = 8 : i64, num_stages = 2 : i64,
// CHECK:         tiled_loop.for "k" = <[0, 256, BLOCK_K]>
// CHECK:           memory_staged.stage %x <[BLOCK_M*pid_m, k]> {mask = [false, false], index_bits = 32 : i64, depth = 2 : i64} : !memory_staged.buffer<global, [512, 256], f16> -> !memory_staged.buffer<shared, [BLOCK_M, BLOCK_K], f16>
// CHECK-NEXT:      memory_staged.stage %w <[k, BLOCK_N*pid_n]> {mask = [false, false], index_bits = 32 : i64, depth = 2 : i64} : !memory_staged.buffer<global, [256, 128], f16> -> !memory_staged.buffer<shared, [BLOCK_K, BLOCK_N], f16>

// DEFAULT-LABEL: memory_staged.kernel @fused_0 attributes {
// DEFAULT-SAME:    constants = {BLOCK_M = {{[0-9]+}} : i64, BLOCK_N = {{[0-9]+}} : i64, BLOCK_K = {{[0-9]+}} : i64, GROUP_M = {{[0-9]+}} : i64}, num_warps = {{(1|2|4|8|16|32)}} : i64, num_stages = [[STAGES:[0-9]+]] : i64,
// DEFAULT:         memory_staged.stage %x <[BLOCK_M*pid_m, k]> {mask = [false, false], index_bits = 32 : i64, depth = [[STAGES]] : i64}
// DEFAULT-NEXT:    memory_staged.stage %w <[k, BLOCK_N*pid_n]> {mask = [false, false], index_bits = 32 : i64, depth = [[STAGES]] : i64}
