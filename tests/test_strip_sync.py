"""strip_sync kernels: the tiles of a row strip wait for each other's statistics (GPU only; the interpreter runs one
program at a time, so there amk tiles the same chains with tile_stats)."""

from __future__ import annotations

import pytest
import torch

import amk

GPU = torch.cuda.is_available()


def compile_strip_sync(ops, shapes, dtype):
    from amk.oplist import build_module, normalize_ops
    from amk.pipeline import compile_module

    return compile_module(build_module(ops, shapes, dtype), reduction_strategy="strip_sync"), normalize_ops(ops)


def test_the_interpreter_refuses_strip_sync_with_a_clear_error():
    if GPU:
        pytest.skip("checks the CPU path")
    with pytest.raises(ValueError, match="interpreter"):
        compile_strip_sync(["matmul", "add", "rmsnorm"], [(64, 512), (512, 80), (64, 80)], torch.float32)


CASES = [
    (["matmul", "add_bias", "gelu", "layernorm"], [(1000, 512), (512, 768), (768,), (768,), (768,)], torch.float16),
    (["matmul", "add", "rmsnorm"], [(1200, 1024), (1024, 2048), (1200, 2048)], torch.bfloat16),
    (["matmul", "softmax"], [(777, 512), (512, 1000)], torch.float16),
]


@pytest.mark.skipif(not GPU, reason="strip_sync needs a GPU")
@pytest.mark.parametrize("ops,shapes,dtype", CASES)
def test_strip_sync_matches_pytorch_call_after_call_and_under_a_cuda_graph(ops, shapes, dtype):
    compiled, op_list = compile_strip_sync(ops, shapes, dtype)
    assert 'strategy = "strip_sync"' in compiled.ir["tiled_loop"]
    torch.manual_seed(0)
    inputs = [torch.randn(s, device="cuda", dtype=dtype) / (s[0] ** 0.5 if len(s) == 2 and i == 1 else 1)
              for i, s in enumerate(shapes)]
    reference = amk.verification.reference_for(op_list, len(shapes))
    expected = reference(*[t.double() for t in inputs]).float()
    tolerance = 1e-2 if dtype == torch.bfloat16 else 2e-3

    def run():
        return compiled.program(*inputs)[0]

    for _ in range(3):  # the strip counters must be back at zero after every launch
        error = ((run().float() - expected).norm() / expected.norm()).item()
        assert error < tolerance, error
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = run()
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        error = ((captured.float() - expected).norm() / expected.norm()).item()
        assert error < tolerance, error
