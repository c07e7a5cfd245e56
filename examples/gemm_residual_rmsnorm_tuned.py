"""Usage example 3: RMSNorm(x @ w + residual) in bf16, with a TunerConfig and an explicit parameter grid.

    python examples/gemm_residual_rmsnorm_tuned.py            # full size on a GPU; small shapes on the CPU
    python examples/gemm_residual_rmsnorm_tuned.py --small    # small shapes everywhere (the CPU's, in Triton's interpreter)
"""

import argparse

import torch
import torch.nn.functional as F

import amk
from amk.runtime import default_device


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="small shapes on a GPU too (the CPU runs them anyway)")
    args = parser.parse_args()
    device = default_device()
    # Triton's interpreter runs the full sizes for minutes: the CPU takes the small ones
    batch, seq, hidden = (2, 16, 128) if args.small or device.type != "cuda" else (16, 2048, 8192)

    tuner = amk.TunerConfig(search_budget=40, warmup_runs=15, measure_runs=40, enable_warp_specialization=True,
                            target_cache_dir="./custom_kernel_binary_cache")
    grid = {"BLOCK_SIZE_M": [32, 64, 128], "BLOCK_SIZE_N": [64, 128, 256], "BLOCK_SIZE_K": [32, 64],
            "num_warps": [4, 8, 16], "num_stages": [2, 3, 4, 5], "GROUP_SIZE_M": [8]}
    kernel = amk.build_fused_kernel(
        ops=["matmul", "add", "rmsnorm"],
        input_shapes=[(batch, seq, hidden), (hidden, hidden), (batch, seq, hidden)],
        dtype=torch.bfloat16, backend="triton", tuner_config=tuner, parameter_grid=grid,
    )
    torch.manual_seed(0)
    x = torch.randn(batch, seq, hidden, dtype=torch.bfloat16, device=device)
    w = (torch.randn(hidden, hidden, device=device) / hidden**0.5).bfloat16()
    residual = torch.randn(batch, seq, hidden, dtype=torch.bfloat16, device=device)
    out = kernel(x, w, residual)
    expected = F.rms_norm((x.float() @ w.float() + residual.float()), (hidden,))
    print(f"max |amk - fp32 reference| = {(out.float() - expected).abs().max().item():.3e}")
    print(amk.verify(kernel, amk.verification.reference_for(kernel.ops, 3), dtypes=[torch.bfloat16]))
    print(f"config: {kernel.config}")


if __name__ == "__main__":
    main()
