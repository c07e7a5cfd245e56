// RUN: amk-opt %s --split-input-file | filecheck %s
// RUN: %roundtrip

// A tile2d matmul kernel with a grouped 2-D grid and a K loop.
tiled_loop.kernel @matmul attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"], strategy = "tile2d", tile_params = ["BLOCK_M", "BLOCK_N", "BLOCK_K"], num_inputs = 2 : i64, group_size = "GROUP_M"} {
^bb0(%x: !tensor_op.tensor<[M, K], f16>, %w: !tensor_op.tensor<[K, N], f16>, %out: !tensor_op.tensor<[M, N], f16>):
  %zero = tiled_loop.full 0.0 : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %acc = tiled_loop.for "k" = <[0, K, BLOCK_K]> iter_args(%zero) : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) -> (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) {
  ^bb1(%acc_in: !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>):
    %a = tiled_loop.load %x <[pid_m * BLOCK_M, k]> : !tensor_op.tensor<[M, K], f16> -> !tiled_loop.tile<[BLOCK_M, BLOCK_K], f16>
    %b = tiled_loop.load %w <[k, pid_n * BLOCK_N]> : !tensor_op.tensor<[K, N], f16> -> !tiled_loop.tile<[BLOCK_K, BLOCK_N], f16>
    %next = tiled_loop.dot %a, %b, %acc_in : (!tiled_loop.tile<[BLOCK_M, BLOCK_K], f16>, !tiled_loop.tile<[BLOCK_K, BLOCK_N], f16>, !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
    tiled_loop.yield %next : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  }
  %c = tiled_loop.cast %acc : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f16>
  tiled_loop.store %c, %out <[pid_m * BLOCK_M, pid_n * BLOCK_N]> : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f16> -> !tensor_op.tensor<[M, N], f16>
}

// CHECK-LABEL: tiled_loop.kernel @matmul attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"], strategy = "tile2d", tile_params = ["BLOCK_M", "BLOCK_N", "BLOCK_K"], num_inputs = 2 : i64, group_size = "GROUP_M"} {
// CHECK-NEXT:  ^bb0(%x: !tensor_op.tensor<[M, K], f16>, %w: !tensor_op.tensor<[K, N], f16>, %out: !tensor_op.tensor<[M, N], f16>):
// CHECK-NEXT:  %zero = tiled_loop.full 0.0 : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  %acc = tiled_loop.for "k" = <[0, K, BLOCK_K]> iter_args(%zero) : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> {
// CHECK-NEXT:  ^bb0(%acc_in: !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>):
// CHECK-NEXT:  %a = tiled_loop.load %x <[BLOCK_M*pid_m, k]> : !tensor_op.tensor<[M, K], f16> -> !tiled_loop.tile<[BLOCK_M, BLOCK_K], f16>
// CHECK-NEXT:  %b = tiled_loop.load %w <[k, BLOCK_N*pid_n]> : !tensor_op.tensor<[K, N], f16> -> !tiled_loop.tile<[BLOCK_K, BLOCK_N], f16>
// CHECK-NEXT:  %next = tiled_loop.dot %a, %b, %acc_in : (!tiled_loop.tile<[BLOCK_M, BLOCK_K], f16>, !tiled_loop.tile<[BLOCK_K, BLOCK_N], f16>, !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  tiled_loop.yield %next : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  }
// CHECK-NEXT:  %c = tiled_loop.cast %acc : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f16>
// CHECK-NEXT:  tiled_loop.store %c, %out <[BLOCK_M*pid_m, BLOCK_N*pid_n]> : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f16> -> !tensor_op.tensor<[M, N], f16>
// CHECK-NEXT:  }

// -----

// Row-strip kernel reading a transposed weight view and a rank-1 bias as a row vector.
tiled_loop.kernel @row_strip attributes {grid = #tiled_loop.exprs<[cdiv(B*S, BLOCK_M)]>, program_ids = ["pid_m"], strategy = "row_strip", tile_params = ["BLOCK_M", "BLOCK_N"], num_inputs = 2 : i64, arg_views = ["none", "transpose", "none"]} {
^bb0(%x: !tensor_op.tensor<[B*S, 64], f32>, %b: !tensor_op.tensor<[64], f32>, %out: !tensor_op.tensor<[B*S, 64], f32>):
  %t = tiled_loop.load %x <[pid_m * BLOCK_M, 0]> : !tensor_op.tensor<[B*S, 64], f32> -> !tiled_loop.tile<[BLOCK_M, 64], f32>
  %bias = tiled_loop.load %b <[0]> : !tensor_op.tensor<[64], f32> -> !tiled_loop.tile<[1, 64], f32>
  %col = tiled_loop.load %b <[0]> : !tensor_op.tensor<[64], f32> -> !tiled_loop.tile<[64, 1], f32>
  %y = tiled_loop.binary "add" %t, %bias : (!tiled_loop.tile<[BLOCK_M, 64], f32>, !tiled_loop.tile<[1, 64], f32>) -> !tiled_loop.tile<[BLOCK_M, 64], f32>
  tiled_loop.store %y, %out <[pid_m * BLOCK_M, 0]> : !tiled_loop.tile<[BLOCK_M, 64], f32> -> !tensor_op.tensor<[B*S, 64], f32>
}

// CHECK-LABEL: tiled_loop.kernel @row_strip attributes {grid = #tiled_loop.exprs<[cdiv(B*S, BLOCK_M)]>, program_ids = ["pid_m"], strategy = "row_strip", tile_params = ["BLOCK_M", "BLOCK_N"], num_inputs = 2 : i64, arg_views = ["none", "transpose", "none"]} {
// CHECK-NEXT:  ^bb0(%x: !tensor_op.tensor<[B*S, 64], f32>, %b: !tensor_op.tensor<[64], f32>, %out: !tensor_op.tensor<[B*S, 64], f32>):
// CHECK-NEXT:  %t = tiled_loop.load %x <[BLOCK_M*pid_m, 0]> : !tensor_op.tensor<[B*S, 64], f32> -> !tiled_loop.tile<[BLOCK_M, 64], f32>
// CHECK-NEXT:  %bias = tiled_loop.load %b <[0]> : !tensor_op.tensor<[64], f32> -> !tiled_loop.tile<[1, 64], f32>
// CHECK-NEXT:  %col = tiled_loop.load %b <[0]> : !tensor_op.tensor<[64], f32> -> !tiled_loop.tile<[64, 1], f32>
// CHECK-NEXT:  %y = tiled_loop.binary "add" %t, %bias : (!tiled_loop.tile<[BLOCK_M, 64], f32>, !tiled_loop.tile<[1, 64], f32>) -> !tiled_loop.tile<[BLOCK_M, 64], f32>
// CHECK-NEXT:  tiled_loop.store %y, %out <[BLOCK_M*pid_m, 0]> : !tiled_loop.tile<[BLOCK_M, 64], f32> -> !tensor_op.tensor<[B*S, 64], f32>
// CHECK-NEXT:  }

// -----

tiled_loop.kernel @skinny attributes {grid = #tiled_loop.exprs<[1, cdiv(N, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"], strategy = "skinny_m", tile_params = [], num_inputs = 0 : i64} {
^bb0(%out: !tensor_op.tensor<[4, N], f32>):
  tiled_loop.for "i" = <[0, 4, 1]> iter_args() : () -> () {
    tiled_loop.yield
  }
}

// CHECK-LABEL: tiled_loop.kernel @skinny attributes {grid = #tiled_loop.exprs<[1, cdiv(N, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"], strategy = "skinny_m", tile_params = [], num_inputs = 0 : i64} {
// CHECK-NEXT:  ^bb0(%out: !tensor_op.tensor<[4, N], f32>):
// CHECK-NEXT:  tiled_loop.for "i" = <[0, 4, 1]> iter_args() : () -> () {
// CHECK-NEXT:  tiled_loop.yield
// CHECK-NEXT:  }
// CHECK-NEXT:  }

// -----

tiled_loop.kernel @full attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = ["BLOCK_N"], num_inputs = 0 : i64} {
  %0 = tiled_loop.full 0.0 : !tiled_loop.tile<[1, BLOCK_N], f32>
  %1 = tiled_loop.full -inf : !tiled_loop.tile<[1, BLOCK_N], f32>
  %2 = tiled_loop.full inf : !tiled_loop.tile<[1, 1], f32>
  %3 = tiled_loop.full 1.5 : !tiled_loop.tile<[16, 16], f16>
  %4 = tiled_loop.full -2.5e-3 : !tiled_loop.tile<[16, 16], f32>
  %5 = tiled_loop.full 3 : !tiled_loop.tile<[16, 16], f32>
}

// CHECK-LABEL: tiled_loop.kernel @full attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = ["BLOCK_N"], num_inputs = 0 : i64} {
// CHECK-NEXT:  %0 = tiled_loop.full 0.0 : !tiled_loop.tile<[1, BLOCK_N], f32>
// CHECK-NEXT:  %1 = tiled_loop.full -inf : !tiled_loop.tile<[1, BLOCK_N], f32>
// CHECK-NEXT:  %2 = tiled_loop.full inf : !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  %3 = tiled_loop.full 1.5 : !tiled_loop.tile<[16, 16], f16>
// CHECK-NEXT:  %4 = tiled_loop.full -0.0025 : !tiled_loop.tile<[16, 16], f32>
// CHECK-NEXT:  %5 = tiled_loop.full 3.0 : !tiled_loop.tile<[16, 16], f32>
// CHECK-NEXT:  }

// -----

tiled_loop.kernel @unary attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = ["BLOCK_M", "BLOCK_N"], num_inputs = 0 : i64} {
  %x = tiled_loop.full 1.0 : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %0 = tiled_loop.unary "exp" %x : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %1 = tiled_loop.unary "log" %x : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %2 = tiled_loop.unary "erf" %x : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %3 = tiled_loop.unary "sqrt" %x : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %4 = tiled_loop.unary "rsqrt" %x : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %5 = tiled_loop.unary "abs" %x : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %6 = tiled_loop.unary "neg" %x : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %7 = tiled_loop.unary "sigmoid" %x : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
}

// CHECK-LABEL: tiled_loop.kernel @unary attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = ["BLOCK_M", "BLOCK_N"], num_inputs = 0 : i64} {
// CHECK-NEXT:  %x = tiled_loop.full 1.0 : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  %0 = tiled_loop.unary "exp" %x : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  %1 = tiled_loop.unary "log" %x : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  %2 = tiled_loop.unary "erf" %x : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  %3 = tiled_loop.unary "sqrt" %x : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  %4 = tiled_loop.unary "rsqrt" %x : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  %5 = tiled_loop.unary "abs" %x : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  %6 = tiled_loop.unary "neg" %x : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  %7 = tiled_loop.unary "sigmoid" %x : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  }

// -----

tiled_loop.kernel @binary attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = ["BLOCK_M", "BLOCK_N"], num_inputs = 0 : i64} {
  %x = tiled_loop.full 1.0 : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %r = tiled_loop.full 2.0 : !tiled_loop.tile<[1, BLOCK_N], f32>
  %c = tiled_loop.full 3.0 : !tiled_loop.tile<[BLOCK_M, 1], f32>
  %0 = tiled_loop.binary "add" %x, %r : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[1, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %1 = tiled_loop.binary "sub" %x, %c : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[BLOCK_M, 1], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %2 = tiled_loop.binary "mul" %c, %r : (!tiled_loop.tile<[BLOCK_M, 1], f32>, !tiled_loop.tile<[1, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %3 = tiled_loop.binary "div" %x, %x : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %4 = tiled_loop.binary "max" %x, %r : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[1, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %5 = tiled_loop.binary "min" %r, %r : (!tiled_loop.tile<[1, BLOCK_N], f32>, !tiled_loop.tile<[1, BLOCK_N], f32>) -> !tiled_loop.tile<[1, BLOCK_N], f32>
  %6 = tiled_loop.binary "lt" %x, %r : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[1, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], i1>
  %7 = tiled_loop.binary "le" %x, %x : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], i1>
  %8 = tiled_loop.binary "gt" %c, %r : (!tiled_loop.tile<[BLOCK_M, 1], f32>, !tiled_loop.tile<[1, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], i1>
  %9 = tiled_loop.binary "ge" %x, %c : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[BLOCK_M, 1], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], i1>
  %10 = tiled_loop.binary "eq" %r, %r : (!tiled_loop.tile<[1, BLOCK_N], f32>, !tiled_loop.tile<[1, BLOCK_N], f32>) -> !tiled_loop.tile<[1, BLOCK_N], i1>
  %11 = tiled_loop.binary "ne" %x, %x : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], i1>
}

// CHECK-LABEL: tiled_loop.kernel @binary attributes {grid = #tiled_loop.exprs<[1]>, program_ids = ["pid"], strategy = "row_strip", tile_params = ["BLOCK_M", "BLOCK_N"], num_inputs = 0 : i64} {
// CHECK-NEXT:  %x = tiled_loop.full 1.0 : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  %r = tiled_loop.full 2.0 : !tiled_loop.tile<[1, BLOCK_N], f32>
// CHECK-NEXT:  %c = tiled_loop.full 3.0 : !tiled_loop.tile<[BLOCK_M, 1], f32>
// CHECK-NEXT:  %0 = tiled_loop.binary "add" %x, %r : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[1, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  %1 = tiled_loop.binary "sub" %x, %c : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[BLOCK_M, 1], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  %2 = tiled_loop.binary "mul" %c, %r : (!tiled_loop.tile<[BLOCK_M, 1], f32>, !tiled_loop.tile<[1, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  %3 = tiled_loop.binary "div" %x, %x : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  %4 = tiled_loop.binary "max" %x, %r : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[1, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  %5 = tiled_loop.binary "min" %r, %r : (!tiled_loop.tile<[1, BLOCK_N], f32>, !tiled_loop.tile<[1, BLOCK_N], f32>) -> !tiled_loop.tile<[1, BLOCK_N], f32>
// CHECK-NEXT:  %6 = tiled_loop.binary "lt" %x, %r : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[1, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], i1>
// CHECK-NEXT:  %7 = tiled_loop.binary "le" %x, %x : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], i1>
// CHECK-NEXT:  %8 = tiled_loop.binary "gt" %c, %r : (!tiled_loop.tile<[BLOCK_M, 1], f32>, !tiled_loop.tile<[1, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], i1>
// CHECK-NEXT:  %9 = tiled_loop.binary "ge" %x, %c : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[BLOCK_M, 1], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], i1>
// CHECK-NEXT:  %10 = tiled_loop.binary "eq" %r, %r : (!tiled_loop.tile<[1, BLOCK_N], f32>, !tiled_loop.tile<[1, BLOCK_N], f32>) -> !tiled_loop.tile<[1, BLOCK_N], i1>
// CHECK-NEXT:  %11 = tiled_loop.binary "ne" %x, %x : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], i1>
// CHECK-NEXT:  }

// -----

// Masking padding columns before a row reduction.
tiled_loop.kernel @select_reduce attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M)]>, program_ids = ["pid_m"], strategy = "row_strip", tile_params = ["BLOCK_M", "BLOCK_N"], num_inputs = 1 : i64} {
^bb0(%x: !tensor_op.tensor<[M, 75], f32>, %out: !tensor_op.tensor<[M], f32>):
  %t = tiled_loop.load %x <[pid_m * BLOCK_M, 0]> : !tensor_op.tensor<[M, 75], f32> -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %valid = tiled_loop.in_bounds <[0, 0]> within <[M, 75]> : !tiled_loop.tile<[1, BLOCK_N], i1>
  %rows = tiled_loop.in_bounds <[pid_m * BLOCK_M, 0]> within <[M, 75]> : !tiled_loop.tile<[BLOCK_M, 1], i1>
  %ninf = tiled_loop.full -inf : !tiled_loop.tile<[1, 1], f32>
  %zero = tiled_loop.full 0.0 : !tiled_loop.tile<[1, 1], f32>
  %m = tiled_loop.select %valid, %t, %ninf : (!tiled_loop.tile<[1, BLOCK_N], i1>, !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[1, 1], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %s = tiled_loop.select %valid, %t, %zero : (!tiled_loop.tile<[1, BLOCK_N], i1>, !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[1, 1], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %mx = tiled_loop.reduce "max" %m : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
  %mn = tiled_loop.reduce "min" %s : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
  %sum = tiled_loop.reduce "sum" %s : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
  %h = tiled_loop.cast %sum : !tiled_loop.tile<[BLOCK_M, 1], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f16>
  %f = tiled_loop.cast %h : !tiled_loop.tile<[BLOCK_M, 1], f16> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
  tiled_loop.store %f, %out <[pid_m * BLOCK_M]> : !tiled_loop.tile<[BLOCK_M, 1], f32> -> !tensor_op.tensor<[M], f32>
}

// CHECK-LABEL: tiled_loop.kernel @select_reduce attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M)]>, program_ids = ["pid_m"], strategy = "row_strip", tile_params = ["BLOCK_M", "BLOCK_N"], num_inputs = 1 : i64} {
// CHECK-NEXT:  ^bb0(%x: !tensor_op.tensor<[M, 75], f32>, %out: !tensor_op.tensor<[M], f32>):
// CHECK-NEXT:  %t = tiled_loop.load %x <[BLOCK_M*pid_m, 0]> : !tensor_op.tensor<[M, 75], f32> -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  %valid = tiled_loop.in_bounds <[0, 0]> within <[M, 75]> : !tiled_loop.tile<[1, BLOCK_N], i1>
// CHECK-NEXT:  %rows = tiled_loop.in_bounds <[BLOCK_M*pid_m, 0]> within <[M, 75]> : !tiled_loop.tile<[BLOCK_M, 1], i1>
// CHECK-NEXT:  %ninf = tiled_loop.full -inf : !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  %zero = tiled_loop.full 0.0 : !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  %m = tiled_loop.select %valid, %t, %ninf : (!tiled_loop.tile<[1, BLOCK_N], i1>, !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[1, 1], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  %s = tiled_loop.select %valid, %t, %zero : (!tiled_loop.tile<[1, BLOCK_N], i1>, !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[1, 1], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:  %mx = tiled_loop.reduce "max" %m : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
// CHECK-NEXT:  %mn = tiled_loop.reduce "min" %s : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
// CHECK-NEXT:  %sum = tiled_loop.reduce "sum" %s : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
// CHECK-NEXT:  %h = tiled_loop.cast %sum : !tiled_loop.tile<[BLOCK_M, 1], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f16>
// CHECK-NEXT:  %f = tiled_loop.cast %h : !tiled_loop.tile<[BLOCK_M, 1], f16> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
// CHECK-NEXT:  tiled_loop.store %f, %out <[BLOCK_M*pid_m]> : !tiled_loop.tile<[BLOCK_M, 1], f32> -> !tensor_op.tensor<[M], f32>
// CHECK-NEXT:  }

// -----

// Two loop-carried values (online softmax style).
tiled_loop.kernel @two_carried attributes {grid = #tiled_loop.exprs<[M]>, program_ids = ["pid_m"], strategy = "row_strip", tile_params = ["BLOCK_N"], num_inputs = 1 : i64} {
^bb0(%x: !tensor_op.tensor<[M, N], f32>, %out: !tensor_op.tensor<[M, 1], f32>):
  %m0 = tiled_loop.full -inf : !tiled_loop.tile<[1, 1], f32>
  %s0 = tiled_loop.full 0.0 : !tiled_loop.tile<[1, 1], f32>
  %m, %s = tiled_loop.for "n" = <[0, N, BLOCK_N]> iter_args(%m0, %s0) : (!tiled_loop.tile<[1, 1], f32>, !tiled_loop.tile<[1, 1], f32>) -> (!tiled_loop.tile<[1, 1], f32>, !tiled_loop.tile<[1, 1], f32>) {
  ^bb1(%mi: !tiled_loop.tile<[1, 1], f32>, %si: !tiled_loop.tile<[1, 1], f32>):
    %t = tiled_loop.load %x <[pid_m, n]> : !tensor_op.tensor<[M, N], f32> -> !tiled_loop.tile<[1, BLOCK_N], f32>
    %tm = tiled_loop.reduce "max" %t : !tiled_loop.tile<[1, BLOCK_N], f32> -> !tiled_loop.tile<[1, 1], f32>
    %mn = tiled_loop.binary "max" %mi, %tm : (!tiled_loop.tile<[1, 1], f32>, !tiled_loop.tile<[1, 1], f32>) -> !tiled_loop.tile<[1, 1], f32>
    tiled_loop.yield %mn, %si : !tiled_loop.tile<[1, 1], f32>, !tiled_loop.tile<[1, 1], f32>
  }
  tiled_loop.store %s, %out <[pid_m, 0]> : !tiled_loop.tile<[1, 1], f32> -> !tensor_op.tensor<[M, 1], f32>
}

// CHECK-LABEL: tiled_loop.kernel @two_carried attributes {grid = #tiled_loop.exprs<[M]>, program_ids = ["pid_m"], strategy = "row_strip", tile_params = ["BLOCK_N"], num_inputs = 1 : i64} {
// CHECK-NEXT:  ^bb0(%x: !tensor_op.tensor<[M, N], f32>, %out: !tensor_op.tensor<[M, 1], f32>):
// CHECK-NEXT:  %m0 = tiled_loop.full -inf : !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  %s0 = tiled_loop.full 0.0 : !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  %m, %s = tiled_loop.for "n" = <[0, N, BLOCK_N]> iter_args(%m0, %s0) : (!tiled_loop.tile<[1, 1], f32>, !tiled_loop.tile<[1, 1], f32>) -> (!tiled_loop.tile<[1, 1], f32>, !tiled_loop.tile<[1, 1], f32>) {
// CHECK-NEXT:  ^bb0(%mi: !tiled_loop.tile<[1, 1], f32>, %si: !tiled_loop.tile<[1, 1], f32>):
// CHECK-NEXT:  %t = tiled_loop.load %x <[pid_m, n]> : !tensor_op.tensor<[M, N], f32> -> !tiled_loop.tile<[1, BLOCK_N], f32>
// CHECK-NEXT:  %tm = tiled_loop.reduce "max" %t : !tiled_loop.tile<[1, BLOCK_N], f32> -> !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  %mn = tiled_loop.binary "max" %mi, %tm : (!tiled_loop.tile<[1, 1], f32>, !tiled_loop.tile<[1, 1], f32>) -> !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  tiled_loop.yield %mn, %si : !tiled_loop.tile<[1, 1], f32>, !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  }
// CHECK-NEXT:  tiled_loop.store %s, %out <[pid_m, 0]> : !tiled_loop.tile<[1, 1], f32> -> !tensor_op.tensor<[M, 1], f32>
// CHECK-NEXT:  }

// -----

// tile_stats pieces: trailing workspace arguments (a scratch buffer and an i32 counter), the last-arrival test and
// the region it guards.
tiled_loop.kernel @last_arrival attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"], strategy = "tile_stats", tile_params = ["BLOCK_M", "BLOCK_N"], num_inputs = 1 : i64, workspace = ["scratch", "counter"]} {
^bb0(%x: !tensor_op.tensor<[M, N], f32>, %out: !tensor_op.tensor<[M, N], f32>, %partial: !tensor_op.tensor<[M, cdiv(N, BLOCK_N)], f32>, %counters: !tensor_op.tensor<[cdiv(M, BLOCK_M)], i32>):
  %t = tiled_loop.load %x <[pid_m * BLOCK_M, pid_n * BLOCK_N]> : !tensor_op.tensor<[M, N], f32> -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %s = tiled_loop.reduce "sum" %t : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
  tiled_loop.store %s, %partial <[pid_m * BLOCK_M, pid_n]> : !tiled_loop.tile<[BLOCK_M, 1], f32> -> !tensor_op.tensor<[M, cdiv(N, BLOCK_N)], f32>
  %last = tiled_loop.last_arrival %counters <[pid_m]> of <[cdiv(N, BLOCK_N)]> : !tensor_op.tensor<[cdiv(M, BLOCK_M)], i32> -> i1
  tiled_loop.if %last {
    %p = tiled_loop.load %partial <[pid_m * BLOCK_M, 0]> : !tensor_op.tensor<[M, cdiv(N, BLOCK_N)], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
    tiled_loop.store %p, %out <[pid_m * BLOCK_M, 0]> : !tiled_loop.tile<[BLOCK_M, 1], f32> -> !tensor_op.tensor<[M, N], f32>
  }
}

// CHECK-LABEL: tiled_loop.kernel @last_arrival attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"], strategy = "tile_stats", tile_params = ["BLOCK_M", "BLOCK_N"], num_inputs = 1 : i64, workspace = ["scratch", "counter"]} {
// CHECK-NEXT:  ^bb0(%x: !tensor_op.tensor<[M, N], f32>, %out: !tensor_op.tensor<[M, N], f32>, %partial: !tensor_op.tensor<[M, cdiv(N, BLOCK_N)], f32>, %counters: !tensor_op.tensor<[cdiv(M, BLOCK_M)], i32>):
// CHECK-NEXT:  %t = tiled_loop.load %x <[BLOCK_M*pid_m, BLOCK_N*pid_n]>
// CHECK-NEXT:  %s = tiled_loop.reduce "sum" %t
// CHECK-NEXT:  tiled_loop.store %s, %partial <[BLOCK_M*pid_m, pid_n]>
// CHECK-NEXT:  %last = tiled_loop.last_arrival %counters <[pid_m]> of <[cdiv(N, BLOCK_N)]> : !tensor_op.tensor<[cdiv(M, BLOCK_M)], i32> -> i1
// CHECK-NEXT:  tiled_loop.if %last {
// CHECK-NEXT:    %p = tiled_loop.load %partial <[BLOCK_M*pid_m, 0]> : !tensor_op.tensor<[M, cdiv(N, BLOCK_N)], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
// CHECK-NEXT:    tiled_loop.store %p, %out <[BLOCK_M*pid_m, 0]> : !tiled_loop.tile<[BLOCK_M, 1], f32> -> !tensor_op.tensor<[M, N], f32>
// CHECK-NEXT:  }
// CHECK-NEXT:  }

// -----

// strip_sync pieces: the tiles of a row strip write partial statistics, then wait for each other at a strip barrier.
tiled_loop.kernel @strip_barrier attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"], strategy = "strip_sync", tile_params = ["BLOCK_M", "BLOCK_N"], num_inputs = 1 : i64, workspace = ["scratch", "counter"]} {
^bb0(%x: !tensor_op.tensor<[M, N], f32>, %out: !tensor_op.tensor<[M, N], f32>, %partial: !tensor_op.tensor<[M, cdiv(N, BLOCK_N)], f32>, %counters: !tensor_op.tensor<[cdiv(M, BLOCK_M)], i32>):
  %t = tiled_loop.load %x <[pid_m * BLOCK_M, pid_n * BLOCK_N]> : !tensor_op.tensor<[M, N], f32> -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %s = tiled_loop.reduce "sum" %t : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
  tiled_loop.store %s, %partial <[pid_m * BLOCK_M, pid_n]> : !tiled_loop.tile<[BLOCK_M, 1], f32> -> !tensor_op.tensor<[M, cdiv(N, BLOCK_N)], f32>
  tiled_loop.strip_barrier %counters <[pid_m]> of <[cdiv(N, BLOCK_N)]> : !tensor_op.tensor<[cdiv(M, BLOCK_M)], i32>
  tiled_loop.store %t, %out <[pid_m * BLOCK_M, pid_n * BLOCK_N]> : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tensor_op.tensor<[M, N], f32>
}

// CHECK-LABEL: tiled_loop.kernel @strip_barrier attributes {{.*}}strategy = "strip_sync"
// CHECK:       tiled_loop.store %s, %partial <[BLOCK_M*pid_m, pid_n]>
// CHECK-NEXT:  tiled_loop.strip_barrier %counters <[pid_m]> of <[cdiv(N, BLOCK_N)]> : !tensor_op.tensor<[cdiv(M, BLOCK_M)], i32>
// CHECK-NEXT:  tiled_loop.store %t, %out <[BLOCK_M*pid_m, BLOCK_N*pid_n]>

// -----

// tile_stats pieces: the first launch writes per-tile partial statistics; after the relaunch a second launch (every
// program of the first has finished) reads them back.
tiled_loop.kernel @relaunch attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"], strategy = "tile_stats", tile_params = ["BLOCK_M", "BLOCK_N"], num_inputs = 1 : i64, workspace = ["scratch"]} {
^bb0(%x: !tensor_op.tensor<[M, N], f32>, %out: !tensor_op.tensor<[M, N], f32>, %partial: !tensor_op.tensor<[M, cdiv(N, BLOCK_N)], f32>):
  %t = tiled_loop.load %x <[pid_m * BLOCK_M, pid_n * BLOCK_N]> : !tensor_op.tensor<[M, N], f32> -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %s = tiled_loop.reduce "sum" %t : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
  tiled_loop.store %s, %partial <[pid_m * BLOCK_M, pid_n]> : !tiled_loop.tile<[BLOCK_M, 1], f32> -> !tensor_op.tensor<[M, cdiv(N, BLOCK_N)], f32>
  tiled_loop.relaunch {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"]}
  %p = tiled_loop.load %partial <[pid_m * BLOCK_M, 0]> : !tensor_op.tensor<[M, cdiv(N, BLOCK_N)], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
  tiled_loop.store %p, %out <[pid_m * BLOCK_M, pid_n * BLOCK_N]> : !tiled_loop.tile<[BLOCK_M, 1], f32> -> !tensor_op.tensor<[M, N], f32>
}

// CHECK-LABEL: tiled_loop.kernel @relaunch attributes {{.*}}strategy = "tile_stats"
// CHECK:       tiled_loop.store %s, %partial <[BLOCK_M*pid_m, pid_n]>
// CHECK-NEXT:  tiled_loop.relaunch {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"]}
// CHECK-NEXT:  %p = tiled_loop.load %partial <[BLOCK_M*pid_m, 0]>
