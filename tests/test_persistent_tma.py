"""Persistent grids and tensor-descriptor (TMA) staging of tile-grid GEMM kernels (``PERSISTENT``, ``TMA``,
``WARP_SPECIALIZE``): every combination matches PyTorch call after call, also on ragged shapes (TMA zero-fills what
lies out of bounds); layouts TMA cannot read fall back to the pointer loads; the switches are checked where they are
given and pruned where they cannot apply."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from conftest import GPU, INTERPRETER_WARNINGS
from test_reduction_strategies import CASES, assert_matches_pytorch_call_after_call
from xdsl.utils.exceptions import VerifyException

from amk.lowering.configs import KernelConfig
from amk.oplist import build_module
from amk.pipeline import compile_module
from amk.runtime import default_device
from amk.tuner import DeviceLimits, default_space, prune_reason

pytestmark = INTERPRETER_WARNINGS

GEMM_CHAINS = [  # tile2d: no row reduction
    (["matmul", "add_bias", "relu"], [(70, 96), (96, 80), (80,)], torch.float16),
    (["matmul", "add", "silu"], [(200, 64), (64, 48), (200, 48)], torch.bfloat16),
]
SWITCHES = [(1, 1), (1, 0), (0, 1)]  # (PERSISTENT, TMA)


def config_with(persistent: int, tma: int):
    def choose(kernel) -> KernelConfig:
        return KernelConfig(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, GROUP_M=2, num_warps=4, num_stages=2,
                            PERSISTENT=persistent, TMA=tma)

    return choose


@pytest.mark.parametrize("persistent,tma", SWITCHES)
@pytest.mark.parametrize("ops,shapes,dtype,strategy", [case + ("auto",) for case in GEMM_CHAINS]
                         + [case + (strategy,) for case in CASES[:3]
                            for strategy in ("tile_stats", "tile_recompute", "strip_finish")],
                         ids=lambda value: value if isinstance(value, str) else None)
def test_every_switch_matches_pytorch_call_after_call(persistent, tma, ops, shapes, dtype, strategy):
    compiled = compile_module(build_module(ops, shapes, dtype), config_with(persistent, tma),
                              reduction_strategy=strategy)
    source = compiled.ir["triton"]
    assert ("tl.make_tensor_descriptor" in source) == bool(tma)
    assert ("_sm_count()" in source) == bool(persistent)
    if persistent and strategy != "strip_finish":
        assert "flatten=True" in source  # the tile loop and its K loop are pipelined as one
    assert_matches_pytorch_call_after_call(compiled, ops, shapes, dtype)


@pytest.mark.skipif(not GPU, reason="only a GPU builds tensor descriptors on the device (Triton's allocator)")
def test_a_tma_kernel_runs_in_a_thread_that_never_set_tritons_allocator():
    """A kernel that builds tensor descriptors on the device needs Triton's allocator for their memory, and Triton
    keeps it per thread (a context variable, unset in a new thread): the emitted launcher sets it on every call."""
    ops, shapes, dtype = GEMM_CHAINS[0]
    compiled = compile_module(build_module(ops, shapes, dtype), config_with(1, 1))
    assert "triton.set_allocator(" in compiled.ir["triton"]
    with ThreadPoolExecutor(max_workers=1) as fresh_thread:
        fresh_thread.submit(assert_matches_pytorch_call_after_call, compiled, ops, shapes, dtype).result()


def test_layouts_tma_cannot_read_take_the_pointer_loads():
    """A transposed weight (columns contiguous), a view starting 2 bytes into its storage and an expanded row (stride
    0, every row the same memory) are read through pointers; the kernel is still right."""
    ops, shapes, dtype = GEMM_CHAINS[0]
    compiled = compile_module(build_module(ops, shapes, dtype), config_with(1, 1))
    (kernel,) = compiled.kernels.values()
    readable = kernel.launch.__globals__["_tma_readable"]
    weight = torch.randn(shapes[1], dtype=dtype)
    transposed = weight.t().contiguous().t()
    shifted = torch.randn(shapes[1][0] * shapes[1][1] + 1, dtype=dtype)[1:].view(shapes[1])
    expanded = torch.randn(1, shapes[1][1], dtype=dtype).expand(shapes[1])
    assert readable(weight) and not readable(transposed) and not readable(shifted) and not readable(expanded)
    assert_matches_pytorch_call_after_call(compiled, ops, shapes, dtype,
                                           transform=lambda i, t: t.t().contiguous().t() if i == 1 else t)


@pytest.mark.parametrize("persistent", [1, 0])
def test_a_weight_read_transposed_goes_through_a_descriptor_of_its_own_rows(persistent):
    """``nn.Linear``'s weight ``[N, K]`` reaches the kernel as ``W^T`` (strides ``(1, K)``), a layout TMA cannot read
    as it is: the descriptor is built on W's rows (``[BLOCK_N, BLOCK_K]`` tiles), each tile transposed for the dot
    (as Hopper GEMMs read a K-major B), so such calls take TMA too; a weight stored column-major (``W^T``
    contiguous) takes the pointer loads. Both match PyTorch."""
    ops, shapes, dtype = [("matmul", {"transpose_b": True}), "add_bias", "relu"], [(70, 96), (80, 96), (80,)], torch.float16
    compiled = compile_module(build_module(ops, shapes, dtype), config_with(persistent, 1))
    source = compiled.ir["triton"]
    assert "shape=[80, 96], strides=[stride_w_1, 1], block_shape=[BLOCK_N, BLOCK_K]" in source
    assert "tl.trans(w_desc.load([" in source and "_tma_readable(w.t())" in source
    (kernel,) = compiled.kernels.values()
    readable = kernel.launch.__globals__["_tma_readable"]
    weight = torch.randn(shapes[1], dtype=dtype)
    assert readable(weight) and not readable(weight.t().contiguous().t())  # what the launcher asks of W = (W^T).t()
    assert_matches_pytorch_call_after_call(compiled, ops, shapes, dtype)
    assert_matches_pytorch_call_after_call(compiled, ops, shapes, dtype,
                                           transform=lambda i, t: t.t().contiguous().t() if i == 1 else t)


def test_a_transposed_lhs_goes_through_a_descriptor_of_its_own_rows():
    """``x^T @ w`` (x stored [K, M]): the lhs view [M, K] has strides (1, M); its descriptor is x's own ([BLOCK_K,
    BLOCK_M] tiles at [k, m]), each tile transposed, and the result matches PyTorch."""
    from xdsl.parser import Parser

    from amk.context import make_context

    text = """func.func @xt_w(%x : !tensor_op.tensor<[96, 70], f16>, %w : !tensor_op.tensor<[96, 80], f16>) -> !tensor_op.tensor<[70, 80], f16> {
      %0 = tensor_op.matmul %x, %w {transpose_lhs = true} : (!tensor_op.tensor<[96, 70], f16>, !tensor_op.tensor<[96, 80], f16>) -> !tensor_op.tensor<[70, 80], f16>
      func.return %0 : !tensor_op.tensor<[70, 80], f16>
    }"""
    compiled = compile_module(Parser(make_context(), text).parse_module(), config_with(1, 1))
    source = compiled.ir["triton"]
    assert "shape=[96, 70], strides=[stride_x_1, 1], block_shape=[BLOCK_K, BLOCK_M]" in source
    assert "tl.trans(x_desc.load([" in source and "_tma_readable(x.t())" in source
    generator = torch.Generator().manual_seed(0)
    x, w = (torch.randn(shape, generator=generator).to(default_device(), torch.float16) for shape in [(96, 70), (96, 80)])
    expected = x.double().t() @ w.double()
    for _ in range(2):
        got = compiled.program(x, w)[0].double()
        assert ((got - expected).norm() / expected.norm()).item() < 2e-3


def staged_kernel(ops, shapes, config: KernelConfig):
    compiled = compile_module(build_module(ops, shapes, torch.float16), lambda kernel: config)
    return compiled.ir["memory_staged"]


def test_the_switches_reach_the_ir_only_where_they_apply():
    switches = KernelConfig(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, PERSISTENT=1, TMA=1, WARP_SPECIALIZE=1)
    tiled = staged_kernel(*GEMM_CHAINS[0][:2], switches)
    assert "persistent" in tiled and "warp_specialize" in tiled and "descriptor" in tiled
    row_strip = staged_kernel(["rmsnorm", "matmul", "softmax"], [(64, 128), (128,), (128, 96)], switches)
    assert 'strategy = "row_strip"' in row_strip
    assert "persistent" not in row_strip and "descriptor" not in row_strip


def test_the_verifier_rejects_persistence_without_a_grouped_grid():
    from amk.dialects import memory_staged

    def kernel(**switches):
        op = memory_staged.KernelOp("k", grid=["4"], program_ids=["pid"], constants={}, num_warps=4, num_stages=1,
                                    num_inputs=0, strategy="tile2d", arg_types=[])
        for name in switches:
            setattr(op, name, switches[name])
        return op

    from xdsl.dialects.builtin import UnitAttr

    with pytest.raises(VerifyException, match="grouped order"):
        kernel(persistent=UnitAttr()).verify()
    with pytest.raises(VerifyException, match="persistent kernel"):
        kernel(warp_specialize=UnitAttr()).verify()


def test_the_tuner_offers_the_switches_on_tma_devices_and_prunes_them_elsewhere():
    from amk.symbolic import Dim

    hopper, older = DeviceLimits("H200", 232448, 132, tma=True), DeviceLimits("A100", 166912, 108)
    assert {"PERSISTENT", "TMA"} <= set(default_space("tile2d", Dim(4096), True, hopper))
    assert "WARP_SPECIALIZE" in default_space("tile_stats", Dim(4096), True, hopper, warp_specialization=True)
    assert "TMA" not in default_space("tile2d", Dim(4096), True, older)
    assert "TMA" not in default_space("row_strip", Dim(4096), True, hopper)
    tiles = KernelConfig(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64)
    assert "compute capability" in prune_reason(KernelConfig(**{**tiles.as_dict(), "TMA": 1}), "tile2d", True, 2, older)
    assert "tile-grid" in prune_reason(KernelConfig(**{**tiles.as_dict(), "PERSISTENT": 1}), "row_strip", True, 2, hopper)
    assert "persistent TMA" in prune_reason(KernelConfig(**{**tiles.as_dict(), "WARP_SPECIALIZE": 1}), "tile2d", True,
                                            2, hopper)
    assert prune_reason(KernelConfig(**{**tiles.as_dict(), "PERSISTENT": 1, "TMA": 1}), "tile2d", True, 2, hopper) is None


def test_amk_stage_rejects_a_switch_that_is_not_0_or_1():
    from xdsl.utils.exceptions import PassFailedException

    from amk.lowering.stage import StagePass
    from amk.pipeline import make_context

    module = build_module(*GEMM_CHAINS[0][:2], torch.float16)
    with pytest.raises(PassFailedException, match="amk-stage: tma must be 0 or 1, got 2"):
        StagePass(tma=2).apply(make_context(), module)
