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

// CHECK: not a dimension expression: 'cdiv ( M , 64 ]' (use integers, names, + - * / and parentheses)

// -----

// Regression tests: these malformed dimensions used to escape amk.symbolic.parse_sympy as Python exceptions
// (AttributeError, TokenError, TypeError) and kill amk-opt with a traceback; they are now parse diagnostics.

func.func @attribute_access(%x : !tensor_op.tensor<[M.foo], f32>) {
  func.return
}

// CHECK: not a dimension expression: 'M.foo' (use integers, names, + - * / and parentheses)

// -----

func.func @unclosed_paren(%x : !tensor_op.tensor<[(M, 4], f32>) {
  func.return
}

// CHECK: not a dimension expression: '( M , 4 ]'

// -----

func.func @stray_paren(%x : !tensor_op.tensor<[M), 4], f32>) {
  func.return
}

// CHECK: not a dimension expression: 'M ) , 4 ]{{.*}}' (use integers, names, + - * / and parentheses)

// -----

func.func @subscript(%x : !tensor_op.tensor<[M[0], 4], f32>) {
  func.return
}

// CHECK: not a dimension expression: 'M [ 0 ]' (use integers, names, + - * / and parentheses)

// -----

func.func @dangling_power(%x : !tensor_op.tensor<[M**, 4], f32>) {
  func.return
}

// CHECK: not a dimension expression: 'M * *' (SyntaxError)

// -----

func.func @keyword(%x : !tensor_op.tensor<[lambda, 4], f32>) {
  func.return
}

// CHECK: not a dimension expression: 'lambda' ('lambda' is not a dimension name)
