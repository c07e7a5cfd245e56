// RUN: amk-opt %s -p 'amk-fuse{vendor_gemm=true}' | filecheck %s

// With vendor_gemm the matmul joins no group: it stays a tensor_op.matmul of the function, which the runtime hands
// to the vendor library (cuBLAS, through PyTorch), and the bias, GELU and LayerNorm after it fuse into one group of
// their own (amk-tile makes it one row_resident pass over the product). The autotuner times this program against
// the fully fused one.

func.func @matmul_gelu_layernorm(%x : !tensor_op.tensor<[M, 256], f16>, %w : !tensor_op.tensor<[256, 512], f16>, %bias : !tensor_op.tensor<[512], f16>, %g : !tensor_op.tensor<[512], f16>, %b : !tensor_op.tensor<[512], f16>) -> !tensor_op.tensor<[M, 512], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 256], f16>, !tensor_op.tensor<[256, 512], f16>) -> !tensor_op.tensor<[M, 512], f16>
  %1 = tensor_op.add %0, %bias : (!tensor_op.tensor<[M, 512], f16>, !tensor_op.tensor<[512], f16>) -> !tensor_op.tensor<[M, 512], f16>
  %2 = tensor_op.gelu %1 : !tensor_op.tensor<[M, 512], f16>
  %3 = tensor_op.layernorm %2 weight %g bias %b {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 512], f16> weight !tensor_op.tensor<[512], f16> bias !tensor_op.tensor<[512], f16> -> !tensor_op.tensor<[M, 512], f16>
  func.return %3 : !tensor_op.tensor<[M, 512], f16>
}

// CHECK-LABEL: func.func @matmul_gelu_layernorm(
// CHECK-NEXT:    %[[MM:[0-9]+]] = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 256], f16>, !tensor_op.tensor<[256, 512], f16>) -> !tensor_op.tensor<[M, 512], f16>
// CHECK-NEXT:    %[[F:[0-9]+]] = tensor_op.fused %[[MM]], %bias, %g, %b : ({{.*}}) -> !tensor_op.tensor<[M, 512], f16> {
// CHECK-NEXT:    ^bb0(%[[Y:[a-z0-9_]+]]: !tensor_op.tensor<[M, 512], f16>, %{{.*}}):
// CHECK-NEXT:      %[[ADD:[0-9]+]] = tensor_op.add %[[Y]], %{{[a-z0-9_]+}} :
// CHECK-NEXT:      %[[GELU:[0-9]+]] = tensor_op.gelu %[[ADD]] :
// CHECK-NEXT:      %[[LN:[0-9]+]] = tensor_op.layernorm %[[GELU]] weight
// CHECK-NEXT:      tensor_op.yield %[[LN]] : !tensor_op.tensor<[M, 512], f16>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]] : !tensor_op.tensor<[M, 512], f16>
