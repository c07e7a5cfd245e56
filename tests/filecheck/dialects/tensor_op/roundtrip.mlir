// RUN: amk-opt %s --split-input-file | filecheck %s
// RUN: %roundtrip

// Matmul with a symbolic row dimension: S*B is printed canonically as B*S.
func.func @matmul(%x : !tensor_op.tensor<[B*S, 4096], f16>, %w : !tensor_op.tensor<[4096, 1024], f16>) -> !tensor_op.tensor<[B*S, 1024], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[B*S, 4096], f16>, !tensor_op.tensor<[4096, 1024], f16>) -> !tensor_op.tensor<[S*B, 1024], f16>
  func.return %0 : !tensor_op.tensor<[B*S, 1024], f16>
}

// CHECK-LABEL: func.func @matmul(%x: !tensor_op.tensor<[B*S, 4096], f16>, %w: !tensor_op.tensor<[4096, 1024], f16>) -> !tensor_op.tensor<[B*S, 1024], f16> {
// CHECK-NEXT:  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[B*S, 4096], f16>, !tensor_op.tensor<[4096, 1024], f16>) -> !tensor_op.tensor<[B*S, 1024], f16>
// CHECK-NEXT:  func.return %0 : !tensor_op.tensor<[B*S, 1024], f16>
// CHECK-NEXT:  }

// -----

// A Linear with its bias and tanh GELU (the vendor GEMM's epilogue), on a batch of sequences; and one without activation.
func.func @linear(%x : !tensor_op.tensor<[B, S, 64], bf16>, %w : !tensor_op.tensor<[256, 64], bf16>, %b : !tensor_op.tensor<[256], bf16>, %w2 : !tensor_op.tensor<[64, 256], bf16>, %b2 : !tensor_op.tensor<[64], bf16>) -> !tensor_op.tensor<[B, S, 64], bf16> {
  %h = tensor_op.linear %x, %w, %b {activation = "gelu_tanh"} : (!tensor_op.tensor<[B, S, 64], bf16>, !tensor_op.tensor<[256, 64], bf16>, !tensor_op.tensor<[256], bf16>) -> !tensor_op.tensor<[B, S, 256], bf16>
  %y = tensor_op.linear %h, %w2, %b2 : (!tensor_op.tensor<[B, S, 256], bf16>, !tensor_op.tensor<[64, 256], bf16>, !tensor_op.tensor<[64], bf16>) -> !tensor_op.tensor<[B, S, 64], bf16>
  func.return %y : !tensor_op.tensor<[B, S, 64], bf16>
}

// CHECK-LABEL: func.func @linear(
// CHECK-NEXT:  %h = tensor_op.linear %x, %w, %b {activation = "gelu_tanh"} : (!tensor_op.tensor<[B, S, 64], bf16>, !tensor_op.tensor<[256, 64], bf16>, !tensor_op.tensor<[256], bf16>) -> !tensor_op.tensor<[B, S, 256], bf16>
// CHECK-NEXT:  %y = tensor_op.linear %h, %w2, %b2 : (!tensor_op.tensor<[B, S, 256], bf16>, !tensor_op.tensor<[64, 256], bf16>, !tensor_op.tensor<[64], bf16>) -> !tensor_op.tensor<[B, S, 64], bf16>
// CHECK-NEXT:  func.return %y

// -----

// Hugging Face's Conv1D: a [K, N] weight.
func.func @linear_kn(%x : !tensor_op.tensor<[M, 64], f16>, %w : !tensor_op.tensor<[64, 256], f16>, %b : !tensor_op.tensor<[256], f16>) -> !tensor_op.tensor<[M, 256], f16> {
  %h = tensor_op.linear %x, %w, %b {activation = "relu", weight_layout = "kn"} : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64, 256], f16>, !tensor_op.tensor<[256], f16>) -> !tensor_op.tensor<[M, 256], f16>
  func.return %h : !tensor_op.tensor<[M, 256], f16>
}

// CHECK-LABEL: func.func @linear_kn(
// CHECK-NEXT:  %h = tensor_op.linear %x, %w, %b {activation = "relu", weight_layout = "kn"} : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64, 256], f16>, !tensor_op.tensor<[256], f16>) -> !tensor_op.tensor<[M, 256], f16>
// CHECK-NEXT:  func.return %h

// -----

func.func @matmul_transposed(%x : !tensor_op.tensor<[B, 128, 64], f16>, %w : !tensor_op.tensor<[32, 64], f16>, %y : !tensor_op.tensor<[B, 64, 128], f16>, %v : !tensor_op.tensor<[64, 32], f16>) {
  %0 = tensor_op.matmul %x, %w {transpose_rhs = true} : (!tensor_op.tensor<[B, 128, 64], f16>, !tensor_op.tensor<[32, 64], f16>) -> !tensor_op.tensor<[B, 128, 32], f16>
  %1 = tensor_op.matmul %y, %v {transpose_lhs = true} : (!tensor_op.tensor<[B, 64, 128], f16>, !tensor_op.tensor<[64, 32], f16>) -> !tensor_op.tensor<[B, 128, 32], f16>
  %2 = tensor_op.matmul %y, %w {transpose_lhs = true, transpose_rhs = true} : (!tensor_op.tensor<[B, 64, 128], f16>, !tensor_op.tensor<[32, 64], f16>) -> !tensor_op.tensor<[B, 128, 32], f16>
  %3 = tensor_op.matmul %x, %v {transpose_lhs = false, transpose_rhs = false} : (!tensor_op.tensor<[B, 128, 64], f16>, !tensor_op.tensor<[64, 32], f16>) -> !tensor_op.tensor<[B, 128, 32], f16>
  func.return
}

// CHECK-LABEL: func.func @matmul_transposed(%x: !tensor_op.tensor<[B, 128, 64], f16>, %w: !tensor_op.tensor<[32, 64], f16>, %y: !tensor_op.tensor<[B, 64, 128], f16>, %v: !tensor_op.tensor<[64, 32], f16>) {
// CHECK-NEXT:  %0 = tensor_op.matmul %x, %w {transpose_rhs = true} : (!tensor_op.tensor<[B, 128, 64], f16>, !tensor_op.tensor<[32, 64], f16>) -> !tensor_op.tensor<[B, 128, 32], f16>
// CHECK-NEXT:  %1 = tensor_op.matmul %y, %v {transpose_lhs = true} : (!tensor_op.tensor<[B, 64, 128], f16>, !tensor_op.tensor<[64, 32], f16>) -> !tensor_op.tensor<[B, 128, 32], f16>
// CHECK-NEXT:  %2 = tensor_op.matmul %y, %w {transpose_lhs = true, transpose_rhs = true} : (!tensor_op.tensor<[B, 64, 128], f16>, !tensor_op.tensor<[32, 64], f16>) -> !tensor_op.tensor<[B, 128, 32], f16>
// CHECK-NEXT:  %3 = tensor_op.matmul %x, %v {transpose_lhs = false, transpose_rhs = false} : (!tensor_op.tensor<[B, 128, 64], f16>, !tensor_op.tensor<[64, 32], f16>) -> !tensor_op.tensor<[B, 128, 32], f16>
// CHECK-NEXT:  func.return
// CHECK-NEXT:  }

// -----

func.func @binary(%x : !tensor_op.tensor<[M, N], f32>, %y : !tensor_op.tensor<[M, N], f32>, %b : !tensor_op.tensor<[N], f32>, %c : !tensor_op.tensor<[M, 1], f32>) {
  %0 = tensor_op.add %x, %b : (!tensor_op.tensor<[M, N], f32>, !tensor_op.tensor<[N], f32>) -> !tensor_op.tensor<[M, N], f32>
  %1 = tensor_op.sub %x, %y : (!tensor_op.tensor<[M, N], f32>, !tensor_op.tensor<[M, N], f32>) -> !tensor_op.tensor<[M, N], f32>
  %2 = tensor_op.mul %x, %c : (!tensor_op.tensor<[M, N], f32>, !tensor_op.tensor<[M, 1], f32>) -> !tensor_op.tensor<[M, N], f32>
  %3 = tensor_op.div %c, %b : (!tensor_op.tensor<[M, 1], f32>, !tensor_op.tensor<[N], f32>) -> !tensor_op.tensor<[M, N], f32>
  %4 = tensor_op.maximum %x, %y : (!tensor_op.tensor<[M, N], f32>, !tensor_op.tensor<[M, N], f32>) -> !tensor_op.tensor<[M, N], f32>
  %5 = tensor_op.minimum %b, %x : (!tensor_op.tensor<[N], f32>, !tensor_op.tensor<[M, N], f32>) -> !tensor_op.tensor<[M, N], f32>
  func.return
}

// CHECK-LABEL: func.func @binary(%x: !tensor_op.tensor<[M, N], f32>, %y: !tensor_op.tensor<[M, N], f32>, %b: !tensor_op.tensor<[N], f32>, %c: !tensor_op.tensor<[M, 1], f32>) {
// CHECK-NEXT:  %0 = tensor_op.add %x, %b : (!tensor_op.tensor<[M, N], f32>, !tensor_op.tensor<[N], f32>) -> !tensor_op.tensor<[M, N], f32>
// CHECK-NEXT:  %1 = tensor_op.sub %x, %y : (!tensor_op.tensor<[M, N], f32>, !tensor_op.tensor<[M, N], f32>) -> !tensor_op.tensor<[M, N], f32>
// CHECK-NEXT:  %2 = tensor_op.mul %x, %c : (!tensor_op.tensor<[M, N], f32>, !tensor_op.tensor<[M, 1], f32>) -> !tensor_op.tensor<[M, N], f32>
// CHECK-NEXT:  %3 = tensor_op.div %c, %b : (!tensor_op.tensor<[M, 1], f32>, !tensor_op.tensor<[N], f32>) -> !tensor_op.tensor<[M, N], f32>
// CHECK-NEXT:  %4 = tensor_op.maximum %x, %y : (!tensor_op.tensor<[M, N], f32>, !tensor_op.tensor<[M, N], f32>) -> !tensor_op.tensor<[M, N], f32>
// CHECK-NEXT:  %5 = tensor_op.minimum %b, %x : (!tensor_op.tensor<[N], f32>, !tensor_op.tensor<[M, N], f32>) -> !tensor_op.tensor<[M, N], f32>
// CHECK-NEXT:  func.return
// CHECK-NEXT:  }

// -----

func.func @unary(%x : !tensor_op.tensor<[B*S, 768], bf16>) {
  %0 = tensor_op.relu %x : !tensor_op.tensor<[B*S, 768], bf16>
  %1 = tensor_op.gelu %x : !tensor_op.tensor<[B*S, 768], bf16>
  %2 = tensor_op.gelu %x {approximate = "none"} : !tensor_op.tensor<[B*S, 768], bf16>
  %3 = tensor_op.gelu %x {approximate = "tanh"} : !tensor_op.tensor<[B*S, 768], bf16>
  %4 = tensor_op.silu %x : !tensor_op.tensor<[B*S, 768], bf16>
  %5 = tensor_op.sigmoid %x : !tensor_op.tensor<[B*S, 768], bf16>
  %6 = tensor_op.tanh %x : !tensor_op.tensor<[B*S, 768], bf16>
  %7 = tensor_op.exp %x : !tensor_op.tensor<[B*S, 768], bf16>
  %8 = tensor_op.mish %x : !tensor_op.tensor<[B*S, 768], bf16>
  %9 = tensor_op.abs %x : !tensor_op.tensor<[B*S, 768], bf16>
  %10 = tensor_op.sqrt %x : !tensor_op.tensor<[B*S, 768], bf16>
  %11 = tensor_op.rsqrt %x : !tensor_op.tensor<[B*S, 768], bf16>
  %12 = tensor_op.log %x : !tensor_op.tensor<[B*S, 768], bf16>
  %13 = tensor_op.erf %x : !tensor_op.tensor<[B*S, 768], bf16>
  %14 = tensor_op.softplus %x : !tensor_op.tensor<[B*S, 768], bf16>
  %15 = tensor_op.softplus %x {beta = 2.000000e+00 : f64, threshold = 1.000000e+01 : f64} : !tensor_op.tensor<[B*S, 768], bf16>
  %16 = tensor_op.hardsigmoid %x : !tensor_op.tensor<[B*S, 768], bf16>
  %17 = tensor_op.hardswish %x : !tensor_op.tensor<[B*S, 768], bf16>
  func.return
}

// CHECK-LABEL: func.func @unary(%x: !tensor_op.tensor<[B*S, 768], bf16>) {
// CHECK-NEXT:  %0 = tensor_op.relu %x : !tensor_op.tensor<[B*S, 768], bf16>
// CHECK-NEXT:  %1 = tensor_op.gelu %x : !tensor_op.tensor<[B*S, 768], bf16>
// CHECK-NEXT:  %2 = tensor_op.gelu %x {approximate = "none"} : !tensor_op.tensor<[B*S, 768], bf16>
// CHECK-NEXT:  %3 = tensor_op.gelu %x {approximate = "tanh"} : !tensor_op.tensor<[B*S, 768], bf16>
// CHECK-NEXT:  %4 = tensor_op.silu %x : !tensor_op.tensor<[B*S, 768], bf16>
// CHECK-NEXT:  %5 = tensor_op.sigmoid %x : !tensor_op.tensor<[B*S, 768], bf16>
// CHECK-NEXT:  %6 = tensor_op.tanh %x : !tensor_op.tensor<[B*S, 768], bf16>
// CHECK-NEXT:  %7 = tensor_op.exp %x : !tensor_op.tensor<[B*S, 768], bf16>
// CHECK-NEXT:  %8 = tensor_op.mish %x : !tensor_op.tensor<[B*S, 768], bf16>
// CHECK-NEXT:  %9 = tensor_op.abs %x : !tensor_op.tensor<[B*S, 768], bf16>
// CHECK-NEXT:  %10 = tensor_op.sqrt %x : !tensor_op.tensor<[B*S, 768], bf16>
// CHECK-NEXT:  %11 = tensor_op.rsqrt %x : !tensor_op.tensor<[B*S, 768], bf16>
// CHECK-NEXT:  %12 = tensor_op.log %x : !tensor_op.tensor<[B*S, 768], bf16>
// CHECK-NEXT:  %13 = tensor_op.erf %x : !tensor_op.tensor<[B*S, 768], bf16>
// CHECK-NEXT:  %14 = tensor_op.softplus %x : !tensor_op.tensor<[B*S, 768], bf16>
// CHECK-NEXT:  %15 = tensor_op.softplus %x {beta = 2.000000e+00 : f64, threshold = 1.000000e+01 : f64} : !tensor_op.tensor<[B*S, 768], bf16>
// CHECK-NEXT:  %16 = tensor_op.hardsigmoid %x : !tensor_op.tensor<[B*S, 768], bf16>
// CHECK-NEXT:  %17 = tensor_op.hardswish %x : !tensor_op.tensor<[B*S, 768], bf16>
// CHECK-NEXT:  func.return
// CHECK-NEXT:  }

// -----

func.func @unary_params(%x : !tensor_op.tensor<[M, cdiv(N, 64)], f32>) {
  %0 = tensor_op.leaky_relu %x : !tensor_op.tensor<[M, cdiv(N, 64)], f32>
  %1 = tensor_op.leaky_relu %x {negative_slope = 2.000000e-01 : f64} : !tensor_op.tensor<[M, cdiv(N, 64)], f32>
  %2 = tensor_op.clamp %x {min = -1.0 : f64, max = 1.0 : f64} : !tensor_op.tensor<[M, cdiv(N, 64)], f32>
  %3 = tensor_op.clamp %x {min = 0.0 : f64} : !tensor_op.tensor<[M, cdiv(N, 64)], f32>
  %4 = tensor_op.clamp %x {max = 6.0 : f64} : !tensor_op.tensor<[M, cdiv(N, 64)], f32>
  %5 = tensor_op.scale %x {factor = 0.125 : f64} : !tensor_op.tensor<[M, cdiv(N, 64)], f32>
  func.return
}

// CHECK-LABEL: func.func @unary_params(%x: !tensor_op.tensor<[M, cdiv(N, 64)], f32>) {
// CHECK-NEXT:  %0 = tensor_op.leaky_relu %x : !tensor_op.tensor<[M, cdiv(N, 64)], f32>
// CHECK-NEXT:  %1 = tensor_op.leaky_relu %x {negative_slope = 2.000000e-01 : f64} : !tensor_op.tensor<[M, cdiv(N, 64)], f32>
// CHECK-NEXT:  %2 = tensor_op.clamp %x {min = -1.000000e+00 : f64, max = 1.000000e+00 : f64} : !tensor_op.tensor<[M, cdiv(N, 64)], f32>
// CHECK-NEXT:  %3 = tensor_op.clamp %x {min = 0.000000e+00 : f64} : !tensor_op.tensor<[M, cdiv(N, 64)], f32>
// CHECK-NEXT:  %4 = tensor_op.clamp %x {max = 6.000000e+00 : f64} : !tensor_op.tensor<[M, cdiv(N, 64)], f32>
// CHECK-NEXT:  %5 = tensor_op.scale %x {factor = 1.250000e-01 : f64} : !tensor_op.tensor<[M, cdiv(N, 64)], f32>
// CHECK-NEXT:  func.return
// CHECK-NEXT:  }

// -----

func.func @cast(%x : !tensor_op.tensor<[M, N], f16>, %y : !tensor_op.tensor<[M, N], f32>) {
  %0 = tensor_op.cast %x : !tensor_op.tensor<[M, N], f16> -> !tensor_op.tensor<[M, N], f32>
  %1 = tensor_op.cast %y : !tensor_op.tensor<[M, N], f32> -> !tensor_op.tensor<[M, N], bf16>
  func.return
}

// CHECK-LABEL: func.func @cast(%x: !tensor_op.tensor<[M, N], f16>, %y: !tensor_op.tensor<[M, N], f32>) {
// CHECK-NEXT:  %0 = tensor_op.cast %x : !tensor_op.tensor<[M, N], f16> -> !tensor_op.tensor<[M, N], f32>
// CHECK-NEXT:  %1 = tensor_op.cast %y : !tensor_op.tensor<[M, N], f32> -> !tensor_op.tensor<[M, N], bf16>
// CHECK-NEXT:  func.return
// CHECK-NEXT:  }

// -----

func.func @reductions(%x : !tensor_op.tensor<[B, S, 64], f32>) {
  %0 = tensor_op.reduce_sum %x {axis = -1 : i64} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[B, S], f32>
  %1 = tensor_op.reduce_max %x {axis = -1 : i64, keepdim = true} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[B, S, 1], f32>
  %2 = tensor_op.reduce_mean %x {axis = 1 : i64} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[B, 64], f32>
  %3 = tensor_op.logsumexp %x {axis = -1 : i64} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[B, S], f32>
  %4 = tensor_op.logsumexp %x {axis = 0 : i64, keepdim = true} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[1, S, 64], f32>
  %5 = tensor_op.reduce_sum %x {axis = 2 : i64, keepdim = false} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[B, S], f32>
  %6 = tensor_op.reduce_var %x {axis = -1 : i64} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[B, S], f32>
  %7 = tensor_op.reduce_var %x {axis = -1 : i64, keepdim = true, correction = 0.000000e+00 : f64} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[B, S, 1], f32>
  func.return
}

// CHECK-LABEL: func.func @reductions(%x: !tensor_op.tensor<[B, S, 64], f32>) {
// CHECK-NEXT:  %0 = tensor_op.reduce_sum %x {axis = -1 : i64} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[B, S], f32>
// CHECK-NEXT:  %1 = tensor_op.reduce_max %x {axis = -1 : i64, keepdim = true} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[B, S, 1], f32>
// CHECK-NEXT:  %2 = tensor_op.reduce_mean %x {axis = 1 : i64} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[B, 64], f32>
// CHECK-NEXT:  %3 = tensor_op.logsumexp %x {axis = -1 : i64} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[B, S], f32>
// CHECK-NEXT:  %4 = tensor_op.logsumexp %x {axis = 0 : i64, keepdim = true} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[1, S, 64], f32>
// CHECK-NEXT:  %5 = tensor_op.reduce_sum %x {axis = 2 : i64, keepdim = false} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[B, S], f32>
// CHECK-NEXT:  %6 = tensor_op.reduce_var %x {axis = -1 : i64} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[B, S], f32>
// CHECK-NEXT:  %7 = tensor_op.reduce_var %x {axis = -1 : i64, keepdim = true, correction = 0.000000e+00 : f64} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[B, S, 1], f32>
// CHECK-NEXT:  func.return
// CHECK-NEXT:  }

// -----

func.func @softmax(%x : !tensor_op.tensor<[B*H, S, S], f16>) {
  %0 = tensor_op.softmax %x {axis = -1 : i64} : !tensor_op.tensor<[B*H, S, S], f16>
  %1 = tensor_op.softmax %x {axis = 1 : i64} : !tensor_op.tensor<[B*H, S, S], f16>
  func.return
}

// CHECK-LABEL: func.func @softmax(%x: !tensor_op.tensor<[B*H, S, S], f16>) {
// CHECK-NEXT:  %0 = tensor_op.softmax %x {axis = -1 : i64} : !tensor_op.tensor<[B*H, S, S], f16>
// CHECK-NEXT:  %1 = tensor_op.softmax %x {axis = 1 : i64} : !tensor_op.tensor<[B*H, S, S], f16>
// CHECK-NEXT:  func.return
// CHECK-NEXT:  }

// -----

func.func @log_softmax(%x : !tensor_op.tensor<[N, 50257], f32>) {
  %0 = tensor_op.log_softmax %x {axis = -1 : i64} : !tensor_op.tensor<[N, 50257], f32>
  func.return
}

// CHECK-LABEL: func.func @log_softmax(%x: !tensor_op.tensor<[N, 50257], f32>) {
// CHECK-NEXT:  %0 = tensor_op.log_softmax %x {axis = -1 : i64} : !tensor_op.tensor<[N, 50257], f32>
// CHECK-NEXT:  func.return
// CHECK-NEXT:  }

// -----

func.func @norms(%x : !tensor_op.tensor<[B*S, 4096], bf16>, %g : !tensor_op.tensor<[4096], bf16>, %b : !tensor_op.tensor<[4096], bf16>) {
  %0 = tensor_op.layernorm %x {eps = 1.0e-05 : f64} : !tensor_op.tensor<[B*S, 4096], bf16> -> !tensor_op.tensor<[B*S, 4096], bf16>
  %1 = tensor_op.layernorm %x weight %g {eps = 1.0e-05 : f64} : !tensor_op.tensor<[B*S, 4096], bf16> weight !tensor_op.tensor<[4096], bf16> -> !tensor_op.tensor<[B*S, 4096], bf16>
  %2 = tensor_op.layernorm %x weight %g bias %b {eps = 1.0e-06 : f64} : !tensor_op.tensor<[B*S, 4096], bf16> weight !tensor_op.tensor<[4096], bf16> bias !tensor_op.tensor<[4096], bf16> -> !tensor_op.tensor<[B*S, 4096], bf16>
  %3 = tensor_op.rmsnorm %x {eps = 1.0e-06 : f64} : !tensor_op.tensor<[B*S, 4096], bf16> -> !tensor_op.tensor<[B*S, 4096], bf16>
  %4 = tensor_op.rmsnorm %x weight %g {eps = 1.0e-06 : f64} : !tensor_op.tensor<[B*S, 4096], bf16> weight !tensor_op.tensor<[4096], bf16> -> !tensor_op.tensor<[B*S, 4096], bf16>
  %5 = tensor_op.layernorm %x bias %b {eps = 1.0e-05 : f64} : !tensor_op.tensor<[B*S, 4096], bf16> bias !tensor_op.tensor<[4096], bf16> -> !tensor_op.tensor<[B*S, 4096], bf16>
  func.return
}

// CHECK-LABEL: func.func @norms(%x: !tensor_op.tensor<[B*S, 4096], bf16>, %g: !tensor_op.tensor<[4096], bf16>, %b: !tensor_op.tensor<[4096], bf16>) {
// CHECK-NEXT:  %0 = tensor_op.layernorm %x {eps = 1.000000e-05 : f64} : !tensor_op.tensor<[B*S, 4096], bf16> -> !tensor_op.tensor<[B*S, 4096], bf16>
// CHECK-NEXT:  %1 = tensor_op.layernorm %x weight %g {eps = 1.000000e-05 : f64} : !tensor_op.tensor<[B*S, 4096], bf16> weight !tensor_op.tensor<[4096], bf16> -> !tensor_op.tensor<[B*S, 4096], bf16>
// CHECK-NEXT:  %2 = tensor_op.layernorm %x weight %g bias %b {eps = 1.000000e-06 : f64} : !tensor_op.tensor<[B*S, 4096], bf16> weight !tensor_op.tensor<[4096], bf16> bias !tensor_op.tensor<[4096], bf16> -> !tensor_op.tensor<[B*S, 4096], bf16>
// CHECK-NEXT:  %3 = tensor_op.rmsnorm %x {eps = 1.000000e-06 : f64} : !tensor_op.tensor<[B*S, 4096], bf16> -> !tensor_op.tensor<[B*S, 4096], bf16>
// CHECK-NEXT:  %4 = tensor_op.rmsnorm %x weight %g {eps = 1.000000e-06 : f64} : !tensor_op.tensor<[B*S, 4096], bf16> weight !tensor_op.tensor<[4096], bf16> -> !tensor_op.tensor<[B*S, 4096], bf16>
// CHECK-NEXT:  %5 = tensor_op.layernorm %x bias %b {eps = 1.000000e-05 : f64} : !tensor_op.tensor<[B*S, 4096], bf16> bias !tensor_op.tensor<[4096], bf16> -> !tensor_op.tensor<[B*S, 4096], bf16>
// CHECK-NEXT:  func.return
// CHECK-NEXT:  }

// -----

func.func @fused(%x : !tensor_op.tensor<[B*S, 64], f16>, %w : !tensor_op.tensor<[64, 32], f16>, %b : !tensor_op.tensor<[32], f16>) -> (!tensor_op.tensor<[B*S, 32], f16>, !tensor_op.tensor<[B*S], f16>) {
  %0, %1 = tensor_op.fused %x, %w, %b : (!tensor_op.tensor<[B*S, 64], f16>, !tensor_op.tensor<[64, 32], f16>, !tensor_op.tensor<[32], f16>) -> (!tensor_op.tensor<[B*S, 32], f16>, !tensor_op.tensor<[B*S], f16>) {
  ^bb0(%a : !tensor_op.tensor<[B*S, 64], f16>, %bw : !tensor_op.tensor<[64, 32], f16>, %bb : !tensor_op.tensor<[32], f16>):
    %2 = tensor_op.matmul %a, %bw : (!tensor_op.tensor<[B*S, 64], f16>, !tensor_op.tensor<[64, 32], f16>) -> !tensor_op.tensor<[B*S, 32], f16>
    %3 = tensor_op.add %2, %bb : (!tensor_op.tensor<[B*S, 32], f16>, !tensor_op.tensor<[32], f16>) -> !tensor_op.tensor<[B*S, 32], f16>
    %4 = tensor_op.reduce_max %3 {axis = -1 : i64} : !tensor_op.tensor<[B*S, 32], f16> -> !tensor_op.tensor<[B*S], f16>
    tensor_op.yield %3, %4 : !tensor_op.tensor<[B*S, 32], f16>, !tensor_op.tensor<[B*S], f16>
  }
  func.return %0, %1 : !tensor_op.tensor<[B*S, 32], f16>, !tensor_op.tensor<[B*S], f16>
}

// CHECK-LABEL: func.func @fused(%x: !tensor_op.tensor<[B*S, 64], f16>, %w: !tensor_op.tensor<[64, 32], f16>, %b: !tensor_op.tensor<[32], f16>) -> (!tensor_op.tensor<[B*S, 32], f16>, !tensor_op.tensor<[B*S], f16>) {
// CHECK-NEXT:  %0, %1 = tensor_op.fused %x, %w, %b : (!tensor_op.tensor<[B*S, 64], f16>, !tensor_op.tensor<[64, 32], f16>, !tensor_op.tensor<[32], f16>) -> (!tensor_op.tensor<[B*S, 32], f16>, !tensor_op.tensor<[B*S], f16>) {
// CHECK-NEXT:  ^bb0(%a: !tensor_op.tensor<[B*S, 64], f16>, %bw: !tensor_op.tensor<[64, 32], f16>, %bb: !tensor_op.tensor<[32], f16>):
// CHECK-NEXT:  %2 = tensor_op.matmul %a, %bw : (!tensor_op.tensor<[B*S, 64], f16>, !tensor_op.tensor<[64, 32], f16>) -> !tensor_op.tensor<[B*S, 32], f16>
// CHECK-NEXT:  %3 = tensor_op.add %2, %bb : (!tensor_op.tensor<[B*S, 32], f16>, !tensor_op.tensor<[32], f16>) -> !tensor_op.tensor<[B*S, 32], f16>
// CHECK-NEXT:  %4 = tensor_op.reduce_max %3 {axis = -1 : i64} : !tensor_op.tensor<[B*S, 32], f16> -> !tensor_op.tensor<[B*S], f16>
// CHECK-NEXT:  tensor_op.yield %3, %4 : !tensor_op.tensor<[B*S, 32], f16>, !tensor_op.tensor<[B*S], f16>
// CHECK-NEXT:  }
// CHECK-NEXT:  func.return %0, %1 : !tensor_op.tensor<[B*S, 32], f16>, !tensor_op.tensor<[B*S], f16>
// CHECK-NEXT:  }

// -----

func.func @fused_single(%x : !tensor_op.tensor<[cdiv(N, 64)*64], f32>) -> !tensor_op.tensor<[cdiv(N, 64)*64], f32> {
  %0 = tensor_op.fused %x : (!tensor_op.tensor<[cdiv(N, 64)*64], f32>) -> !tensor_op.tensor<[cdiv(N, 64)*64], f32> {
  ^bb0(%a : !tensor_op.tensor<[cdiv(N, 64)*64], f32>):
    %1 = tensor_op.relu %a : !tensor_op.tensor<[cdiv(N, 64)*64], f32>
    tensor_op.yield %1 : !tensor_op.tensor<[cdiv(N, 64)*64], f32>
  }
  func.return %0 : !tensor_op.tensor<[cdiv(N, 64)*64], f32>
}

// CHECK-LABEL: func.func @fused_single(%x: !tensor_op.tensor<[64*cdiv(N, 64)], f32>) -> !tensor_op.tensor<[64*cdiv(N, 64)], f32> {
// CHECK-NEXT:  %0 = tensor_op.fused %x : (!tensor_op.tensor<[64*cdiv(N, 64)], f32>) -> !tensor_op.tensor<[64*cdiv(N, 64)], f32> {
// CHECK-NEXT:  ^bb0(%a: !tensor_op.tensor<[64*cdiv(N, 64)], f32>):
// CHECK-NEXT:  %1 = tensor_op.relu %a : !tensor_op.tensor<[64*cdiv(N, 64)], f32>
// CHECK-NEXT:  tensor_op.yield %1 : !tensor_op.tensor<[64*cdiv(N, 64)], f32>
// CHECK-NEXT:  }
// CHECK-NEXT:  func.return %0 : !tensor_op.tensor<[64*cdiv(N, 64)], f32>
// CHECK-NEXT:  }

// -----

// nanoGPT's mask: its tril buffer compared with 0, then a masked_fill of -inf.
func.func @causal_mask(%scores : !tensor_op.tensor<[B, H, T, T], f32>, %bias : !tensor_op.tensor<[1, 1, T, T], f32>) -> !tensor_op.tensor<[B, H, T, T], f32> {
  %0 = tensor_op.compare %bias {predicate = "eq", value = 0.000000e+00 : f64} : !tensor_op.tensor<[1, 1, T, T], f32> -> !tensor_op.tensor<[1, 1, T, T], i1>
  %1 = tensor_op.masked_fill %scores, %0 {value = 0xFFF0000000000000 : f64} : (!tensor_op.tensor<[B, H, T, T], f32>, !tensor_op.tensor<[1, 1, T, T], i1>) -> !tensor_op.tensor<[B, H, T, T], f32>
  func.return %1 : !tensor_op.tensor<[B, H, T, T], f32>
}

// CHECK:       func.func @causal_mask(
// CHECK-NEXT:  %0 = tensor_op.compare %bias {predicate = "eq", value = 0.000000e+00 : f64} : !tensor_op.tensor<[1, 1, T, T], f32> -> !tensor_op.tensor<[1, 1, T, T], i1>
// CHECK-NEXT:  %1 = tensor_op.masked_fill %scores, %0
