// Regression test: the canonical text of a dimension is a fixed point of parse-and-print. `(M+1)*(2*cdiv(N, 64))`
// used to be stored as "2*(M + 1)*cdiv(N, 64)" but re-canonicalized as "(2*M + 2)*cdiv(N, 64)", so the two spellings
// below printed identically yet compared unequal and func.return failed to verify.
// RUN: %roundtrip
// (%roundtrip re-parses the printed form; tests/test_roundtrip_files.py also re-parses the custom form.)

func.func @f(%x : !tensor_op.tensor<[(M+1)*(2*cdiv(N, 64)), 64], f32>) -> !tensor_op.tensor<[(2*M + 2)*cdiv(N, 64), 64], f32> {
  func.return %x : !tensor_op.tensor<[(M+1)*(2*cdiv(N, 64)), 64], f32>
}

// CHECK-LABEL: func.func @f(%x: !tensor_op.tensor<[(2*M + 2)*cdiv(N, 64), 64], f32>) -> !tensor_op.tensor<[(2*M + 2)*cdiv(N, 64), 64], f32> {
// CHECK-NEXT:  func.return %x : !tensor_op.tensor<[(2*M + 2)*cdiv(N, 64), 64], f32>

// -----

// Spellings that sympy groups alike meet at one canonical text, in operand and result types alike. (Only the
// automatic grouping counts: `2*(B*S + S)` and `2*S*(B + 1)` stay different types.)
func.func @g(%x : !tensor_op.tensor<[S*B*2, (K+1)*4], f16>) -> !tensor_op.tensor<[2*B*S, 4*K + 4], f16> {
  %0 = tensor_op.relu %x : !tensor_op.tensor<[B*(2*S), 4*(1 + K)], f16>
  %1 = tensor_op.relu %0 : !tensor_op.tensor<[2*S*B, 4 + 4*K], f16>
  func.return %1 : !tensor_op.tensor<[(B*S)*2, 2*(2*K + 2)], f16>
}

// CHECK-LABEL: func.func @g(%x: !tensor_op.tensor<[2*B*S, 4*K + 4], f16>) -> !tensor_op.tensor<[2*B*S, 4*K + 4], f16> {
// CHECK-NEXT:  %0 = tensor_op.relu %x : !tensor_op.tensor<[2*B*S, 4*K + 4], f16>
// CHECK-NEXT:  %1 = tensor_op.relu %0 : !tensor_op.tensor<[2*B*S, 4*K + 4], f16>
// CHECK-NEXT:  func.return %1 : !tensor_op.tensor<[2*B*S, 4*K + 4], f16>

// -----

// A nested cdiv whose argument regroups when re-parsed.
func.func @h(%x : !tensor_op.tensor<[cdiv(2*(N+1), 64)*(M+1)*2], f32>) -> !tensor_op.tensor<[(2*M + 2)*cdiv(2*N + 2, 64)], f32> {
  func.return %x : !tensor_op.tensor<[cdiv(2*(N+1), 64)*(M+1)*2], f32>
}

// CHECK-LABEL: func.func @h(%x: !tensor_op.tensor<[(2*M + 2)*cdiv(2*N + 2, 64)], f32>) -> !tensor_op.tensor<[(2*M + 2)*cdiv(2*N + 2, 64)], f32> {
// CHECK-NEXT:  func.return %x : !tensor_op.tensor<[(2*M + 2)*cdiv(2*N + 2, 64)], f32>
