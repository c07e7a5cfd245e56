// RUN: amk-opt %s --split-input-file -p amk-duplicate-norm-prologues | filecheck %s

// Read by three matmuls (an attention block's q, k and v projections): each gets its own copy.
func.func @qkv(%x : !tensor_op.tensor<[S, 64], f16>, %g : !tensor_op.tensor<[64], f16>, %wq : !tensor_op.tensor<[64, 64], f16>, %wk : !tensor_op.tensor<[64, 64], f16>, %wv : !tensor_op.tensor<[64, 64], f16>) -> (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[S, 64], f16>) {
  %n = tensor_op.rmsnorm %x weight %g {eps = 1.0e-05 : f64} : !tensor_op.tensor<[S, 64], f16> weight !tensor_op.tensor<[64], f16> -> !tensor_op.tensor<[S, 64], f16>
  %q = tensor_op.matmul %n, %wq : (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[64, 64], f16>) -> !tensor_op.tensor<[S, 64], f16>
  %k = tensor_op.matmul %n, %wk : (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[64, 64], f16>) -> !tensor_op.tensor<[S, 64], f16>
  %v = tensor_op.matmul %n, %wv : (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[64, 64], f16>) -> !tensor_op.tensor<[S, 64], f16>
  func.return %q, %k, %v : !tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[S, 64], f16>
}

// CHECK-LABEL: func.func @qkv
// CHECK-NEXT:    %n = tensor_op.rmsnorm %x weight %g
// CHECK-NEXT:    %n_1 = tensor_op.rmsnorm %x weight %g
// CHECK-NEXT:    %q = tensor_op.matmul %n_1, %wq
// CHECK-NEXT:    %n_2 = tensor_op.rmsnorm %x weight %g
// CHECK-NEXT:    %k = tensor_op.matmul %n_2, %wk
// CHECK-NEXT:    %v = tensor_op.matmul %n, %wv

// -----


// Read by two matmuls of the same shape (a SwiGLU's gate and up): left alone, for amk-fuse's dual GEMM.
func.func @gate_up(%x : !tensor_op.tensor<[S, 64], f16>, %g : !tensor_op.tensor<[64], f16>, %wg : !tensor_op.tensor<[64, 128], f16>, %wu : !tensor_op.tensor<[64, 128], f16>) -> (!tensor_op.tensor<[S, 128], f16>, !tensor_op.tensor<[S, 128], f16>) {
  %n = tensor_op.rmsnorm %x weight %g {eps = 1.0e-05 : f64} : !tensor_op.tensor<[S, 64], f16> weight !tensor_op.tensor<[64], f16> -> !tensor_op.tensor<[S, 64], f16>
  %a = tensor_op.matmul %n, %wg : (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[64, 128], f16>) -> !tensor_op.tensor<[S, 128], f16>
  %b = tensor_op.matmul %n, %wu : (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[64, 128], f16>) -> !tensor_op.tensor<[S, 128], f16>
  func.return %a, %b : !tensor_op.tensor<[S, 128], f16>, !tensor_op.tensor<[S, 128], f16>
}

// CHECK-LABEL: func.func @gate_up
// CHECK-NEXT:    %n = tensor_op.rmsnorm %x weight %g
// CHECK-NEXT:    %a = tensor_op.matmul %n, %wg
// CHECK-NEXT:    %b = tensor_op.matmul %n, %wu
// CHECK-NEXT:    func.return

// -----


// Read by a matmul and a residual add: the matmul gets a copy, the add keeps the original.
func.func @residual(%x : !tensor_op.tensor<[S, 64], f16>, %g : !tensor_op.tensor<[64], f16>, %w : !tensor_op.tensor<[64, 64], f16>) -> !tensor_op.tensor<[S, 64], f16> {
  %n = tensor_op.rmsnorm %x weight %g {eps = 1.0e-05 : f64} : !tensor_op.tensor<[S, 64], f16> weight !tensor_op.tensor<[64], f16> -> !tensor_op.tensor<[S, 64], f16>
  %y = tensor_op.matmul %n, %w : (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[64, 64], f16>) -> !tensor_op.tensor<[S, 64], f16>
  %r = tensor_op.add %y, %n : (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[S, 64], f16>) -> !tensor_op.tensor<[S, 64], f16>
  func.return %r : !tensor_op.tensor<[S, 64], f16>
}

// CHECK-LABEL: func.func @residual
// CHECK-NEXT:    %n = tensor_op.rmsnorm %x weight %g
// CHECK-NEXT:    %n_1 = tensor_op.rmsnorm %x weight %g
// CHECK-NEXT:    %y = tensor_op.matmul %n_1, %w
// CHECK-NEXT:    %r = tensor_op.add %y, %n
