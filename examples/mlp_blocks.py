"""GPT-2 and Llama style MLP blocks, compiled with ``amk.compile`` and with ``torch.compile(backend="amk")``.

    python examples/mlp_blocks.py                      # GPU: hidden 4096; CPU: small sizes in Triton's interpreter
    python examples/mlp_blocks.py --small              # small sizes everywhere (hidden 64)
    python examples/mlp_blocks.py --out result.json    # also write the comparison as a JSON results file

For each block: the relative error against eager PyTorch in fp32 and fp16 (bf16 on the CPU is skipped: slow),
gradients through the compiled block, how many times it compiled for batch sizes 1, 3, 8 and 17, and the fused
groups ``amk.explain`` reports.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class GPT2MLP(nn.Module):
    """LayerNorm -> Linear -> GELU(tanh) -> Linear, plus the residual."""

    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, intermediate)
        self.proj = nn.Linear(intermediate, hidden)

    def forward(self, x):
        return x + self.proj(F.gelu(self.fc(self.ln(x)), approximate="tanh"))


class HandWrittenRMSNorm(nn.Module):
    """``x * rsqrt(mean(x^2) + eps) * w``, as many codebases write it."""

    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlamaMLP(nn.Module):
    """RMSNorm -> gate/up Linear -> SiLU(gate) * up -> down Linear, plus the residual."""

    def __init__(self, hidden: int, intermediate: int, norm=HandWrittenRMSNorm):
        super().__init__()
        self.norm = norm(hidden, eps=1e-6)
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        h = self.norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


BLOCKS = {"gpt2": GPT2MLP, "llama": LlamaMLP,
          "llama_nn_rmsnorm": lambda hidden, intermediate: LlamaMLP(hidden, intermediate, norm=nn.RMSNorm)}


def make(kind: str, hidden: int, intermediate: int, seed: int = 0) -> nn.Module:
    """A block with its norm weights moved away from the identity, so that they matter."""
    torch.manual_seed(seed)
    model = BLOCKS[kind](hidden, intermediate)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 1:
                parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def check(kind: str, hidden: int, intermediate: int, device: torch.device, dtype: torch.dtype) -> dict:
    import amk
    from amk.frontend.compile import STATS
    from amk.verification import compare

    model = make(kind, hidden, intermediate).to(device=device, dtype=dtype)
    reference = make(kind, hidden, intermediate).to(device=device, dtype=torch.float64)
    compiled = amk.compile(model)
    graphs_before = STATS.graphs
    errors, lines, failed = {}, [], False
    for batch in (1, 3, 8, 17):
        x = torch.randn(batch, 5, hidden, device=device, dtype=dtype)
        result = compare(compiled(x), reference(x.double()), dtype)
        errors[batch] = result.relative_l2_error
        lines += [f"{kind}, batch {batch}:", result.line()]
        failed = failed or not result.passed
    result = {"block": kind, "dtype": str(dtype), "relative_errors": errors, "compilations": STATS.graphs - graphs_before,
              "report": lines, "passed": not failed}
    dynamo = torch.compile(model, backend="amk")
    x = torch.randn(4, 5, hidden, device=device, dtype=dtype)
    result["torch_compile_backend_error"] = relative_error(dynamo(x), model(x))
    if dtype == torch.float32:
        x = torch.randn(2, 5, hidden, device=device, dtype=dtype, requires_grad=True)
        compiled(x).sum().backward()
        amk_grad = x.grad.clone()
        x.grad = None
        model(x).sum().backward()
        result["input_gradient_error"] = relative_error(amk_grad, x.grad)
    result["explain"] = str(amk.explain(model, (x.detach(),), print_report=False))
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--small", action="store_true", help="hidden 64, intermediate 128 (the CPU sizes)")
    args = parser.parse_args(argv)
    from amk.benchmarking import environment
    from amk.runtime import default_device

    device = default_device()
    hidden, intermediate = (4096, 11008) if device.type == "cuda" and not args.small else (64, 128)
    dtypes = [torch.float32, torch.float16]
    results = [check(kind, hidden, intermediate, device, dtype) for kind in ("gpt2", "llama") for dtype in dtypes]
    document = {"environment": environment(), "command": " ".join(["python", *sys.argv]), "hidden": hidden,
                "intermediate": intermediate, "results": results}
    text = json.dumps(document, indent=2, default=str)
    print("verification against PyTorch (float64 reference):")
    for result in results:
        print("\n".join(result["report"]))
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text)
    if not all(result["passed"] for result in results):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
