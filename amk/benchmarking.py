"""Timing helpers shared by the examples and the benchmark suite."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def time_ms(fn: Callable[[], object], *, cuda_graph: bool = False, warmup: int = 25, rep: int = 100) -> float:
    """Median time of ``fn`` in milliseconds: Triton's ``do_bench`` on a GPU (CUDA graphs optional), wall clock on
    the CPU (interpreter timings say nothing about GPU speed; they are reported for completeness)."""
    if torch.cuda.is_available():
        import triton.testing

        if cuda_graph:
            return triton.testing.do_bench_cudagraph(fn, rep=rep, return_mode="median")
        return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")
    fn()
    samples = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def environment() -> dict[str, str]:
    """GPU, versions and date for results files."""
    import datetime
    import platform

    import triton

    import amk

    return {
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "none (CPU, Triton interpreter)",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "amk": amk.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def save_rows(path, rows: list[dict]) -> None:
    """Write a diagnostic's measurements as a results file: the environment, the command line and the rows."""
    import json
    import sys

    with open(path, "w") as handle:
        json.dump({"environment": environment(), "command": " ".join(["python", *sys.argv]), "rows": rows}, handle,
                  indent=1)
