"""Diagnostic: a Linear followed by its activation as two PyTorch calls (``F.linear`` with its bias, then ReLU or
tanh GELU: what eager runs, and what amk's program with the vendor GEMM ran) against one cuBLASLt call with the
activation in the GEMM's epilogue (``torch._addmm_activation``, CUBLASLT_EPILOGUE_RELU_BIAS / GELU_BIAS: the
activation on the fp32 accumulator, before the one rounding to 16 bits), and what each costs the host per call.

    python benchmarks/probes/vendor_epilogue.py --out benchmarks/results/<stem>.json

Why: the model rows whose MLPs are GEMM-bound (GPT-2's tanh GELU, OPT's ReLU) pay a pass over the hidden
activations for the activation alone, where cuBLASLt applies it in the epilogue. Per shape: each variant's median
time from a cold L2 (``amk.benchmarking.time_ms``), its relative L2 error and max abs error against float64, and its
per-call host time (``amk.benchmarking.host_us``, 100 back-to-back calls, the median of 5 repeats): the two above,
``F.linear`` alone, and ``amk.reference.linear_function`` (the callable amk's vendor program runs) on the rows as a
``[batch, tokens, features]`` input (where a model's MLP gets them); GPU only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from amk.benchmarking import environment, host_us, time_ms
from amk.reference import linear_function

SHAPES = {  # name: rows, in features, out features, dtype
    "gpt2_c_fc": (4096, 1024, 4096, torch.float16),
    "bert_intermediate": (4096, 768, 3072, torch.float16),
    "vit_fc1": (64 * 197, 768, 3072, torch.bfloat16),
    "opt_fc1": (2048, 2048, 8192, torch.float16),
}


def variants(activation: str):
    approximate = "tanh" if activation == "gelu_tanh" else "none"
    amk_linear = linear_function(activation, False)
    act = (lambda y: F.gelu(y, approximate=approximate)) if activation == "gelu_tanh" else F.relu
    return {
        "linear_then_activation": lambda x, w, b: act(F.linear(x, w, b)),
        "addmm_activation": lambda x, w, b: torch._addmm_activation(b, x, w.t(),
                                                                     use_gelu=activation == "gelu_tanh"),
        "linear_alone": lambda x, w, b: F.linear(x, w, b),
        "amk_linear_function": lambda x, w, b: amk_linear(x.view(8, -1, x.shape[-1]), w, b),
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
        host = host_us(lambda fn=fn: fn(x, w, b), calls=100, repeats=5, warmup=10)
        if label == "linear_alone":  # no activation: its host time only
            result[label] = {"host_us": host}
            continue
        out = fn(x, w, b).double().reshape(reference.shape)
        error = ((out - reference).norm() / reference.norm()).item()
        result[label] = {"rel_l2": error, "max_abs": (out - reference).abs().max().item(),
                         "ms": time_ms(lambda fn=fn: fn(x, w, b)), "host_us": host}
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
              f"{r['addmm_activation']['rel_l2']:.1e}; host us: " +
              ", ".join(f"{label} {r[label]['host_us']:.1f}" for label in variants(r["activation"])[0]))
    if args.out:
        command = " ".join(["python benchmarks/probes/vendor_epilogue.py", *(sys.argv[1:] if argv is None else argv)])
        args.out.write_text(json.dumps({"environment": environment(), "command": command, "results": results},
                                       indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
