// RUN: amk-opt %s -p 'amk-fuse,amk-tile,amk-stage{block_m=16 block_n=128 block_k=128 split_k=4 num_warps=2 num_stages=5},amk-emit-triton' -t triton | filecheck %s

// A decode step, RMSNorm(x) * g @ W + residual with 16 rows: split-K programs, each gathering the RMSNorm statistics
// of its chunk of K. The rows' sums of squares are the diagonal of x @ x^T, a second small dot on the bf16 tile the
// K loop loads anyway (tl.trans, no reduction across threads inside the loop).

func.func @decode(%x : !tensor_op.tensor<[16, 4096], bf16>, %g : !tensor_op.tensor<[4096], bf16>, %w : !tensor_op.tensor<[4096, 4096], bf16>, %r : !tensor_op.tensor<[16, 4096], bf16>) -> !tensor_op.tensor<[16, 4096], bf16> {
  %0 = tensor_op.rmsnorm %x weight %g {eps = 1.0e-05 : f64} : !tensor_op.tensor<[16, 4096], bf16> weight !tensor_op.tensor<[4096], bf16> -> !tensor_op.tensor<[16, 4096], bf16>
  %1 = tensor_op.matmul %0, %w : (!tensor_op.tensor<[16, 4096], bf16>, !tensor_op.tensor<[4096, 4096], bf16>) -> !tensor_op.tensor<[16, 4096], bf16>
  %2 = tensor_op.add %1, %r : (!tensor_op.tensor<[16, 4096], bf16>, !tensor_op.tensor<[16, 4096], bf16>) -> !tensor_op.tensor<[16, 4096], bf16>
  func.return %2 : !tensor_op.tensor<[16, 4096], bf16>
}

// CHECK:       flat = tl.program_id(0)  # one flat axis: CUDA caps the others at 65535 programs
// CHECK:       pid_n = flat % num_pid_n
// CHECK:       pid_m = flat // num_pid_n % num_pid_m
// CHECK-NEXT:  pid_k = flat // num_pid_n // num_pid_m
// CHECK:       gram = tl.zeros((BLOCK_M, BLOCK_M), dtype=tl.float32)
// CHECK:       for k in tl.range({{.*}}, num_stages=5):
// CHECK:           x_tile = tl.load(x_ptr + x_rows[:, None] * stride_x_0 + x_cols[None, :] * stride_x_1)
// CHECK-NOT:       tl.sum
// CHECK:           x_tile_t = tl.trans(x_tile)
// CHECK-NEXT:      gram_2 = tl.dot(x_tile, x_tile_t, gram_1)
// CHECK:           acc_2 = tl.dot(a_tile, w_tile, acc_1)
// CHECK:       [[SUMSQ:rmsnorm_[0-9]+]] = tl.sum(tl.where(tl.arange(0, BLOCK_M)[:, None] == tl.arange(0, BLOCK_M)[None, :], gram_1, 0.0), axis=1, keep_dims=True)
// CHECK:       arrived = tl.atomic_add(tile_counters_ptr
// The last arrival loads the residual first, then the partial tiles: the residual's load from a cold L2 does not
// wait for theirs. Its cast to fp32 comes where the epilogue uses it (a cast before the loop would wait for it).
// CHECK:       if last_split:
// CHECK:           r_tile = tl.load(r_ptr +
// CHECK-NOT:       r_f32
// CHECK:           for split in tl.range(0, SPLIT_K, 1):
// CHECK:               partial_acc_1 = tl.load(partial_acc_ptr + {{.*}}, cache_modifier=".cg")
// CHECK:           rstd = tl.rsqrt(
// CHECK:           r_f32 = r_tile.to(tl.float32)
// CHECK-NEXT:      # add
// CHECK-NEXT:      add = rmsnorm_9 + r_f32
// CHECK:       grid = (triton.cdiv(4096, 128) * triton.cdiv(16, 16) * 4,)
