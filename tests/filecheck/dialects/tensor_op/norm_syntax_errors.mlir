// RUN: amk-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// The norm ops label every optional operand's type (`: T weight TW bias TB -> T`): a type list that does not match
// the operands present, or the old parenthesized `(T, TW) -> T` form, is a parse error.

func.func @weight_type_missing(%x : !tensor_op.tensor<[M, 64], f32>, %g : !tensor_op.tensor<[64], f32>) {
  %0 = tensor_op.layernorm %x weight %g {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 64], f32> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: expected 0 operand types but had 1

// -----

func.func @weight_type_without_operand(%x : !tensor_op.tensor<[M, 64], f32>, %g : !tensor_op.tensor<[64], f32>) {
  %0 = tensor_op.layernorm %x {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 64], f32> weight !tensor_op.tensor<[64], f32> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: expected 1 operand types but had 0

// -----

// The bias operand's type must be labelled `bias`, not `weight`.
func.func @bias_labelled_weight(%x : !tensor_op.tensor<[M, 64], f32>, %b : !tensor_op.tensor<[64], f32>) {
  %0 = tensor_op.layernorm %x bias %b {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 64], f32> weight !tensor_op.tensor<[64], f32> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: expected 1 operand types but had 0

// -----

func.func @labels_out_of_order(%x : !tensor_op.tensor<[M, 64], f32>, %g : !tensor_op.tensor<[64], f32>, %b : !tensor_op.tensor<[64], f32>) {
  %0 = tensor_op.layernorm %x weight %g bias %b {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 64], f32> bias !tensor_op.tensor<[64], f32> weight !tensor_op.tensor<[64], f32> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: Expected '->'

// -----

// The old syntax: `(T, TW)` now reads as one (function) type, so the parser stops at the next line.
func.func @old_parenthesized_types(%x : !tensor_op.tensor<[M, 64], f32>, %g : !tensor_op.tensor<[64], f32>) {
  %0 = tensor_op.layernorm %x weight %g {eps = 1.0e-05 : f64} : (!tensor_op.tensor<[M, 64], f32>, !tensor_op.tensor<[64], f32>) -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: Expected '->'

// -----

func.func @rmsnorm_weight_type_missing(%x : !tensor_op.tensor<[M, 64], f32>, %g : !tensor_op.tensor<[64], f32>) {
  %0 = tensor_op.rmsnorm %x weight %g {eps = 1.0e-06 : f64} : !tensor_op.tensor<[M, 64], f32> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: expected 0 operand types but had 1

// -----

// rmsnorm has no bias.
func.func @rmsnorm_bias(%x : !tensor_op.tensor<[M, 64], f32>, %b : !tensor_op.tensor<[64], f32>) {
  %0 = tensor_op.rmsnorm %x bias %b {eps = 1.0e-06 : f64} : !tensor_op.tensor<[M, 64], f32> bias !tensor_op.tensor<[64], f32> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK: Expected ':'
