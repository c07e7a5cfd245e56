// RUN: amk-opt %s -p 'amk-fuse,amk-tile,amk-stage{block_m=128 block_n=128 block_k=64 persistent=1 tma=1},amk-emit-triton' -t triton | filecheck %s

// nn.Linear's weight W [N, K] read transposed: the kernel's argument is the view W^T [K, N] (strides (1, K)), which
// TMA cannot read as it is (its rows are not contiguous). The descriptor is built on W's own rows, [BLOCK_N, BLOCK_K]
// tiles at [n, k], each transposed for the dot (a K-major B, as Hopper GEMMs read nn.Linear's weight); the launcher
// asks TMA to read the view transposed back, W itself.

func.func @linear_relu(%x : !tensor_op.tensor<[M, 256], f16>, %w : !tensor_op.tensor<[512, 256], f16>) -> !tensor_op.tensor<[M, 512], f16> {
  %0 = tensor_op.matmul %x, %w {transpose_rhs = true} : (!tensor_op.tensor<[M, 256], f16>, !tensor_op.tensor<[512, 256], f16>) -> !tensor_op.tensor<[M, 512], f16>
  %1 = tensor_op.relu %0 : !tensor_op.tensor<[M, 512], f16>
  func.return %1 : !tensor_op.tensor<[M, 512], f16>
}

// CHECK:       if USE_TMA:
// CHECK-NEXT:      x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, 256], strides=[stride_x_0, 1], block_shape=[BLOCK_M, BLOCK_K])
// CHECK-NEXT:      w_desc = tl.make_tensor_descriptor(w_ptr, shape=[512, 256], strides=[stride_w_1, 1], block_shape=[BLOCK_N, BLOCK_K])
// CHECK:           for k in tl.range(0, 256, BLOCK_K, num_stages=3):
// CHECK:                   x_tile = x_desc.load([BLOCK_M*pid_m, k])
// CHECK:               if USE_TMA:
// CHECK-NEXT:              w_tile = tl.trans(w_desc.load([BLOCK_N*pid_n, k]))
// CHECK-NEXT:          else:
// CHECK:       def launch(x, w, out0):
// CHECK:           use_tma = _tma_readable(x) and _tma_readable(w.t())
