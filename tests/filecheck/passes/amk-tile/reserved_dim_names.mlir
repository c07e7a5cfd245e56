// RUN: not amk-opt %s -p amk-fuse,amk-tile 2>&1 | filecheck %s 

// A dimension named as amk-tile names its own symbols (here k, its K loop's variable): the loop ran to itself.
func.func @dim_named_k(%x : !tensor_op.tensor<[M, k], f32>, %w : !tensor_op.tensor<[k, 16], f32>) -> !tensor_op.tensor<[M, 16], f32> {
  %h = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, k], f32>, !tensor_op.tensor<[k, 16], f32>) -> !tensor_op.tensor<[M, 16], f32>
  %r = tensor_op.relu %h : !tensor_op.tensor<[M, 16], f32>
  func.return %r : !tensor_op.tensor<[M, 16], f32>
}

// CHECK: amk-opt: error: amk-tile: fused_0: dimension name 'k' is one amk's lowering gives its loop variables (k, n, split, t), program ids (pid_*) or tile parameters (BLOCK_*, SPLIT_*, ...), which the kernel would read instead: rename the dimension
