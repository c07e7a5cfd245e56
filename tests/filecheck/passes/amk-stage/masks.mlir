// RUN: amk-opt %s --split-input-file -p 'amk-fuse,amk-tile{reduction_strategy=row_strip},amk-stage{block_m=64 block_n=64 block_k=32 num_warps=4 num_stages=3}' | filecheck %s

// amk-stage binds the tile sizes and places each access in memory: an axis is masked only where sympy cannot prove
// the extent a multiple of the tile size; a load read only by a dot inside the K loop is staged into shared memory
// (num_stages deep); the K loop's zero tile becomes a register accumulator; a buffer that may hold 2^31 elements or
// more (a symbolic extent, or a static one that large) is addressed with 64-bit offsets.

// Every extent is a multiple of its tile size: no masks, 32-bit offsets.
func.func @divisible(%x : !tensor_op.tensor<[512, 256], f16>, %w : !tensor_op.tensor<[256, 128], f16>, %b : !tensor_op.tensor<[128], f16>) -> !tensor_op.tensor<[512, 128], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[512, 256], f16>, !tensor_op.tensor<[256, 128], f16>) -> !tensor_op.tensor<[512, 128], f16>
  %1 = tensor_op.add %0, %b : (!tensor_op.tensor<[512, 128], f16>, !tensor_op.tensor<[128], f16>) -> !tensor_op.tensor<[512, 128], f16>
  %2 = tensor_op.relu %1 : !tensor_op.tensor<[512, 128], f16>
  func.return %2 : !tensor_op.tensor<[512, 128], f16>
}

// CHECK-LABEL: memory_staged.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(512, BLOCK_M), cdiv(128, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"], constants = {BLOCK_M = 64 : i64, BLOCK_N = 64 : i64, BLOCK_K = 32 : i64, GROUP_M = 8 : i64}, num_warps = 4 : i64, num_stages = 3 : i64, num_inputs = 3 : i64, strategy = "tile2d"
// CHECK-NEXT:    ^bb0(%x: !memory_staged.buffer<global, [512, 256], f16>, %w: !memory_staged.buffer<global, [256, 128], f16>, %b: !memory_staged.buffer<global, [128], f16>, %out0: !memory_staged.buffer<global, [512, 128], f16>):
// CHECK-NEXT:      %[[ACC0:[a-z0-9_]+]] = memory_staged.accumulator : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:      %[[ACC:[a-z0-9_]+]] = tiled_loop.for "k" = <[0, 256, BLOCK_K]> iter_args(%[[ACC0]])
// CHECK-NEXT:      ^bb0(%[[ACC_IN:[a-z0-9_]+]]: !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>):
// CHECK-NEXT:        %[[A:[a-z0-9_]+]] = memory_staged.stage %x <[BLOCK_M*pid_m, k]> {mask = [false, false], index_bits = 32 : i64, depth = 3 : i64} : !memory_staged.buffer<global, [512, 256], f16> -> !memory_staged.buffer<shared, [BLOCK_M, BLOCK_K], f16>
// CHECK-NEXT:        %[[B:[a-z0-9_]+]] = memory_staged.stage %w <[k, BLOCK_N*pid_n]> {mask = [false, false], index_bits = 32 : i64, depth = 3 : i64} : !memory_staged.buffer<global, [256, 128], f16> -> !memory_staged.buffer<shared, [BLOCK_K, BLOCK_N], f16>
// CHECK-NEXT:        %[[NEXT:[a-z0-9_]+]] = memory_staged.dot %[[A]], %[[B]], %[[ACC_IN]] {origin = "matmul"} : (!memory_staged.buffer<shared, [BLOCK_M, BLOCK_K], f16>, !memory_staged.buffer<shared, [BLOCK_K, BLOCK_N], f16>, !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:        tiled_loop.yield %[[NEXT]]
// CHECK-NEXT:      }
// CHECK-NEXT:      memory_staged.load %b <[BLOCK_N*pid_n]> {mask = [false], index_bits = 32 : i64} : !memory_staged.buffer<global, [128], f16> -> !tiled_loop.tile<[1, BLOCK_N], f16>
// CHECK:           memory_staged.store %{{[0-9]+}}, %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]> {mask = [false, false], index_bits = 32 : i64} : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !memory_staged.buffer<global, [512, 128], f16>
// CHECK-NOT:     tiled_loop.load
// CHECK-NOT:     tiled_loop.full 0.0 {origin = "matmul"}
// CHECK-LABEL:   func.func @divisible(
// CHECK-NEXT:      tiled_loop.launch @fused_0(%x, %w, %b)

// -----

// M = 37, N = 75, K = 100: no extent is a multiple of its tile, so every axis is masked (37 rows is skinny_m).
func.func @ragged(%x : !tensor_op.tensor<[37, 100], f16>, %w : !tensor_op.tensor<[100, 75], f16>, %b : !tensor_op.tensor<[75], f16>) -> !tensor_op.tensor<[37, 75], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[37, 100], f16>, !tensor_op.tensor<[100, 75], f16>) -> !tensor_op.tensor<[37, 75], f16>
  %1 = tensor_op.add %0, %b : (!tensor_op.tensor<[37, 75], f16>, !tensor_op.tensor<[75], f16>) -> !tensor_op.tensor<[37, 75], f16>
  %2 = tensor_op.relu %1 : !tensor_op.tensor<[37, 75], f16>
  func.return %2 : !tensor_op.tensor<[37, 75], f16>
}

// CHECK-LABEL: memory_staged.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(75, BLOCK_N), cdiv(37, BLOCK_M)]>, program_ids = ["pid_n", "pid_m"], constants = {BLOCK_M = 64 : i64, BLOCK_N = 64 : i64, BLOCK_K = 32 : i64}, num_warps = 4 : i64, num_stages = 3 : i64, num_inputs = 3 : i64, strategy = "skinny_m"
// CHECK:         memory_staged.accumulator
// CHECK:         tiled_loop.for "k" = <[0, 100, BLOCK_K]>
// CHECK:           memory_staged.stage %x <[BLOCK_M*pid_m, k]> {mask = [true, true], index_bits = 32 : i64, depth = 3 : i64}
// CHECK-NEXT:      memory_staged.stage %w <[k, BLOCK_N*pid_n]> {mask = [true, true], index_bits = 32 : i64, depth = 3 : i64}
// CHECK-NEXT:      memory_staged.dot
// CHECK:         memory_staged.load %b <[BLOCK_N*pid_n]> {mask = [true], index_bits = 32 : i64}
// CHECK:         memory_staged.store %{{[0-9]+}}, %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]> {mask = [true, true], index_bits = 32 : i64}

// -----

// A symbolic row count B*S: rows stay masked (B*S need not be a multiple of 64), marked mask_if_uneven (tiles start at
// multiples of 64, so the launches where B*S is one need no row mask), and the buffers with B*S rows use 64-bit
// offsets; K = 64 is a multiple of BLOCK_K = 32, but N = 32 is smaller than BLOCK_N = 64: a mask on every launch.
func.func @symbolic_rows(%x : !tensor_op.tensor<[B*S, 64], f16>, %w : !tensor_op.tensor<[64, 32], f16>) -> !tensor_op.tensor<[B*S, 32], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[B*S, 64], f16>, !tensor_op.tensor<[64, 32], f16>) -> !tensor_op.tensor<[B*S, 32], f16>
  %1 = tensor_op.gelu %0 : !tensor_op.tensor<[B*S, 32], f16>
  func.return %1 : !tensor_op.tensor<[B*S, 32], f16>
}

// CHECK-LABEL: memory_staged.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(B*S, BLOCK_M), cdiv(32, BLOCK_N)]>, {{.*}}strategy = "tile2d"
// CHECK-NEXT:    ^bb0(%x: !memory_staged.buffer<global, [B*S, 64], f16>, %w: !memory_staged.buffer<global, [64, 32], f16>, %out0: !memory_staged.buffer<global, [B*S, 32], f16>):
// CHECK:           memory_staged.stage %x <[BLOCK_M*pid_m, k]> {mask = [true, false], index_bits = 64 : i64, depth = 3 : i64, mask_if_uneven = [true, false]}
// CHECK-NEXT:      memory_staged.stage %w <[k, BLOCK_N*pid_n]> {mask = [false, true], index_bits = 32 : i64, depth = 3 : i64}
// CHECK:         tiled_loop.unary "erf" {{.*}}origin = "gelu"
// CHECK:         memory_staged.store %{{[0-9]+}}, %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]> {mask = [true, true], index_bits = 64 : i64, mask_if_uneven = [true, false]}

// -----

// 64*B rows are provably a multiple of BLOCK_M = 64: no row mask even though the extent is symbolic.
func.func @symbolic_divisible(%x : !tensor_op.tensor<[64*B, 128], f16>, %w : !tensor_op.tensor<[128, 256], f16>) -> !tensor_op.tensor<[64*B, 256], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[64*B, 128], f16>, !tensor_op.tensor<[128, 256], f16>) -> !tensor_op.tensor<[64*B, 256], f16>
  func.return %0 : !tensor_op.tensor<[64*B, 256], f16>
}

// CHECK-LABEL: memory_staged.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(64*B, BLOCK_M), cdiv(256, BLOCK_N)]>
// CHECK:           memory_staged.stage %x <[BLOCK_M*pid_m, k]> {mask = [false, false], index_bits = 64 : i64, depth = 3 : i64}
// CHECK-NEXT:      memory_staged.stage %w <[k, BLOCK_N*pid_n]> {mask = [false, false], index_bits = 32 : i64, depth = 3 : i64}
// CHECK:         memory_staged.store %{{[a-z0-9_]+}}, %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]> {mask = [false, false], index_bits = 64 : i64}

// -----

// Softmax rows of 1024 = 16 x BLOCK_N: the column validity test (tiled_loop.in_bounds) is provably all-true, so it
// and its -inf select fold away; loads outside a dot's K loop go to registers (memory_staged.load).
func.func @softmax_even(%x : !tensor_op.tensor<[M, 1024], f32>) -> !tensor_op.tensor<[M, 1024], f32> {
  %0 = tensor_op.softmax %x {axis = -1 : i64} : !tensor_op.tensor<[M, 1024], f32>
  func.return %0 : !tensor_op.tensor<[M, 1024], f32>
}

// CHECK-LABEL: memory_staged.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M)]>, program_ids = ["pid_m"], constants = {BLOCK_M = 64 : i64, BLOCK_N = 64 : i64}, {{.*}}strategy = "row_strip"
// CHECK-NOT:     memory_staged.stage
// CHECK-NOT:     memory_staged.accumulator
// CHECK:         tiled_loop.for "n" = <[0, 1024, BLOCK_N]>
// CHECK:           %[[T:[a-z0-9_]+]] = memory_staged.load %x <[BLOCK_M*pid_m, n]> {mask = [true, false], index_bits = 64 : i64, mask_if_uneven = [true, false]}
// CHECK-NOT:       tiled_loop.in_bounds
// CHECK-NOT:       tiled_loop.select %{{[a-z_]+}}, %[[T]]
// CHECK-NEXT:      tiled_loop.reduce "max" %[[T]] {origin = "softmax"}
// CHECK:         tiled_loop.for "n" = <[0, 1024, BLOCK_N]>
// CHECK:           memory_staged.store %{{[0-9]+}}, %out0 <[BLOCK_M*pid_m, n]> {mask = [true, false], index_bits = 64 : i64, mask_if_uneven = [true, false]}
// CHECK-LABEL: func.func @softmax_even(

// -----

// Rows of 1000: the column mask and the in_bounds select stay.
func.func @softmax_ragged(%x : !tensor_op.tensor<[M, 1000], f32>) -> !tensor_op.tensor<[M, 1000], f32> {
  %0 = tensor_op.softmax %x {axis = -1 : i64} : !tensor_op.tensor<[M, 1000], f32>
  func.return %0 : !tensor_op.tensor<[M, 1000], f32>
}

// CHECK-LABEL: memory_staged.kernel @fused_0
// CHECK:         tiled_loop.for "n" = <[0, 1000, BLOCK_N]>
// CHECK:           %[[T:[a-z0-9_]+]] = memory_staged.load %x <[BLOCK_M*pid_m, n]> {mask = [true, true], index_bits = 64 : i64, mask_if_uneven = [true, false]}
// CHECK-NEXT:      %[[VALID:[a-z0-9_]+]] = tiled_loop.in_bounds <[0, n]> within <[1, 1000]> : !tiled_loop.tile<[1, BLOCK_N], i1>
// CHECK-NEXT:      %[[NINF:[0-9]+]] = tiled_loop.full -inf
// CHECK-NEXT:      tiled_loop.select %[[VALID]], %[[T]], %[[NINF]]
// CHECK:           memory_staged.store %{{[0-9]+}}, %out0 <[BLOCK_M*pid_m, n]> {mask = [true, true], index_bits = 64 : i64, mask_if_uneven = [true, false]}

// -----

// Static shapes: 32767 x 65536 elements (< 2^31) keep 32-bit offsets ...
func.func @index_bits_32(%x : !tensor_op.tensor<[32767, 65536], f16>) -> !tensor_op.tensor<[32767, 65536], f16> {
  %0 = tensor_op.relu %x : !tensor_op.tensor<[32767, 65536], f16>
  func.return %0 : !tensor_op.tensor<[32767, 65536], f16>
}

// CHECK-LABEL: memory_staged.kernel @fused_0
// CHECK:         memory_staged.load %x <[BLOCK_M*pid_m, BLOCK_N*pid_n]> {mask = [true, false], index_bits = 32 : i64}
// CHECK:         memory_staged.store %{{[0-9]+}}, %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]> {mask = [true, false], index_bits = 32 : i64}

// -----

// ... 32768 x 65536 (= 2^31) need 64-bit ones.
func.func @index_bits_64(%x : !tensor_op.tensor<[32768, 65536], f16>) -> !tensor_op.tensor<[32768, 65536], f16> {
  %0 = tensor_op.relu %x : !tensor_op.tensor<[32768, 65536], f16>
  func.return %0 : !tensor_op.tensor<[32768, 65536], f16>
}

// CHECK-LABEL: memory_staged.kernel @fused_0
// CHECK:         memory_staged.load %x <[BLOCK_M*pid_m, BLOCK_N*pid_n]> {mask = [false, false], index_bits = 64 : i64}
// CHECK:         memory_staged.store %{{[0-9]+}}, %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]> {mask = [false, false], index_bits = 64 : i64}
