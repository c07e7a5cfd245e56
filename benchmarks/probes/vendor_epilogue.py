"""Diagnostic: a Linear followed by its activation as two PyTorch calls (``F.linear`` with its bias, then ReLU or
tanh GELU: what eager runs, and what amk's program with the vendor GEMM ran) against one cuBLASLt call with the
activation in the GEMM's epilogue (``torch._addmm_activation``, CUBLASLT_EPILOGUE_RELU_BIAS / GELU_BIAS: the
activation on the fp32 accumulator, before the one rounding to 16 bits).

    python benchmarks/probes/vendor_epilogue.py --out benchmarks/results/<stem>.json

Why: the model rows whose MLPs are GEMM-bound (GPT-2's tanh GELU, OPT's ReLU) pay a pass over the hidden
activations for the activation alone, where cuBLASLt applies it in the epilogue. Per shape: each variant's median
time from a cold L2 (``amk.benchmarking.time_ms``), its relative L2 error and max abs error against float64; GPU
only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from amk.benchmarking import environment, time_ms

SHAPES = {  # name: rows, in features, out features, dtype
    "gpt2_c_fc": (4096, 1024, 4096, torch.float16),
    "bert_intermediate": (4096, 768, 3072, torch.float16),
    "vit_fc1": (64 * 197, 768, 3072, torch.bfloat16),
    "opt_fc1": (2048, 2048, 8192, torch.float16),
}


def variants(activation: str):
    approximate = "tanh" if activation == "gelu_tanh" else "none"
    act = (lambda y: F.gelu(y, approximate=approximate)) if activation == "gelu_tanh" else F.relu
    return {
        "linear_then_activation": lambda x, w, b: act(F.linear(x, w, b)),
        "addmm_activation": lambda x, w, b: torch._addmm_activation(b, x, w.t(),
                                                                     use_gelu=activation == "gelu_tanh"),
    }, act


def measure(name: str, activation: str) -> dict:
    rows, k, n, dtype = SHAPES[name]
    torch.manual_seed(0)
    x = torch.randn(rows, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
    b = torch.randn(n, device="cuda", dtype=dtype)
    fns, act = variants(activation)
    reference = act(F.linear(x.double(), w.double(), b.double()))
    result = {"rows": rows, "in": k, "out": n, "dtype": str(dtype).removeprefix("torch."), "activation": activation}
    for label, fn in fns.items():
        out = fn(x, w, b).double()
        error = ((out - reference).norm() / reference.norm()).item()
        result[label] = {"rel_l2": error, "max_abs": (out - reference).abs().max().item(),
                         "ms": time_ms(lambda fn=fn: fn(x, w, b))}
    result["speedup"] = result["linear_then_activation"]["ms"] / result["addmm_activation"]["ms"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("vendor_epilogue.py needs a GPU", file=sys.stderr)
        return 1
    results = [measure(name, activation) for name in SHAPES for activation in ("gelu_tanh", "relu")]
    for r in results:
        print(f"{r['rows']}x{r['in']}->{r['out']} {r['dtype']} {r['activation']}: "
              f"linear+act {r['linear_then_activation']['ms']:.4f} ms, epilogue {r['addmm_activation']['ms']:.4f} ms "
              f"({r['speedup']:.2f}x); errors {r['linear_then_activation']['rel_l2']:.1e} / "
              f"{r['addmm_activation']['rel_l2']:.1e}")
    if args.out:
        command = " ".join(["python benchmarks/probes/vendor_epilogue.py", *(sys.argv[1:] if argv is None else argv)])
        args.out.write_text(json.dumps({"environment": environment(), "command": command, "results": results},
                                       indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
