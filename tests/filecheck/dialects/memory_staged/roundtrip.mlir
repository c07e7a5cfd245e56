// RUN: amk-opt %s --split-input-file | filecheck %s
// RUN: %roundtrip

// A staged tile2d matmul with a masked epilogue load and store.
memory_staged.kernel @matmul attributes {grid = #tiled_loop.exprs<[8, 1]>, program_ids = ["pid_m", "pid_n"], constants = {BLOCK_M = 64 : i64, BLOCK_N = 64 : i64, BLOCK_K = 32 : i64}, num_warps = 4 : i64, num_stages = 3 : i64, num_inputs = 2 : i64, strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [512, 32], f16>, %w: !memory_staged.buffer<global, [32, 64], f16>, %out: !memory_staged.buffer<global, [512, 64], f16>):
  %acc0 = memory_staged.accumulator : !tiled_loop.tile<[64, 64], f32>
  %acc = tiled_loop.for "k" = <[0, 32, 32]> iter_args(%acc0) : (!tiled_loop.tile<[64, 64], f32>) -> (!tiled_loop.tile<[64, 64], f32>) {
  ^bb1(%acc_in: !tiled_loop.tile<[64, 64], f32>):
    %a = memory_staged.stage %x <[pid_m * 64, k]> {depth = 3 : i64, mask = [false, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [512, 32], f16> -> !memory_staged.buffer<shared, [64, 32], f16>
    %b = memory_staged.stage %w <[k, 64 * pid_n]> {depth = 3 : i64, mask = [false, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [32, 64], f16> -> !memory_staged.buffer<shared, [32, 64], f16>
    %next = memory_staged.dot %a, %b, %acc_in : (!memory_staged.buffer<shared, [64, 32], f16>, !memory_staged.buffer<shared, [32, 64], f16>, !tiled_loop.tile<[64, 64], f32>) -> !tiled_loop.tile<[64, 64], f32>
    tiled_loop.yield %next : !tiled_loop.tile<[64, 64], f32>
  }
  %t = memory_staged.load %x <[64*pid_m, 0]> {mask = [false, true], index_bits = 64 : i64} : !memory_staged.buffer<global, [512, 32], f16> -> !tiled_loop.tile<[64, 32], f16>
  memory_staged.store %acc, %out <[64*pid_m, 64*pid_n]> {mask = [true, false], index_bits = 32 : i64} : !tiled_loop.tile<[64, 64], f32> -> !memory_staged.buffer<global, [512, 64], f16>
}

// CHECK-LABEL: memory_staged.kernel @matmul attributes {grid = #tiled_loop.exprs<[8, 1]>, program_ids = ["pid_m", "pid_n"], constants = {BLOCK_M = 64 : i64, BLOCK_N = 64 : i64, BLOCK_K = 32 : i64}, num_warps = 4 : i64, num_stages = 3 : i64, num_inputs = 2 : i64, strategy = "tile2d"} {
// CHECK-NEXT:  ^bb0(%x: !memory_staged.buffer<global, [512, 32], f16>, %w: !memory_staged.buffer<global, [32, 64], f16>, %out: !memory_staged.buffer<global, [512, 64], f16>):
// CHECK-NEXT:  %acc0 = memory_staged.accumulator : !tiled_loop.tile<[64, 64], f32>
// CHECK-NEXT:  %acc = tiled_loop.for "k" = <[0, 32, 32]> iter_args(%acc0) : (!tiled_loop.tile<[64, 64], f32>) -> !tiled_loop.tile<[64, 64], f32> {
// CHECK-NEXT:  ^bb0(%acc_in: !tiled_loop.tile<[64, 64], f32>):
// CHECK-NEXT:  %a = memory_staged.stage %x <[64*pid_m, k]> {depth = 3 : i64, mask = [false, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [512, 32], f16> -> !memory_staged.buffer<shared, [64, 32], f16>
// CHECK-NEXT:  %b = memory_staged.stage %w <[k, 64*pid_n]> {depth = 3 : i64, mask = [false, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [32, 64], f16> -> !memory_staged.buffer<shared, [32, 64], f16>
// CHECK-NEXT:  %next = memory_staged.dot %a, %b, %acc_in : (!memory_staged.buffer<shared, [64, 32], f16>, !memory_staged.buffer<shared, [32, 64], f16>, !tiled_loop.tile<[64, 64], f32>) -> !tiled_loop.tile<[64, 64], f32>
// CHECK-NEXT:  tiled_loop.yield %next : !tiled_loop.tile<[64, 64], f32>
// CHECK-NEXT:  }
// CHECK-NEXT:  %t = memory_staged.load %x <[64*pid_m, 0]> {mask = [false, true], index_bits = 64 : i64} : !memory_staged.buffer<global, [512, 32], f16> -> !tiled_loop.tile<[64, 32], f16>
// CHECK-NEXT:  memory_staged.store %acc, %out <[64*pid_m, 64*pid_n]> {mask = [true, false], index_bits = 32 : i64} : !tiled_loop.tile<[64, 64], f32> -> !memory_staged.buffer<global, [512, 64], f16>
// CHECK-NEXT:  }

// -----

// Symbolic shapes, a rank-1 bias buffer, grouped grid, arg views, and a register-operand dot.
memory_staged.kernel @symbolic attributes {grid = #tiled_loop.exprs<[cdiv(B*S, 128), cdiv(N, 64)]>, program_ids = ["pid_m", "pid_n"], constants = {BLOCK_M = 128 : i64, BLOCK_N = 64 : i64, BLOCK_K = 64 : i64, GROUP_M = 8 : i64}, num_warps = 8 : i64, num_stages = 1 : i64, num_inputs = 3 : i64, arg_views = ["none", "transpose", "none", "none"], group_size = "GROUP_M", strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [B*S, 64], bf16>, %w: !memory_staged.buffer<global, [64, N], bf16>, %bias: !memory_staged.buffer<global, [N], bf16>, %out: !memory_staged.buffer<global, [B*S, N], bf16>):
  %acc = memory_staged.accumulator : !tiled_loop.tile<[128, 64], f32>
  %a = memory_staged.load %x <[128*pid_m, 0]> {mask = [true, false], index_bits = 64 : i64} : !memory_staged.buffer<global, [B*S, 64], bf16> -> !tiled_loop.tile<[128, 64], bf16>
  %b = memory_staged.stage %w <[0, 64*pid_n]> {depth = 1 : i64, mask = [false, true], index_bits = 32 : i64} : !memory_staged.buffer<global, [64, N], bf16> -> !memory_staged.buffer<shared, [64, 64], bf16>
  %d = memory_staged.dot %a, %b, %acc : (!tiled_loop.tile<[128, 64], bf16>, !memory_staged.buffer<shared, [64, 64], bf16>, !tiled_loop.tile<[128, 64], f32>) -> !tiled_loop.tile<[128, 64], f32>
  %bv = memory_staged.load %bias <[64*pid_n]> {mask = [true], index_bits = 32 : i64} : !memory_staged.buffer<global, [N], bf16> -> !tiled_loop.tile<[1, 64], bf16>
  %bf = tiled_loop.cast %bv : !tiled_loop.tile<[1, 64], bf16> -> !tiled_loop.tile<[1, 64], f32>
  %y = tiled_loop.binary "add" %d, %bf : (!tiled_loop.tile<[128, 64], f32>, !tiled_loop.tile<[1, 64], f32>) -> !tiled_loop.tile<[128, 64], f32>
  memory_staged.store %y, %out <[128*pid_m, 64*pid_n]> {mask = [true, true], index_bits = 64 : i64} : !tiled_loop.tile<[128, 64], f32> -> !memory_staged.buffer<global, [B*S, N], bf16>
}

// CHECK-LABEL: memory_staged.kernel @symbolic attributes {grid = #tiled_loop.exprs<[cdiv(B*S, 128), cdiv(N, 64)]>, program_ids = ["pid_m", "pid_n"], constants = {BLOCK_M = 128 : i64, BLOCK_N = 64 : i64, BLOCK_K = 64 : i64, GROUP_M = 8 : i64}, num_warps = 8 : i64, num_stages = 1 : i64, num_inputs = 3 : i64, arg_views = ["none", "transpose", "none", "none"], group_size = "GROUP_M", strategy = "tile2d"} {
// CHECK-NEXT:  ^bb0(%x: !memory_staged.buffer<global, [B*S, 64], bf16>, %w: !memory_staged.buffer<global, [64, N], bf16>, %bias: !memory_staged.buffer<global, [N], bf16>, %out: !memory_staged.buffer<global, [B*S, N], bf16>):
// CHECK-NEXT:  %acc = memory_staged.accumulator : !tiled_loop.tile<[128, 64], f32>
// CHECK-NEXT:  %a = memory_staged.load %x <[128*pid_m, 0]> {mask = [true, false], index_bits = 64 : i64} : !memory_staged.buffer<global, [B*S, 64], bf16> -> !tiled_loop.tile<[128, 64], bf16>
// CHECK-NEXT:  %b = memory_staged.stage %w <[0, 64*pid_n]> {depth = 1 : i64, mask = [false, true], index_bits = 32 : i64} : !memory_staged.buffer<global, [64, N], bf16> -> !memory_staged.buffer<shared, [64, 64], bf16>
// CHECK-NEXT:  %d = memory_staged.dot %a, %b, %acc : (!tiled_loop.tile<[128, 64], bf16>, !memory_staged.buffer<shared, [64, 64], bf16>, !tiled_loop.tile<[128, 64], f32>) -> !tiled_loop.tile<[128, 64], f32>
// CHECK-NEXT:  %bv = memory_staged.load %bias <[64*pid_n]> {mask = [true], index_bits = 32 : i64} : !memory_staged.buffer<global, [N], bf16> -> !tiled_loop.tile<[1, 64], bf16>
// CHECK-NEXT:  %bf = tiled_loop.cast %bv : !tiled_loop.tile<[1, 64], bf16> -> !tiled_loop.tile<[1, 64], f32>
// CHECK-NEXT:  %y = tiled_loop.binary "add" %d, %bf : (!tiled_loop.tile<[128, 64], f32>, !tiled_loop.tile<[1, 64], f32>) -> !tiled_loop.tile<[128, 64], f32>
// CHECK-NEXT:  memory_staged.store %y, %out <[128*pid_m, 64*pid_n]> {mask = [true, true], index_bits = 64 : i64} : !tiled_loop.tile<[128, 64], f32> -> !memory_staged.buffer<global, [B*S, N], bf16>
// CHECK-NEXT:  }

// -----

// Row-strip kernel, one program id, no constants; store of a column vector to a rank-1 buffer.
memory_staged.kernel @row_strip attributes {grid = #tiled_loop.exprs<[M]>, program_ids = ["pid_m"], constants = {}, num_warps = 1 : i64, num_stages = 2 : i64, num_inputs = 1 : i64, strategy = "row_strip"} {
^bb0(%x: !memory_staged.buffer<global, [M, 75], f32>, %out: !memory_staged.buffer<global, [M], f32>):
  %r = memory_staged.load %x <[pid_m, 0]> {mask = [false, true], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 75], f32> -> !tiled_loop.tile<[1, 128], f32>
  %s = tiled_loop.reduce "sum" %r : !tiled_loop.tile<[1, 128], f32> -> !tiled_loop.tile<[1, 1], f32>
  memory_staged.store %s, %out <[pid_m]> {mask = [false], index_bits = 32 : i64} : !tiled_loop.tile<[1, 1], f32> -> !memory_staged.buffer<global, [M], f32>
}

// CHECK-LABEL: memory_staged.kernel @row_strip attributes {grid = #tiled_loop.exprs<[M]>, program_ids = ["pid_m"], constants = {}, num_warps = 1 : i64, num_stages = 2 : i64, num_inputs = 1 : i64, strategy = "row_strip"} {
// CHECK-NEXT:  ^bb0(%x: !memory_staged.buffer<global, [M, 75], f32>, %out: !memory_staged.buffer<global, [M], f32>):
// CHECK-NEXT:  %r = memory_staged.load %x <[pid_m, 0]> {mask = [false, true], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 75], f32> -> !tiled_loop.tile<[1, 128], f32>
// CHECK-NEXT:  %s = tiled_loop.reduce "sum" %r : !tiled_loop.tile<[1, 128], f32> -> !tiled_loop.tile<[1, 1], f32>
// CHECK-NEXT:  memory_staged.store %s, %out <[pid_m]> {mask = [false], index_bits = 32 : i64} : !tiled_loop.tile<[1, 1], f32> -> !memory_staged.buffer<global, [M], f32>
// CHECK-NEXT:  }

// -----

// A coherent load (it reads what other programs of the launch wrote) and trailing workspace buffers.
memory_staged.kernel @coherent attributes {grid = #tiled_loop.exprs<[M]>, program_ids = ["pid_m"], constants = {}, num_warps = 1 : i64, num_stages = 1 : i64, num_inputs = 1 : i64, strategy = "strip_finish", workspace = ["scratch", "counter"]} {
^bb0(%x: !memory_staged.buffer<global, [M, 64], f32>, %out: !memory_staged.buffer<global, [M, 64], f32>, %partial: !memory_staged.buffer<global, [M, 4], f32>, %counters: !memory_staged.buffer<global, [M], i32>):
  %last = tiled_loop.last_arrival %counters <[pid_m]> of <[4]> : !memory_staged.buffer<global, [M], i32> -> i1
  tiled_loop.if %last {
    %p = memory_staged.load %partial <[pid_m, 0]> {mask = [false, false], index_bits = 32 : i64, coherent = true} : !memory_staged.buffer<global, [M, 4], f32> -> !tiled_loop.tile<[1, 4], f32>
    %y = memory_staged.load %out <[pid_m, 0]> {mask = [false, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f32> -> !tiled_loop.tile<[1, 64], f32>
  }
}

// CHECK-LABEL: memory_staged.kernel @coherent attributes {grid = #tiled_loop.exprs<[M]>, program_ids = ["pid_m"], constants = {}, num_warps = 1 : i64, num_stages = 1 : i64, num_inputs = 1 : i64, strategy = "strip_finish", workspace = ["scratch", "counter"]} {
// CHECK-NEXT:  ^bb0(%x: !memory_staged.buffer<global, [M, 64], f32>, %out: !memory_staged.buffer<global, [M, 64], f32>, %partial: !memory_staged.buffer<global, [M, 4], f32>, %counters: !memory_staged.buffer<global, [M], i32>):
// CHECK-NEXT:  %last = tiled_loop.last_arrival %counters <[pid_m]> of <[4]> : !memory_staged.buffer<global, [M], i32> -> i1
// CHECK-NEXT:  tiled_loop.if %last {
// CHECK-NEXT:    %p = memory_staged.load %partial <[pid_m, 0]> {mask = [false, false], index_bits = 32 : i64, coherent = true} : !memory_staged.buffer<global, [M, 4], f32> -> !tiled_loop.tile<[1, 4], f32>
// CHECK-NEXT:    %y = memory_staged.load %out <[pid_m, 0]> {mask = [false, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [M, 64], f32> -> !tiled_loop.tile<[1, 64], f32>
// CHECK-NEXT:  }
// CHECK-NEXT:  }

// -----

// Buffer types in both memory spaces, of rank 0 to 3, with symbolic dims.
func.func @buffer_types(%a: !memory_staged.buffer<global, [B, S, 4096], f32>, %b: !memory_staged.buffer<shared, [64, 32], f16>, %c: !memory_staged.buffer<global, [], f32>, %d: !memory_staged.buffer<shared, [cdiv(N, 64)*64], bf16>, %e: !memory_staged.buffer<global, [S*B, N], i32>) {
  func.return
}

// CHECK-LABEL: func.func @buffer_types(%a: !memory_staged.buffer<global, [B, S, 4096], f32>, %b: !memory_staged.buffer<shared, [64, 32], f16>, %c: !memory_staged.buffer<global, [], f32>, %d: !memory_staged.buffer<shared, [64*cdiv(N, 64)], bf16>, %e: !memory_staged.buffer<global, [B*S, N], i32>) {
// CHECK-NEXT:  func.return
// CHECK-NEXT:  }
