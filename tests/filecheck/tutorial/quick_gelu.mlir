// RUN: python %S/../../../examples/tutorial_fusion_pass.py opt %s --split-input-file -p tutorial-fuse-quick-gelu | filecheck %s
// RUN: python %S/../../../examples/tutorial_fusion_pass.py opt %s --split-input-file -p tutorial-fuse-quick-gelu,amk-fuse | filecheck %s --check-prefix=FUSED
// RUN: python %S/../../../examples/tutorial_fusion_pass.py opt %s --split-input-file -p tutorial-fuse-quick-gelu,amk-fuse,amk-tile,amk-stage,amk-emit-triton -t triton | filecheck %s --check-prefix=TRITON
// The new op's generic form parses back to the same IR:
// RUN: python %S/../../../examples/tutorial_fusion_pass.py opt %s --split-input-file -p tutorial-fuse-quick-gelu --print-op-generic | python %S/../../../examples/tutorial_fusion_pass.py opt --split-input-file | filecheck %s

// The tutorial pass (docs/tutorial-fusion-pass.md): x * sigmoid(1.702 * x) becomes tutorial.quick_gelu.

// After a matmul and a bias: the three ops become one, and amk-fuse puts it in the matmul's epilogue.
func.func @mlp(%x : !tensor_op.tensor<[M, 64], f16>, %w : !tensor_op.tensor<[64, 96], f16>, %b : !tensor_op.tensor<[96], f16>) -> !tensor_op.tensor<[M, 96], f16> {
  %h = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64, 96], f16>) -> !tensor_op.tensor<[M, 96], f16>
  %hb = tensor_op.add %h, %b : (!tensor_op.tensor<[M, 96], f16>, !tensor_op.tensor<[96], f16>) -> !tensor_op.tensor<[M, 96], f16>
  %s = tensor_op.scale %hb {factor = 1.702 : f64} : !tensor_op.tensor<[M, 96], f16>
  %g = tensor_op.sigmoid %s : !tensor_op.tensor<[M, 96], f16>
  %y = tensor_op.mul %hb, %g : (!tensor_op.tensor<[M, 96], f16>, !tensor_op.tensor<[M, 96], f16>) -> !tensor_op.tensor<[M, 96], f16>
  func.return %y : !tensor_op.tensor<[M, 96], f16>
}

// CHECK-LABEL: func.func @mlp(
// CHECK-NEXT:    %h = tensor_op.matmul %x, %w
// CHECK-NEXT:    %hb = tensor_op.add %h, %b
// CHECK-NEXT:    %y = tutorial.quick_gelu %hb : !tensor_op.tensor<[M, 96], f16>
// CHECK-NEXT:    func.return %y

// FUSED-LABEL: func.func @mlp(
// FUSED-NEXT:    %y = tensor_op.fused %x, %w, %b :
// FUSED-NEXT:    ^bb0(
// FUSED-NEXT:      %h = tensor_op.matmul
// FUSED-NEXT:      %hb = tensor_op.add %h,
// FUSED-NEXT:      %[[Q:[a-z0-9_]+]] = tutorial.quick_gelu %hb
// FUSED-NEXT:      tensor_op.yield %[[Q]]
// FUSED-NEXT:    }
// FUSED-NEXT:    func.return %y

// The Triton code computes it after the K loop, under a comment naming the op.
// TRITON:      def fused_0_kernel(
// TRITON:        {{.*}} = tl.dot(
// TRITON:        # add
// TRITON-NEXT:   add = acc{{.*}} + b_f32
// TRITON-NEXT:   # quick_gelu
// TRITON-NEXT:   quick_gelu = add * 1.702
// TRITON-NEXT:   quick_gelu_1 = tl.sigmoid(quick_gelu)
// TRITON-NEXT:   quick_gelu_2 = add * quick_gelu_1
// TRITON:        tl.store({{.*}}, quick_gelu_2.to(tl.float16), mask=

// -----

// The mul's operands in the other order: still QuickGELU.
func.func @swapped(%x : !tensor_op.tensor<[8, 32], f32>) -> !tensor_op.tensor<[8, 32], f32> {
  %s = tensor_op.scale %x {factor = 1.702 : f64} : !tensor_op.tensor<[8, 32], f32>
  %g = tensor_op.sigmoid %s : !tensor_op.tensor<[8, 32], f32>
  %y = tensor_op.mul %g, %x : (!tensor_op.tensor<[8, 32], f32>, !tensor_op.tensor<[8, 32], f32>) -> !tensor_op.tensor<[8, 32], f32>
  func.return %y : !tensor_op.tensor<[8, 32], f32>
}

// CHECK-LABEL: func.func @swapped(
// CHECK-NEXT:    %y = tutorial.quick_gelu %x : !tensor_op.tensor<[8, 32], f32>
// CHECK-NEXT:    func.return %y

// -----

// Another factor is another function (x * sigmoid(x) is SiLU): nothing changes.
func.func @other_factor(%x : !tensor_op.tensor<[8, 32], f32>) -> !tensor_op.tensor<[8, 32], f32> {
  %s = tensor_op.scale %x {factor = 1.0 : f64} : !tensor_op.tensor<[8, 32], f32>
  %g = tensor_op.sigmoid %s : !tensor_op.tensor<[8, 32], f32>
  %y = tensor_op.mul %x, %g : (!tensor_op.tensor<[8, 32], f32>, !tensor_op.tensor<[8, 32], f32>) -> !tensor_op.tensor<[8, 32], f32>
  func.return %y : !tensor_op.tensor<[8, 32], f32>
}

// CHECK-LABEL: func.func @other_factor(
// CHECK-NEXT:    %s = tensor_op.scale %x {factor = 1.000000e+00 : f64}
// CHECK-NEXT:    %g = tensor_op.sigmoid %s
// CHECK-NEXT:    %y = tensor_op.mul %x, %g
// CHECK-NOT:     tutorial.quick_gelu

// -----

// The sigmoid gates a different value than the one it multiplies: not QuickGELU.
func.func @other_value(%x : !tensor_op.tensor<[8, 32], f32>, %z : !tensor_op.tensor<[8, 32], f32>) -> !tensor_op.tensor<[8, 32], f32> {
  %s = tensor_op.scale %z {factor = 1.702 : f64} : !tensor_op.tensor<[8, 32], f32>
  %g = tensor_op.sigmoid %s : !tensor_op.tensor<[8, 32], f32>
  %y = tensor_op.mul %x, %g : (!tensor_op.tensor<[8, 32], f32>, !tensor_op.tensor<[8, 32], f32>) -> !tensor_op.tensor<[8, 32], f32>
  func.return %y : !tensor_op.tensor<[8, 32], f32>
}

// CHECK-LABEL: func.func @other_value(
// CHECK-NEXT:    %s = tensor_op.scale %z
// CHECK-NEXT:    %g = tensor_op.sigmoid %s
// CHECK-NEXT:    %y = tensor_op.mul %x, %g
// CHECK-NOT:     tutorial.quick_gelu

// -----

// The gate is also returned: the rewrite happens, and the sigmoid stays for its other user.
func.func @gate_used_twice(%x : !tensor_op.tensor<[8, 32], f32>) -> (!tensor_op.tensor<[8, 32], f32>, !tensor_op.tensor<[8, 32], f32>) {
  %s = tensor_op.scale %x {factor = 1.702 : f64} : !tensor_op.tensor<[8, 32], f32>
  %g = tensor_op.sigmoid %s : !tensor_op.tensor<[8, 32], f32>
  %y = tensor_op.mul %x, %g : (!tensor_op.tensor<[8, 32], f32>, !tensor_op.tensor<[8, 32], f32>) -> !tensor_op.tensor<[8, 32], f32>
  func.return %y, %g : !tensor_op.tensor<[8, 32], f32>, !tensor_op.tensor<[8, 32], f32>
}

// CHECK-LABEL: func.func @gate_used_twice(
// CHECK-NEXT:    %s = tensor_op.scale %x
// CHECK-NEXT:    %g = tensor_op.sigmoid %s
// CHECK-NEXT:    %y = tutorial.quick_gelu %x
// CHECK-NEXT:    func.return %y, %g
