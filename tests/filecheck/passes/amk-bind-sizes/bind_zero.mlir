// RUN: amk-opt %s -p 'amk-bind-sizes{sizes="s=0"}' | filecheck %s
// RUN: not amk-opt %s -p 'amk-bind-sizes{sizes="s=-1"}' 2>&1 | filecheck %s --check-prefix=ERROR
// RUN: not amk-opt %s -p 'amk-bind-sizes{sizes="s=0,T=8,s=4"}' 2>&1 | filecheck %s --check-prefix=TWICE

// A prefill from an empty key cache: the keys are the cache (length s) concatenated with the prompt's T, so s = 0
// leaves every dim positive and is bound like any other value.
func.func @prefill(%q : !tensor_op.tensor<[T, 64], f16>, %k : !tensor_op.tensor<[s + T, 64], f16>) -> !tensor_op.tensor<[T, s + T], f16> {
  %0 = tensor_op.matmul %q, %k {transpose_rhs = true} : (!tensor_op.tensor<[T, 64], f16>, !tensor_op.tensor<[s + T, 64], f16>) -> !tensor_op.tensor<[T, s + T], f16>
  %1 = tensor_op.softmax %0 {axis = -1 : i64} : !tensor_op.tensor<[T, s + T], f16>
  func.return %1 : !tensor_op.tensor<[T, s + T], f16>
}

// CHECK:       func.func @prefill(%q: !tensor_op.tensor<[T, 64], f16>, %k: !tensor_op.tensor<[T, 64], f16>) -> !tensor_op.tensor<[T, T], f16> {
// CHECK-NEXT:    %0 = tensor_op.matmul %q, %k {transpose_rhs = true} : (!tensor_op.tensor<[T, 64], f16>, !tensor_op.tensor<[T, 64], f16>) -> !tensor_op.tensor<[T, T], f16>

// ERROR: amk-bind-sizes: sizes must be SYMBOL=VALUE pairs separated by commas, each value a non-negative integer (s0=16,s1=1); got 's=-1' in 's=-1'

// A size given two values (the last one was bound, silently).
// TWICE: amk-bind-sizes: sizes gives s two values (0 and 4) in 's=0,T=8,s=4'
