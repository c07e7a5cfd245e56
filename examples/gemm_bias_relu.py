"""Usage example 2: relu(x @ w + b) as one fused fp16 kernel, compared and timed against eager PyTorch.

    python examples/gemm_bias_relu.py            # full size on a GPU; small shapes on the CPU
    python examples/gemm_bias_relu.py --small    # small shapes everywhere (the CPU's, in Triton's interpreter)
"""

import argparse

import torch

import amk
from amk.benchmarking import time_ms
from amk.runtime import default_device


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="small shapes on a GPU too (the CPU runs them anyway)")
    args = parser.parse_args()
    device = default_device()
    # Triton's interpreter runs the full sizes for minutes: the CPU takes the small ones
    batch, seq, hidden = (2, 32, 192) if args.small or device.type != "cuda" else (64, 1024, 4096)
    torch.manual_seed(0)
    x = torch.randn(batch, seq, hidden, dtype=torch.float16, device=device)
    w = torch.randn(hidden, hidden, dtype=torch.float16, device=device) / hidden**0.5
    b = torch.randn(hidden, dtype=torch.float16, device=device)

    kernel = amk.build_fused_kernel(ops=["matmul", "add_bias", "relu"], input_shapes=[x.shape, w.shape, b.shape],
                                    dtype=torch.float16, backend="triton")
    out = kernel(x, w, b)

    def eager():
        return torch.relu(x @ w + b)

    max_diff = (out.float() - eager().float()).abs().max().item()
    print(f"max |amk - eager| = {max_diff:.3e}")
    print(amk.verify(kernel, amk.verification.reference_for(kernel.ops, 3), dtypes=[torch.float16]))
    amk_ms, eager_ms = time_ms(lambda: kernel(x, w, b)), time_ms(eager)
    print(f"amk {amk_ms:.3f} ms, eager {eager_ms:.3f} ms ({'GPU' if device.type == 'cuda' else 'CPU interpreter'})")


if __name__ == "__main__":
    main()
