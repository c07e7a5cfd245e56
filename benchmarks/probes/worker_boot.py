"""Diagnostic: how long amk's compile workers take to start, by their count (issue 18's first call).

    for n in 15 8 4; do python benchmarks/probes/worker_boot.py --workers $n; done

Run in a new process per count (a process's pool starts once): starts a pool of ``--workers`` compile workers
(:class:`amk.compile_worker.CompileWorkers`: forks of one process that imports triton, never torch) and prints the
seconds until all are ready, each one's boot time, the part of it the imports took, and how many workers imported
torch (none should), as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from amk.benchmarking import environment
from amk.compile_worker import CompileWorkers


def boot(workers: int) -> dict:
    started = time.time()
    pool = CompileWorkers(workers)
    pool.start()
    try:
        while len(pool.boot_seconds) < workers and pool.broken is None:
            time.sleep(0.02)
        return {"workers": workers, "all_ready_s": round(time.time() - started, 2),
                "boot_s": sorted(round(seconds, 2) for seconds in pool.boot_seconds),
                "import_s": sorted(round(w.import_seconds, 2) for w in pool.workers if w.import_seconds is not None),
                "with_torch": sum(bool(w.imported_torch) for w in pool.workers), "broken": pool.broken}
    finally:
        pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=15, help="how many workers to start")
    parser.add_argument("--out", type=Path, help="append the result, with the environment, as a JSON line here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("worker_boot.py times workers that compile for a GPU: it needs one")
    result = boot(args.workers)
    print(json.dumps(result))
    if args.out:
        with args.out.open("a") as out:
            out.write(json.dumps({"environment": environment(), "command": " ".join(sys.argv), **result}) + "\n")


if __name__ == "__main__":
    main()
