// Regression test: tiled_loop.full used to print its value with Python's repr() (`1e-05`, `1e+20`, `nan`), which is
// not an MLIR float literal, so the printed custom form did not parse back ("Expected ':'"). It now prints floats
// the lexer re-reads exactly: `1.0e-05`, `nan`, `inf`, `-inf`, and integral values as `3.0`.
// RUN: amk-opt %s | filecheck %s
// RUN: amk-opt %s | amk-opt --print-op-generic | filecheck %s --check-prefix=GENERIC
// (tests/test_roundtrip_files.py checks the generic -> custom and custom -> custom round trips of this file.)

tiled_loop.kernel @full attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = [], num_inputs = 0 : i64} {
^bb0(%out: !tensor_op.tensor<[M, 64], f32>):
  %0 = tiled_loop.full 1.0e-05 : !tiled_loop.tile<[1, 1], f32>
  %1 = tiled_loop.full 1.0e+20 : !tiled_loop.tile<[1, 1], f32>
  %2 = "tiled_loop.full"() <{value = 0x7FF8000000000000 : f64}> : () -> !tiled_loop.tile<[1, 1], f32>
  %3 = tiled_loop.full nan : !tiled_loop.tile<[1, 1], f32>
  %4 = tiled_loop.full inf : !tiled_loop.tile<[1, 1], f32>
  %5 = tiled_loop.full -inf : !tiled_loop.tile<[1, 1], f32>
  %6 = tiled_loop.full -0.0 : !tiled_loop.tile<[1, 1], f32>
  %7 = tiled_loop.full 3 : !tiled_loop.tile<[1, 1], f32>
  %8 = tiled_loop.full 0.1 : !tiled_loop.tile<[1, 1], f32>
  %9 = tiled_loop.full 0.7978845608028654 : !tiled_loop.tile<[1, 1], f32>
  %10 = tiled_loop.full 5.0e-324 : !tiled_loop.tile<[1, 1], f32>
  %11 = tiled_loop.full -1.7976931348623157e+308 : !tiled_loop.tile<[1, 1], f32>
}

// CHECK-LABEL: tiled_loop.kernel @full
// CHECK:       %0 = tiled_loop.full 1.0e-05 : !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  %1 = tiled_loop.full 1.0e+20 : !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  %2 = tiled_loop.full nan : !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  %3 = tiled_loop.full nan : !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  %4 = tiled_loop.full inf : !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  %5 = tiled_loop.full -inf : !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  %6 = tiled_loop.full -0.0 : !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  %7 = tiled_loop.full 3.0 : !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  %8 = tiled_loop.full 0.1 : !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  %9 = tiled_loop.full 0.7978845608028654 : !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  %10 = tiled_loop.full 5.0e-324 : !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  %11 = tiled_loop.full -1.7976931348623157e+308 : !tiled_loop.tile<[1, 1], f32>

// Custom -> generic keeps the exact f64 values.
// GENERIC: value = 1.000000e-05 : f64
// GENERIC: value = 1.000000e+20 : f64
// GENERIC: value = {{0x7[fF][fF]8}}000000000000 : f64
// GENERIC: value = {{0x7[fF][fF]8}}000000000000 : f64
// GENERIC: value = {{0x7[fF][fF]0}}000000000000 : f64
// GENERIC: value = {{0x[fF][fF][fF]0}}000000000000 : f64
// GENERIC: value = -0.000000e+00 : f64
// GENERIC: value = 3.000000e+00 : f64
// GENERIC: value = 1.000000e-01 : f64
// GENERIC: value = 0.79788456080286541 : f64
// GENERIC: value = 4.940660e-324 : f64
// GENERIC: value = -1.7976931348623157e+308 : f64
