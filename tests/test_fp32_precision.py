"""fp32 matmuls follow PyTorch's float32 matmul precision: fp32-accurate (IEEE) dots under "highest", PyTorch's
default, TF32 under "high" and "medium"; the setting is part of the cache key, so a kernel built under one is never
reused under the other."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE, INTERPRETER_WARNINGS

import amk
from amk.lowering.emit_triton import EmitTritonPass

pytestmark = INTERPRETER_WARNINGS

OPS, SHAPES = ["matmul", "add_bias", "relu"], [(8, 32), (32, 16), (16,)]


@pytest.fixture
def precision():
    """Sets torch's float32 matmul precision for the test, and puts the previous one back."""
    previous = torch.get_float32_matmul_precision()
    yield torch.set_float32_matmul_precision
    torch.set_float32_matmul_precision(previous)


def test_highest_gives_ieee_dots_and_high_gives_tf32(tmp_path, precision):
    settings = amk.TunerConfig(target_cache_dir=tmp_path)
    precision("highest")
    accurate = amk.build_fused_kernel(OPS, SHAPES, torch.float32, autotune=False, tuner_config=settings)
    precision("high")
    fast = amk.build_fused_kernel(OPS, SHAPES, torch.float32, autotune=False, tuner_config=settings)
    assert 'input_precision="ieee"' in accurate.source and "tf32" not in accurate.source
    assert 'input_precision="tf32"' in fast.source
    assert fast.cache_key != accurate.cache_key and not fast.cache_hit
    precision("highest")
    again = amk.build_fused_kernel(OPS, SHAPES, torch.float32, autotune=False, tuner_config=settings)
    assert again.cache_hit and again.cache_key == accurate.cache_key and "tf32" not in again.source
    x, w, b = (torch.randn(shape).to(DEVICE) for shape in SHAPES)
    torch.testing.assert_close(fast(x, w, b), torch.relu(x @ w + b), rtol=1e-2, atol=1e-2)


def test_compiled_modules_follow_the_precision_too(tmp_path, precision):
    precision("high")
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU()).to(DEVICE)
    compiled = amk.compile(model, autotune=False, tuner_config=amk.TunerConfig(target_cache_dir=tmp_path))
    with torch.no_grad():
        compiled(torch.randn(4, 32).to(DEVICE))
    sources = [p.read_text() for p in (tmp_path / "sources").glob("*.py")]
    dots = [s for s in sources if "tl.dot" in s]
    assert dots and all('input_precision="tf32"' in s for s in dots)


def test_an_unknown_fp32_dot_is_refused():
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.utils.exceptions import PassFailedException

    from amk.context import make_context

    with pytest.raises(PassFailedException, match="fp32_dot must be one of ieee, tf32x3, tf32"):
        EmitTritonPass(fp32_dot="fast").apply(make_context(), ModuleOp([]))
