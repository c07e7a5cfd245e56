// RUN: amk-opt %s --split-input-file -p amk-duplicate-norm-prologues | filecheck %s

// Read by three matmuls (an attention block's q, k and v projections): left alone (its own kernel, two of the
// projections a dual GEMM, was faster at decode than a copy in each).
func.func @qkv(%x : !tensor_op.tensor<[S, 64], f16>, %g : !tensor_op.tensor<[64], f16>, %wq : !tensor_op.tensor<[64, 64], f16>, %wk : !tensor_op.tensor<[64, 64], f16>, %wv : !tensor_op.tensor<[64, 64], f16>) -> (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[S, 64], f16>) {
  %n = tensor_op.rmsnorm %x weight %g {eps = 1.0e-05 : f64} : !tensor_op.tensor<[S, 64], f16> weight !tensor_op.tensor<[64], f16> -> !tensor_op.tensor<[S, 64], f16>
  %q = tensor_op.matmul %n, %wq : (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[64, 64], f16>) -> !tensor_op.tensor<[S, 64], f16>
  %k = tensor_op.matmul %n, %wk : (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[64, 64], f16>) -> !tensor_op.tensor<[S, 64], f16>
  %v = tensor_op.matmul %n, %wv : (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[64, 64], f16>) -> !tensor_op.tensor<[S, 64], f16>
  func.return %q, %k, %v : !tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[S, 64], f16>
}

// CHECK-LABEL: func.func @qkv
// CHECK-NEXT:    %n = tensor_op.rmsnorm %x weight %g
// CHECK-NEXT:    %q = tensor_op.matmul %n, %wq
// CHECK-NEXT:    %k = tensor_op.matmul %n, %wk
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


// Read by the two matmuls of a dual GEMM and returned too: the matmuls share one copy (their dual GEMM's prologue),
// the return keeps the original. A copy each would make them two kernels.
func.func @gate_up_and_norm(%x : !tensor_op.tensor<[S, 64], f16>, %g : !tensor_op.tensor<[64], f16>, %wg : !tensor_op.tensor<[64, 128], f16>, %wu : !tensor_op.tensor<[64, 128], f16>) -> (!tensor_op.tensor<[S, 128], f16>, !tensor_op.tensor<[S, 128], f16>, !tensor_op.tensor<[S, 64], f16>) {
  %n = tensor_op.rmsnorm %x weight %g {eps = 1.0e-05 : f64} : !tensor_op.tensor<[S, 64], f16> weight !tensor_op.tensor<[64], f16> -> !tensor_op.tensor<[S, 64], f16>
  %a = tensor_op.matmul %n, %wg : (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[64, 128], f16>) -> !tensor_op.tensor<[S, 128], f16>
  %b = tensor_op.matmul %n, %wu : (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[64, 128], f16>) -> !tensor_op.tensor<[S, 128], f16>
  func.return %a, %b, %n : !tensor_op.tensor<[S, 128], f16>, !tensor_op.tensor<[S, 128], f16>, !tensor_op.tensor<[S, 64], f16>
}

// CHECK-LABEL: func.func @gate_up_and_norm
// CHECK-NEXT:    %n = tensor_op.rmsnorm %x weight %g
// CHECK-NEXT:    %n_1 = tensor_op.rmsnorm %x weight %g
// CHECK-NEXT:    %a = tensor_op.matmul %n_1, %wg
// CHECK-NEXT:    %b = tensor_op.matmul %n_1, %wu
// CHECK-NEXT:    func.return %a, %b, %n

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

// -----


// A norm of a matmul's result plus a residual (an attention block's output projection, then the next norm): left
// alone, for amk-fuse to make it that matmul's epilogue, whose copies would each be written out.
func.func @after_a_matmul(%a : !tensor_op.tensor<[S, 64], f16>, %wo : !tensor_op.tensor<[64, 64], f16>, %x : !tensor_op.tensor<[S, 64], f16>, %g : !tensor_op.tensor<[64], f16>, %wq : !tensor_op.tensor<[64, 64], f16>, %wk : !tensor_op.tensor<[64, 64], f16>, %wv : !tensor_op.tensor<[64, 64], f16>) -> (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[S, 64], f16>) {
  %o = tensor_op.matmul %a, %wo : (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[64, 64], f16>) -> !tensor_op.tensor<[S, 64], f16>
  %r = tensor_op.add %o, %x : (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[S, 64], f16>) -> !tensor_op.tensor<[S, 64], f16>
  %n = tensor_op.rmsnorm %r weight %g {eps = 1.0e-05 : f64} : !tensor_op.tensor<[S, 64], f16> weight !tensor_op.tensor<[64], f16> -> !tensor_op.tensor<[S, 64], f16>
  %q = tensor_op.matmul %n, %wq : (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[64, 64], f16>) -> !tensor_op.tensor<[S, 64], f16>
  %k = tensor_op.matmul %n, %wk : (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[64, 64], f16>) -> !tensor_op.tensor<[S, 64], f16>
  %v = tensor_op.matmul %n, %wv : (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[64, 64], f16>) -> !tensor_op.tensor<[S, 64], f16>
  func.return %q, %k, %v : !tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[S, 64], f16>
}

// CHECK-LABEL: func.func @after_a_matmul
// CHECK:         %n = tensor_op.rmsnorm %r weight %g
// CHECK-NEXT:    %q = tensor_op.matmul %n, %wq
// CHECK-NEXT:    %k = tensor_op.matmul %n, %wk
// CHECK-NEXT:    %v = tensor_op.matmul %n, %wv

// -----


// A bf16 model's norm computed in fp32 (Llama's): its input and weight cast up, its result cast back down; read by
// two projections of different shapes, one of them gets a copy of the four ops.
func.func @in_fp32(%x : !tensor_op.tensor<[S, 64], bf16>, %g : !tensor_op.tensor<[64], bf16>, %wq : !tensor_op.tensor<[64, 64], bf16>, %wk : !tensor_op.tensor<[64, 16], bf16>) -> (!tensor_op.tensor<[S, 64], bf16>, !tensor_op.tensor<[S, 16], bf16>) {
  %xf = tensor_op.cast %x : !tensor_op.tensor<[S, 64], bf16> -> !tensor_op.tensor<[S, 64], f32>
  %gf = tensor_op.cast %g : !tensor_op.tensor<[64], bf16> -> !tensor_op.tensor<[64], f32>
  %nf = tensor_op.rmsnorm %xf weight %gf {eps = 1.0e-05 : f64} : !tensor_op.tensor<[S, 64], f32> weight !tensor_op.tensor<[64], f32> -> !tensor_op.tensor<[S, 64], f32>
  %n = tensor_op.cast %nf : !tensor_op.tensor<[S, 64], f32> -> !tensor_op.tensor<[S, 64], bf16>
  %q = tensor_op.matmul %n, %wq : (!tensor_op.tensor<[S, 64], bf16>, !tensor_op.tensor<[64, 64], bf16>) -> !tensor_op.tensor<[S, 64], bf16>
  %k = tensor_op.matmul %n, %wk : (!tensor_op.tensor<[S, 64], bf16>, !tensor_op.tensor<[64, 16], bf16>) -> !tensor_op.tensor<[S, 16], bf16>
  func.return %q, %k : !tensor_op.tensor<[S, 64], bf16>, !tensor_op.tensor<[S, 16], bf16>
}

// CHECK-LABEL: func.func @in_fp32
// CHECK-NEXT:    %xf = tensor_op.cast %x
// CHECK-NEXT:    %gf = tensor_op.cast %g
// CHECK-NEXT:    %nf = tensor_op.rmsnorm %xf weight %gf
// CHECK-NEXT:    %n = tensor_op.cast %nf
// CHECK-NEXT:    %xf_1 = tensor_op.cast %x
// CHECK-NEXT:    %gf_1 = tensor_op.cast %g
// CHECK-NEXT:    %nf_1 = tensor_op.rmsnorm %xf_1 weight %gf_1
// CHECK-NEXT:    %n_1 = tensor_op.cast %nf_1
// CHECK-NEXT:    %q = tensor_op.matmul %n_1, %wq
// CHECK-NEXT:    %k = tensor_op.matmul %n, %wk

// -----

// Gemma's norm: its weight computed for it alone (1 + w in fp32). A copy of the norm takes a copy of that
// computation too; left behind, read by two norms in two kernels, it was a kernel of its own.
func.func @computed_weight(%x : !tensor_op.tensor<[S, 64], f32>, %g : !tensor_op.tensor<[64], bf16>, %one : !tensor_op.tensor<[1], f32>, %w : !tensor_op.tensor<[64, 64], f32>) -> !tensor_op.tensor<[S, 64], f32> {
  %gf = tensor_op.cast %g : !tensor_op.tensor<[64], bf16> -> !tensor_op.tensor<[64], f32>
  %scale = tensor_op.add %gf, %one : (!tensor_op.tensor<[64], f32>, !tensor_op.tensor<[1], f32>) -> !tensor_op.tensor<[64], f32>
  %n = tensor_op.rmsnorm %x weight %scale {eps = 1.0e-06 : f64} : !tensor_op.tensor<[S, 64], f32> weight !tensor_op.tensor<[64], f32> -> !tensor_op.tensor<[S, 64], f32>
  %y = tensor_op.matmul %n, %w : (!tensor_op.tensor<[S, 64], f32>, !tensor_op.tensor<[64, 64], f32>) -> !tensor_op.tensor<[S, 64], f32>
  %r = tensor_op.add %y, %n : (!tensor_op.tensor<[S, 64], f32>, !tensor_op.tensor<[S, 64], f32>) -> !tensor_op.tensor<[S, 64], f32>
  func.return %r : !tensor_op.tensor<[S, 64], f32>
}

// CHECK-LABEL: func.func @computed_weight
// CHECK-NEXT:    %gf = tensor_op.cast %g
// CHECK-NEXT:    %scale = tensor_op.add %gf, %one
// CHECK-NEXT:    %n = tensor_op.rmsnorm %x weight %scale
// CHECK-NEXT:    %gf_1 = tensor_op.cast %g
// CHECK-NEXT:    %scale_1 = tensor_op.add %gf_1, %one
// CHECK-NEXT:    %n_1 = tensor_op.rmsnorm %x weight %scale_1
// CHECK-NEXT:    %y = tensor_op.matmul %n_1, %w
// CHECK-NEXT:    %r = tensor_op.add %y, %n
