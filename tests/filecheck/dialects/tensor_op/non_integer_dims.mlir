// RUN: not amk-opt %s 2>&1 | filecheck %s
// NO-ROUNDTRIP: the input is what the verifier refuses, so it has no printed form

// A dimension is a whole number of at least 1: a launcher sized 3/2's buffer by its floor (one row) while the kernel
// wrote the rows it was given, past the buffer's end.
func.func @half(%x : !tensor_op.tensor<[3/2, 4], f32>) {
  func.return
}

// CHECK: amk-opt: error: tensor_op.tensor: dimension 3/2 is not a whole number of at least 1 (write floor(M/2) or cdiv(M, 2) for a quotient)

