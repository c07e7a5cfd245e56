// RUN: amk-opt %s --split-input-file -p amk-fuse,amk-tile | filecheck %s

// amk-tile replaces each tensor_op.fused region by a tiled_loop.launch of a new tiled_loop.kernel with symbolic tile
// sizes. The strategy comes from the group's plan: tile2d (a grid of output tiles), skinny_m (few rows: column tiles
// first), row_strip (row reductions over the last axis: a program owns BLOCK_M full rows) or, for rows of a static
// length without a matmul, row_resident (the same rows held in registers).

// tile2d: a 2-D grouped grid of BLOCK_M x BLOCK_N output tiles; a K loop accumulates the matmul into an fp32 tile,
// and the bias add and relu run on the accumulator before the single store.
func.func @tile2d(%x : !tensor_op.tensor<[512, 256], f16>, %w : !tensor_op.tensor<[256, 128], f16>, %b : !tensor_op.tensor<[128], f16>) -> !tensor_op.tensor<[512, 128], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[512, 256], f16>, !tensor_op.tensor<[256, 128], f16>) -> !tensor_op.tensor<[512, 128], f16>
  %1 = tensor_op.add %0, %b : (!tensor_op.tensor<[512, 128], f16>, !tensor_op.tensor<[128], f16>) -> !tensor_op.tensor<[512, 128], f16>
  %2 = tensor_op.relu %1 : !tensor_op.tensor<[512, 128], f16>
  func.return %2 : !tensor_op.tensor<[512, 128], f16>
}

// CHECK-LABEL: tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(512, BLOCK_M), cdiv(128, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"], strategy = "tile2d", tile_params = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"], num_inputs = 3 : i64, {{.*}}group_size = "GROUP_M"{{.*}}} {
// CHECK-NEXT:    ^bb0(%x: !tensor_op.tensor<[512, 256], f16>, %w: !tensor_op.tensor<[256, 128], f16>, %b: !tensor_op.tensor<[128], f16>, %out0: !tensor_op.tensor<[512, 128], f16>):
// CHECK-NEXT:      %[[ZERO:[a-z0-9_]+]] = tiled_loop.full 0.0 {origin = "matmul"} : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:      %[[ACC:[a-z0-9_]+]] = tiled_loop.for "k" = <[0, 256, BLOCK_K]> iter_args(%[[ZERO]]) {{.*}}: (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> {
// CHECK-NEXT:      ^bb0(%[[ACC_IN:[a-z0-9_]+]]: !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>):
// CHECK-NEXT:        %[[A:[a-z0-9_]+]] = tiled_loop.load %x <[BLOCK_M*pid_m, k]> : !tensor_op.tensor<[512, 256], f16> -> !tiled_loop.tile<[BLOCK_M, BLOCK_K], f16>
// CHECK-NEXT:        %[[B:[a-z0-9_]+]] = tiled_loop.load %w <[k, BLOCK_N*pid_n]> : !tensor_op.tensor<[256, 128], f16> -> !tiled_loop.tile<[BLOCK_K, BLOCK_N], f16>
// CHECK-NEXT:        %[[NEXT:[a-z0-9_]+]] = tiled_loop.dot %[[A]], %[[B]], %[[ACC_IN]] {origin = "matmul"} :
// CHECK-NEXT:        tiled_loop.yield %[[NEXT]] : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:      }
// CHECK-NEXT:      %[[BIAS:[a-z0-9_]+]] = tiled_loop.load %b <[BLOCK_N*pid_n]> : !tensor_op.tensor<[128], f16> -> !tiled_loop.tile<[1, BLOCK_N], f16>
// CHECK-NEXT:      %[[BIAS32:[a-z0-9_]+]] = tiled_loop.cast %[[BIAS]] : !tiled_loop.tile<[1, BLOCK_N], f16> -> !tiled_loop.tile<[1, BLOCK_N], f32>
// CHECK-NEXT:      %[[ADD:[a-z0-9_]+]] = tiled_loop.binary "add" %[[ACC]], %[[BIAS32]] {origin = "add"} :
// CHECK-NEXT:      %[[RZERO:[a-z0-9_]+]] = tiled_loop.full 0.0 {origin = "relu"} : !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:      %[[RELU:[a-z0-9_]+]] = tiled_loop.binary "max" %[[ADD]], %[[RZERO]] {origin = "relu"} :
// CHECK-NEXT:      tiled_loop.store %[[RELU]], %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]> : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tensor_op.tensor<[512, 128], f16>
// CHECK-NEXT:    }
// CHECK-LABEL:   func.func @tile2d(
// CHECK-NEXT:      %[[L:[0-9]+]] = tiled_loop.launch @fused_0(%x, %w, %b) : (!tensor_op.tensor<[512, 256], f16>, !tensor_op.tensor<[256, 128], f16>, !tensor_op.tensor<[128], f16>) -> !tensor_op.tensor<[512, 128], f16>
// CHECK-NEXT:      func.return %[[L]] : !tensor_op.tensor<[512, 128], f16>
// CHECK-NOT:     tensor_op.

// -----

// skinny_m: 8 rows (decode) and a short K. The grid is column tiles first, and there is no GROUP_M ordering.
func.func @skinny_m(%x : !tensor_op.tensor<[8, 512], f16>, %w : !tensor_op.tensor<[512, 1024], f16>) -> !tensor_op.tensor<[8, 1024], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[8, 512], f16>, !tensor_op.tensor<[512, 1024], f16>) -> !tensor_op.tensor<[8, 1024], f16>
  %1 = tensor_op.silu %0 : !tensor_op.tensor<[8, 1024], f16>
  func.return %1 : !tensor_op.tensor<[8, 1024], f16>
}

// CHECK-LABEL: tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(1024, BLOCK_N), cdiv(8, BLOCK_M)]>, program_ids = ["pid_n", "pid_m"], strategy = "skinny_m", tile_params = ["BLOCK_M", "BLOCK_N", "BLOCK_K"], num_inputs = 2 : i64
// CHECK-NOT:     group_size
// CHECK-SAME:    {
// CHECK:         tiled_loop.for "k" = <[0, 512, BLOCK_K]>
// CHECK:           tiled_loop.load %x <[BLOCK_M*pid_m, k]>
// CHECK:           tiled_loop.load %w <[k, BLOCK_N*pid_n]>
// CHECK:           tiled_loop.dot
// CHECK:         %[[SIG:[0-9]+]] = tiled_loop.unary "sigmoid" %[[ACC:[a-z0-9_]+]] {origin = "silu"}
// CHECK-NEXT:    %[[SILU:[0-9]+]] = tiled_loop.binary "mul" %[[ACC]], %[[SIG]] {origin = "silu"}
// CHECK-NEXT:    tiled_loop.store %[[SILU]], %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]> : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tensor_op.tensor<[8, 1024], f16>
// CHECK-LABEL: func.func @skinny_m(
// CHECK-NEXT:    tiled_loop.launch @fused_0(%x, %w)

// -----

// Few rows and a long K (>= 1024): split_k. A third grid axis splits K into SPLIT_K chunks; each program stores its
// fp32 partial tile to a scratch buffer and the last of the SPLIT_K programs sharing an output tile sums them.
func.func @split_k(%x : !tensor_op.tensor<[8, 4096], f16>, %w : !tensor_op.tensor<[4096, 1024], f16>) -> !tensor_op.tensor<[8, 1024], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[8, 4096], f16>, !tensor_op.tensor<[4096, 1024], f16>) -> !tensor_op.tensor<[8, 1024], f16>
  func.return %0 : !tensor_op.tensor<[8, 1024], f16>
}

// CHECK-LABEL: tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(1024, BLOCK_N), cdiv(8, BLOCK_M), SPLIT_K]>, program_ids = ["pid_n", "pid_m", "pid_k"], strategy = "split_k"
// CHECK-SAME:    workspace = [
// CHECK:         tiled_loop.for "k" = <[BLOCK_K*pid_k*{{.*}}, BLOCK_K]>
// CHECK:         tiled_loop.last_arrival
// CHECK-NEXT:    tiled_loop.if
// CHECK:           tiled_loop.for "split" = <[0, SPLIT_K, 1]>
// CHECK:           tiled_loop.store {{.*}}, %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]>
// CHECK-LABEL: func.func @split_k(
// CHECK-NEXT:    tiled_loop.launch @fused_0(%x, %w)

// -----

// row_strip: softmax over the last axis, rows of a length known at run time only. A 1-D grid of row strips; phase 1
// ("n" loop) folds each column tile into running max / sum-of-exp statistics (columns past N are selected to -inf),
// phase 2 (a second "n" loop) re-reads the input and normalizes (times the reciprocal of the row's sum, computed once
// per row).
func.func @row_strip(%x : !tensor_op.tensor<[M, N], f32>) -> !tensor_op.tensor<[M, N], f32> {
  %0 = tensor_op.softmax %x {axis = -1 : i64} : !tensor_op.tensor<[M, N], f32>
  func.return %0 : !tensor_op.tensor<[M, N], f32>
}

// CHECK-LABEL: tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M)]>, program_ids = ["pid_m"], strategy = "row_strip", tile_params = ["BLOCK_M", "BLOCK_N"], num_inputs = 1 : i64
// CHECK:         %[[MAX0:[a-z0-9_]+]] = tiled_loop.full -inf : !tiled_loop.tile<[BLOCK_M, 1], f32>
// CHECK-NEXT:    %[[SUM0:[a-z0-9_]+]] = tiled_loop.full 0.0 : !tiled_loop.tile<[BLOCK_M, 1], f32>
// CHECK-NEXT:    %[[MAX:[a-z0-9_]+]], %[[SUM:[a-z0-9_]+]] = tiled_loop.for "n" = <[0, N, BLOCK_N]> iter_args(%[[MAX0]], %[[SUM0]])
// CHECK:           %[[T:[a-z0-9_]+]] = tiled_loop.load %x <[BLOCK_M*pid_m, n]> : !tensor_op.tensor<[M, N], f32> -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:      %[[VALID:[a-z0-9_]+]] = tiled_loop.in_bounds <[0, n]> within <[1, N]> : !tiled_loop.tile<[1, BLOCK_N], i1>
// CHECK-NEXT:      %[[NINF:[0-9]+]] = tiled_loop.full -inf {origin = "softmax"}
// CHECK-NEXT:      %[[SEL:[0-9]+]] = tiled_loop.select %[[VALID]], %[[T]], %[[NINF]] {origin = "softmax"}
// CHECK-NEXT:      tiled_loop.reduce "max" %[[SEL]] {origin = "softmax"} : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
// CHECK:           tiled_loop.reduce "sum"
// CHECK:           tiled_loop.yield
// CHECK-NEXT:    }
// The exponentials' shift: the maximum, or 0 for a row of only -inf.
// CHECK-NEXT:    %[[NINF2:[0-9]+]] = tiled_loop.full -inf {origin = "softmax"}
// CHECK-NEXT:    %[[EMPTY:[0-9]+]] = tiled_loop.binary "eq" %[[MAX]], %[[NINF2]] {origin = "softmax"}
// CHECK-NEXT:    %[[ZERO:[0-9]+]] = tiled_loop.full 0.0 {origin = "softmax"}
// CHECK-NEXT:    %[[SHIFT:[0-9]+]] = tiled_loop.select %[[EMPTY]], %[[ZERO]], %[[MAX]] {origin = "softmax"}
// CHECK-NEXT:    %[[ONE:[0-9]+]] = tiled_loop.full 1.0 {origin = "softmax"}
// CHECK-NEXT:    %inv_sumexp = tiled_loop.binary "div" %[[ONE]], %[[SUM]] {origin = "softmax"}
// CHECK-NEXT:    tiled_loop.for "n" = <[0, N, BLOCK_N]> iter_args() {{.*}}: () -> () {
// CHECK-NEXT:      %[[T2:[a-z0-9_]+]] = tiled_loop.load %x <[BLOCK_M*pid_m, n]>
// CHECK-NEXT:      %[[D:[0-9]+]] = tiled_loop.binary "sub" %[[T2]], %[[SHIFT]] {origin = "softmax"}
// CHECK-NEXT:      %[[E:[0-9]+]] = tiled_loop.unary "exp" %[[D]] {origin = "softmax"}
// CHECK-NEXT:      %[[Y:[0-9]+]] = tiled_loop.binary "mul" %[[E]], %inv_sumexp {origin = "softmax"}
// CHECK-NEXT:      tiled_loop.store %[[Y]], %out0 <[BLOCK_M*pid_m, n]> : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tensor_op.tensor<[M, N], f32>
// CHECK-NEXT:      tiled_loop.yield
// CHECK-NEXT:    }
// CHECK-LABEL: func.func @row_strip(
// CHECK-NEXT:    tiled_loop.launch @fused_0(%x) : (!tensor_op.tensor<[M, N], f32>) -> !tensor_op.tensor<[M, N], f32>

// -----

// row_resident: the same softmax over rows of a static length (at most 16384): each program loads its BLOCK_M rows
// once, as one tile padded to 1024 columns (those past 1000 selected to -inf), reduces it and normalizes the values
// it holds. No loop, one read and one write of every element; BLOCK_N is not a parameter.
func.func @row_resident(%x : !tensor_op.tensor<[M, 1000], f32>) -> !tensor_op.tensor<[M, 1000], f32> {
  %0 = tensor_op.softmax %x {axis = -1 : i64} : !tensor_op.tensor<[M, 1000], f32>
  func.return %0 : !tensor_op.tensor<[M, 1000], f32>
}

// CHECK-LABEL: tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M)]>, program_ids = ["pid_m"], strategy = "row_resident", tile_params = ["BLOCK_M"], num_inputs = 1 : i64
// CHECK-NOT:     tiled_loop.for
// CHECK:         %[[T:[a-z0-9_]+]] = tiled_loop.load %x <[BLOCK_M*pid_m, 0]> : !tensor_op.tensor<[M, 1000], f32> -> !tiled_loop.tile<[BLOCK_M, 1024], f32>
// CHECK-NEXT:    %[[VALID:[a-z0-9_]+]] = tiled_loop.in_bounds <[0, 0]> within <[1, 1000]> : !tiled_loop.tile<[1, 1024], i1>
// CHECK-NEXT:    %[[NINF:[0-9]+]] = tiled_loop.full -inf {origin = "softmax"}
// CHECK-NEXT:    %[[SEL:[0-9]+]] = tiled_loop.select %[[VALID]], %[[T]], %[[NINF]] {origin = "softmax"}
// CHECK-NEXT:    %[[MAX:[0-9]+]] = tiled_loop.reduce "max" %[[SEL]] {origin = "softmax"} : !tiled_loop.tile<[BLOCK_M, 1024], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
// The output's exponentials are those of the sum (the same shift of the same values): Triton computes them once.
// CHECK:         %[[SHIFTED:[0-9]+]] = tiled_loop.binary "sub" %[[SEL]], %[[SUM_SHIFT:[0-9]+]] {origin = "softmax"}
// CHECK-NEXT:    tiled_loop.unary "exp" %[[SHIFTED]]
// CHECK-NEXT:    %[[SUM:[0-9]+]] = tiled_loop.reduce "sum"
// CHECK:         %[[SHIFT:[0-9]+]] = tiled_loop.select %{{[0-9]+}}, %{{[0-9]+}}, %[[MAX]] {origin = "softmax"}
// CHECK-NEXT:    %[[ONE:[0-9]+]] = tiled_loop.full 1.0 {origin = "softmax"}
// CHECK-NEXT:    %inv_sumexp = tiled_loop.binary "div" %[[ONE]], %[[SUM]] {origin = "softmax"}
// CHECK-NEXT:    %[[D:[0-9]+]] = tiled_loop.binary "sub" %[[T]], %[[SHIFT]] {origin = "softmax"}
// CHECK-NEXT:    %[[E:[0-9]+]] = tiled_loop.unary "exp" %[[D]] {origin = "softmax"}
// CHECK-NEXT:    %[[Y:[0-9]+]] = tiled_loop.binary "mul" %[[E]], %inv_sumexp {origin = "softmax"}
// CHECK-NEXT:    tiled_loop.store %[[Y]], %out0 <[BLOCK_M*pid_m, 0]> : !tiled_loop.tile<[BLOCK_M, 1024], f32> -> !tensor_op.tensor<[M, 1000], f32>
// CHECK-NOT:     tiled_loop.for
// CHECK-LABEL: func.func @row_resident(

// -----

// An RMSNorm prologue on the matmul's A operand (tile2d): a first loop over K gathers each row's sum of squares,
// then the main K loop normalizes every A tile (x * rstd * g, padded columns zeroed) before the dot.
func.func @rmsnorm_prologue(%x : !tensor_op.tensor<[B*S, 64], f16>, %g : !tensor_op.tensor<[64], f16>, %w : !tensor_op.tensor<[64, 128], f16>) -> !tensor_op.tensor<[B*S, 128], f16> {
  %0 = tensor_op.rmsnorm %x weight %g {eps = 1.0e-06 : f64} : !tensor_op.tensor<[B*S, 64], f16> weight !tensor_op.tensor<[64], f16> -> !tensor_op.tensor<[B*S, 64], f16>
  %1 = tensor_op.matmul %0, %w : (!tensor_op.tensor<[B*S, 64], f16>, !tensor_op.tensor<[64, 128], f16>) -> !tensor_op.tensor<[B*S, 128], f16>
  func.return %1 : !tensor_op.tensor<[B*S, 128], f16>
}

// CHECK-LABEL: tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(B*S, BLOCK_M), cdiv(128, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"], strategy = "tile2d"
// CHECK-NEXT:    ^bb0(%x: !tensor_op.tensor<[B*S, 64], f16>, %g: !tensor_op.tensor<[64], f16>, %w: !tensor_op.tensor<[64, 128], f16>, %out0: !tensor_op.tensor<[B*S, 128], f16>):
// CHECK:         tiled_loop.for "k" = <[0, 64, BLOCK_K]> iter_args
// CHECK:           tiled_loop.load %x <[BLOCK_M*pid_m, k]>
// CHECK:           tiled_loop.reduce "sum" {{.*}} {origin = "rmsnorm"}
// CHECK:         %[[EPS:[0-9]+]] = tiled_loop.full 1.0e-06 {origin = "rmsnorm"} : !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:    %[[VAR:[0-9]+]] = tiled_loop.binary "add" %{{[0-9]+}}, %[[EPS]] {origin = "rmsnorm"}
// CHECK-NEXT:    %[[RSTD:[a-z0-9_]+]] = tiled_loop.unary "rsqrt" %[[VAR]] {origin = "rmsnorm"} : !tiled_loop.tile<[BLOCK_M, 1], f32>
// CHECK-NEXT:    %[[ZERO:[a-z0-9_]+]] = tiled_loop.full 0.0 {origin = "matmul"} : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:    %[[ACC:[a-z0-9_]+]] = tiled_loop.for "k" = <[0, 64, BLOCK_K]> iter_args(%[[ZERO]])
// CHECK:           tiled_loop.load %x <[BLOCK_M*pid_m, k]>
// CHECK:           tiled_loop.load %g <[k]> : !tensor_op.tensor<[64], f16> -> !tiled_loop.tile<[1, BLOCK_K], f16>
// CHECK:           tiled_loop.binary "mul" %{{[a-z0-9_]+}}, %[[RSTD]] {origin = "rmsnorm"}
// CHECK:           %[[ATILE:[a-z0-9_]+]] = tiled_loop.cast %{{[0-9]+}} : !tiled_loop.tile<[BLOCK_M, BLOCK_K], f32> -> !tiled_loop.tile<[BLOCK_M, BLOCK_K], f16>
// CHECK-NEXT:      %[[WTILE:[a-z0-9_]+]] = tiled_loop.load %w <[k, BLOCK_N*pid_n]>
// CHECK-NEXT:      tiled_loop.dot %[[ATILE]], %[[WTILE]], %{{[a-z0-9_]+}} {origin = "matmul"}
// CHECK:         tiled_loop.store %[[ACC]], %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]>
// CHECK-LABEL: func.func @rmsnorm_prologue(
// CHECK-NEXT:    tiled_loop.launch @fused_0(%x, %g, %w)

// -----

// A standalone elementwise chain: tile2d without a K loop (no BLOCK_K, no GROUP_M).
func.func @elementwise(%x : !tensor_op.tensor<[M, N], f32>, %y : !tensor_op.tensor<[M, N], f32>) -> !tensor_op.tensor<[M, N], f32> {
  %0 = tensor_op.mul %x, %y : (!tensor_op.tensor<[M, N], f32>, !tensor_op.tensor<[M, N], f32>) -> !tensor_op.tensor<[M, N], f32>
  %1 = tensor_op.silu %0 : !tensor_op.tensor<[M, N], f32>
  func.return %1 : !tensor_op.tensor<[M, N], f32>
}

// CHECK-LABEL: tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"], strategy = "tile2d", tile_params = ["BLOCK_M", "BLOCK_N"], num_inputs = 2 : i64
// CHECK-NOT:     tiled_loop.for
// CHECK:         %[[X:[a-z0-9_]+]] = tiled_loop.load %x <[BLOCK_M*pid_m, BLOCK_N*pid_n]> : !tensor_op.tensor<[M, N], f32> -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
// CHECK-NEXT:    %[[Y:[a-z0-9_]+]] = tiled_loop.load %y <[BLOCK_M*pid_m, BLOCK_N*pid_n]>
// CHECK-NEXT:    %[[MUL:[0-9]+]] = tiled_loop.binary "mul" %[[X]], %[[Y]] {origin = "mul"}
// CHECK-NEXT:    %[[SIG:[0-9]+]] = tiled_loop.unary "sigmoid" %[[MUL]] {origin = "silu"}
// CHECK-NEXT:    %[[SILU:[0-9]+]] = tiled_loop.binary "mul" %[[MUL]], %[[SIG]] {origin = "silu"}
// CHECK-NEXT:    tiled_loop.store %[[SILU]], %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @elementwise(
// CHECK-NEXT:    tiled_loop.launch @fused_0(%x, %y)
