// RUN: amk-opt %s -p amk-fuse,amk-tile,amk-fold-exponent-scales | filecheck %s
// RUN: amk-opt %s -p amk-fuse,amk-tile,amk-fold-exponent-scales,amk-stage,amk-emit-triton | filecheck %s --check-prefix=TRITON

// softmax((q @ k + mask) * 0.69) in bf16: the mask added before the scale may hold bfloat16's lowest value (a query
// row masked whole), so the scaled tile is no matmul's. Its row maximum is still taken before the scale, and the
// kernel gets exact_products: its launches pass enable_fp_fusion=False, so that x * 0.69 - m is not contracted into
// one FMA (at the row's maximum that gives the product's rounding, about 1e31 here, and exp overflows). The scores
// of softmax.mlir, a matmul's tile, keep the FMA.

func.func @masked_first(%q : !tensor_op.tensor<[M, 32], bf16>, %k : !tensor_op.tensor<[32, 64], bf16>, %mask : !tensor_op.tensor<[M, 64], bf16>) -> !tensor_op.tensor<[M, 64], bf16> {
  %0 = tensor_op.matmul %q, %k : (!tensor_op.tensor<[M, 32], bf16>, !tensor_op.tensor<[32, 64], bf16>) -> !tensor_op.tensor<[M, 64], bf16>
  %1 = tensor_op.add %0, %mask : (!tensor_op.tensor<[M, 64], bf16>, !tensor_op.tensor<[M, 64], bf16>) -> !tensor_op.tensor<[M, 64], bf16>
  %2 = tensor_op.scale %1 {factor = 0.69 : f64} : !tensor_op.tensor<[M, 64], bf16>
  %3 = tensor_op.softmax %2 {axis = -1 : i64} : !tensor_op.tensor<[M, 64], bf16>
  func.return %3 : !tensor_op.tensor<[M, 64], bf16>
}

// CHECK:       tiled_loop.kernel @fused_0 attributes {{{.*}}exact_products
// CHECK:         %[[RAW_MAX:[0-9]+]] = tiled_loop.reduce "max"
// CHECK-NEXT:    tiled_loop.binary "mul" %[[RAW_MAX]], %{{[0-9]+}} {origin = "softmax"}
// CHECK-NOT:     tiled_loop.unary "exp2"

// TRITON:      memory_staged.kernel @fused_0 attributes {triton_source = {{.*}}enable_fp_fusion=False
// TRITON-SAME: exact_products
