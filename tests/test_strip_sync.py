"""strip_sync kernels: the tiles of a row strip wait for each other's statistics (GPU only; the interpreter runs one
program at a time, so there amk tiles the same chains with tile_stats)."""

from __future__ import annotations

import pytest
import torch

import amk
from amk.lowering.emit_triton import TritonEmitter

GPU = torch.cuda.is_available()


def test_the_interpreter_gets_tile_stats_and_refuses_strip_sync():
    if GPU:
        pytest.skip("checks the CPU path")
    kernel = amk.build_fused_kernel(["matmul", "add", "rmsnorm"], [(64, 512), (512, 80), (64, 80)], torch.float32,
                                    autotune=False)
    assert 'strategy = "tile_stats"' in kernel.ir["tiled_loop"]
    from xdsl.parser import Parser

    from amk.dialects import memory_staged
    from amk.pipeline import make_context

    text = kernel.ir["memory_staged"].replace('strategy = "tile_stats"', 'strategy = "strip_sync"')
    module = Parser(make_context(), text).parse_module()
    staged = next(op for op in module.walk() if isinstance(op, memory_staged.KernelOp))
    with pytest.raises(ValueError, match="interpreter"):
        TritonEmitter(staged, interpret=True).emit()


CASES = [
    (["matmul", "add_bias", "gelu", "layernorm"], [(1000, 512), (512, 768), (768,), (768,), (768,)], torch.float16),
    (["matmul", "add", "rmsnorm"], [(4, 300, 1024), (1024, 2048), (4, 300, 2048)], torch.bfloat16),
    (["matmul", "softmax"], [(777, 512), (512, 1000)], torch.float16),
]


@pytest.mark.skipif(not GPU, reason="strip_sync needs a GPU")
@pytest.mark.parametrize("ops,shapes,dtype", CASES)
def test_strip_sync_matches_pytorch_call_after_call_and_under_a_cuda_graph(ops, shapes, dtype):
    kernel = amk.build_fused_kernel(ops, shapes, dtype, autotune=False)
    assert 'strategy = "strip_sync"' in kernel.ir["tiled_loop"]
    torch.manual_seed(0)
    inputs = [torch.randn(s, device="cuda", dtype=dtype) / (s[0] ** 0.5 if len(s) == 2 and i == 1 else 1)
              for i, s in enumerate(shapes)]
    reference = amk.verification.reference_for(kernel.ops, len(shapes))
    expected = reference(*[t.double() for t in inputs]).float()
    tolerance = 1e-2 if dtype == torch.bfloat16 else 2e-3
    for _ in range(3):  # the strip counters must be back at zero after every launch
        out = kernel(*inputs)
        error = ((out.float() - expected).norm() / expected.norm()).item()
        assert error < tolerance, error
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = kernel(*inputs)
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        error = ((captured.float() - expected).norm() / expected.norm()).item()
        assert error < tolerance, error
