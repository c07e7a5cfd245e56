"""Usage example 1: x @ W + bias -> GELU -> LayerNorm as one fused fp16 kernel.

    python examples/gemm_bias_gelu_layernorm.py            # full size on a GPU; small shapes on the CPU
    python examples/gemm_bias_gelu_layernorm.py --small    # small shapes everywhere (the CPU's, in Triton's interpreter)
"""

import argparse

import torch
import torch.nn.functional as F

import amk
from amk.benchmarking import time_ms
from amk.runtime import default_device


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="small shapes on a GPU too (the CPU runs them anyway)")
    args = parser.parse_args()
    device = default_device()
    # Triton's interpreter runs the full sizes for minutes: the CPU takes the small ones
    batch, seq, hidden = (2, 16, 256) if args.small or device.type != "cuda" else (32, 512, 4096)
    torch.manual_seed(0)
    x = torch.randn(batch, seq, hidden, dtype=torch.float16, device=device)
    weight = torch.randn(hidden, hidden, dtype=torch.float16, device=device) / hidden**0.5
    bias = torch.randn(hidden, dtype=torch.float16, device=device)
    # LayerNorm parameters as trained models have them: near 1 and near 0.
    gamma = (1 + 0.1 * torch.randn(hidden, device=device)).half()
    beta = (0.1 * torch.randn(hidden, device=device)).half()

    kernel = amk.build_fused_kernel(
        ops=["matmul", "add_bias", "gelu", "layernorm"],
        input_shapes=[x.shape, weight.shape, bias.shape, gamma.shape, beta.shape],
        dtype=torch.float16,
        backend="triton",
        autotune=True,
    )
    out = kernel(x, weight, bias, gamma, beta)

    def eager():
        return F.layer_norm(F.gelu(x @ weight + bias), (hidden,), gamma, beta)

    max_diff = (out.float() - eager().float()).abs().max().item()
    print(f"max |amk - eager| = {max_diff:.3e}  ({'ok' if max_diff < 1e-2 else 'TOO LARGE'}; must be < 1e-2)")
    reference = amk.verification.reference_for(kernel.ops, 5)
    print(amk.verify(kernel, reference, dtypes=[torch.float16]))
    print(f"config: {kernel.config}")
    print(f"emitted Triton source: {kernel.source_paths[0]}")
    if device.type == "cuda":
        print(f"amk {time_ms(lambda: kernel(x, weight, bias, gamma, beta)):.3f} ms, eager {time_ms(eager):.3f} ms")
    if max_diff >= 1e-2:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
