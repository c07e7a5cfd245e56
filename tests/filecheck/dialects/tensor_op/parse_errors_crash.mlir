// Known bug: some malformed dimensions escape as Python exceptions (here AttributeError) from
// amk.symbolic.parse_sympy instead of becoming parse diagnostics, so amk-opt dies with a traceback.
// XFAIL: *
// RUN: amk-opt %s --split-input-file --parsing-diagnostics | filecheck %s

func.func @attribute_access(%x : !tensor_op.tensor<[M.foo], f32>) {
  func.return
}

// CHECK: not a dimension expression
