"""Large-index correctness on a GPU: kernels whose output holds more than 2^31 elements (64-bit offsets).

    python benchmarks/large_index.py --out benchmarks/results/<date>-h200-large-index.json
    python benchmarks/large_index.py --out /tmp/li.json --cases gelu --autotune
    python benchmarks/large_index.py --out /tmp/li.json --small      # tiny shapes: a smoke test of this script (CPU)

Cases (fp16 by default; each needs ~9 GB of GPU memory, freed before the next):

- ``bias_gelu``: ``x + bias -> GELU`` on x [2^16+1, 2^15] (2^31 + 2^15 elements, 4.3 GB), an elementwise kernel;
- ``softmax``: softmax over the rows of the same x, a row-reduction kernel (two sweeps over each row);
- ``layernorm``: LayerNorm with gamma and beta over the same x;
- ``matmul_bias_gelu``: ``x @ W + bias -> GELU`` with x [2^17+1, 256], W [256, 2^14]: the output has 2^31 + 2^14
  elements, the inputs are small (a GEMM with a 64-bit output index).

Each kernel is built with ``amk.build_fused_kernel`` (the heuristic configuration unless ``--autotune``), checked to
address its large buffers with 64-bit offsets (``.to(tl.int64)`` in the emitted code), run once, and compared with
PyTorch in float64 on sampled rows: the first rows, random rows, and the last rows (those past element 2^31, which
32-bit offsets would wrap onto the first rows). The whole output is also checked to be finite. The JSON result names
the GPU, versions, date, command, and per case the configuration, time, error and verdict; the exit status is 1
when a case fails.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import amk
from amk.benchmarking import environment
from amk.runtime import default_device
from amk.verification import TOLERANCES

LIMIT = 2**31
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def cases(small: bool) -> dict[str, dict]:
    rows, cols = (33, 64) if small else (2**16 + 1, 2**15)
    m, k, n = (65, 32, 48) if small else (2**17 + 1, 256, 2**14)
    return {
        "bias_gelu": {"ops": ["add_bias", "gelu"], "shapes": [(rows, cols), (cols,)],
                      "reference": lambda x, b: F.gelu(x + b)},
        "softmax": {"ops": ["softmax"], "shapes": [(rows, cols)], "reference": lambda x: torch.softmax(x, -1)},
        "layernorm": {"ops": ["layernorm"], "shapes": [(rows, cols), (cols,), (cols,)],
                      "reference": lambda x, g, b: F.layer_norm(x, (x.shape[-1],), g, b)},
        "matmul_bias_gelu": {"ops": ["matmul", "add_bias", "gelu"], "shapes": [(m, k), (k, n), (n,)],
                             "reference": lambda x, w, b: F.gelu(x @ w + b)},
    }


def make_inputs(name: str, shapes, dtype, device, seed: int) -> list[torch.Tensor]:
    """Random inputs generated on the device (matmul weights scaled by 1/sqrt(K))."""
    generator = torch.Generator(device=device).manual_seed(seed)
    tensors = []
    for index, shape in enumerate(shapes):
        tensor = torch.randn(shape, generator=generator, device=device, dtype=dtype)
        if name.startswith("matmul") and index == 1:
            tensor.mul_(1.0 / math.sqrt(shape[0]))
        tensors.append(tensor)
    return tensors


def sample_rows(total: int, count: int, seed: int) -> list[int]:
    """The first rows, the last rows (past element 2^31) and random rows in between."""
    edge = min(count // 4, total)
    generator = torch.Generator().manual_seed(seed)
    middle = torch.randint(0, total, (max(0, count - 2 * edge),), generator=generator).tolist()
    return sorted(set(range(edge)) | set(range(total - edge, total)) | set(middle))


def run_case(name: str, case: dict, dtype, args) -> dict:
    device = default_device()
    shapes = case["shapes"]
    result = {"case": name, "ops": case["ops"], "shapes": [list(s) for s in shapes], "dtype": str(dtype)}
    start = time.perf_counter()
    kernel = amk.build_fused_kernel(case["ops"], shapes, dtype, autotune=args.autotune)
    result["build_s"] = round(time.perf_counter() - start, 2)
    result["config"] = kernel.config
    result["num_kernels"] = kernel.num_kernels
    result["int64_offsets"] = ".to(tl.int64)" in kernel.source
    tensors = make_inputs(name, shapes, dtype, device, args.seed)
    out = kernel(*tensors)
    if device.type == "cuda":
        torch.cuda.synchronize()
        # time a few launches (the first one above compiled the kernel)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(args.repeat):
            kernel(*tensors)
        end.record()
        end.synchronize()
        result["time_ms"] = begin.elapsed_time(end) / args.repeat
        moved = sum(t.numel() * t.element_size() for t in tensors) + out.numel() * out.element_size()
        result["effective_gbps"] = round(moved / (result["time_ms"] * 1e-3) / 1e9, 1)
        out = kernel(*tensors)  # a fresh output for the checks
        torch.cuda.synchronize()
    rows = out.shape[0]
    result["output_elements"] = out.numel()
    result["output_elements_over_2^31"] = out.numel() - LIMIT
    result["all_finite"] = bool(torch.isfinite(out).all().item())
    checked = sample_rows(rows, args.sample_rows, args.seed)
    index = torch.tensor(checked, device=out.device)
    lead, *rest = tensors
    reference = case["reference"](lead.index_select(0, index).double(), *[t.double() for t in rest])
    have = out.index_select(0, index).double()
    row_errors = ((have - reference).norm(dim=-1) / reference.norm(dim=-1).clamp_min(1e-30)).cpu()
    result["checked_rows"] = len(checked)
    result["first_checked_row_past_2^31"] = next((r for r in checked if (r + 1) * out.shape[-1] > LIMIT), None)
    result["max_abs_error"] = (have - reference).abs().max().item()
    result["max_row_rel_l2_error"] = row_errors.max().item()
    result["rel_l2_error"] = ((have - reference).norm() / reference.norm()).item()
    result["tolerance"] = TOLERANCES[dtype]
    result["last_rows_rel_l2_error"] = row_errors[-min(8, len(checked)):].max().item()
    big = out.numel() >= LIMIT
    result["passed"] = bool(result["all_finite"] and result["rel_l2_error"] <= TOLERANCES[dtype]
                            and result["max_row_rel_l2_error"] <= 4 * TOLERANCES[dtype]
                            and (result["int64_offsets"] or not big))
    del kernel, tensors, out, reference, have
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="where to write the JSON result")
    parser.add_argument("--cases", default=",".join(cases(False)), help="comma-separated: " + ", ".join(cases(False)))
    parser.add_argument("--dtype", default="fp16", choices=list(DTYPES))
    parser.add_argument("--autotune", action="store_true", help="time candidate configurations (slow at this size)")
    parser.add_argument("--sample-rows", type=int, default=64, help="rows compared with PyTorch (default 64)")
    parser.add_argument("--repeat", type=int, default=5, help="timed launches per case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--small", action="store_true", help="tiny shapes: checks this script, not large indices")
    args = parser.parse_args(argv)
    table = cases(args.small)
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in table]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(table)}")
    if not args.small and default_device().type != "cuda":
        parser.error("large-index cases need a CUDA GPU (use --small for a smoke test on the CPU)")
    dtype = DTYPES[args.dtype]
    document = {**environment(), "command": " ".join([Path(sys.executable).name, *sys.argv]), "small": args.small,
                "autotune": args.autotune, "cases": []}
    if torch.cuda.is_available():
        document["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for name in names:
        try:
            result = run_case(name, table[name], dtype, args)
        except Exception as error:  # record the failure and go on with the other cases
            result = {"case": name, "passed": False, "error": f"{type(error).__name__}: {str(error)[:2000]}"}
        document["cases"].append(result)
        line = {k: result.get(k) for k in ("case", "passed", "rel_l2_error", "last_rows_rel_l2_error", "time_ms",
                                            "int64_offsets", "error") if k in result}
        print(json.dumps(line), flush=True)
        document["passed"] = all(c["passed"] for c in document["cases"]) and len(document["cases"]) == len(names)
        out.write_text(json.dumps(document, indent=1, default=str) + "\n")  # after every case: partial results
    print(f"{'PASSED' if document['passed'] else 'FAILED'}: {len(document['cases'])} case(s); wrote {out}")
    return 0 if document["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
