// RUN: amk-opt %s --split-input-file -p amk-fuse,amk-tile | filecheck %s --check-prefix=AUTO
// RUN: amk-opt %s --split-input-file -p 'amk-fuse,amk-tile{reduction_strategy=row_strip}' | filecheck %s --check-prefix=STRIP
// RUN: amk-opt %s --split-input-file -p 'amk-fuse,amk-tile{reduction_strategy=tile_stats}' | filecheck %s --check-prefix=STATS
// RUN: amk-opt %s --split-input-file -p 'amk-fuse,amk-tile{reduction_strategy=strip_finish}' | filecheck %s --check-prefix=FINISH
// RUN: amk-opt %s --split-input-file -p 'amk-fuse,amk-tile{reduction_strategy=tile_recompute}' | filecheck %s --check-prefix=RECOMPUTE
// RUN: amk-opt %s --split-input-file -p 'amk-fuse,amk-tile{reduction_strategy=tile_stats merge_chunk=16}' | filecheck %s --check-prefix=CHUNK
// RUN: amk-opt %s --split-input-file -p 'amk-fuse,amk-tile{reduction_strategy=strip_recompute}' | filecheck %s --check-prefix=SRECOMPUTE

// A matmul followed by a layernorm over the last axis. amk-tile's reduction_strategy picks the tiling:
// - row_strip: a program owns BLOCK_M full rows; phase 1 loops over the column tiles ("n"), runs the K loop for each,
//   stores the pre-norm tile and merges its statistics (count, pivot, offset, M2; the mean is pivot + offset, kept
//   apart so that merges round at the offset's ulp) into running ones; phase 2 re-reads the stored tiles and
//   normalizes them as (y - pivot) - offset.
// - tile_stats: output tiles in parallel; each writes its rows' partial statistics to scratch buffers; after a
//   tiled_loop.relaunch, a second launch over the same tiles merges each row's statistics and normalizes its tile.
// - strip_finish: the same output tiles and partial statistics; each counts itself in at its row strip's counter,
//   and the last to arrive merges the statistics and normalizes the whole strip (re-read from L2).
// - tile_recompute: as tile_stats, but the first launch stores only the statistics and the
//   second runs the K loop again instead of re-reading the tile.
// - auto (the default): chunk_recompute when K is short (a static K <= 256; see chunk_recompute.mlir), row_strip with
//   such a K and a prologue; otherwise strip_finish for outputs of 2^27 elements or more, tile_stats for the rest
//   (here M is symbolic: tile_stats). Its second launch merges 64 tiles' statistics per iteration by default (a whole
//   row's at once: the merge loop is latency-bound, so its trip count is what costs).

func.func @matmul_layernorm(%x : !tensor_op.tensor<[M, 256], f16>, %w : !tensor_op.tensor<[256, 512], f16>, %g : !tensor_op.tensor<[512], f16>, %b : !tensor_op.tensor<[512], f16>) -> !tensor_op.tensor<[M, 512], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 256], f16>, !tensor_op.tensor<[256, 512], f16>) -> !tensor_op.tensor<[M, 512], f16>
  %1 = tensor_op.layernorm %0 weight %g bias %b {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 512], f16> weight !tensor_op.tensor<[512], f16> bias !tensor_op.tensor<[512], f16> -> !tensor_op.tensor<[M, 512], f16>
  func.return %1 : !tensor_op.tensor<[M, 512], f16>
}

// STRIP-LABEL: tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M)]>, program_ids = ["pid_m"], strategy = "row_strip", tile_params = ["BLOCK_M", "BLOCK_N", "BLOCK_K"], num_inputs = 4 : i64
// STRIP-NEXT:    ^bb0(%x: !tensor_op.tensor<[M, 256], f16>, %w: !tensor_op.tensor<[256, 512], f16>, %g: !tensor_op.tensor<[512], f16>, %b: !tensor_op.tensor<[512], f16>, %out0: !tensor_op.tensor<[M, 512], f16>):
// STRIP:         %[[COUNT:[a-z0-9_]+]], %[[PIVOT:[a-z0-9_]+]], %[[OFFSET:[a-z0-9_]+]], %[[M2:[a-z0-9_]+]] = tiled_loop.for "n" = <[0, 512, BLOCK_N]> iter_args(
// STRIP:           tiled_loop.for "k" = <[0, 256, BLOCK_K]>
// STRIP:             tiled_loop.load %x <[BLOCK_M*pid_m, k]>
// STRIP-NEXT:        tiled_loop.load %w <[k, n]> : !tensor_op.tensor<[256, 512], f16> -> !tiled_loop.tile<[BLOCK_K, BLOCK_N], f16>
// STRIP-NEXT:        tiled_loop.dot
// STRIP:           tiled_loop.store %{{[a-z0-9_]+}}, %out0 <[BLOCK_M*pid_m, n]>
// STRIP-NEXT:      tiled_loop.in_bounds <[0, n]> within <[1, 512]>
// STRIP:           tiled_loop.reduce "sum" {{.*}}origin = "layernorm"
// STRIP:           tiled_loop.yield
// STRIP-NEXT:    }
// STRIP-NEXT:    %[[VAR:[0-9]+]] = tiled_loop.binary "div" %[[M2]], %[[COUNT]] {origin = "layernorm"}
// STRIP-NEXT:    %[[EPS:[0-9]+]] = tiled_loop.full 1.0e-05 {origin = "layernorm"}
// STRIP-NEXT:    %[[VAREPS:[0-9]+]] = tiled_loop.binary "add" %[[VAR]], %[[EPS]]
// STRIP-NEXT:    %[[RSTD:[a-z0-9_]+]] = tiled_loop.unary "rsqrt" %[[VAREPS]]
// STRIP-NEXT:    tiled_loop.for "n" = <[0, 512, BLOCK_N]> iter_args() {{.*}}: () -> () {
// STRIP-NEXT:      %[[Y:[a-z0-9_]+]] = tiled_loop.load %out0 <[BLOCK_M*pid_m, n]> : !tensor_op.tensor<[M, 512], f16> -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f16>
// STRIP:           tiled_loop.load %g <[n]>
// STRIP:           tiled_loop.load %b <[n]>
// STRIP:           tiled_loop.binary "sub" %{{[a-z0-9_]+}}, %[[PIVOT]] {origin = "layernorm"}
// STRIP-NEXT:      tiled_loop.binary "sub" %{{[0-9]+}}, %[[OFFSET]] {origin = "layernorm"}
// STRIP-NEXT:      tiled_loop.binary "mul" %{{[0-9]+}}, %[[RSTD]] {origin = "layernorm"}
// STRIP:           tiled_loop.store %{{[0-9]+}}, %out0 <[BLOCK_M*pid_m, n]>
// STRIP-NEXT:      tiled_loop.yield
// STRIP-NEXT:    }
// STRIP-NEXT:  }
// STRIP-LABEL: func.func @matmul_layernorm(
// STRIP-NEXT:    tiled_loop.launch @fused_0(%x, %w, %g, %b) :

// STATS-LABEL: tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(512, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"], strategy = "tile_stats", {{.*}}workspace = ["scratch", "scratch", "scratch", "scratch"]{{.*}}} {
// STATS-NEXT:    ^bb0({{.*}}, %out0: !tensor_op.tensor<[M, 512], f16>, %partial0: !tensor_op.tensor<[M, cdiv(512, BLOCK_N)], f32>, %partial1: {{.*}}, %partial2: {{.*}}, %partial3: {{.*}}):
// STATS:         tiled_loop.for "k" = <[0, 256, BLOCK_K]>
// STATS:         tiled_loop.store %{{[a-z0-9_]+}}, %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]>
// STATS:         tiled_loop.store %{{[0-9]+}}, %partial0 <[BLOCK_M*pid_m, pid_n]> : !tiled_loop.tile<[BLOCK_M, 1], f32>
// STATS-NEXT:    tiled_loop.store %{{[0-9]+}}, %partial1 <[BLOCK_M*pid_m, pid_n]>
// STATS-NEXT:    tiled_loop.store %{{[0-9]+}}, %partial2 <[BLOCK_M*pid_m, pid_n]>
// STATS-NEXT:    tiled_loop.store %{{[0-9]+}}, %partial3 <[BLOCK_M*pid_m, pid_n]>
// STATS-NEXT:    tiled_loop.relaunch {note = "Second launch, {{.*}}", grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(512, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"]}
// STATS:         tiled_loop.for "t" = <[0, cdiv(512, BLOCK_N), 64]>
// STATS:           tiled_loop.load %partial0 <[BLOCK_M*pid_m, t]>
// STATS:         tiled_loop.unary "rsqrt"
// STATS-NEXT:    tiled_loop.load %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]>
// STATS:         tiled_loop.store %{{[0-9]+}}, %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]>
// STATS-NEXT:  }
// STATS-LABEL: func.func @matmul_layernorm(
// STATS-NEXT:    tiled_loop.launch @fused_0(%x, %w, %g, %b) :

// FINISH-LABEL: tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(512, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"], strategy = "strip_finish", {{.*}}workspace = ["scratch", "scratch", "scratch", "scratch", "counter"]{{.*}}} {
// FINISH-NEXT:    ^bb0({{.*}}, %out0: !tensor_op.tensor<[M, 512], f16>, %partial0: !tensor_op.tensor<[M, cdiv(512, BLOCK_N)], f32>, %partial1: {{.*}}, %partial2: {{.*}}, %partial3: {{.*}}, %strip_counters: !tensor_op.tensor<[cdiv(M, BLOCK_M)], i32>):
// FINISH:         tiled_loop.for "k" = <[0, 256, BLOCK_K]>
// FINISH:         tiled_loop.store %{{[a-z0-9_]+}}, %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]>
// FINISH:         tiled_loop.store %{{[0-9]+}}, %partial3 <[BLOCK_M*pid_m, pid_n]>
// FINISH-NEXT:    %[[LAST:[a-z0-9_]+]] = tiled_loop.last_arrival %strip_counters <[pid_m]> of <[cdiv(512, BLOCK_N)]> : !tensor_op.tensor<[cdiv(M, BLOCK_M)], i32> -> i1
// FINISH-NEXT:    tiled_loop.if %[[LAST]] {
// FINISH:           tiled_loop.for "t" = <[0, cdiv(512, BLOCK_N), 64]>
// FINISH:             tiled_loop.load %partial0 <[BLOCK_M*pid_m, t]>
// FINISH:           tiled_loop.unary "rsqrt"
// FINISH:           tiled_loop.for "n" = <[0, 512, BLOCK_N]>
// FINISH-NEXT:        tiled_loop.load %out0 <[BLOCK_M*pid_m, n]>
// FINISH:             tiled_loop.store %{{[0-9]+}}, %out0 <[BLOCK_M*pid_m, n]>
// FINISH-LABEL: func.func @matmul_layernorm(

// RECOMPUTE-LABEL: tiled_loop.kernel @fused_0 attributes {{.*}}strategy = "tile_recompute"
// RECOMPUTE:         tiled_loop.for "k" = <[0, 256, BLOCK_K]>
// RECOMPUTE-NOT:     tiled_loop.store {{.*}}%out0
// RECOMPUTE:         tiled_loop.store %{{[0-9]+}}, %partial3 <[BLOCK_M*pid_m, pid_n]>
// RECOMPUTE-NEXT:    tiled_loop.relaunch
// RECOMPUTE:         tiled_loop.for "t" = <[0, cdiv(512, BLOCK_N), 64]> {{.*}}pipelined
// RECOMPUTE:         tiled_loop.for "k" = <[0, 256, BLOCK_K]>
// RECOMPUTE-NOT:     tiled_loop.load %out0
// RECOMPUTE:         tiled_loop.store %{{[0-9]+}}, %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]>
// RECOMPUTE-LABEL: func.func @matmul_layernorm(

// strip_recompute: row_strip whose first sweep stores nothing but keeps the statistics, and whose second sweep runs
// the K loop again for each tile instead of re-reading it.
// SRECOMPUTE-LABEL: tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M)]>, program_ids = ["pid_m"], strategy = "strip_recompute"
// SRECOMPUTE:         tiled_loop.for "n" = <[0, 512, BLOCK_N]>
// SRECOMPUTE:           tiled_loop.for "k" = <[0, 256, BLOCK_K]>
// SRECOMPUTE-NOT:       tiled_loop.store
// SRECOMPUTE:         tiled_loop.unary "rsqrt"
// SRECOMPUTE:         tiled_loop.for "n" = <[0, 512, BLOCK_N]>
// SRECOMPUTE:           tiled_loop.for "k" = <[0, 256, BLOCK_K]>
// SRECOMPUTE-NOT:       tiled_loop.load %out0
// SRECOMPUTE:           tiled_loop.store %{{[0-9]+}}, %out0 <[BLOCK_M*pid_m, n]>
// SRECOMPUTE-LABEL: func.func @matmul_layernorm(

// merge_chunk=16: the second launch loads 16 tiles' (count, pivot, offset, M2) per iteration as [BLOCK_M, 16] tiles, masks the
// ones past the row's last tile, merges them at once and folds the result into the running state.
// CHUNK-LABEL: tiled_loop.kernel @fused_0 attributes {{.*}}strategy = "tile_stats"
// CHUNK:         tiled_loop.relaunch
// CHUNK-NEXT:    %count = tiled_loop.full 0.0
// CHUNK:         tiled_loop.for "t" = <[0, cdiv(512, BLOCK_N), 16]> {{.*}}pipelined
// CHUNK:           %valid_tiles = tiled_loop.in_bounds <[0, t]> within <[1, cdiv(512, BLOCK_N)]> : !tiled_loop.tile<[1, 16], i1>
// CHUNK-NEXT:      tiled_loop.load %partial0 <[BLOCK_M*pid_m, t]> : {{.*}} -> !tiled_loop.tile<[BLOCK_M, 16], f32>
// CHUNK-NEXT:      tiled_loop.load %partial1 <[BLOCK_M*pid_m, t]> : {{.*}} -> !tiled_loop.tile<[BLOCK_M, 16], f32>
// CHUNK-NEXT:      tiled_loop.load %partial2 <[BLOCK_M*pid_m, t]> : {{.*}} -> !tiled_loop.tile<[BLOCK_M, 16], f32>
// CHUNK-NEXT:      tiled_loop.load %partial3 <[BLOCK_M*pid_m, t]> : {{.*}} -> !tiled_loop.tile<[BLOCK_M, 16], f32>
// CHUNK:           tiled_loop.reduce "sum"
// CHUNK:           tiled_loop.yield
// CHUNK-LABEL: func.func @matmul_layernorm(

// -----

func.func @matmul_layernorm_long_k(%x : !tensor_op.tensor<[M, 4096], f16>, %w : !tensor_op.tensor<[4096, 512], f16>, %g : !tensor_op.tensor<[512], f16>) -> !tensor_op.tensor<[M, 512], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 4096], f16>, !tensor_op.tensor<[4096, 512], f16>) -> !tensor_op.tensor<[M, 512], f16>
  %1 = tensor_op.layernorm %0 weight %g {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 512], f16> weight !tensor_op.tensor<[512], f16> -> !tensor_op.tensor<[M, 512], f16>
  func.return %1 : !tensor_op.tensor<[M, 512], f16>
}

// STRIP-LABEL: tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M)]>, program_ids = ["pid_m"], strategy = "row_strip"
// STRIP:         tiled_loop.for "k" = <[0, 4096, BLOCK_K]>
// STRIP-LABEL: func.func @matmul_layernorm_long_k(

// STATS-LABEL: tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(512, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"], strategy = "tile_stats"
// STATS:         tiled_loop.for "k" = <[0, 4096, BLOCK_K]>
// STATS:         tiled_loop.relaunch
// STATS-LABEL: func.func @matmul_layernorm_long_k(

// FINISH-LABEL: tiled_loop.kernel @fused_0 attributes {{.*}}strategy = "strip_finish"
// FINISH:         tiled_loop.last_arrival
// FINISH-LABEL: func.func @matmul_layernorm_long_k(

// The default is chunk_recompute for the short K (its whole A tile loaded once per launch, no K loop) and tile_stats
// for the long one (M is symbolic); both second launches merge a row's statistics up to 64 states at a time.
// AUTO:        strategy = "chunk_recompute"
// AUTO:        tiled_loop.load %x <[BLOCK_M*pid_m, 0]> : !tensor_op.tensor<[M, 256], f16> -> !tiled_loop.tile<[BLOCK_M, 256], f16>
// AUTO-NOT:    tiled_loop.for "k"
// AUTO:        tiled_loop.relaunch
// AUTO:        tiled_loop.for "t" = <[0, cdiv(512, BLOCK_N*cdiv(cdiv(512, BLOCK_N), SPLIT_N)), 64]>
// AUTO-LABEL:  func.func @matmul_layernorm(
// AUTO:        strategy = "tile_stats"
// AUTO:        tiled_loop.for "k" = <[0, 4096, BLOCK_K]>
// AUTO:        tiled_loop.relaunch
// AUTO:        tiled_loop.for "t" = <[0, cdiv(512, BLOCK_N), 64]>
// AUTO-LABEL:  func.func @matmul_layernorm_long_k(

