// RUN: amk-opt %s -p 'amk-bind-sizes{sizes="T=512,D=64"}' | filecheck %s
// RUN: amk-opt %s -p 'amk-bind-sizes{sizes="T=512,D=64"},amk-fuse,amk-tile' | filecheck %s --check-prefix=TILE
// RUN: not amk-opt %s -p 'amk-bind-sizes{sizes="T=0"}' 2>&1 | filecheck %s --check-prefix=ERROR
// RUN: not amk-opt %s -p 'amk-bind-sizes{sizes="Z=16"}' 2>&1 | filecheck %s --check-prefix=UNKNOWN

// amk-bind-sizes writes the values of bound symbols into every tensor type: the function's signature and every op's
// result. Unbound symbols (S) stay. The passes after it then see numbers: amk-tile's loops over the columns have
// constant bounds.
func.func @scores(%q : !tensor_op.tensor<[S, D], f16>, %k : !tensor_op.tensor<[T, D], f16>, %r : !tensor_op.tensor<[S, T], f16>) -> !tensor_op.tensor<[S, T], f16> {
  %0 = tensor_op.matmul %q, %k {transpose_rhs = true} : (!tensor_op.tensor<[S, D], f16>, !tensor_op.tensor<[T, D], f16>) -> !tensor_op.tensor<[S, T], f16>
  %1 = tensor_op.add %0, %r : (!tensor_op.tensor<[S, T], f16>, !tensor_op.tensor<[S, T], f16>) -> !tensor_op.tensor<[S, T], f16>
  %2 = tensor_op.softmax %1 {axis = -1 : i64} : !tensor_op.tensor<[S, T], f16>
  func.return %2 : !tensor_op.tensor<[S, T], f16>
}

// CHECK:       func.func @scores(%q: !tensor_op.tensor<[S, 64], f16>, %k: !tensor_op.tensor<[512, 64], f16>, %r: !tensor_op.tensor<[S, 512], f16>) -> !tensor_op.tensor<[S, 512], f16> {
// CHECK-NEXT:    %0 = tensor_op.matmul %q, %k {transpose_rhs = true} : (!tensor_op.tensor<[S, 64], f16>, !tensor_op.tensor<[512, 64], f16>) -> !tensor_op.tensor<[S, 512], f16>
// CHECK-NEXT:    %1 = tensor_op.add %0, %r : (!tensor_op.tensor<[S, 512], f16>, !tensor_op.tensor<[S, 512], f16>) -> !tensor_op.tensor<[S, 512], f16>
// CHECK-NEXT:    %2 = tensor_op.softmax %1 {axis = -1 : i64} : !tensor_op.tensor<[S, 512], f16>

// TILE:        tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(S, BLOCK_M), cdiv(512, BLOCK_N*cdiv(cdiv(512, BLOCK_N), SPLIT_N))]>

// ERROR: amk-bind-sizes: sizes 'T=0' make the dim T empty (0): a size is bound to 0 only where it appears inside expressions that stay positive
// UNKNOWN: amk-bind-sizes: no tensor type has the size Z; the module's symbolic sizes: D, S, T
