"""Diagnostic: the host time of one Triton kernel launch by each path a hot path could take (issue 18's overhead).

    python benchmarks/probes/launch_paths.py [--out FILE.json]

One small elementwise kernel of a fused epilogue's shape (five tensors, two sizes) launched, in one process on the same
tensors, taking turns (20 rounds of 50 calls each, the median over rounds, :func:`amk.benchmarking.host_us`):

- ``jit``: ``kernel[grid](...)``, Triton's JIT path (binding, specialization key, cache lookup);
- ``launch_replay``: amk's :class:`~amk.replay.LaunchReplay` of a launcher calling it (what amk's hot path runs:
  its layout key, then PyTorch's C++ launcher where the kernel allows it, :func:`amk.replay.direct_launch`);
- ``compiled_runner``: the compiled kernel's ``compiled[grid](*args)`` (what a replay calls where the C++ launcher
  does not apply);
- ``direct_launch``: :func:`amk.replay.direct_launch`, PyTorch's C++ launcher of Inductor's kernels
  (``torch._C._StaticCudaLauncher``) on the compiled kernel's loaded function where the kernel allows it;
- the pieces around a launch on amk's path: ``empty`` (``torch.empty``, one output) and ``output_allocator`` (what
  the hot path allocates outputs with, :func:`amk.workspace.output_allocator`), ``reshape`` (one view),
  ``layout_key`` (the strides and alignment of five tensors, what a replay keys on), ``raw_stream``;
- a vendor GEMM as a program's step left to PyTorch could call it, on ``nn.Linear``'s weight (``[1024, 4096] x
  [4096, 4096]^T``, fp16): ``linear`` (``F.linear``, what :func:`amk.reference.bound` calls), ``mm`` (``torch.mm`` on
  the weight's transpose) and ``mm_out`` (into a buffer allocated as the hot path allocates outputs, as Inductor's
  ``extern_kernels.mm`` calls it); a GEMM's host cost depends on its shapes (cuBLAS's choice of kernels);
- ``call_size``: what TorchDynamo's code before a graph calls for each size symbol of the inputs, per symbol (one per
  dynamic dim: the cost of marking a dim dynamic).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch._dynamo.utils
import triton
import triton.language as tl

from amk.benchmarking import environment, host_us
from amk.replay import LaunchReplay, direct_launch
from amk.workspace import output_allocator


@triton.jit
def _bias_gelu_residual(x_ptr, bias_ptr, residual_ptr, out_ptr, aux_ptr, rows, cols, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < rows * cols
    x = tl.load(x_ptr + offsets, mask=mask) + tl.load(bias_ptr + offsets % cols, mask=mask)
    y = 0.5 * x * (1 + tl.sigmoid(1.5958 * x)) + tl.load(residual_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, y, mask=mask)
    tl.store(aux_ptr + offsets, x, mask=mask)


def _launcher(x, bias, residual, out, aux):
    rows, cols = x.shape
    _bias_gelu_residual[(triton.cdiv(rows * cols, 1024),)](x, bias, residual, out, aux, rows, cols, BLOCK=1024)


def launch_paths(rows: int = 16, cols: int = 1024) -> dict[str, float]:
    device = torch.device("cuda")
    x, residual, out, aux = (torch.randn(rows, cols, device=device) for _ in range(4))
    bias = torch.randn(cols, device=device)
    tensors = (x, bias, residual, out, aux)
    grid = (triton.cdiv(rows * cols, 1024),)
    compiled = _bias_gelu_residual[grid](*tensors, rows, cols, BLOCK=1024)
    runner = compiled[grid + (1, 1)]
    replay = LaunchReplay(_launcher, len(tensors))
    allocate = output_allocator(device)
    layers = {
        "jit": lambda: _bias_gelu_residual[grid](*tensors, rows, cols, BLOCK=1024),
        "launch_replay": lambda: replay(*tensors),
        "compiled_runner": lambda: runner(*tensors, rows, cols, 1024),  # constexprs included, as bound
    }
    direct = direct_launch(compiled, grid + (1, 1), [*tensors, rows, cols, 1024], len(tensors))
    expected = x + bias
    expected = 0.5 * expected * (1 + torch.sigmoid(1.5958 * expected)) + residual
    out.zero_()
    direct(tensors)
    torch.cuda.synchronize()
    print(f"the direct launch's max abs error: {(out - expected).abs().max().item():.2e}")
    layers["direct_launch"] = lambda: direct(tensors)
    layers |= {
        "empty": lambda: torch.empty((rows, cols), device=device),
        "output_allocator": lambda: allocate((rows, cols), (cols, 1), torch.float32),
        "reshape": lambda: x.reshape(rows * cols),
        "layout_key": lambda: tuple((t.stride(), t.data_ptr() % 16 == 0) for t in tensors),
        "raw_stream": lambda: torch._C._cuda_getCurrentRawStream(0),
        "call_size": lambda: torch._dynamo.utils.call_size(x, 0),
    }
    a = torch.randn(1024, 4096, device=device, dtype=torch.float16)
    weight = torch.randn(4096, 4096, device=device, dtype=torch.float16)
    layers |= {
        "linear": lambda: torch.nn.functional.linear(a, weight),
        "mm": lambda: torch.mm(a, weight.t()),
        "mm_out": lambda: torch.mm(a, weight.t(), out=allocate((1024, 4096), (4096, 1), torch.float16)),
    }
    torch.testing.assert_close(layers["mm_out"](), layers["linear"]())
    samples: dict[str, list[float]] = {name: [] for name in layers}
    for fn in layers.values():
        for _ in range(5):
            fn()
    for _ in range(20):
        for name, fn in layers.items():
            samples[name].append(host_us(fn, calls=50))
    return {name: round(statistics.median(values), 2) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("launch_paths.py times CUDA launches: it needs a GPU")
    with torch.no_grad():  # as a compiled module runs in inference
        result = {"environment": environment(), "command": " ".join(sys.argv), "host_us": launch_paths()}
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
