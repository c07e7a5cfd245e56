// RUN: amk-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// Malformed symbolic dimensions are parse errors that point at the dimension.

func.func @bad_dim(%x : !tensor_op.tensor<[M +, 4], f32>) {
  func.return
}

// CHECK: not a dimension expression: 'M +'

// -----

func.func @empty_dim(%x : !tensor_op.tensor<[M, ], f32>) {
  func.return
}

// CHECK: expected a dimension expression

// -----

func.func @missing_element_type(%x : !tensor_op.tensor<[M, 4]>) {
  func.return
}

// CHECK: Expected ','

// -----

func.func @unbalanced(%x : !tensor_op.tensor<[cdiv(M, 64], f32>) {
  func.return
}

// CHECK: not a dimension expression: 'cdiv ( M , 64 ]'
