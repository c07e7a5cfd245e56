// RUN: amk-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Verifier failures of every tensor_op op; each case names the op and the dimension or attribute at fault.

func.func @matmul_k(%x : !tensor_op.tensor<[M, 4096], f16>, %w : !tensor_op.tensor<[2048, 1024], f16>) {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 4096], f16>, !tensor_op.tensor<[2048, 1024], f16>) -> !tensor_op.tensor<[M, 1024], f16>
  func.return
}

// CHECK: {{^}}'tensor_op.matmul' contraction dimension of lhs is 4096 but rhs has 2048

// -----

func.func @matmul_k_transposed(%x : !tensor_op.tensor<[M, 4096], f16>, %w : !tensor_op.tensor<[1024, 2048], f16>) {
  %0 = tensor_op.matmul %x, %w {transpose_rhs = true} : (!tensor_op.tensor<[M, 4096], f16>, !tensor_op.tensor<[1024, 2048], f16>) -> !tensor_op.tensor<[M, 1024], f16>
  func.return
}

// CHECK: {{^}}'tensor_op.matmul' contraction dimension of lhs is 4096 but rhs has 2048

// -----

func.func @matmul_lhs_rank(%x : !tensor_op.tensor<[4096], f16>, %w : !tensor_op.tensor<[4096, 1024], f16>) {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[4096], f16>, !tensor_op.tensor<[4096, 1024], f16>) -> !tensor_op.tensor<[1024], f16>
  func.return
}

// CHECK: {{^}}'tensor_op.matmul' lhs must have rank >= 2, got rank 1

// -----

func.func @linear_activation(%x : !tensor_op.tensor<[M, 64], f16>, %w : !tensor_op.tensor<[256, 64], f16>, %b : !tensor_op.tensor<[256], f16>) {
  %0 = tensor_op.linear %x, %w, %b {activation = "gelu"} : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[256, 64], f16>, !tensor_op.tensor<[256], f16>) -> !tensor_op.tensor<[M, 256], f16>
  func.return
}

// CHECK: {{^}}'tensor_op.linear' activation must be one of relu, gelu_tanh, got 'gelu'

// -----

func.func @linear_bias_length(%x : !tensor_op.tensor<[M, 64], f16>, %w : !tensor_op.tensor<[256, 64], f16>, %b : !tensor_op.tensor<[128], f16>) {
  %0 = tensor_op.linear %x, %w, %b : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[256, 64], f16>, !tensor_op.tensor<[128], f16>) -> !tensor_op.tensor<[M, 256], f16>
  func.return
}

// CHECK: {{^}}'tensor_op.linear' bias has 128 elements, the weight 256 rows

// -----

func.func @linear_bias_dtype(%x : !tensor_op.tensor<[M, 64], f16>, %w : !tensor_op.tensor<[256, 64], f16>, %b : !tensor_op.tensor<[256], f32>) {
  %0 = tensor_op.linear %x, %w, %b : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[256, 64], f16>, !tensor_op.tensor<[256], f32>) -> !tensor_op.tensor<[M, 256], f16>
  func.return
}

// CHECK: {{^}}'tensor_op.linear' bias is f32, the input f16

// -----

func.func @linear_weight_layout(%x : !tensor_op.tensor<[M, 64], f16>, %w : !tensor_op.tensor<[256, 64], f16>, %b : !tensor_op.tensor<[256], f16>) {
  %0 = tensor_op.linear %x, %w, %b {weight_layout = "nt"} : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[256, 64], f16>, !tensor_op.tensor<[256], f16>) -> !tensor_op.tensor<[M, 256], f16>
  func.return
}

// CHECK: {{^}}'tensor_op.linear' weight_layout must be one of nk, kn, got 'nt'

// -----

func.func @linear_kn_bias_length(%x : !tensor_op.tensor<[M, 64], f16>, %w : !tensor_op.tensor<[64, 256], f16>, %b : !tensor_op.tensor<[64], f16>) {
  %0 = tensor_op.linear %x, %w, %b {weight_layout = "kn"} : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64, 256], f16>, !tensor_op.tensor<[64], f16>) -> !tensor_op.tensor<[M, 256], f16>
  func.return
}

// CHECK: {{^}}'tensor_op.linear' bias has 64 elements, the weight 256 columns

// -----

func.func @linear_weight_rank(%x : !tensor_op.tensor<[B, M, 64], f16>, %w : !tensor_op.tensor<[B, 256, 64], f16>, %b : !tensor_op.tensor<[256], f16>) {
  %0 = tensor_op.linear %x, %w, %b : (!tensor_op.tensor<[B, M, 64], f16>, !tensor_op.tensor<[B, 256, 64], f16>, !tensor_op.tensor<[256], f16>) -> !tensor_op.tensor<[B, M, 256], f16>
  func.return
}

// CHECK: {{^}}'tensor_op.linear' takes a weight of rank 2 and a bias of rank 1, got ranks 3 and 1

// -----

func.func @matmul_rhs_rank(%x : !tensor_op.tensor<[M, 64], f16>, %w : !tensor_op.tensor<[B, 64, 32], f16>) {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[B, 64, 32], f16>) -> !tensor_op.tensor<[M, 32], f16>
  func.return
}

// CHECK: {{^}}'tensor_op.matmul' rhs must have rank 2 (shared) or the lhs's rank 2 (batched), got rank 3

// -----

func.func @matmul_batch_dims(%q : !tensor_op.tensor<[2, S, 64], f16>, %k : !tensor_op.tensor<[3, 64, T], f16>) {
  %0 = tensor_op.matmul %q, %k : (!tensor_op.tensor<[2, S, 64], f16>, !tensor_op.tensor<[3, 64, T], f16>) -> !tensor_op.tensor<[2, S, T], f16>
  func.return
}

// CHECK: {{^}}'tensor_op.matmul' batch dimension 0 of lhs is 2 but rhs has 3

// -----

func.func @matmul_dtype(%x : !tensor_op.tensor<[M, 64], f16>, %w : !tensor_op.tensor<[64, 32], f32>) {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64, 32], f32>) -> !tensor_op.tensor<[M, 32], f16>
  func.return
}

// CHECK: {{^}}'tensor_op.matmul' operands have different element types (f16 vs f32)

// -----

func.func @matmul_result_dim(%x : !tensor_op.tensor<[B*S, 64], f16>, %w : !tensor_op.tensor<[64, 32], f16>) {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[B*S, 64], f16>, !tensor_op.tensor<[64, 32], f16>) -> !tensor_op.tensor<[B*S, 64], f16>
  func.return
}

// CHECK: {{^}}'tensor_op.matmul' result dimension 1 is 64, inferred 32

// -----

func.func @matmul_result_symbolic(%x : !tensor_op.tensor<[B*S, 64], f16>, %w : !tensor_op.tensor<[64, 32], f16>) {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[B*S, 64], f16>, !tensor_op.tensor<[64, 32], f16>) -> !tensor_op.tensor<[B, 32], f16>
  func.return
}

// CHECK: {{^}}'tensor_op.matmul' result dimension 0 is B, inferred B*S

// -----

func.func @add_broadcast(%x : !tensor_op.tensor<[M, 64], f32>, %b : !tensor_op.tensor<[32], f32>) {
  %0 = tensor_op.add %x, %b : (!tensor_op.tensor<[M, 64], f32>, !tensor_op.tensor<[32], f32>) -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.add': dimension 1 does not broadcast (64 vs 32)

// -----

func.func @sub_dtype(%x : !tensor_op.tensor<[M, 64], f32>, %y : !tensor_op.tensor<[M, 64], f16>) {
  %0 = tensor_op.sub %x, %y : (!tensor_op.tensor<[M, 64], f32>, !tensor_op.tensor<[M, 64], f16>) -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.sub' operands have different element types (f32 vs f16)

// -----

func.func @mul_rank(%x : !tensor_op.tensor<[M, 64], f32>, %y : !tensor_op.tensor<[64], f32>) {
  %0 = tensor_op.mul %x, %y : (!tensor_op.tensor<[M, 64], f32>, !tensor_op.tensor<[64], f32>) -> !tensor_op.tensor<[64], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.mul' result rank 1 should be 2

// -----

func.func @div_result_dtype(%x : !tensor_op.tensor<[M, 64], f32>, %y : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.div %x, %y : (!tensor_op.tensor<[M, 64], f32>, !tensor_op.tensor<[M, 64], f32>) -> !tensor_op.tensor<[M, 64], f16>
  func.return
}

// CHECK: {{^}}'tensor_op.div' result element type f16 should be f32

// -----

func.func @maximum_result_dim(%x : !tensor_op.tensor<[M, 1], f32>, %y : !tensor_op.tensor<[1, 64], f32>) {
  %0 = tensor_op.maximum %x, %y : (!tensor_op.tensor<[M, 1], f32>, !tensor_op.tensor<[1, 64], f32>) -> !tensor_op.tensor<[M, 1], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.maximum' result dimension 1 is 1, inferred 64

// -----

func.func @minimum_symbolic(%x : !tensor_op.tensor<[M, K], f32>, %y : !tensor_op.tensor<[M, N], f32>) {
  %0 = tensor_op.minimum %x, %y : (!tensor_op.tensor<[M, K], f32>, !tensor_op.tensor<[M, N], f32>) -> !tensor_op.tensor<[M, N], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.minimum': dimension 1 does not broadcast (K vs N)

// -----

func.func @relu_type(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = "tensor_op.relu"(%x) : (!tensor_op.tensor<[M, 64], f32>) -> !tensor_op.tensor<[M, 32], f32>
  func.return
}

// CHECK: {{^}}result 'output' at position 0 does not verify:
// CHECK-NEXT: {{^}}attribute !tensor_op.tensor<[M, 64], f32> expected from variable 'T', but got !tensor_op.tensor<[M, 32], f32>

// -----

func.func @gelu_approximate(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.gelu %x {approximate = "fast"} : !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.gelu' approximate must be one of none, tanh, got 'fast'

// -----

func.func @silu_operand(%x : tensor<4x64xf32>) {
  %0 = "tensor_op.silu"(%x) : (tensor<4x64xf32>) -> tensor<4x64xf32>
  func.return
}

// CHECK: {{^}}operand 'input' at position 0 does not verify:
// CHECK-NEXT: {{^}}tensor<4x64xf32> should be of base attribute tensor_op.tensor

// -----

func.func @sigmoid_type(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = "tensor_op.sigmoid"(%x) : (!tensor_op.tensor<[M, 64], f32>) -> !tensor_op.tensor<[M, 64], f16>
  func.return
}

// CHECK: {{^}}result 'output' at position 0 does not verify:
// CHECK-NEXT: {{^}}attribute !tensor_op.tensor<[M, 64], f32> expected from variable 'T', but got !tensor_op.tensor<[M, 64], f16>

// -----

func.func @tanh_type(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = "tensor_op.tanh"(%x) : (!tensor_op.tensor<[M, 64], f32>) -> !tensor_op.tensor<[N, 64], f32>
  func.return
}

// CHECK: {{^}}result 'output' at position 0 does not verify:
// CHECK-NEXT: {{^}}attribute !tensor_op.tensor<[M, 64], f32> expected from variable 'T', but got !tensor_op.tensor<[N, 64], f32>

// -----

func.func @exp_type(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = "tensor_op.exp"(%x) : (!tensor_op.tensor<[M, 64], f32>) -> f32
  func.return
}

// CHECK: {{^}}result 'output' at position 0 does not verify:
// CHECK-NEXT: {{^}}attribute !tensor_op.tensor<[M, 64], f32> expected from variable 'T', but got f32

// -----

func.func @mish_type(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = "tensor_op.mish"(%x) : (!tensor_op.tensor<[M, 64], f32>) -> !tensor_op.tensor<[M, 64, 1], f32>
  func.return
}

// CHECK: {{^}}result 'output' at position 0 does not verify:
// CHECK-NEXT: {{^}}attribute !tensor_op.tensor<[M, 64], f32> expected from variable 'T', but got !tensor_op.tensor<[M, 64, 1], f32>

// -----

func.func @leaky_relu_slope(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.leaky_relu %x {negative_slope = 2 : i64} : !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}2 : i64 should be of base attribute float

// -----

func.func @clamp_order(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.clamp %x {min = 1.0 : f64, max = -1.0 : f64} : !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.clamp' min (1.0) is greater than max (-1.0)

// -----

func.func @clamp_no_bounds(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.clamp %x : !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.clamp' needs at least one of min and max

// -----

func.func @scale_no_factor(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.scale %x : !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}property 'factor' expected in operation 'tensor_op.scale'

// -----

func.func @cast_to_int(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.cast %x : !tensor_op.tensor<[M, 64], f32> -> !tensor_op.tensor<[M, 64], i32>
  func.return
}

// CHECK: {{^}}'tensor_op.cast' casts to floating-point types only, got i32

// -----

func.func @cast_shape(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.cast %x : !tensor_op.tensor<[M, 64], f32> -> !tensor_op.tensor<[M, 32], f16>
  func.return
}

// CHECK: {{^}}'tensor_op.cast' result dimension 1 is 32, inferred 64

// -----

func.func @reduce_sum_axis(%x : !tensor_op.tensor<[B, S, 64], f32>) {
  %0 = tensor_op.reduce_sum %x {axis = 3 : i64} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[B, S], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.reduce_sum': axis 3 is out of range for a rank-3 tensor

// -----

func.func @reduce_max_keepdim(%x : !tensor_op.tensor<[B, S, 64], f32>) {
  %0 = tensor_op.reduce_max %x {axis = -1 : i64, keepdim = true} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[B, S], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.reduce_max' result rank 2 should be 3

// -----

func.func @reduce_mean_result(%x : !tensor_op.tensor<[B, S, 64], f32>) {
  %0 = tensor_op.reduce_mean %x {axis = 1 : i64} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[B, S], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.reduce_mean' result dimension 1 is S, inferred 64

// -----

func.func @logsumexp_axis(%x : !tensor_op.tensor<[B, S, 64], f32>) {
  %0 = tensor_op.logsumexp %x {axis = -4 : i64} : !tensor_op.tensor<[B, S, 64], f32> -> !tensor_op.tensor<[B, S], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.logsumexp': axis -4 is out of range for a rank-3 tensor

// -----

func.func @softmax_axis(%x : !tensor_op.tensor<[B, S], f32>) {
  %0 = tensor_op.softmax %x {axis = 2 : i64} : !tensor_op.tensor<[B, S], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.softmax': axis 2 is out of range for a rank-2 tensor

// -----

func.func @layernorm_weight(%x : !tensor_op.tensor<[M, 4096], f32>, %g : !tensor_op.tensor<[2048], f32>) {
  %0 = tensor_op.layernorm %x weight %g {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 4096], f32> weight !tensor_op.tensor<[2048], f32> -> !tensor_op.tensor<[M, 4096], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.layernorm' weight has 2048 elements but the normalized axis has 4096

// -----

func.func @layernorm_bias_dtype(%x : !tensor_op.tensor<[M, 64], f32>, %g : !tensor_op.tensor<[64], f32>, %b : !tensor_op.tensor<[64], f16>) {
  %0 = tensor_op.layernorm %x weight %g bias %b {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 64], f32> weight !tensor_op.tensor<[64], f32> bias !tensor_op.tensor<[64], f16> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.layernorm' bias element type f16 differs from input f32

// -----

func.func @layernorm_weight_rank(%x : !tensor_op.tensor<[M, 64], f32>, %g : !tensor_op.tensor<[1, 64], f32>) {
  %0 = tensor_op.layernorm %x weight %g {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 64], f32> weight !tensor_op.tensor<[1, 64], f32> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.layernorm' weight must have rank 1, got rank 2

// -----

func.func @layernorm_bias_only_size(%x : !tensor_op.tensor<[M, 64], f32>, %b : !tensor_op.tensor<[32], f32>) {
  %0 = tensor_op.layernorm %x bias %b {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 64], f32> bias !tensor_op.tensor<[32], f32> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.layernorm' bias has 32 elements but the normalized axis has 64

// -----

func.func @layernorm_bias_rank(%x : !tensor_op.tensor<[M, 64], f32>, %g : !tensor_op.tensor<[64], f32>, %b : !tensor_op.tensor<[64, 1], f32>) {
  %0 = tensor_op.layernorm %x weight %g bias %b {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 64], f32> weight !tensor_op.tensor<[64], f32> bias !tensor_op.tensor<[64, 1], f32> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.layernorm' bias must have rank 1, got rank 2

// -----

func.func @layernorm_result(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.layernorm %x {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 64], f32> -> !tensor_op.tensor<[M, 64], f16>
  func.return
}

// CHECK: {{^}}'tensor_op.layernorm' result element type f16 should be f32

// -----

func.func @rmsnorm_weight(%x : !tensor_op.tensor<[M, 64], f32>, %g : !tensor_op.tensor<[128], f32>) {
  %0 = tensor_op.rmsnorm %x weight %g {eps = 1.0e-06 : f64} : !tensor_op.tensor<[M, 64], f32> weight !tensor_op.tensor<[128], f32> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.rmsnorm' weight has 128 elements but the normalized axis has 64

// -----

func.func @rmsnorm_weight_dtype(%x : !tensor_op.tensor<[M, 64], bf16>, %g : !tensor_op.tensor<[64], f32>) {
  %0 = tensor_op.rmsnorm %x weight %g {eps = 1.0e-06 : f64} : !tensor_op.tensor<[M, 64], bf16> weight !tensor_op.tensor<[64], f32> -> !tensor_op.tensor<[M, 64], bf16>
  func.return
}

// CHECK: {{^}}'tensor_op.rmsnorm' weight element type f32 differs from input bf16

// -----

func.func @rmsnorm_rank0(%x : !tensor_op.tensor<[], f32>) {
  %0 = tensor_op.rmsnorm %x {eps = 1.0e-06 : f64} : !tensor_op.tensor<[], f32> -> !tensor_op.tensor<[], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.rmsnorm' input must have rank >= 1

// -----

func.func @rmsnorm_eps(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.rmsnorm %x : !tensor_op.tensor<[M, 64], f32> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}property 'eps' expected in operation 'tensor_op.rmsnorm'

// -----

func.func @fused_arg_count(%x : !tensor_op.tensor<[M, 64], f32>, %y : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.fused %x, %y : (!tensor_op.tensor<[M, 64], f32>, !tensor_op.tensor<[M, 64], f32>) -> !tensor_op.tensor<[M, 64], f32> {
  ^bb0(%a : !tensor_op.tensor<[M, 64], f32>):
    tensor_op.yield %a : !tensor_op.tensor<[M, 64], f32>
  }
  func.return
}

// CHECK: {{^}}'tensor_op.fused' region has 1 arguments but the op has 2 inputs

// -----

func.func @fused_arg_type(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.fused %x : (!tensor_op.tensor<[M, 64], f32>) -> !tensor_op.tensor<[M, 64], f32> {
  ^bb0(%a : !tensor_op.tensor<[M, 64], f16>):
    %1 = tensor_op.cast %a : !tensor_op.tensor<[M, 64], f16> -> !tensor_op.tensor<[M, 64], f32>
    tensor_op.yield %1 : !tensor_op.tensor<[M, 64], f32>
  }
  func.return
}

// CHECK: {{^}}'tensor_op.fused' region argument 0 has type !tensor_op.tensor<[M, 64], f16> but input 0 is !tensor_op.tensor<[M, 64], f32>

// -----

func.func @fused_yield_type(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.fused %x : (!tensor_op.tensor<[M, 64], f32>) -> !tensor_op.tensor<[M], f32> {
  ^bb0(%a : !tensor_op.tensor<[M, 64], f32>):
    tensor_op.yield %a : !tensor_op.tensor<[M, 64], f32>
  }
  func.return
}

// CHECK: {{^}}'tensor_op.fused' yields 1 values whose types differ from its results

// -----

func.func @fused_no_yield(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.fused %x : (!tensor_op.tensor<[M, 64], f32>) -> !tensor_op.tensor<[M, 64], f32> {
  ^bb0(%a : !tensor_op.tensor<[M, 64], f32>):
    %1 = tensor_op.relu %a : !tensor_op.tensor<[M, 64], f32>
  }
  func.return
}

// CHECK: {{^}}Operation tensor_op.relu terminates block in single-block region but is not a terminator

// -----

func.func @yield_parent(%x : !tensor_op.tensor<[M, 64], f32>) {
  tensor_op.yield %x : !tensor_op.tensor<[M, 64], f32>
}

// CHECK: {{^}}'tensor_op.yield' expects parent op 'tensor_op.fused'

// -----

func.func @where_float_condition(%c : !tensor_op.tensor<[M, 64], f32>, %x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.where %c, %x, %x : (!tensor_op.tensor<[M, 64], f32>, !tensor_op.tensor<[M, 64], f32>, !tensor_op.tensor<[M, 64], f32>) -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.where' condition must be a boolean (i1) tensor, got f32

// -----

func.func @where_branch_types(%c : !tensor_op.tensor<[1, 64], i1>, %x : !tensor_op.tensor<[M, 64], f32>, %y : !tensor_op.tensor<[1], f16>) {
  %0 = tensor_op.where %c, %x, %y : (!tensor_op.tensor<[1, 64], i1>, !tensor_op.tensor<[M, 64], f32>, !tensor_op.tensor<[1], f16>) -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.where' operands have different element types (f32 vs f16)

// -----

func.func @where_shapes(%c : !tensor_op.tensor<[M, 32], i1>, %x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.where %c, %x, %x : (!tensor_op.tensor<[M, 32], i1>, !tensor_op.tensor<[M, 64], f32>, !tensor_op.tensor<[M, 64], f32>) -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.where': dimension 1 does not broadcast (32 vs 64)

// -----

func.func @masked_fill_float_mask(%x : !tensor_op.tensor<[M, 64], f32>, %m : !tensor_op.tensor<[M, 64], f16>) {
  %0 = tensor_op.masked_fill %x, %m {value = 0xfff0000000000000 : f64} : (!tensor_op.tensor<[M, 64], f32>, !tensor_op.tensor<[M, 64], f16>) -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.masked_fill' mask must be a boolean (i1) tensor, got f16

// -----

func.func @masked_fill_nan(%x : !tensor_op.tensor<[M, 64], f32>, %m : !tensor_op.tensor<[1, 64], i1>) {
  %0 = tensor_op.masked_fill %x, %m {value = 0x7ff8000000000000 : f64} : (!tensor_op.tensor<[M, 64], f32>, !tensor_op.tensor<[1, 64], i1>) -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.masked_fill' value must be a number, got NaN

// -----

func.func @masked_fill_shapes(%x : !tensor_op.tensor<[M, 64], f32>, %m : !tensor_op.tensor<[M, 32], i1>) {
  %0 = tensor_op.masked_fill %x, %m {value = 0.0 : f64} : (!tensor_op.tensor<[M, 64], f32>, !tensor_op.tensor<[M, 32], i1>) -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.masked_fill': dimension 1 does not broadcast (64 vs 32)

// -----

func.func @masked_fill_of_a_mask(%x : !tensor_op.tensor<[M, 64], i1>, %m : !tensor_op.tensor<[M, 64], i1>) {
  %0 = tensor_op.masked_fill %x, %m {value = 1.0 : f64} : (!tensor_op.tensor<[M, 64], i1>, !tensor_op.tensor<[M, 64], i1>) -> !tensor_op.tensor<[M, 64], i1>
  func.return
}

// CHECK: {{^}}'tensor_op.masked_fill' fills floating-point tensors, got i1

// -----

func.func @compare_predicate(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.compare %x {predicate = "is", value = 0.0 : f64} : !tensor_op.tensor<[M, 64], f32> -> !tensor_op.tensor<[M, 64], i1>
  func.return
}

// CHECK: {{^}}'tensor_op.compare' predicate must be one of eq, ne, lt, le, gt, ge, got 'is'

// -----

func.func @compare_nan(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.compare %x {predicate = "eq", value = 0x7ff8000000000000 : f64} : !tensor_op.tensor<[M, 64], f32> -> !tensor_op.tensor<[M, 64], i1>
  func.return
}

// CHECK: {{^}}'tensor_op.compare' value must be a number, got NaN

// -----

func.func @compare_a_mask(%x : !tensor_op.tensor<[M, 64], i1>) {
  %0 = tensor_op.compare %x {predicate = "eq", value = 0.0 : f64} : !tensor_op.tensor<[M, 64], i1> -> !tensor_op.tensor<[M, 64], i1>
  func.return
}

// CHECK: {{^}}'tensor_op.compare' compares floating-point tensors, got i1

// -----

func.func @compare_result_type(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.compare %x {predicate = "lt", value = 0.0 : f64} : !tensor_op.tensor<[M, 64], f32> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: {{^}}'tensor_op.compare' result element type f32 should be i1

