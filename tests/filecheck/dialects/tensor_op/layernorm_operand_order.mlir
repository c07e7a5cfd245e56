// Regression test: the generic form lists layernorm operands as input, weight, bias (IRDL once ordered them
// [bias, input, weight] because `bias` was declared in the subclass, which also broke LayerNormOp.__init__).
// RUN: amk-opt %s --split-input-file --print-op-generic | filecheck %s

func.func @layernorm(%x : !tensor_op.tensor<[M, 64], f32>, %g : !tensor_op.tensor<[64], f32>, %b : !tensor_op.tensor<[64], f32>) {
  %0 = tensor_op.layernorm %x weight %g bias %b {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 64], f32> weight !tensor_op.tensor<[64], f32> bias !tensor_op.tensor<[64], f32> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK-LABEL: "func.func"() <{sym_name = "layernorm"
// CHECK: "tensor_op.layernorm"(%x, %g, %b) <{eps = 1.000000e-05 : f64, operandSegmentSizes = array<i32: 1, 1, 1>}>

// -----

func.func @layernorm_weight_only(%x : !tensor_op.tensor<[M, 64], f32>, %g : !tensor_op.tensor<[64], f32>) {
  %0 = tensor_op.layernorm %x weight %g {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 64], f32> weight !tensor_op.tensor<[64], f32> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK-LABEL: "func.func"() <{sym_name = "layernorm_weight_only"
// CHECK: "tensor_op.layernorm"(%x, %g) <{eps = 1.000000e-05 : f64, operandSegmentSizes = array<i32: 1, 1, 0>}>

// -----

func.func @layernorm_plain(%x : !tensor_op.tensor<[M, 64], f32>) {
  %0 = tensor_op.layernorm %x {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 64], f32> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK-LABEL: "func.func"() <{sym_name = "layernorm_plain"
// CHECK: "tensor_op.layernorm"(%x) <{eps = 1.000000e-05 : f64, operandSegmentSizes = array<i32: 1, 0, 0>}>

// -----

func.func @layernorm_bias_only(%x : !tensor_op.tensor<[M, 64], f32>, %b : !tensor_op.tensor<[64], f32>) {
  %0 = tensor_op.layernorm %x bias %b {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 64], f32> bias !tensor_op.tensor<[64], f32> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK-LABEL: "func.func"() <{sym_name = "layernorm_bias_only"
// CHECK: "tensor_op.layernorm"(%x, %b) <{eps = 1.000000e-05 : f64, operandSegmentSizes = array<i32: 1, 0, 1>}>

// -----

func.func @rmsnorm(%x : !tensor_op.tensor<[M, 64], f32>, %g : !tensor_op.tensor<[64], f32>) {
  %0 = tensor_op.rmsnorm %x weight %g {eps = 1.0e-06 : f64} : !tensor_op.tensor<[M, 64], f32> weight !tensor_op.tensor<[64], f32> -> !tensor_op.tensor<[M, 64], f32>
  %1 = tensor_op.rmsnorm %x {eps = 1.0e-06 : f64} : !tensor_op.tensor<[M, 64], f32> -> !tensor_op.tensor<[M, 64], f32>
  func.return
}

// CHECK-LABEL: "func.func"() <{sym_name = "rmsnorm"
// CHECK: "tensor_op.rmsnorm"(%x, %g) <{eps = 1.000000e-06 : f64, operandSegmentSizes = array<i32: 1, 1>}>
// CHECK: "tensor_op.rmsnorm"(%x) <{eps = 1.000000e-06 : f64, operandSegmentSizes = array<i32: 1, 0>}>
