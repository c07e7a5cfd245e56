// RUN: amk-opt %s -p amk-fuse,amk-tile | filecheck %s --check-prefix=SYMBOLIC
// RUN: amk-opt %s -p 'amk-fuse,amk-tile{size_hints="s0=1"}' | filecheck %s --check-prefix=DECODE
// RUN: amk-opt %s -p 'amk-fuse,amk-tile{size_hints="s0=64"}' | filecheck %s --check-prefix=DECODE
// RUN: amk-opt %s -p 'amk-fuse,amk-tile{size_hints="s0=4096"}' | filecheck %s --check-prefix=SYMBOLIC
// RUN: not amk-opt %s -p 'amk-fuse,amk-tile{size_hints="s0=many"}' 2>&1 | filecheck %s --check-prefix=BAD
// RUN: not amk-opt %s -p 'amk-fuse,amk-tile{size_hints="S0=1"}' 2>&1 | filecheck %s --check-prefix=UNKNOWN

// A symbolic row count s0 is tiled as a grid of output tiles (tile2d): it may be large. With size hints (the size
// bucket amk.compile builds), auto chooses as for those sizes: split_k for a decode-sized s0 and this long K. Either
// way the kernel stays symbolic in s0 (its grid and bounds read s0 at launch), so it is correct for every row count.

func.func @linear_relu(%x : !tensor_op.tensor<[s0, 1024], f16>, %w : !tensor_op.tensor<[1024, 128], f16>) -> !tensor_op.tensor<[s0, 128], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[s0, 1024], f16>, !tensor_op.tensor<[1024, 128], f16>) -> !tensor_op.tensor<[s0, 128], f16>
  %1 = tensor_op.relu %0 : !tensor_op.tensor<[s0, 128], f16>
  func.return %1 : !tensor_op.tensor<[s0, 128], f16>
}

// SYMBOLIC: tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(s0, BLOCK_M), cdiv(128, BLOCK_N)]>, {{.*}}strategy = "tile2d"
// DECODE: tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(128, BLOCK_N), cdiv(s0, BLOCK_M), SPLIT_K]>, {{.*}}strategy = "split_k"
// DECODE: ^bb0(%x: !tensor_op.tensor<[s0, 1024], f16>
// BAD: amk-tile: size_hints must be SYMBOL=VALUE pairs separated by commas, each value a positive integer
// UNKNOWN: amk-tile: size_hints: no tensor type has the size S0; the module's symbolic sizes: s0
