"""``amk-emit-gluon``: which kernels it refuses, the spellings of each triton version, and a compile of the emitted
kernel for Hopper (sm_90) that needs no GPU, and on a Hopper GPU a Gluon kernel built and run through
``build_fused_kernel``. The emitted text itself is FileChecked in ``tests/filecheck/passes/amk-emit-gluon``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import BIASED_SCORES, SCORES_AND_SOFTMAX
from xdsl.parser import Parser
from xdsl.passes import PassPipeline
from xdsl.utils.exceptions import PassFailedException

from amk.context import make_context
from amk.dialects import memory_staged
from amk.lowering.emit_gluon import (
    HOPPER_SHARED_MEMORY,
    TRITON_3_6_API,
    TRITON_3_9_API,
    EmitGluonPass,
    emit_gluon,
    installed_gluon_api,
    store_pieces,
)
from amk.opt import AMK_PASSES

B_CONFIG = "block_m=128 block_n=256 block_k=64 num_warps=8 num_stages=3 persistent=1 tma=1"
PINGPONG_CONFIG = "block_m=128 block_n=128 block_k=64 num_warps=4 num_stages=4 persistent=1 tma=1"


def chain(dtype: str = "f16", epilogue: str = "relu", weight_transposed: bool = False) -> str:
    """Workload B's chain at a small width: matmul, bias, then ``epilogue`` (an elementwise op, ``add`` of a
    residual tile, or ``rmsnorm`` over the row: a strip's statistics); with ``weight_transposed`` the weight is
    ``nn.Linear``'s ``[N, K]``, read transposed."""
    x, w, b = (f"!tensor_op.tensor<[{shape}], {dtype}>" for shape in ("M, 512", "512, 512", "512"))
    transpose = " {transpose_rhs = true}" if weight_transposed else ""
    last = (f"%2 = tensor_op.add %1, %x : ({x}, {x}) -> {x}" if epilogue == "add"
            else f"%2 = tensor_op.rmsnorm %1 {{eps = 1.0e-05 : f64}} : {x} -> {x}" if epilogue == "rmsnorm"
            else f"%2 = tensor_op.{epilogue} %1 : {x}")
    return f"""func.func @linear(%x : {x}, %w : {w}, %b : {b}) -> {x} {{
  %0 = tensor_op.matmul %x, %w{transpose} : ({x}, {w}) -> {x}
  %1 = tensor_op.add %0, %b : ({x}, {b}) -> {x}
  {last}
  func.return %2 : {x}
}}"""


def staged_kernel(text: str, config: str = B_CONFIG, tile: str = "") -> memory_staged.KernelOp:
    ctx = make_context()
    module = Parser(ctx, text).parse_module()
    PassPipeline.parse_spec(AMK_PASSES, f"amk-fuse,amk-tile{tile},amk-stage{{{config}}}").apply(ctx, module)
    return next(op for op in module.walk() if isinstance(op, memory_staged.KernelOp))


@pytest.mark.parametrize(("text", "config", "reason"), [
    (chain(), B_CONFIG.replace("persistent=1", "persistent=0"), "not persistent"),
    (chain(), B_CONFIG.replace("tma=1", "tma=0"), "not staged through a tensor descriptor"),
    (chain(), B_CONFIG.replace("num_stages=3", "num_stages=1"), "num_stages is 1"),
    (chain(), B_CONFIG.replace("block_m=128", "block_m=64"), "cannot be split between 8 warps"),
    (chain("f32"), B_CONFIG, "not fp16 or bf16"),
    # tile_stats: a tile grid, but its epilogue stores the pre-normalization tile and the rows' partial statistics
    (chain().replace("tensor_op.relu %1", "tensor_op.softmax %1 {axis = 1 : i64}"), B_CONFIG,
     "its epilogue has tiled_loop.relaunch"),
])
def test_refuses_what_it_does_not_emit(text, config, reason):
    kernel = staged_kernel(text, config)
    with pytest.raises(PassFailedException, match=reason) as error:
        emit_gluon(kernel, TRITON_3_9_API)
    assert "amk-emit-gluon emits persistent tile-grid GEMM kernels" in str(error.value)


def test_refuses_an_operand_whose_rows_broadcast_over_the_space():
    """Position embeddings [1, T, N] added after the GEMM are loaded through a map of the space's rows to theirs
    (``broadcast_rows``), which the Gluon kernels do not emit: the tuner does not offer them (gluon_kernel_problem) and
    the pass refuses such a kernel rather than read the wrong rows."""
    from amk.dialects import tiled_loop
    from amk.lowering.emit_gluon import gluon_kernel_problem

    x, w, p = (f"!tensor_op.tensor<[{shape}], f16>" for shape in ("B, T, 512", "512, 512", "1, T, 512"))
    text = f"""func.func @positions(%x : {x}, %w : {w}, %p : {p}) -> {x} {{
  %0 = tensor_op.matmul %x, %w : ({x}, {w}) -> {x}
  %1 = tensor_op.add %0, %p : ({x}, {p}) -> {x}
  func.return %1 : {x}
}}"""
    with pytest.raises(PassFailedException, match="broadcast over the space's"):
        emit_gluon(staged_kernel(text), TRITON_3_9_API)
    ctx = make_context()
    module = Parser(ctx, text).parse_module()
    PassPipeline.parse_spec(AMK_PASSES, "amk-fuse,amk-tile").apply(ctx, module)
    tiled = next(op for op in module.walk() if isinstance(op, tiled_loop.KernelOp))
    assert "broadcast over the space's" in gluon_kernel_problem(None, tiled)


def test_refuses_a_boolean_mask_and_a_mask_broadcast_over_the_batch():
    """A GEMM's epilogue selecting by a boolean mask, and attention's scores masked by a causal mask [1, 1, S, T]
    (one matrix read at every batch index) or Hugging Face's [B, 1, S, T] (a matrix per sequence, through a map of
    the batch index): none of these accesses has run in a Gluon kernel on a GPU, so the tuner does not offer Gluon
    for them (gluon_kernel_problem says why)."""
    from amk.dialects import tiled_loop
    from amk.lowering.emit_gluon import COLUMN_SWEEP, gluon_kernel_problem

    x, w, m, c = (f"!tensor_op.tensor<[{shape}], f16>" for shape in ("M, 512", "512, 512", "M, 512", "1"))
    masked_gemm = f"""func.func @masked(%x : {x}, %w : {w}, %m : {m.replace("f16", "i1")}, %c : {c}) -> {x} {{
  %0 = tensor_op.matmul %x, %w : ({x}, {w}) -> {x}
  %1 = tensor_op.where %m, %0, %c : ({m.replace("f16", "i1")}, {x}, {c}) -> {x}
  func.return %1 : {x}
}}"""
    q, k, s = (f"!tensor_op.tensor<[{shape}]" for shape in ("B, H, S, 64", "B, H, T, 64", "B, H, S, T"))

    def masked_attention(mask: str) -> str:
        keep = f"!tensor_op.tensor<[{mask}]"
        return f"""func.func @masked(%q : {q}, f16>, %k : {k}, f16>, %keep : {keep}, f16>) -> {s}, f16> {{
  %0 = tensor_op.matmul %q, %k {{transpose_rhs = true}} : ({q}, f16>, {k}, f16>) -> {s}, f16>
  %1 = tensor_op.add %0, %keep : ({s}, f16>, {keep}, f16>) -> {s}, f16>
  %2 = tensor_op.softmax %1 {{axis = -1 : i64}} : {s}, f16>
  func.return %2 : {s}, f16>
}}"""

    for text, form, reason in ((masked_gemm, None, "reads a boolean mask"),
                               (masked_attention("1, 1, S, T"), COLUMN_SWEEP, "one matrix at every batch index"),
                               (masked_attention("B, 1, S, T"), COLUMN_SWEEP, "broadcast over the kernel's batch"),
                               (masked_attention("B, 1, 1, T"), COLUMN_SWEEP, "broadcast over the kernel's batch"),
                               (masked_attention("B, H, 1, T"), COLUMN_SWEEP, "a row vector per matrix")):
        ctx = make_context()
        module = Parser(ctx, text).parse_module()
        PassPipeline.parse_spec(AMK_PASSES, "amk-fuse,amk-tile").apply(ctx, module)
        tiled = next(op for op in module.walk() if isinstance(op, tiled_loop.KernelOp))
        assert reason in gluon_kernel_problem(form, tiled)


def test_refuses_a_kernel_whose_products_must_be_rounded_before_a_subtraction():
    """softmax((q @ k + mask) * c): amk-fold-exponent-scales gives the kernel exact_products (its Triton launches pass
    enable_fp_fusion=False), which Gluon's launches do not ask for."""
    from amk.dialects import tiled_loop
    from amk.lowering.emit_gluon import COLUMN_SWEEP, gluon_kernel_problem

    q, k, s = (f"!tensor_op.tensor<[{shape}], f16>" for shape in ("M, 64", "64, 1024", "M, 1024"))
    text = f"""func.func @masked_first(%q : {q}, %k : {k}, %mask : {s}) -> {s} {{
  %0 = tensor_op.matmul %q, %k : ({q}, {k}) -> {s}
  %1 = tensor_op.add %0, %mask : ({s}, {s}) -> {s}
  %2 = tensor_op.scale %1 {{factor = 0.125 : f64}} : {s}
  %3 = tensor_op.softmax %2 {{axis = -1 : i64}} : {s}
  func.return %3 : {s}
}}"""
    ctx = make_context()
    module = Parser(ctx, text).parse_module()
    PassPipeline.parse_spec(AMK_PASSES, "amk-fuse,amk-tile,amk-fold-exponent-scales").apply(ctx, module)
    tiled = next(op for op in module.walk() if isinstance(op, tiled_loop.KernelOp))
    assert "exact_products" in gluon_kernel_problem(COLUMN_SWEEP, tiled)


def test_a_residual_tile_is_read_in_the_accumulators_layout():
    """``x @ w + b + x``: x is a TMA-staged operand and, read again with pointers, the residual; the kernel gets its
    pointer once, the descriptor's row stride and the strides the pointer reads use."""
    source = emit_gluon(staged_kernel(chain(epilogue="add")), TRITON_3_9_API)
    assert "x_rows = BLOCK_M*pid_m + gl.arange(0, BLOCK_M, gl.SliceLayout(1, acc_layout))" in source
    assert "x_cols = BLOCK_N*pid_n + gl.arange(0, BLOCK_N, gl.SliceLayout(0, acc_layout))" in source
    assert "x_ptr + x_rows.to(gl.int64)[:, None] * stride_x_0 + x_cols.to(gl.int64)[None, :] * stride_x_1" in source
    assert "    fused_0_kernel[grid](\n        x,\n        w,\n        b,\n        out0,\n        x.stride(0)," in source
    assert "def fused_0_kernel(\n    x_ptr,\n    w_ptr,\n    b_ptr,\n    out0_ptr,\n    x_desc_stride," in source
    assert "x.stride(1)," in source


def test_a_transposed_weight_is_loaded_as_tiles_of_its_own_rows():
    """nn.Linear's weight W [N, K] reaches the kernel as W^T: its descriptor is W's own ([N, K] with W's row stride,
    the view's column stride; [BLOCK_N, BLOCK_K] tiles loaded at [n, k]) and wgmma reads each ring slot permuted, a
    K-major B."""
    source = emit_gluon(staged_kernel(chain(weight_transposed=True)), TRITON_3_9_API)
    assert ("w_desc = tma.make_tensor_descriptor(w_ptr, [512, 512], [w_desc_stride, 1], [256, 64], "
            "gl.NVMMASharedLayout.get_default_for([256, 64], gl.float16))") in source
    assert "w = _tma_operand(w, transposed=True)" in source and "        w.stride(1),\n" in source
    assert f"{TRITON_3_9_API.tma_load}(w_desc, [BLOCK_N*pid_n, k], ready.index(slot), w_ring.index(slot))" in source
    assert "= warpgroup_mma(x_ring.index(slot), w_ring.index(slot).permute((1, 0)), " in source


def test_writes_out_what_gluon_does_not_name():
    """``gl`` has no sigmoid (SiLU's) and no ``math`` namespace: the sigmoid is written as Triton defines it."""
    source = emit_gluon(staged_kernel(chain(epilogue="silu")), TRITON_3_9_API)
    assert "silu = 1.0 / (1.0 + gl.exp(-add))" in source and "sigmoid(" not in source


@pytest.mark.parametrize(("config", "schedule", "reason"), [
    (B_CONFIG, "pingpong", "each consumer is one warpgroup"),
    (B_CONFIG.replace("num_warps=8", "num_warps=4"), "pingpong", "more than one warpgroup's accumulator holds"),
    (PINGPONG_CONFIG, "interleaved", "schedule 'interleaved' is not one of cooperative, pingpong"),
])
def test_refuses_a_schedule_it_cannot_emit(config, schedule, reason):
    with pytest.raises(PassFailedException, match=reason):
        emit_gluon(staged_kernel(chain(), config), TRITON_3_9_API, schedule)


def test_the_pass_checks_its_schedule_option_before_any_kernel():
    with pytest.raises(PassFailedException, match="amk-emit-gluon: schedule must be cooperative or pingpong, got 'x'"):
        EmitGluonPass(schedule="x").apply(make_context(), staged_kernel(chain()).parent_op())


def test_the_launcher_gives_tma_a_copy_of_an_input_it_cannot_read_as_it_is(tmp_path):
    """TMA reads rows that are contiguous, 16-byte aligned, a multiple of 16 bytes apart and no closer than a row is
    long (of W itself, for a weight read transposed): a sliced or expanded input is read from a contiguous copy; an
    output must be readable as it is."""
    pytest.importorskip("triton.experimental.gluon", reason="this triton has no Gluon")
    from amk.runtime import load_source

    emitted = load_source(emit_gluon(staged_kernel(chain()), installed_gluon_api()), "gluon_launcher", tmp_path)
    operand = emitted._tma_operand
    plain, weight = torch.randn(32, 64, dtype=torch.float16), torch.randn(48, 64, dtype=torch.float16)
    viewed = weight.t()  # nn.Linear's weight as the kernel's argument
    assert operand(plain) is plain and operand(viewed, transposed=True) is viewed
    for unreadable in (torch.randn(1, 64, dtype=torch.float16).expand(32, 64),
                       torch.randn(32, 72, dtype=torch.float16)[:, 4:68]):
        copy = operand(unreadable)
        assert copy is not unreadable and copy.is_contiguous() and torch.equal(copy, unreadable)
        copy = operand(unreadable.t(), transposed=True)  # a copy whose transpose has contiguous rows
        assert copy.t().is_contiguous() and torch.equal(copy, unreadable.t())
    with pytest.raises(ValueError, match="stores tiles with TMA"):
        operand(torch.randn(1, 64, dtype=torch.float16).expand(32, 64), output=True)
    # a batch of matrices (attention's keys, a batched column sweep): an expanded or overlapping batch is copied too
    matrices = torch.randn(4, 32, 64, dtype=torch.float16)
    assert operand(matrices) is matrices
    for unreadable in (matrices[:1].expand(4, 32, 64), matrices.flatten().as_strided((4, 32, 64), (512, 64, 1))):
        copy = operand(unreadable)
        assert copy is not unreadable and copy.is_contiguous() and torch.equal(copy, unreadable)


def test_pass_attaches_the_source_with_the_installed_spellings():
    kernel = staged_kernel(chain())
    EmitGluonPass().apply(make_context(), kernel.parent_op())
    source = kernel.attributes["gluon_source"].data
    assert f"{installed_gluon_api().tma_load}(" in source and "def launch(x, w, b, out0):" in source


@pytest.mark.parametrize(("api", "absent"), [(TRITON_3_6_API, "async_load"), (TRITON_3_9_API, "async_copy")])
def test_spells_the_tma_copies_and_barrier_of_each_triton(api, absent):
    source = emit_gluon(staged_kernel(chain()), api)
    for spelling in (api.tma_load, api.tma_store, api.thread_barrier):
        assert f"{spelling}(" in source
    assert absent not in source


# Compiles the emitted kernel of argv[1] for sm_90 (tile sizes, stages and warps in argv[2]); prints its PTX, warps
# and shared memory.
_COMPILE_FOR_SM90 = """
import importlib.util, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource

spec = importlib.util.spec_from_file_location("kernel", sys.argv[1])
emitted = importlib.util.module_from_spec(spec)
spec.loader.exec_module(emitted)
block_m, block_n, block_k, stages, warps = json.loads(sys.argv[2])

names = emitted.fused_0_kernel.arg_names
# As Triton's JIT specializes a launch on contiguous rows: a stride of 1 is a constant, and pointers and row strides
# divisible by 16 say so (without it the compiler cannot prove that a thread's values are contiguous and aligned).
unit_strides = [name for name in names if name.startswith("stride_")  # each buffer's last axis
                and f"{name.rsplit('_', 1)[0]}_{int(name.rsplit('_', 1)[1]) + 1}" not in names]
# (GROUP_M: the tile grids' group; SPLIT_N: a column sweep's chunks a row, as the tests' configurations have them)
constants = {name: value for name, value in {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": 8,
                                              "SPLIT_N": 4, "STAGES": stages}.items() if name in names}
constants |= dict.fromkeys(unit_strides, 1)
aligned = {(index,): [["tt.divisibility", 16]] for index, name in enumerate(names)
           if name.endswith(("_ptr", "_desc_stride", "_desc_batch_stride"))
           or (name.startswith("stride_") and name not in constants)}
pointers = {"partial0_ptr": "*fp32", "partial1_ptr": "*fp32", "strip_counters_ptr": "*i32"}  # the workspace
signature = {name: pointers.get(name, "*fp16") if name.endswith("_ptr") else "constexpr" if name in constants
             else "i32" for name in names}
compiled = triton.compile(GluonASTSource(emitted.fused_0_kernel, signature, constexprs=constants, attrs=aligned),
                          target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
print(json.dumps({"ptx": compiled.asm["ptx"], "num_warps": compiled.metadata.num_warps,
                  "shared": compiled.metadata.shared}))
"""


STRIP_FINISH = "{reduction_strategy=strip_finish}"


@pytest.mark.parametrize(("config", "schedule", "tile", "warps", "epilogue"), [
    (B_CONFIG, "cooperative", (128, 256, 64), 8, "relu"),
    # 4 stages: the output tile is stored in 4 pieces of 64 columns (store_pieces)
    (B_CONFIG.replace("num_stages=3", "num_stages=4"), "cooperative", (128, 256, 64), 8, "relu"),
    (B_CONFIG, "cooperative", (128, 256, 64), 8, "add"),  # a residual tile: x is TMA-staged and read with pointers
    (PINGPONG_CONFIG, "pingpong", (128, 128, 64), 4, "silu"),
    (B_CONFIG, "cooperative", (128, 256, 64), 8, "rmsnorm"),  # strip_finish: statistics, counter, merge and sweep
    (PINGPONG_CONFIG, "pingpong", (128, 128, 64), 4, "rmsnorm"),
    # nn.Linear's weight read transposed: tiles of its own rows, a K-major B
    (B_CONFIG, "cooperative", (128, 256, 64), 8, "linear-relu"),
    (PINGPONG_CONFIG, "pingpong", (128, 128, 64), 4, "linear-silu"),
])
def test_compiles_for_hopper_without_a_gpu(tmp_path, config, schedule, tile, warps, epilogue):
    """``GluonASTSource`` + ``triton.compile`` for sm_90 (no driver needed): the PTX has TMA copies and wgmma, and the
    producer warp gives its registers to the MMA warps; the ping-pong kernel has its three partitions (12 warps). A
    strip_finish kernel also counts its tiles in with a GPU-scope atomic, behind a barrier of its MMA warps only (a
    barrier of the whole program would wait for the producer warp forever), and moves its tiles through global memory
    in 16-byte accesses."""
    pytest.importorskip("triton.experimental.gluon", reason="this triton has no Gluon")
    from triton.backends import backends

    if "nvidia" not in backends:
        pytest.skip("this triton has no CUDA backend to compile for sm_90")
    path = tmp_path / "kernel.py"
    strip_finish = epilogue == "rmsnorm"
    weight_transposed = epilogue.startswith("linear-")
    text = chain(epilogue=epilogue.removeprefix("linear-"), weight_transposed=weight_transposed)
    path.write_text(emit_gluon(staged_kernel(text, config, STRIP_FINISH if strip_finish else ""), schedule=schedule))
    stages = int(config.split("num_stages=")[1].split()[0])
    # the output tile's TMA block: the whole tile, or one piece where the tile is stored in pieces
    pieces = 1 if strip_finish else store_pieces(*tile, stages, 2, 2, schedule)
    # In a process of its own: this one runs Triton's interpreter, where gl.sum and the other reductions are
    # interpreted functions that the compiler refuses.
    environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    shape = json.dumps([*tile, stages, warps])
    result = subprocess.run([sys.executable, "-c", _COMPILE_FOR_SM90, str(path), shape],
                            capture_output=True, text=True, timeout=300, env=environment)
    assert result.returncode == 0, result.stderr[-3000:]
    compiled = json.loads(result.stdout.splitlines()[-1])
    ptx = compiled["ptx"]
    assert "wgmma.mma_async" in ptx
    assert "cp.async.bulk.tensor" in ptx
    assert "setmaxnreg" in ptx  # the producer warp gives its registers to the MMA warps
    # the kernel makes its TMA descriptors in global scratch: one for each operand, and each consumer one for a
    # TMA-stored output (a strip_finish kernel stores with pointers)
    consumers = 2 if schedule == "pingpong" else 1
    descriptors = 2 if strip_finish else 2 + consumers
    assert ptx.count("tensormap.replace.tile.global_address") == descriptors and "fence.proxy.tensormap" in ptx
    assert compiled["shared"] <= HOPPER_SHARED_MEMORY
    if not strip_finish:  # a TMA store per piece of the output tile, in each consumer
        assert ptx.count("cp.async.bulk.tensor.2d.global.shared") == pieces * consumers
    # the kernel's warps (the default partition), the producer's warpgroup and in ping-pong the second consumer's
    assert compiled["num_warps"] == warps + (8 if schedule == "pingpong" else 4)
    if strip_finish:
        assert "atom.global.gpu.acq_rel.add" in ptx
        # the pre-normalization tile and the sweep go through global memory 16 bytes a thread (io_layout), not in
        # the accumulator's 4-byte pairs, and each row's statistics are stored once, not by every thread holding them
        assert "st.global.v4.b32" in ptx and "ld.global.cg.v4.b32" in ptx
        # each consumer stores two statistics and resets the counter
        assert len(re.findall(r"\bst\.global\.b32\b", ptx)) == 3 * consumers
        # every barrier of the epilogue (the counter's, the reductions' across warps) counts one consumer's threads;
        # the one barrier of the whole program, warp_specialize's own, has id 1
        barriers = re.findall(r"\b(?:bar|barrier)\.sync\s+(\d+)(?:,\s*(\d+))?;", ptx)
        assert {count for _, count in barriers} == {"", str(32 * warps)}
        assert {ident for ident, count in barriers if not count} == {"1"}


def test_the_gpu_smoke_probe_emits_its_three_sources(tmp_path):
    """benchmarks/probes/gluon_smoke.py, the milestones' GPU check, without a GPU: the Gluon (cooperative) and the
    Triton source of the same staged kernel and the ping-pong Gluon source, as the GPU run would load them."""
    probe = Path(__file__).resolve().parent.parent / "benchmarks" / "probes" / "gluon_smoke.py"
    subprocess.run([sys.executable, str(probe), "--m", "256", "--n", "256", "--k", "256", "--emit-only",
                    str(tmp_path)], check=True, capture_output=True, text=True, timeout=300)
    gluon, triton = (tmp_path / "gluon.py").read_text(), (tmp_path / "triton.py").read_text()
    assert "gl.warp_specialize(" in gluon and "warpgroup_mma(" in gluon and "def launch(" in gluon
    assert "mbarrier.arrive(turn.index(1 - WARP_GROUP))" in (tmp_path / "gluon_pingpong.py").read_text()
    assert "@triton.jit" in triton and "def launch(" in triton


def test_the_gpu_probe_emits_the_strip_finish_kernels_of_a(tmp_path):
    """The same probe for workload A's chain: one strip_finish kernel in both Gluon schedules and in Triton, from the
    same staged IR, each launched with its workspace after its outputs."""
    probe = Path(__file__).resolve().parent.parent / "benchmarks" / "probes" / "gluon_smoke.py"
    subprocess.run([sys.executable, str(probe), "--workload", "A", "--emit-only", str(tmp_path)], check=True,
                   capture_output=True, text=True, timeout=300)
    for schedule in ("gluon", "gluon_pingpong"):
        source = (tmp_path / f"{schedule}.py").read_text()
        assert "gl.warp_specialize(" in source and "gl.atomic_add(strip_counters_ptr" in source
        assert "def launch(x, w, bias, gamma, beta, out0, partial0, partial1, partial2, partial3, strip_counters):" in source
    assert "@triton.jit" in (tmp_path / "triton.py").read_text()


def test_refuses_a_strategy_without_output_tiles():
    softmax = chain().replace("tensor_op.relu %1", "tensor_op.softmax %1 {axis = 1 : i64}")
    kernel = staged_kernel(softmax, tile="{reduction_strategy=row_strip}")
    with pytest.raises(PassFailedException, match="its strategy, row_strip, does not give each program output tiles"):
        emit_gluon(kernel)


@pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9),
                    reason="Gluon's wgmma kernels run on Hopper GPUs only")
def test_a_gluon_kernel_is_built_and_runs_through_the_build_service(tmp_path):
    """A ``parameter_grid`` that holds only Gluon configurations: the tuner times them, the build verifies the kernel
    and the kernel's output matches PyTorch on fresh inputs (ragged M and N: masked loads, clipped TMA stores), and
    on a sliced input, which TMA cannot read in place (the launcher reads it from an aligned copy)."""
    import amk

    grid = {"BLOCK_SIZE_M": [128], "BLOCK_SIZE_N": [128, 256], "BLOCK_SIZE_K": [64], "num_warps": [8],
            "num_stages": [3], "PERSISTENT": [1], "TMA": [1], "GLUON": [1]}
    shapes = [(16001, 1024), (1024, 1152), (1152,)]  # big enough for a Gluon kernel (tile2d's gluon_min_macs)
    kernel = amk.build_fused_kernel(["matmul", "add_bias", "relu"], shapes, torch.float16, parameter_grid=grid,
                                    tuner_config=amk.TunerConfig(target_cache_dir=str(tmp_path)))
    assert kernel.config["GLUON"] == 1, kernel.tuning_log
    assert "gl.warp_specialize(" in kernel.source
    x, w, b = (torch.randn(shape, device="cuda", dtype=torch.float16) for shape in shapes)
    expected = torch.relu(x.double() @ w.double() + b.double())
    got = kernel(x, w, b).double()
    assert ((got - expected).norm() / expected.norm()).item() < 1e-3
    sliced = torch.randn(16001, 1032, device="cuda", dtype=torch.float16)[:, 8:]  # 16-byte aligned, rows 2064 B apart
    unaligned = torch.randn(16001 * 1024 + 1, device="cuda", dtype=torch.float16)[1:].view(16001, 1024)
    for x in (sliced, unaligned):
        expected = torch.relu(x.double() @ w.double() + b.double())
        assert ((kernel(x, w, b).double() - expected).norm() / expected.norm()).item() < 1e-3


@pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9),
                    reason="Gluon's wgmma kernels run on Hopper GPUs only")
def test_a_gluon_kernel_on_nn_linears_weight_runs_through_the_build_service(tmp_path, monkeypatch):
    """nn.Linear's layout (``transpose_b``: W is [N, K], read as W^T): the Gluon kernel loads tiles of W's rows and
    wgmma reads them as a K-major B; the output matches PyTorch's F.linear on fresh inputs, ragged M and N; once the
    hot path has recorded its launch, calls replay it without Triton's JIT (the kernel makes its descriptors over
    each call's tensors)."""
    import torch.nn.functional as F
    from triton.runtime.jit import JITFunction

    import amk

    grid = {"BLOCK_SIZE_M": [128], "BLOCK_SIZE_N": [128, 256], "BLOCK_SIZE_K": [64], "num_warps": [8],
            "num_stages": [3], "PERSISTENT": [1], "TMA": [1], "GLUON": [1]}
    shapes = [(16001, 1024), (1152, 1024), (1152,)]
    ops = [("matmul", {"transpose_b": True}), "add_bias", "relu"]
    # the fused program alone: the vendor GEMM's program, timed against it otherwise, may win
    kernel = amk.build_fused_kernel(ops, shapes, torch.float16, parameter_grid=grid,
                                    tuner_config=amk.TunerConfig(target_cache_dir=str(tmp_path), vendor_gemm=False))
    assert kernel.config["GLUON"] == 1, kernel.tuning_log
    assert ".permute((1, 0))" in kernel.source
    jit_runs = []
    run = JITFunction.run

    def counted_run(*args, **kwargs):
        jit_runs.append(args[0])
        return run(*args, **kwargs)

    outputs = []  # kept: each call's output at an address of its own, as each call's inputs
    for seed in range(5):
        if seed == 3:  # the hot path is set up and its launch recorded: later calls replay it
            monkeypatch.setattr(JITFunction, "run", counted_run)
        torch.manual_seed(seed)
        x, w, b = (torch.randn(shape, device="cuda", dtype=torch.float16) for shape in shapes)
        expected = torch.relu(F.linear(x.double(), w.double(), b.double()))
        outputs.append(kernel(x, w, b))
        assert ((outputs[-1].double() - expected).norm() / expected.norm()).item() < 1e-3
    assert jit_runs == [] and len({output.data_ptr() for output in outputs}) == len(outputs)


def softmax_scores(rows: str = "M", depth: int = 64, cols: int = 1000, transposed: bool = False,
                   batched: bool = False, heads: bool = False) -> str:
    """softmax(q @ k) (workload G's chain), which amk-tile lowers with chunk_recompute: k is [depth, cols], or with
    ``transposed`` attention's keys [cols, depth] read transposed; ``batched`` gives q and k a leading batch dim,
    ``heads`` a second one."""
    batch = ("B, H, " if heads else "B, ") if batched else ""
    q, out = f"!tensor_op.tensor<[{batch}{rows}, {depth}], f16>", f"!tensor_op.tensor<[{batch}{rows}, {cols}], f16>"
    k = f"!tensor_op.tensor<[{batch}{cols}, {depth}], f16>" if transposed else f"!tensor_op.tensor<[{batch}{depth}, {cols}], f16>"
    attributes = " {transpose_rhs = true}" if transposed else ""
    return f"""func.func @scores(%q : {q}, %k : {k}) -> {out} {{
  %0 = tensor_op.matmul %q, %k{attributes} : ({q}, {k}) -> {out}
  %1 = tensor_op.softmax %0 {{axis = -1 : i64}} : {out}
  func.return %1 : {out}
}}"""


def sweep_config(block_m: int = 128, block_n: int = 128, stages: int = 3, warps: int = 4) -> str:
    return f"block_m={block_m} block_n={block_n} block_k=64 split_n=4 num_warps={warps} num_stages={stages}"


@pytest.mark.parametrize(("text", "config", "reason"), [
    (softmax_scores(), sweep_config(warps=8), "each consumer warpgroup (num_warps = 4) 64 rows"),
    (softmax_scores(), sweep_config(block_n=256), "at most 128 fp32 registers a thread"),
    (softmax_scores(), sweep_config(stages=1), "num_stages is 1"),
    (softmax_scores(cols=1004), sweep_config(), "TMA moves rows a multiple of 16 bytes long; k's are 2008 bytes"),
    # a logsumexp's finishing launch merges the chunks' statistics only: no column loop to sweep
    (softmax_scores().replace("%1 = tensor_op.softmax %0 {axis = -1 : i64} : !tensor_op.tensor<[M, 1000], f16>",
                              "%1 = tensor_op.logsumexp %0 {axis = -1 : i64} : !tensor_op.tensor<[M, 1000], f16> -> "
                              "!tensor_op.tensor<[M], f16>")
     .replace("func.return %1 : !tensor_op.tensor<[M, 1000], f16>", "func.return %1 : !tensor_op.tensor<[M], f16>")
     .replace("-> !tensor_op.tensor<[M, 1000], f16> {", "-> !tensor_op.tensor<[M], f16> {"),
     sweep_config(), "its launch 2 has 0 loops over column tiles with a product, not one"),
    # the scores returned beside their softmax: launch 1 stores the scores, launch 2 the probabilities
    (SCORES_AND_SOFTMAX, sweep_config(), "its launches store different output tiles through TMA"),
    # a bias vector added to the scores, read with pointers: the sweep takes matrices only
    (BIASED_SCORES, sweep_config(), "its buffers are not all matrices"),
])
def test_refuses_column_sweeps_it_does_not_emit(text, config, reason):
    with pytest.raises(PassFailedException, match=re.escape(reason)) as error:
        emit_gluon(staged_kernel(text, config), TRITON_3_9_API)
    assert "amk-emit-gluon emits column-sweep kernels (chunk_recompute)" in str(error.value)


def test_a_transposed_rhs_is_swept_as_tiles_of_its_own_rows():
    """Attention's keys [T, D] read as k^T: the descriptor is the keys' own, its [BLOCK_N, D] tiles loaded at [n, 0],
    and wgmma reads each ring slot permuted (a K-major B)."""
    source = emit_gluon(staged_kernel(softmax_scores(transposed=True), sweep_config()), TRITON_3_9_API)
    assert ("k_desc = tma.make_tensor_descriptor(k_ptr, [1000, 64], [k_desc_stride, 1], [128, 64], "
            "gl.NVMMASharedLayout.get_default_for([128, 64], gl.float16))") in source
    assert f"{TRITON_3_9_API.tma_load}(k_desc, [n, 0], ready.index(slot), rhs_ring.index(slot))" in source
    assert "rhs_ring.index((j) % STAGES).permute((1, 0)), zero, use_acc=False, is_async=True)" in source
    assert "k = _tma_operand(k, transposed=True)" in source


def test_a_batched_sweep_moves_one_matrix_a_block():
    """Attention's q [B, S, D] and keys [B, T, D] (read as k^T): descriptors over the batch of matrices (batch
    stride first), blocks of one matrix ([1, rows, columns]: TMA zero-fills and clips at each matrix's edges, so a
    strip of queries never reads or writes the next batch's), loaded at [pid_b, row, column] and reshaped to the
    matrix wgmma reads."""
    source = emit_gluon(staged_kernel(softmax_scores(rows="S", batched=True, transposed=True), sweep_config()),
                        TRITON_3_9_API)
    assert ("k_desc = tma.make_tensor_descriptor(k_ptr, [B, 1000, 64], [k_desc_batch_stride, k_desc_stride, 1], "
            "[1, 128, 64], gl.NVMMASharedLayout.get_default_for([1, 128, 64], gl.float16))") in source
    assert f"{TRITON_3_9_API.tma_load}(k_desc, [pid_b, n, 0], ready.index(slot), rhs_ring.index(slot))" in source
    assert ("warpgroup_mma(lhs_tiles.index(WARP_GROUP).reshape([64, 64]), "
            "rhs_ring.index((j) % STAGES).reshape([128, 64]).permute((1, 0)), zero") in source
    assert f"{TRITON_3_9_API.tma_store}(out0_desc, [pid_b, BLOCK_M*pid_m, n], staged)" in source
    assert "k.stride(0),\n        k.stride(2),\n" in source  # the keys' batch stride and their own rows'


def test_operands_over_two_batch_dims_are_read_by_descriptors_of_their_rank():
    """q [B, H, S, D] and keys [B, H, T, D], which the kernel reads in place (Hugging Face's heads split by a
    transposed view): four-dimensional descriptors, a stride per batch dim, blocks [1, 1, rows, columns], loaded at
    the batch index written over B and H; the output is the kernel's [B*H, S, T]."""
    source = emit_gluon(staged_kernel(softmax_scores(rows="S", batched=True, heads=True, transposed=True),
                                      sweep_config()), TRITON_3_9_API)
    assert ("k_desc = tma.make_tensor_descriptor(k_ptr, [B, H, 1000, 64], [k_desc_batch_stride, "
            "k_desc_batch_stride_1, k_desc_stride, 1], [1, 1, 128, 64], "
            "gl.NVMMASharedLayout.get_default_for([1, 1, 128, 64], gl.float16))") in source
    assert f"{TRITON_3_9_API.tma_load}(k_desc, [((pid_b) // (H)), ((pid_b) % (H)), n, 0]," in source
    assert "rhs_ring.index((j) % STAGES).reshape([128, 64]).permute((1, 0)), zero" in source
    assert f"{TRITON_3_9_API.tma_store}(out0_desc, [pid_b, BLOCK_M*pid_m, n], staged)" in source
    assert "k.stride(0),\n        k.stride(1),\n        k.stride(3),\n" in source  # its batch strides, its rows'


def test_a_gluon_configuration_of_chunk_recompute_stages_and_emits_as_a_column_sweep():
    """The build service's step for a GLUON configuration of a chunk_recompute kernel (what the tuner times on
    Hopper): amk-stage, then amk-emit-gluon's column sweep, with the launcher of its two launches."""
    from amk.lowering.configs import KernelConfig
    from amk.lowering.tile import TilePass
    from amk.pipeline import stage_and_emit

    ctx = make_context()
    module = Parser(ctx, softmax_scores(depth=128, cols=8192)).parse_module()
    PassPipeline.parse_spec(AMK_PASSES, "amk-fuse").apply(ctx, module)
    TilePass().apply(ctx, module)
    kernel = next(op for op in module.walk() if op.name == "tiled_loop.kernel")
    config = KernelConfig(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, SPLIT_N=2, num_warps=4, num_stages=3, GLUON=1)
    source = stage_and_emit(kernel, config).source
    assert source.count("gl.warp_specialize([") == 2
    assert "fused_0_kernel[grid](" in source and "fused_0_finish_kernel[grid](" in source


@pytest.mark.parametrize(("block_m", "block_n", "stages", "transposed", "batched"), [
    (128, 128, 3, False, False),  # G's best by hand: two consumers
    (64, 128, 3, False, False),  # one consumer
    (256, 64, 2, False, False),  # four consumers
    (128, 64, 3, True, False),  # keys read transposed
    (128, 64, 3, True, True),  # attention: a batch of queries and keys, TMA blocks of one matrix
])
def test_column_sweeps_compile_for_hopper_without_a_gpu(tmp_path, block_m, block_n, stages, transposed, batched):
    """Both launches of a column sweep compile for sm_90: TMA loads of the lhs and the rhs tiles, wgmma, the consumers
    given the producer's registers, the finishing launch's TMA stores, within Hopper's
    shared memory; each launch's warps are its consumers' and the producer's warpgroup."""
    pytest.importorskip("triton.experimental.gluon", reason="this triton has no Gluon")
    from triton.backends import backends

    if "nvidia" not in backends:
        pytest.skip("this triton has no CUDA backend to compile for sm_90")
    path = tmp_path / "kernel.py"
    text = softmax_scores(depth=128, cols=8192, transposed=transposed, batched=batched)
    path.write_text(emit_gluon(staged_kernel(text, sweep_config(block_m, block_n, stages))))
    environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    consumers = block_m // 64
    for kernel in ("fused_0_kernel", "fused_0_finish_kernel"):
        # the kernels' BLOCK_M is a consumer's 64 rows (the launcher passes it so)
        shape = json.dumps([64, block_n, 128, stages, 4])
        result = subprocess.run([sys.executable, "-c", _COMPILE_FOR_SM90.replace("fused_0_kernel", kernel),
                                 str(path), shape], capture_output=True, text=True, timeout=300, env=environment)
        assert result.returncode == 0, result.stderr[-3000:]
        compiled = json.loads(result.stdout.splitlines()[-1])
        ptx = compiled["ptx"]
        rank = 3 if batched else 2
        assert "wgmma.mma_async" in ptx and f"cp.async.bulk.tensor.{rank}d.shared" in ptx
        assert "setmaxnreg" in ptx  # the producer warp gives its registers to the consumers
        assert compiled["shared"] <= HOPPER_SHARED_MEMORY
        assert compiled["num_warps"] == 4 * consumers + 4
        assert (f"cp.async.bulk.tensor.{rank}d.global.shared" in ptx) == (kernel == "fused_0_finish_kernel")


@pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9),
                    reason="Gluon's wgmma kernels run on Hopper GPUs only")
@pytest.mark.parametrize(("shapes", "block_m", "block_n"), [
    ([(8192, 128), (128, 8192)], 128, 128),  # workload G, its best form by hand
    # ragged rows and columns (zero-filled loads, masks, clipped stores), big enough for chunk_recompute's
    # gluon_min_macs
    ([(16001, 128), (128, 4000)], 128, 64),
    ([(8192, 128), (128, 8192)], 256, 64),  # four consumers
])
def test_a_gluon_column_sweep_is_built_and_runs_through_the_build_service(tmp_path, shapes, block_m, block_n):
    """softmax(q @ k * scale) through build_fused_kernel with a grid of Gluon configurations only: chunk_recompute's
    two launches as column sweeps; the output matches float64 on fresh inputs, every row sums to one."""
    import amk

    grid = {"BLOCK_SIZE_M": [block_m], "BLOCK_SIZE_N": [block_n], "SPLIT_N": [2], "num_warps": [4],
            "num_stages": [2 if block_m == 256 else 3], "GLUON": [1]}
    ops = ["matmul", ("scale", {"factor": 0.125}), "softmax"]
    # the fused program alone: the vendor GEMM's program, timed against it otherwise, may win
    kernel = amk.build_fused_kernel(ops, shapes, torch.float16, parameter_grid=grid,
                                    tuner_config=amk.TunerConfig(target_cache_dir=str(tmp_path), vendor_gemm=False))
    assert kernel.config["GLUON"] == 1, kernel.tuning_log
    assert kernel.source.count("gl.warp_specialize([") == 2
    for seed in range(2):
        torch.manual_seed(seed)
        q, k = (torch.randn(shape, device="cuda", dtype=torch.float16) for shape in shapes)
        expected = torch.softmax((q.double() @ k.double()) * 0.125, dim=-1)
        got = kernel(q, k).double()
        assert ((got - expected).norm() / expected.norm()).item() < 1e-3
        assert torch.allclose(got.sum(dim=-1), torch.ones_like(got[:, 0]), atol=1e-2)


@pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9),
                    reason="Gluon's wgmma kernels run on Hopper GPUs only")
def test_a_batched_gluon_column_sweep_computes_attention_probabilities():
    """softmax(q @ k^T / 8) over a batch of heads (attention's probabilities; the keys read transposed) through the
    pipeline with a Gluon configuration: ragged query and key lengths, each matrix's blocks zero-filled and clipped at
    its own edges, so that no strip reads or writes the next head's rows."""
    from amk.lowering.configs import KernelConfig
    from amk.pipeline import compile_module

    text = softmax_scores(rows="S", cols=1000, transposed=True, batched=True)
    text = text.replace("%1 = tensor_op.softmax %0", "%s = tensor_op.scale %0 {factor = 0.125 : f64} : "
                        "!tensor_op.tensor<[B, S, 1000], f16>\n  %1 = tensor_op.softmax %s")
    module = Parser(make_context(), text).parse_module()
    config = KernelConfig(BLOCK_M=128, BLOCK_N=64, BLOCK_K=64, SPLIT_N=2, num_warps=4, num_stages=3, GLUON=1)
    compiled = compile_module(module, lambda kernel, size_hints=None: config)
    assert "gl.warp_specialize(" in compiled.source
    for seed in range(2):
        torch.manual_seed(seed)
        q = torch.randn(6, 1001, 64, device="cuda", dtype=torch.float16)
        k = torch.randn(6, 1000, 64, device="cuda", dtype=torch.float16)
        expected = torch.softmax(q.double() @ k.double().transpose(-2, -1) * 0.125, dim=-1)
        got = compiled.program(q, k)[0].double()
        assert ((got - expected).norm() / expected.norm()).item() < 1e-3
