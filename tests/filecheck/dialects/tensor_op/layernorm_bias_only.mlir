// Regression test: a layernorm with a bias but no weight used to print as `%x bias %b : (T, TB) -> T`, which the
// custom parser read back with the second type in the weight group ("expected 0 operand types but had 1"). Each
// optional operand's type now carries its own label, so the bias-only form prints and parses back.
// The custom form is printed, parsed back and printed again; layernorm_operand_order.mlir checks the generic form,
// tests/test_roundtrip_files.py the generic -> custom round trip.
// RUN: amk-opt %s --split-input-file | amk-opt --split-input-file | filecheck %s

func.func @layernorm_bias_only(%x : !tensor_op.tensor<[M, 64], f32>, %b : !tensor_op.tensor<[64], f32>) {
  %0 = tensor_op.layernorm %x bias %b {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 64], f32> bias !tensor_op.tensor<[64], f32> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK-LABEL: func.func @layernorm_bias_only
// CHECK-NEXT:  %0 = tensor_op.layernorm %x bias %b {eps = 1.000000e-05 : f64} : !tensor_op.tensor<[M, 64], f32> bias !tensor_op.tensor<[64], f32> -> !tensor_op.tensor<[M, 64], f32>
// CHECK-NEXT:  func.return

// -----

// The bias may be symbolic; it is still labelled in the type list.
func.func @layernorm_bias_only_symbolic(%x : !tensor_op.tensor<[B, S, H*64], bf16>, %b : !tensor_op.tensor<[64*H], bf16>) {
  %0 = tensor_op.layernorm %x bias %b {eps = 1.0e-06 : f64} : !tensor_op.tensor<[B, S, H*64], bf16> bias !tensor_op.tensor<[64*H], bf16> -> !tensor_op.tensor<[B, S, 64*H], bf16>
  func.return
}

// CHECK-LABEL: func.func @layernorm_bias_only_symbolic
// CHECK-NEXT:  %0 = tensor_op.layernorm %x bias %b {eps = 1.000000e-06 : f64} : !tensor_op.tensor<[B, S, 64*H], bf16> bias !tensor_op.tensor<[64*H], bf16> -> !tensor_op.tensor<[B, S, 64*H], bf16>
// CHECK-NEXT:  func.return

