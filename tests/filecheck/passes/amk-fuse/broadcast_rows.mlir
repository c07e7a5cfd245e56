// RUN: amk-opt %s --split-input-file -p amk-fuse | filecheck %s

// A mask's arithmetic over its own broadcast rows [B, 1, 1, S] before it meets the scores [B, H, T, S]: one group,
// whose iteration space is the scores' (the group's first op is the mask's).

func.func @mask_arithmetic(%s : !tensor_op.tensor<[B, H, T, 64], f32>, %m : !tensor_op.tensor<[B, 1, 1, 64], f32>) -> !tensor_op.tensor<[B, H, T, 64], f32> {
  %e = tensor_op.scale %m {factor = -10000.0 : f64} : !tensor_op.tensor<[B, 1, 1, 64], f32>
  %a = tensor_op.add %s, %e : (!tensor_op.tensor<[B, H, T, 64], f32>, !tensor_op.tensor<[B, 1, 1, 64], f32>) -> !tensor_op.tensor<[B, H, T, 64], f32>
  %p = tensor_op.softmax %a {axis = -1 : i64} : !tensor_op.tensor<[B, H, T, 64], f32>
  func.return %p : !tensor_op.tensor<[B, H, T, 64], f32>
}

// CHECK-LABEL: func.func @mask_arithmetic
// CHECK-NEXT:    %p = tensor_op.fused %m, %s
// CHECK:           tensor_op.scale
// CHECK-NEXT:      tensor_op.add
// CHECK-NEXT:      tensor_op.softmax
// CHECK-NEXT:      tensor_op.yield

// -----

// Returned too, the mask's arithmetic is a kernel of its own: a kernel's tiles hold the space's rows, which cannot be
// written out as the mask's.

func.func @mask_returned(%s : !tensor_op.tensor<[B, H, T, 64], f32>, %m : !tensor_op.tensor<[B, 1, 1, 64], f32>) -> (!tensor_op.tensor<[B, H, T, 64], f32>, !tensor_op.tensor<[B, 1, 1, 64], f32>) {
  %e = tensor_op.scale %m {factor = -10000.0 : f64} : !tensor_op.tensor<[B, 1, 1, 64], f32>
  %a = tensor_op.add %s, %e : (!tensor_op.tensor<[B, H, T, 64], f32>, !tensor_op.tensor<[B, 1, 1, 64], f32>) -> !tensor_op.tensor<[B, H, T, 64], f32>
  %p = tensor_op.softmax %a {axis = -1 : i64} : !tensor_op.tensor<[B, H, T, 64], f32>
  func.return %p, %e : !tensor_op.tensor<[B, H, T, 64], f32>, !tensor_op.tensor<[B, 1, 1, 64], f32>
}

// CHECK-LABEL: func.func @mask_returned
// CHECK-NEXT:    %e = tensor_op.fused %m
// CHECK-NEXT:    ^{{.*}}(%m_1: !tensor_op.tensor<[B, 1, 1, 64], f32>):
// CHECK-NEXT:      %e_1 = tensor_op.scale %m_1
// CHECK-NEXT:      tensor_op.yield %e_1
// CHECK-NEXT:    }
// CHECK-NEXT:    %p = tensor_op.fused %s, %e
