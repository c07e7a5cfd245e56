// Regression test (fixed in 1d96d3f): amk-stage on a tiled_loop.kernel without outputs reports an error diagnostic;
// it once crashed with a Python traceback (IndexError in lowering/stage.py kernel_problem, `kernel.outputs[0]`).
// amk-fuse no longer makes such kernels from dead ops (see ../amk-fuse/dead_ops.mlir), but hand-written IR can.
// RUN: amk-opt %s -p amk-stage > %t 2>&1 || true
// RUN: filecheck %s < %t

tiled_loop.kernel @no_outputs attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M)]>, program_ids = ["pid_m"], strategy = "tile2d", tile_params = ["BLOCK_M", "BLOCK_N"], num_inputs = 1 : i64} {
^bb0(%x: !tensor_op.tensor<[M, 32], f16>):
  %t = tiled_loop.load %x <[BLOCK_M*pid_m, 0]> : !tensor_op.tensor<[M, 32], f16> -> !tiled_loop.tile<[BLOCK_M, 32], f16>
}

// CHECK-NOT: Traceback
// CHECK:     amk-opt: error: amk-stage: kernel no_outputs has no outputs
