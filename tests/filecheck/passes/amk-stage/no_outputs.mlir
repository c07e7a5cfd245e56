// Known bug (open): amk-stage crashes with a Python traceback (IndexError: tuple index out of range, in
// lowering/stage.py kernel_problem, `kernel.outputs[0]`) on a tiled_loop.kernel without outputs, which amk-fuse +
// amk-tile produce for dead ops (see ../amk-fuse/dead_ops.mlir). Expected: the kernel is staged, or amk-opt reports
// an error diagnostic instead of a traceback.
// RUN: amk-opt %s -p amk-stage > %t 2>&1 || true
// RUN: filecheck %s < %t

tiled_loop.kernel @no_outputs attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M)]>, program_ids = ["pid_m"], strategy = "tile2d", tile_params = ["BLOCK_M", "BLOCK_N"], num_inputs = 1 : i64} {
^bb0(%x: !tensor_op.tensor<[M, 32], f16>):
  %t = tiled_loop.load %x <[BLOCK_M*pid_m, 0]> : !tensor_op.tensor<[M, 32], f16> -> !tiled_loop.tile<[BLOCK_M, 32], f16>
}

// CHECK-NOT: Traceback
// CHECK:     {{memory_staged.kernel @no_outputs|error}}
