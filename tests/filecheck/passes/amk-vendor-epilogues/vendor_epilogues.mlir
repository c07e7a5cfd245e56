// RUN: amk-opt %s --split-input-file -p amk-vendor-epilogues | filecheck %s

// GPT-2's MLP: the first Linear's bias and tanh GELU in its epilogue, the second Linear's bias in its own.
func.func @gpt2_mlp(%x : !tensor_op.tensor<[M, 64], f16>, %w1 : !tensor_op.tensor<[256, 64], f16>, %b1 : !tensor_op.tensor<[256], f16>, %w2 : !tensor_op.tensor<[64, 256], f16>, %b2 : !tensor_op.tensor<[64], f16>) -> !tensor_op.tensor<[M, 64], f16> {
  %0 = tensor_op.matmul %x, %w1 {transpose_rhs = true} : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[256, 64], f16>) -> !tensor_op.tensor<[M, 256], f16>
  %1 = tensor_op.add %0, %b1 : (!tensor_op.tensor<[M, 256], f16>, !tensor_op.tensor<[256], f16>) -> !tensor_op.tensor<[M, 256], f16>
  %2 = tensor_op.gelu %1 {approximate = "tanh"} : !tensor_op.tensor<[M, 256], f16>
  %3 = tensor_op.matmul %2, %w2 {transpose_rhs = true} : (!tensor_op.tensor<[M, 256], f16>, !tensor_op.tensor<[64, 256], f16>) -> !tensor_op.tensor<[M, 64], f16>
  %4 = tensor_op.add %b2, %3 : (!tensor_op.tensor<[64], f16>, !tensor_op.tensor<[M, 64], f16>) -> !tensor_op.tensor<[M, 64], f16>
  func.return %4 : !tensor_op.tensor<[M, 64], f16>
}

// CHECK-LABEL: func.func @gpt2_mlp
// CHECK-NEXT:    %[[H:[0-9]+]] = tensor_op.linear %x, %w1, %b1 {activation = "gelu_tanh"} : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[256, 64], f16>, !tensor_op.tensor<[256], f16>) -> !tensor_op.tensor<[M, 256], f16>
// CHECK-NEXT:    %[[Y:[0-9]+]] = tensor_op.linear %[[H]], %w2, %b2 : (!tensor_op.tensor<[M, 256], f16>, !tensor_op.tensor<[64, 256], f16>, !tensor_op.tensor<[64], f16>) -> !tensor_op.tensor<[M, 64], f16>
// CHECK-NEXT:    func.return %[[Y]]

// -----

// OPT's ReLU, on a batch of sequences.
func.func @relu(%x : !tensor_op.tensor<[B, S, 64], bf16>, %w : !tensor_op.tensor<[128, 64], bf16>, %b : !tensor_op.tensor<[128], bf16>) -> !tensor_op.tensor<[B, S, 128], bf16> {
  %0 = tensor_op.matmul %x, %w {transpose_rhs = true} : (!tensor_op.tensor<[B, S, 64], bf16>, !tensor_op.tensor<[128, 64], bf16>) -> !tensor_op.tensor<[B, S, 128], bf16>
  %1 = tensor_op.add %0, %b : (!tensor_op.tensor<[B, S, 128], bf16>, !tensor_op.tensor<[128], bf16>) -> !tensor_op.tensor<[B, S, 128], bf16>
  %2 = tensor_op.relu %1 : !tensor_op.tensor<[B, S, 128], bf16>
  func.return %2 : !tensor_op.tensor<[B, S, 128], bf16>
}

// CHECK-LABEL: func.func @relu
// CHECK-NEXT:    %[[Y:[0-9]+]] = tensor_op.linear %x, %w, %b {activation = "relu"}
// CHECK-NEXT:    func.return %[[Y]]

// -----

// A ReLU that a residual add reads: left alone, the bias and the ReLU in the residual's kernel (amk-fuse's), which
// reads the product anyway.
func.func @relu_then_residual(%x : !tensor_op.tensor<[M, 64], f16>, %w : !tensor_op.tensor<[64, 64], f16>, %b : !tensor_op.tensor<[64], f16>, %r : !tensor_op.tensor<[M, 64], f16>) -> !tensor_op.tensor<[M, 64], f16> {
  %0 = tensor_op.matmul %x, %w {transpose_rhs = true} : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64, 64], f16>) -> !tensor_op.tensor<[M, 64], f16>
  %1 = tensor_op.add %0, %b : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64], f16>) -> !tensor_op.tensor<[M, 64], f16>
  %2 = tensor_op.relu %1 : !tensor_op.tensor<[M, 64], f16>
  %3 = tensor_op.add %2, %r : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[M, 64], f16>) -> !tensor_op.tensor<[M, 64], f16>
  func.return %3 : !tensor_op.tensor<[M, 64], f16>
}

// CHECK-LABEL: func.func @relu_then_residual
// CHECK-NEXT:    %0 = tensor_op.matmul %x, %w {transpose_rhs = true}
// CHECK-NEXT:    %1 = tensor_op.add %0, %b
// CHECK-NEXT:    %2 = tensor_op.relu %1 :

// -----

// Exact GELU (cuBLASLt's is the tanh form) and a sum read twice: left alone, the bias in the kernel of the ops that
// read the sum (amk-fuse's), which reads the product anyway.
func.func @exact_gelu(%x : !tensor_op.tensor<[M, 64], f16>, %w : !tensor_op.tensor<[64, 64], f16>, %b : !tensor_op.tensor<[64], f16>) -> (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[M, 64], f16>) {
  %0 = tensor_op.matmul %x, %w {transpose_rhs = true} : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64, 64], f16>) -> !tensor_op.tensor<[M, 64], f16>
  %1 = tensor_op.add %0, %b : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64], f16>) -> !tensor_op.tensor<[M, 64], f16>
  %2 = tensor_op.gelu %1 : !tensor_op.tensor<[M, 64], f16>
  %3 = tensor_op.relu %1 : !tensor_op.tensor<[M, 64], f16>
  func.return %2, %3 : !tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[M, 64], f16>
}

// CHECK-LABEL: func.func @exact_gelu
// CHECK-NEXT:    %0 = tensor_op.matmul %x, %w {transpose_rhs = true}
// CHECK-NEXT:    %1 = tensor_op.add %0, %b
// CHECK-NEXT:    %2 = tensor_op.gelu %1 :
// CHECK-NEXT:    %3 = tensor_op.relu %1 :

// -----

// Hugging Face's GPT-2 MLP: Conv1D's weights are [K, N] (torch.addmm(b, x, w)), no transpose.
func.func @conv1d(%x : !tensor_op.tensor<[B, S, 64], f16>, %w1 : !tensor_op.tensor<[64, 256], f16>, %b1 : !tensor_op.tensor<[256], f16>, %w2 : !tensor_op.tensor<[256, 64], f16>, %b2 : !tensor_op.tensor<[64], f16>) -> !tensor_op.tensor<[B, S, 64], f16> {
  %0 = tensor_op.matmul %x, %w1 : (!tensor_op.tensor<[B, S, 64], f16>, !tensor_op.tensor<[64, 256], f16>) -> !tensor_op.tensor<[B, S, 256], f16>
  %1 = tensor_op.add %0, %b1 : (!tensor_op.tensor<[B, S, 256], f16>, !tensor_op.tensor<[256], f16>) -> !tensor_op.tensor<[B, S, 256], f16>
  %2 = tensor_op.gelu %1 {approximate = "tanh"} : !tensor_op.tensor<[B, S, 256], f16>
  %3 = tensor_op.matmul %2, %w2 : (!tensor_op.tensor<[B, S, 256], f16>, !tensor_op.tensor<[256, 64], f16>) -> !tensor_op.tensor<[B, S, 64], f16>
  %4 = tensor_op.add %3, %b2 : (!tensor_op.tensor<[B, S, 64], f16>, !tensor_op.tensor<[64], f16>) -> !tensor_op.tensor<[B, S, 64], f16>
  func.return %4 : !tensor_op.tensor<[B, S, 64], f16>
}

// CHECK-LABEL: func.func @conv1d
// CHECK-NEXT:    %[[H:[0-9]+]] = tensor_op.linear %x, %w1, %b1 {activation = "gelu_tanh", weight_layout = "kn"} : (!tensor_op.tensor<[B, S, 64], f16>, !tensor_op.tensor<[64, 256], f16>, !tensor_op.tensor<[256], f16>) -> !tensor_op.tensor<[B, S, 256], f16>
// CHECK-NEXT:    %[[Y:[0-9]+]] = tensor_op.linear %[[H]], %w2, %b2 {weight_layout = "kn"}
// CHECK-NEXT:    func.return %[[Y]]

// -----

// Left alone: a product read by another op too (its bias add is not its one reader), and attention's batched
// product.
func.func @left_alone(%x : !tensor_op.tensor<[M, 64], f16>, %w : !tensor_op.tensor<[64, 64], f16>, %b : !tensor_op.tensor<[64], f16>, %q : !tensor_op.tensor<[B, 8, 64], f16>, %k : !tensor_op.tensor<[B, 8, 64], f16>, %c : !tensor_op.tensor<[8], f16>) -> (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[B, 8, 8], f16>) {
  %0 = tensor_op.matmul %x, %w {transpose_rhs = true} : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64, 64], f16>) -> !tensor_op.tensor<[M, 64], f16>
  %1 = tensor_op.add %0, %b : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64], f16>) -> !tensor_op.tensor<[M, 64], f16>
  %2 = tensor_op.matmul %q, %k {transpose_rhs = true} : (!tensor_op.tensor<[B, 8, 64], f16>, !tensor_op.tensor<[B, 8, 64], f16>) -> !tensor_op.tensor<[B, 8, 8], f16>
  %3 = tensor_op.add %2, %c : (!tensor_op.tensor<[B, 8, 8], f16>, !tensor_op.tensor<[8], f16>) -> !tensor_op.tensor<[B, 8, 8], f16>
  func.return %0, %1, %3 : !tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[B, 8, 8], f16>
}

// CHECK-LABEL: func.func @left_alone
// CHECK-NEXT:    %0 = tensor_op.matmul %x, %w {transpose_rhs = true}
// CHECK-NEXT:    %1 = tensor_op.add %0, %b
// CHECK-NEXT:    %2 = tensor_op.matmul %q, %k {transpose_rhs = true}
// CHECK-NEXT:    %3 = tensor_op.add %2, %c
