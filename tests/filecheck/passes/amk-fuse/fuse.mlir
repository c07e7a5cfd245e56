// RUN: amk-opt %s --split-input-file -p amk-fuse | filecheck %s

// amk-fuse groups producer->consumer chains of tensor_op ops into tensor_op.fused regions. Fusion never changes
// what the program computes: a group value used outside the group becomes a result of the fused op, and an op
// that cannot join (or would create a cycle) stays outside.

// A matmul seeds a group that grows through its elementwise epilogue (bias add, activation).
func.func @matmul_bias_relu(%x : !tensor_op.tensor<[64, 48], f16>, %w : !tensor_op.tensor<[48, 32], f16>, %b : !tensor_op.tensor<[32], f16>) -> !tensor_op.tensor<[64, 32], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[64, 48], f16>, !tensor_op.tensor<[48, 32], f16>) -> !tensor_op.tensor<[64, 32], f16>
  %1 = tensor_op.add %0, %b : (!tensor_op.tensor<[64, 32], f16>, !tensor_op.tensor<[32], f16>) -> !tensor_op.tensor<[64, 32], f16>
  %2 = tensor_op.relu %1 : !tensor_op.tensor<[64, 32], f16>
  func.return %2 : !tensor_op.tensor<[64, 32], f16>
}

// CHECK-LABEL: func.func @matmul_bias_relu(
// CHECK-NEXT:    %[[F:[0-9]+]] = tensor_op.fused %x, %w, %b : (!tensor_op.tensor<[64, 48], f16>, !tensor_op.tensor<[48, 32], f16>, !tensor_op.tensor<[32], f16>) -> !tensor_op.tensor<[64, 32], f16> {
// CHECK-NEXT:    ^bb0(%[[X:[a-z0-9_]+]]: !tensor_op.tensor<[64, 48], f16>, %[[W:[a-z0-9_]+]]: !tensor_op.tensor<[48, 32], f16>, %[[B:[a-z0-9_]+]]: !tensor_op.tensor<[32], f16>):
// CHECK-NEXT:      %[[MM:[0-9]+]] = tensor_op.matmul %[[X]], %[[W]] :
// CHECK-NEXT:      %[[ADD:[0-9]+]] = tensor_op.add %[[MM]], %[[B]] :
// CHECK-NEXT:      %[[RELU:[0-9]+]] = tensor_op.relu %[[ADD]] :
// CHECK-NEXT:      tensor_op.yield %[[RELU]] : !tensor_op.tensor<[64, 32], f16>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]] : !tensor_op.tensor<[64, 32], f16>

// -----

// A row reduction over the last axis (layernorm) joins the matmul's group.
func.func @matmul_layernorm(%x : !tensor_op.tensor<[M, 256], f16>, %w : !tensor_op.tensor<[256, 512], f16>, %g : !tensor_op.tensor<[512], f16>, %b : !tensor_op.tensor<[512], f16>) -> !tensor_op.tensor<[M, 512], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 256], f16>, !tensor_op.tensor<[256, 512], f16>) -> !tensor_op.tensor<[M, 512], f16>
  %1 = tensor_op.layernorm %0 weight %g bias %b {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 512], f16> weight !tensor_op.tensor<[512], f16> bias !tensor_op.tensor<[512], f16> -> !tensor_op.tensor<[M, 512], f16>
  func.return %1 : !tensor_op.tensor<[M, 512], f16>
}

// CHECK-LABEL: func.func @matmul_layernorm(
// CHECK-NEXT:    %[[F:[0-9]+]] = tensor_op.fused %x, %w, %g, %b : ({{.*}}) -> !tensor_op.tensor<[M, 512], f16> {
// CHECK-NEXT:    ^bb0(%[[X:[a-z0-9_]+]]: !tensor_op.tensor<{{[^>]*}}>, %[[W:[a-z0-9_]+]]: !tensor_op.tensor<{{[^>]*}}>, %[[G:[a-z0-9_]+]]: !tensor_op.tensor<{{[^>]*}}>, %[[B:[a-z0-9_]+]]: !tensor_op.tensor<{{[^>]*}}>):
// CHECK-NEXT:      %[[MM:[0-9]+]] = tensor_op.matmul %[[X]], %[[W]] :
// CHECK-NEXT:      %[[LN:[0-9]+]] = tensor_op.layernorm %[[MM]] weight %[[G]] bias %[[B]] {eps = 1.000000e-05 : f64} :
// CHECK-NEXT:      tensor_op.yield %[[LN]] : !tensor_op.tensor<[M, 512], f16>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]]

// -----

// The same for softmax over the last axis.
func.func @matmul_softmax(%x : !tensor_op.tensor<[M, 64], f16>, %w : !tensor_op.tensor<[64, 128], f16>) -> !tensor_op.tensor<[M, 128], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 64], f16>, !tensor_op.tensor<[64, 128], f16>) -> !tensor_op.tensor<[M, 128], f16>
  %1 = tensor_op.softmax %0 {axis = -1 : i64} : !tensor_op.tensor<[M, 128], f16>
  func.return %1 : !tensor_op.tensor<[M, 128], f16>
}

// CHECK-LABEL: func.func @matmul_softmax(
// CHECK-NEXT:    tensor_op.fused %x, %w :
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      %[[MM:[0-9]+]] = tensor_op.matmul
// CHECK-NEXT:      %[[SM:[0-9]+]] = tensor_op.softmax %[[MM]] {axis = -1 : i64} :
// CHECK-NEXT:      tensor_op.yield %[[SM]]
// CHECK-NEXT:    }

// -----

// An RMSNorm producing the matmul's lhs is absorbed as a prologue.
func.func @rmsnorm_prologue(%x : !tensor_op.tensor<[B*S, 64], f16>, %g : !tensor_op.tensor<[64], f16>, %w : !tensor_op.tensor<[64, 128], f16>) -> !tensor_op.tensor<[B*S, 128], f16> {
  %0 = tensor_op.rmsnorm %x weight %g {eps = 1.0e-06 : f64} : !tensor_op.tensor<[B*S, 64], f16> weight !tensor_op.tensor<[64], f16> -> !tensor_op.tensor<[B*S, 64], f16>
  %1 = tensor_op.matmul %0, %w : (!tensor_op.tensor<[B*S, 64], f16>, !tensor_op.tensor<[64, 128], f16>) -> !tensor_op.tensor<[B*S, 128], f16>
  func.return %1 : !tensor_op.tensor<[B*S, 128], f16>
}

// CHECK-LABEL: func.func @rmsnorm_prologue(
// CHECK-NEXT:    %[[F:[0-9]+]] = tensor_op.fused %x, %g, %w : ({{.*}}) -> !tensor_op.tensor<[B*S, 128], f16> {
// CHECK-NEXT:    ^bb0(%[[X:[a-z0-9_]+]]: !tensor_op.tensor<{{[^>]*}}>, %[[G:[a-z0-9_]+]]: !tensor_op.tensor<{{[^>]*}}>, %[[W:[a-z0-9_]+]]: !tensor_op.tensor<{{[^>]*}}>):
// CHECK-NEXT:      %[[N:[0-9]+]] = tensor_op.rmsnorm %[[X]] weight %[[G]] {eps = 1.000000e-06 : f64} :
// CHECK-NEXT:      %[[MM:[0-9]+]] = tensor_op.matmul %[[N]], %[[W]] :
// CHECK-NEXT:      tensor_op.yield %[[MM]] : !tensor_op.tensor<[B*S, 128], f16>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]]

// -----

// The pre-activation value is also returned: the fused op yields it as a second result.
func.func @multiple_results(%x : !tensor_op.tensor<[64, 48], f16>, %w : !tensor_op.tensor<[48, 32], f16>, %b : !tensor_op.tensor<[32], f16>) -> (!tensor_op.tensor<[64, 32], f16>, !tensor_op.tensor<[64, 32], f16>) {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[64, 48], f16>, !tensor_op.tensor<[48, 32], f16>) -> !tensor_op.tensor<[64, 32], f16>
  %1 = tensor_op.add %0, %b : (!tensor_op.tensor<[64, 32], f16>, !tensor_op.tensor<[32], f16>) -> !tensor_op.tensor<[64, 32], f16>
  %2 = tensor_op.gelu %1 {approximate = "tanh"} : !tensor_op.tensor<[64, 32], f16>
  func.return %2, %1 : !tensor_op.tensor<[64, 32], f16>, !tensor_op.tensor<[64, 32], f16>
}

// CHECK-LABEL: func.func @multiple_results(
// CHECK-NEXT:    %[[PRE:[0-9]+]], %[[ACT:[0-9]+]] = tensor_op.fused %x, %w, %b : ({{.*}}) -> (!tensor_op.tensor<[64, 32], f16>, !tensor_op.tensor<[64, 32], f16>) {
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      %[[MM:[0-9]+]] = tensor_op.matmul
// CHECK-NEXT:      %[[ADD:[0-9]+]] = tensor_op.add %[[MM]],
// CHECK-NEXT:      %[[GELU:[0-9]+]] = tensor_op.gelu %[[ADD]] {approximate = "tanh"}
// CHECK-NEXT:      tensor_op.yield %[[ADD]], %[[GELU]] :
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[ACT]], %[[PRE]] :

// -----

// Softmax over axis 0 is not a row reduction a tile kernel can do: it stays outside, after the fused matmul + relu.
func.func @softmax_axis0_not_fused(%x : !tensor_op.tensor<[64, 48], f16>, %w : !tensor_op.tensor<[48, 32], f16>) -> !tensor_op.tensor<[64, 32], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[64, 48], f16>, !tensor_op.tensor<[48, 32], f16>) -> !tensor_op.tensor<[64, 32], f16>
  %1 = tensor_op.relu %0 : !tensor_op.tensor<[64, 32], f16>
  %2 = tensor_op.softmax %1 {axis = 0 : i64} : !tensor_op.tensor<[64, 32], f16>
  func.return %2 : !tensor_op.tensor<[64, 32], f16>
}

// CHECK-LABEL: func.func @softmax_axis0_not_fused(
// CHECK-NEXT:    %[[F:[0-9]+]] = tensor_op.fused %x, %w :
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      tensor_op.matmul
// CHECK-NEXT:      %[[RELU:[0-9]+]] = tensor_op.relu
// CHECK-NEXT:      tensor_op.yield %[[RELU]]
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[SM:[0-9]+]] = tensor_op.softmax %[[F]] {axis = 0 : i64} : !tensor_op.tensor<[64, 32], f16>
// CHECK-NEXT:    func.return %[[SM]]

// -----

// The add reads the matmul directly and through an unfusable softmax: putting it in the matmul's group would make
// a cycle (group -> softmax -> group), so it forms its own group after the softmax.
func.func @no_cycle(%x : !tensor_op.tensor<[64, 48], f16>, %w : !tensor_op.tensor<[48, 32], f16>) -> !tensor_op.tensor<[64, 32], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[64, 48], f16>, !tensor_op.tensor<[48, 32], f16>) -> !tensor_op.tensor<[64, 32], f16>
  %1 = tensor_op.softmax %0 {axis = 0 : i64} : !tensor_op.tensor<[64, 32], f16>
  %2 = tensor_op.add %0, %1 : (!tensor_op.tensor<[64, 32], f16>, !tensor_op.tensor<[64, 32], f16>) -> !tensor_op.tensor<[64, 32], f16>
  func.return %2 : !tensor_op.tensor<[64, 32], f16>
}

// CHECK-LABEL: func.func @no_cycle(
// CHECK-NEXT:    %[[MMF:[0-9]+]] = tensor_op.fused %x, %w :
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      %[[MM:[0-9]+]] = tensor_op.matmul
// CHECK-NEXT:      tensor_op.yield %[[MM]]
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[SM:[0-9]+]] = tensor_op.softmax %[[MMF]] {axis = 0 : i64}
// CHECK-NEXT:    %[[ADDF:[0-9]+]] = tensor_op.fused %[[MMF]], %[[SM]] :
// CHECK-NEXT:    ^bb0(%[[A:[a-z0-9_]+]]: !tensor_op.tensor<{{[^>]*}}>, %[[S:[a-z0-9_]+]]: !tensor_op.tensor<{{[^>]*}}>):
// CHECK-NEXT:      %[[ADD:[0-9]+]] = tensor_op.add %[[A]], %[[S]] :
// CHECK-NEXT:      tensor_op.yield %[[ADD]]
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[ADDF]]

// -----

// A matmul reading another matmul's (activated) output starts a new group; the relu joins the first as its epilogue.
func.func @two_matmuls(%x : !tensor_op.tensor<[64, 48], f16>, %w : !tensor_op.tensor<[48, 32], f16>, %v : !tensor_op.tensor<[32, 16], f16>) -> !tensor_op.tensor<[64, 16], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[64, 48], f16>, !tensor_op.tensor<[48, 32], f16>) -> !tensor_op.tensor<[64, 32], f16>
  %1 = tensor_op.relu %0 : !tensor_op.tensor<[64, 32], f16>
  %2 = tensor_op.matmul %1, %v : (!tensor_op.tensor<[64, 32], f16>, !tensor_op.tensor<[32, 16], f16>) -> !tensor_op.tensor<[64, 16], f16>
  func.return %2 : !tensor_op.tensor<[64, 16], f16>
}

// CHECK-LABEL: func.func @two_matmuls(
// CHECK-NEXT:    %[[F1:[0-9]+]] = tensor_op.fused %x, %w :
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      tensor_op.matmul
// CHECK-NEXT:      tensor_op.relu
// CHECK-NEXT:      tensor_op.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[F2:[0-9]+]] = tensor_op.fused %[[F1]], %v :
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      tensor_op.matmul
// CHECK-NEXT:      tensor_op.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F2]]

// -----

// Without a matmul, an elementwise chain is fused on its own.
func.func @elementwise_chain(%x : !tensor_op.tensor<[M, N], f32>, %y : !tensor_op.tensor<[M, N], f32>) -> !tensor_op.tensor<[M, N], f32> {
  %0 = tensor_op.mul %x, %y : (!tensor_op.tensor<[M, N], f32>, !tensor_op.tensor<[M, N], f32>) -> !tensor_op.tensor<[M, N], f32>
  %1 = tensor_op.silu %0 : !tensor_op.tensor<[M, N], f32>
  %2 = tensor_op.scale %1 {factor = 0.5 : f64} : !tensor_op.tensor<[M, N], f32>
  func.return %2 : !tensor_op.tensor<[M, N], f32>
}

// CHECK-LABEL: func.func @elementwise_chain(
// CHECK-NEXT:    %[[F:[0-9]+]] = tensor_op.fused %x, %y : ({{.*}}) -> !tensor_op.tensor<[M, N], f32> {
// CHECK-NEXT:    ^bb0(%[[X:[a-z0-9_]+]]: !tensor_op.tensor<{{[^>]*}}>, %[[Y:[a-z0-9_]+]]: !tensor_op.tensor<{{[^>]*}}>):
// CHECK-NEXT:      %[[MUL:[0-9]+]] = tensor_op.mul %[[X]], %[[Y]] :
// CHECK-NEXT:      %[[SILU:[0-9]+]] = tensor_op.silu %[[MUL]] :
// CHECK-NEXT:      %[[SCALE:[0-9]+]] = tensor_op.scale %[[SILU]] {factor = 5.000000e-01 : f64} :
// CHECK-NEXT:      tensor_op.yield %[[SCALE]] : !tensor_op.tensor<[M, N], f32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]]

// -----

// A standalone row reduction seeds a group too, and absorbs what follows it.
func.func @standalone_layernorm(%x : !tensor_op.tensor<[M, 64], f32>, %g : !tensor_op.tensor<[64], f32>) -> !tensor_op.tensor<[M, 64], f32> {
  %0 = tensor_op.layernorm %x weight %g {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 64], f32> weight !tensor_op.tensor<[64], f32> -> !tensor_op.tensor<[M, 64], f32>
  %1 = tensor_op.relu %0 : !tensor_op.tensor<[M, 64], f32>
  func.return %1 : !tensor_op.tensor<[M, 64], f32>
}

// CHECK-LABEL: func.func @standalone_layernorm(
// CHECK-NEXT:    tensor_op.fused %x, %g :
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      %[[LN:[0-9]+]] = tensor_op.layernorm
// CHECK-NEXT:      %[[RELU:[0-9]+]] = tensor_op.relu %[[LN]]
// CHECK-NEXT:      tensor_op.yield %[[RELU]]
// CHECK-NEXT:    }
// CHECK-NOT:     tensor_op.fused

// -----

// A kernel reads each input through one view: x @ x.T would need x as [M, K] lhs tiles and as transposed rhs tiles,
// so the matmul stays outside, and the scale and softmax after it form a kernel of their own.
func.func @gram_not_fused(%x : !tensor_op.tensor<[M, 32], f32>) -> !tensor_op.tensor<[M, M], f32> {
  %0 = tensor_op.matmul %x, %x {transpose_rhs = true} : (!tensor_op.tensor<[M, 32], f32>, !tensor_op.tensor<[M, 32], f32>) -> !tensor_op.tensor<[M, M], f32>
  %1 = tensor_op.scale %0 {factor = 5.000000e-01 : f64} : !tensor_op.tensor<[M, M], f32>
  %2 = tensor_op.softmax %1 {axis = 1 : i64} : !tensor_op.tensor<[M, M], f32>
  func.return %2 : !tensor_op.tensor<[M, M], f32>
}

// CHECK-LABEL: func.func @gram_not_fused(
// CHECK-NEXT:    %[[MM:[0-9]+]] = tensor_op.matmul %x, %x {transpose_rhs = true}
// CHECK-NEXT:    %[[F:[0-9]+]] = tensor_op.fused %[[MM]] :
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      tensor_op.scale
// CHECK-NEXT:      tensor_op.softmax
// CHECK-NEXT:      tensor_op.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]]

// -----

// A row reduction without keepdim is [rows]: PyTorch aligns it with the last dim of a [rows, cols] value (one value
// per column, for a square x), so the mul cannot take it as a per-row value and stays outside.
func.func @unkept_row_sum_times_x(%x : !tensor_op.tensor<[8, 8], f32>) -> !tensor_op.tensor<[8, 8], f32> {
  %0 = tensor_op.reduce_sum %x {axis = 1 : i64} : !tensor_op.tensor<[8, 8], f32> -> !tensor_op.tensor<[8], f32>
  %1 = tensor_op.mul %x, %0 : (!tensor_op.tensor<[8, 8], f32>, !tensor_op.tensor<[8], f32>) -> !tensor_op.tensor<[8, 8], f32>
  func.return %1 : !tensor_op.tensor<[8, 8], f32>
}

// CHECK-LABEL: func.func @unkept_row_sum_times_x(
// CHECK-NEXT:    %[[S:[0-9]+]] = tensor_op.fused %x :
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      tensor_op.reduce_sum
// CHECK-NEXT:      tensor_op.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[M:[0-9]+]] = tensor_op.fused %x, %[[S]] :
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      tensor_op.mul
// CHECK-NEXT:      tensor_op.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[M]]

// -----

// An elementwise op computing an epilogue's other operand and read by nothing else (autocast's cast of a Linear's
// fp32 bias) joins the group: the kernel casts the bias on each tile, instead of a kernel of its own writing the
// bf16 bias it would read back. The cast of the weight (the matmul's rhs, which a kernel reads as an input) does not.
func.func @autocast_bias_cast(%x : !tensor_op.tensor<[M, 64], bf16>, %w : !tensor_op.tensor<[128, 64], f32>, %b : !tensor_op.tensor<[128], f32>) -> !tensor_op.tensor<[M, 128], bf16> {
  %0 = tensor_op.cast %w : !tensor_op.tensor<[128, 64], f32> -> !tensor_op.tensor<[128, 64], bf16>
  %1 = tensor_op.matmul %x, %0 {transpose_rhs = true} : (!tensor_op.tensor<[M, 64], bf16>, !tensor_op.tensor<[128, 64], bf16>) -> !tensor_op.tensor<[M, 128], bf16>
  %2 = tensor_op.cast %b : !tensor_op.tensor<[128], f32> -> !tensor_op.tensor<[128], bf16>
  %3 = tensor_op.add %1, %2 : (!tensor_op.tensor<[M, 128], bf16>, !tensor_op.tensor<[128], bf16>) -> !tensor_op.tensor<[M, 128], bf16>
  %4 = tensor_op.gelu %3 : !tensor_op.tensor<[M, 128], bf16>
  func.return %4 : !tensor_op.tensor<[M, 128], bf16>
}

// CHECK-LABEL: func.func @autocast_bias_cast(
// CHECK-NEXT:    %[[WB:[0-9]+]] = tensor_op.fused %w : (!tensor_op.tensor<[128, 64], f32>) -> !tensor_op.tensor<[128, 64], bf16> {
// CHECK:         %[[F:[0-9]+]] = tensor_op.fused %x, %[[WB]], %b : ({{.*}}) -> !tensor_op.tensor<[M, 128], bf16> {
// CHECK-NEXT:    ^bb0(%[[X:[a-z0-9_]+]]: !tensor_op.tensor<{{[^>]*}}>, %[[W:[a-z0-9_]+]]: !tensor_op.tensor<{{[^>]*}}>, %[[B:[a-z0-9_]+]]: !tensor_op.tensor<[128], f32>):
// CHECK-NEXT:      %[[MM:[0-9]+]] = tensor_op.matmul %[[X]], %[[W]] {transpose_rhs = true} :
// CHECK-NEXT:      %[[BB:[0-9]+]] = tensor_op.cast %[[B]] : !tensor_op.tensor<[128], f32> -> !tensor_op.tensor<[128], bf16>
// CHECK-NEXT:      %[[ADD:[0-9]+]] = tensor_op.add %[[MM]], %[[BB]] :
// CHECK-NEXT:      %[[GELU:[0-9]+]] = tensor_op.gelu %[[ADD]] :
// CHECK-NEXT:      tensor_op.yield %[[GELU]] : !tensor_op.tensor<[M, 128], bf16>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]]

// -----

// A transposed lhs read after the matmul too (x^T @ w + relu(x), or + x) does not share its kernel: it reads each input
// through one view, and the lhs's [K, M] tiles gave the epilogue wrong [M, N] ones (relative error 1.06).
func.func @transposed_lhs_read_by_the_epilogue(%x : !tensor_op.tensor<[48, 48], f32>, %w : !tensor_op.tensor<[48, 48], f32>) -> !tensor_op.tensor<[48, 48], f32> {
  %0 = tensor_op.matmul %x, %w {transpose_lhs = true} : (!tensor_op.tensor<[48, 48], f32>, !tensor_op.tensor<[48, 48], f32>) -> !tensor_op.tensor<[48, 48], f32>
  %1 = tensor_op.relu %x : !tensor_op.tensor<[48, 48], f32>
  %2 = tensor_op.add %0, %1 : (!tensor_op.tensor<[48, 48], f32>, !tensor_op.tensor<[48, 48], f32>) -> !tensor_op.tensor<[48, 48], f32>
  func.return %2 : !tensor_op.tensor<[48, 48], f32>
}

// CHECK-LABEL: func.func @transposed_lhs_read_by_the_epilogue(
// CHECK-NEXT:    %[[R:[0-9]+]] = tensor_op.fused %x : ({{.*}}) -> !tensor_op.tensor<[48, 48], f32> {
// CHECK-NEXT:    ^bb0({{.*}}):
// CHECK-NEXT:      %{{[0-9]+}} = tensor_op.relu
// CHECK-NEXT:      tensor_op.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[F:[0-9]+]] = tensor_op.fused %x, %w, %[[R]] : ({{.*}}) -> !tensor_op.tensor<[48, 48], f32> {
// CHECK-NEXT:    ^bb0({{.*}}):
// CHECK-NEXT:      %[[MM:[0-9]+]] = tensor_op.matmul %{{.*}} {transpose_lhs = true} :
// CHECK-NEXT:      %{{[0-9]+}} = tensor_op.add %[[MM]], %{{[0-9]+}} :
// CHECK-NEXT:      tensor_op.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]]

// -----

// Two groups must not each read the other's values, though no op-by-op path is a cycle: the matmul's group takes
// %a (reading %p) and refuses %q (two matmul-derived values after its norm); the group seeded by %p then may not
// take %q, which reads the matmul group's %t and %mm, into the group that %a reads. A group formed before counts as
// one op for the cycle check. (Before, amk-fuse failed: "amk-fuse produced a cycle".)
func.func @groups_reading_each_other(%x : !tensor_op.tensor<[M, 24], f32>, %w : !tensor_op.tensor<[24, 40], f32>, %bias : !tensor_op.tensor<[40], f32>, %z : !tensor_op.tensor<[M, 40], f32>) -> (!tensor_op.tensor<[M, 40], f32>, !tensor_op.tensor<[M, 40], f32>) {
  %p = tensor_op.sigmoid %z : !tensor_op.tensor<[M, 40], f32>
  %mm = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 24], f32>, !tensor_op.tensor<[24, 40], f32>) -> !tensor_op.tensor<[M, 40], f32>
  %u = tensor_op.add %mm, %bias : (!tensor_op.tensor<[M, 40], f32>, !tensor_op.tensor<[40], f32>) -> !tensor_op.tensor<[M, 40], f32>
  %t = tensor_op.layernorm %u {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 40], f32> -> !tensor_op.tensor<[M, 40], f32>
  %a = tensor_op.add %mm, %p : (!tensor_op.tensor<[M, 40], f32>, !tensor_op.tensor<[M, 40], f32>) -> !tensor_op.tensor<[M, 40], f32>
  %q = tensor_op.mul %t, %mm : (!tensor_op.tensor<[M, 40], f32>, !tensor_op.tensor<[M, 40], f32>) -> !tensor_op.tensor<[M, 40], f32>
  %o = tensor_op.add %p, %q : (!tensor_op.tensor<[M, 40], f32>, !tensor_op.tensor<[M, 40], f32>) -> !tensor_op.tensor<[M, 40], f32>
  func.return %a, %o : !tensor_op.tensor<[M, 40], f32>, !tensor_op.tensor<[M, 40], f32>
}

// CHECK-LABEL: func.func @groups_reading_each_other(
// CHECK-NEXT:    %p = tensor_op.fused %z :
// CHECK:           tensor_op.sigmoid
// CHECK-NOT:       tensor_op.mul
// CHECK:         %mm, %t, %a = tensor_op.fused %x, %w, %bias, %p :
// CHECK:           tensor_op.matmul
// CHECK:           tensor_op.layernorm
// CHECK-NOT:       tensor_op.mul
// CHECK:         %o = tensor_op.fused %t, %mm, %p :
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      %q = tensor_op.mul
// CHECK-NEXT:      %o_1 = tensor_op.add
// CHECK:         func.return %a, %o :

// -----

// A side input is taken into the epilogue wherever the program computes it: written before the matmul, the scale
// of %v stood where only the matmul's prologue may (a kernel of its own); it is now ordered just before its reader.
func.func @side_input_written_before_the_matmul(%x : !tensor_op.tensor<[M, 32], f32>, %w : !tensor_op.tensor<[32, 48], f32>, %v : !tensor_op.tensor<[48], f32>) -> !tensor_op.tensor<[M, 48], f32> {
  %v2 = tensor_op.scale %v {factor = 2.0 : f64} : !tensor_op.tensor<[48], f32>
  %mm = tensor_op.matmul %x, %w : (!tensor_op.tensor<[M, 32], f32>, !tensor_op.tensor<[32, 48], f32>) -> !tensor_op.tensor<[M, 48], f32>
  %s = tensor_op.add %mm, %v2 : (!tensor_op.tensor<[M, 48], f32>, !tensor_op.tensor<[48], f32>) -> !tensor_op.tensor<[M, 48], f32>
  %r = tensor_op.relu %s : !tensor_op.tensor<[M, 48], f32>
  func.return %r : !tensor_op.tensor<[M, 48], f32>
}

// CHECK-LABEL: func.func @side_input_written_before_the_matmul(
// CHECK-NEXT:    %r = tensor_op.fused %x, %w, %v :
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      %mm = tensor_op.matmul
// CHECK-NEXT:      %v2 = tensor_op.scale
// CHECK-NEXT:      %s = tensor_op.add %mm, %v2
// CHECK-NEXT:      %r_1 = tensor_op.relu %s
// CHECK-NEXT:      tensor_op.yield %r_1
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %r :
