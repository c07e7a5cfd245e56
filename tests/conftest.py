"""Shared helpers for the end-to-end tests: an eager float64 reference of op lists written independently of
amk's own reference table, seeded inputs, and the relative L2 error used by amk.verification."""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import amk
from amk.environment import default_device, initialize

REPO = Path(__file__).resolve().parent.parent

if importlib.util.find_spec("amk.lowering") is None:
    # `python -m pytest` from the checkout's root puts the checkout first on sys.path: its amk/ lacks the dialects,
    # passes and lowering that only an install (setuptools' package-dir) places under amk.
    pytest.exit(f"amk was imported from {Path(amk.__file__).parent}, which lacks amk.lowering, amk.passes and "
                "amk.dialects: install the project editable (pip install -e ., as make does) or run pytest from "
                "tests/", returncode=4)

initialize()  # as amk's entry points do, before any test imports triton (without CUDA: its interpreter)
if os.environ.get("PYTEST_XDIST_WORKER") and torch.cuda.is_available():
    # Each test process would start a pool of compile workers: 14 processes x 15 workers compiling on 16 cores. Two
    # per process keep the pool tested without starving the CPUs.
    os.environ.setdefault("AMK_COMPILE_WORKERS", "2")

# Where kernels run: CUDA on a GPU machine, else the CPU (Triton's interpreter). Tests make their tensors here (inputs
# are drawn on the CPU from seeded generators, then moved, so the values are the same on both).
DEVICE = default_device()
GPU = DEVICE.type == "cuda"
# The suite's last run on an H200: benchmarks/results/2026-12-02-h200-gpu-tests-6.log.
# Tests whose point is Triton's interpreter on the CPU say so with this mark.
CPU_ONLY = pytest.mark.skipif(GPU, reason="checks the CPU interpreter; kernels run on CUDA here")

# Padding lanes of partial tiles (masked out of every store) may divide 0 by 0, overflow or reduce only NaN in the
# interpreter (numpy warns from Triton's interpreter module: pyproject.toml filters those; numpy's own reductions warn
# from numpy); chains that compile to several kernels warn that they did.
INTERPRETER_WARNINGS = pytest.mark.filterwarnings(
    "ignore:invalid value encountered in reduce:RuntimeWarning",
    "ignore:All-NaN slice encountered:RuntimeWarning",
    "ignore:the op chain:UserWarning",
)


def load_script_module(name: str, path: Path):
    """A module of the examples or the benchmarks (they and the tests share one definition of a block)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # TorchDynamo looks modules up by name when it traces their code
    spec.loader.exec_module(module)
    return module


def find_script(name: str) -> str | None:
    """The path of an installed console script (``amk``, ``amk-opt``, ``xdsl-opt``, ``mkdocs``), or None: next to
    the interpreter in a virtual environment, in ``DIR/bin`` where ``pip install --target DIR`` put amk (and the
    script) in DIR, else on PATH."""
    for folder in (Path(sys.executable).parent, Path(amk.__file__).resolve().parents[1] / "bin"):
        if (folder / name).exists():
            return str(folder / name)
    return shutil.which(name)


def installed_script(name: str) -> str:
    """:func:`find_script`, failing the test that needs the script when it is not installed."""
    path = find_script(name)
    if path is None:
        pytest.fail(f"the console script {name} is neither next to {sys.executable}, nor in the bin folder beside "
                    "the installed amk, nor on PATH: install the package (pip install -e .), or put the bin folder "
                    "that pip installed it into on PATH")
    return path


def _layernorm(x, gamma=None, beta=None, eps=1e-5):
    return F.layer_norm(x, (x.shape[-1],), gamma, beta, eps)


def _rmsnorm(x, weight=None, eps=1e-5):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def _reduction(fn):
    def run(x, dim=-1, axis=None, keepdim=False):
        return fn(x, dim=axis if axis is not None else dim, keepdim=keepdim)

    return run


def _rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., :x.shape[-1] // 2]), dim=-1)


# Written from the PyTorch docs, not from amk.reference, so that a wrong entry there cannot hide a wrong kernel.
EAGER = {
    "matmul": lambda x, w, transpose_b=False: x @ (w.t() if transpose_b else w),
    "add_bias": lambda x, b: x + b,
    "add": lambda x, b: x + b,
    "sub": lambda x, b: x - b,
    "mul": lambda x, b: x * b,
    "div": lambda x, b: x / b,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "relu": torch.relu,
    "gelu": lambda x, approximate="none": F.gelu(x, approximate=approximate),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "exp": torch.exp,
    "abs": torch.abs,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "log": torch.log,
    "erf": torch.erf,
    "mish": F.mish,
    "softplus": lambda x, beta=1.0, threshold=20.0: F.softplus(x, beta, threshold),
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
    "rotate_half": lambda x, group=None: _rotate_half(x) if group is None else _rotate_half(
        x.reshape(*x.shape[:-1], -1, group)).reshape(x.shape),
    "leaky_relu": lambda x, negative_slope=0.01: F.leaky_relu(x, negative_slope),
    "clamp": lambda x, min=None, max=None: torch.clamp(x, min, max),
    "hardtanh": lambda x, min_val=-1.0, max_val=1.0: F.hardtanh(x, min_val, max_val),
    "scale": lambda x, factor: x * factor,
    "cast": lambda x, dtype: x.to(dtype).double(),
    "sum": _reduction(torch.sum),
    "mean": _reduction(torch.mean),
    "max": _reduction(torch.amax),
    "logsumexp": _reduction(torch.logsumexp),
    "var": lambda x, dim=-1, axis=None, keepdim=False, correction=1.0: torch.var(
        x, dim=axis if axis is not None else dim, keepdim=keepdim, correction=correction),
    "softmax": lambda x, dim=-1, axis=None: torch.softmax(x, dim=axis if axis is not None else dim),
    "layernorm": _layernorm,
    "rmsnorm": _rmsnorm,
}


def _normalized(ops, count):
    from amk.oplist import bind_operands, normalize_ops

    op_list = normalize_ops(ops)
    return op_list, bind_operands(op_list, count)


def eager(ops, tensors):
    """The op chain evaluated eagerly (call it with float64 tensors)."""
    op_list, counts = _normalized(ops, len(tensors))
    x, position = tensors[0], 1
    for (name, params), count in zip(op_list, counts):
        x = EAGER[name](x, *tensors[position:position + count], **params)
        position += count
    return x


def make_inputs(ops, shapes, dtype, seed=0, weight_scale=1.0, device=DEVICE):
    """Seeded standard-normal inputs on ``device`` (where kernels run); matmul weights scaled by 1/sqrt(K), divisors
    kept away from zero."""
    op_list, counts = _normalized(ops, len(shapes))
    generator = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(shape, generator=generator) for shape in shapes]
    position = 1
    for (name, params), count in zip(op_list, counts):
        for index in range(position, position + count):
            if name == "matmul":
                k = shapes[index][1] if params.get("transpose_b") else shapes[index][0]
                tensors[index] = tensors[index] * (weight_scale / math.sqrt(k))
            if name == "div":
                tensors[index] = torch.sign(tensors[index]) * (tensors[index].abs() + 0.5)
        position += count
    return [t.to(device, dtype) for t in tensors]


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    assert out.shape == ref.shape, f"output shape {tuple(out.shape)} != reference shape {tuple(ref.shape)}"
    assert torch.isfinite(out).all(), "kernel output has non-finite values"
    norm = torch.linalg.vector_norm(ref).item()
    return torch.linalg.vector_norm(out - ref).item() / max(norm, 1e-30)


def tile_level_kernel(ops, shapes, dtype):
    """The one ``tiled_loop.kernel`` that amk-fuse and amk-tile make of an op chain (what the tuner searches)."""
    from amk.context import make_context
    from amk.dialects import tiled_loop
    from amk.lowering.tile import TilePass
    from amk.oplist import build_module
    from amk.passes.fuse import FusePass

    module = build_module(ops, shapes, dtype)
    ctx = make_context()
    FusePass().apply(ctx, module)
    TilePass().apply(ctx, module)
    (kernel,) = [op for op in module.walk() if isinstance(op, tiled_loop.KernelOp)]
    return kernel


@pytest.fixture(autouse=True)
def _precision_put_back():
    """Every test leaves torch's fp32 precision settings as it found them, the legacy one and the newer API's alike:
    test_fp32_precision.py put the newer settings back over a legacy "high", which left cuBLAS on TF32, and on the GPU
    the reference matmuls of the test modules run after it drifted from their fp32 kernels by 1e-2."""
    legacy = torch._C._get_float32_matmul_precision()
    newer = (torch.backends.fp32_precision, torch.backends.cuda.matmul.fp32_precision) \
        if hasattr(torch.backends, "fp32_precision") else None
    yield
    torch.set_float32_matmul_precision(legacy)
    if newer is not None:
        torch.backends.fp32_precision, torch.backends.cuda.matmul.fp32_precision = newer


@pytest.fixture(autouse=True, scope="module")
def _gpu_memory_given_back(request):
    """On a GPU, each test module hands its cached blocks back to the driver when it ends: the suite runs in several
    processes at once (``-n``), and one process's allocator cache must not starve another's allocations. With
    ``AMK_TEST_GPU_MEMORY_LOG`` set, each module's peak of reserved memory is appended to that file (where an
    out-of-memory failure would start looking)."""
    yield
    if GPU:
        log = os.environ.get("AMK_TEST_GPU_MEMORY_LOG")
        if log:
            with open(log, "a") as file:
                file.write(f"{torch.cuda.max_memory_reserved() / 2**30:8.2f} GiB {request.node.nodeid}\n")
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


# Column sweeps (chunk_recompute's Gluon form) that amk-emit-gluon refuses whatever their tiles: the scores returned
# beside their softmax (each launch stores another output), a bias vector added to the scores (not a matrix).
_SCORES = "!tensor_op.tensor<[M, 1024], f16>"
_Q, _K = "!tensor_op.tensor<[M, 64], f16>", "!tensor_op.tensor<[64, 1024], f16>"
SCORES_AND_SOFTMAX = f"""func.func @scores(%q : {_Q}, %k : {_K}) -> ({_SCORES}, {_SCORES}) {{
  %0 = tensor_op.matmul %q, %k : ({_Q}, {_K}) -> {_SCORES}
  %1 = tensor_op.softmax %0 {{axis = -1 : i64}} : {_SCORES}
  func.return %0, %1 : {_SCORES}, {_SCORES}
}}"""
BIASED_SCORES = f"""func.func @scores(%q : {_Q}, %k : {_K}, %b : !tensor_op.tensor<[1024], f16>) -> {_SCORES} {{
  %0 = tensor_op.matmul %q, %k : ({_Q}, {_K}) -> {_SCORES}
  %1 = tensor_op.add %0, %b : ({_SCORES}, !tensor_op.tensor<[1024], f16>) -> {_SCORES}
  %2 = tensor_op.softmax %1 {{axis = -1 : i64}} : {_SCORES}
  func.return %2 : {_SCORES}
}}"""
