"""Diagnostic: the model benchmark with amk's tuner timing decode-sized kernels from a cold L2.

    COLD=1 python benchmarks/probes/cold_tuning.py --rows norm_linear_residual_m1,... [models.py's options]

The tuner times a candidate under ``amk.tuner.GRAPH_TIMING_BELOW_MS`` (0.05 ms: decode kernels) again as replays of
a captured CUDA graph, in which a 32 MB weight stays in the H200's L2 from one replay to the next; the benchmark's
``ms`` and a real decode step (each layer's weights read once) find it in HBM. With ``COLD=1`` this runs
``benchmarks/models.py`` with that replay timing switched off (every candidate, and every race between programs,
timed by CUDA events after an L2 flush, as the benchmark's ``ms``); with ``COLD=0`` as it is, so that both run the
same script. Everything after ``cold_tuning.py`` goes to models.py.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

if os.environ.get("COLD") == "1":
    import amk.build
    import amk.tuner

    amk.tuner.GRAPH_TIMING_BELOW_MS = amk.build.GRAPH_TIMING_BELOW_MS = 0.0
    amk.tuner._measure.__defaults__ = (None, None)  # (give_up_above, graph_below): no graph re-timing
    print("cold tuning: candidates and races timed by events after an L2 flush", flush=True)

if __name__ == "__main__":
    benchmarks = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(benchmarks))  # models.py imports the shared workloads module
    models = benchmarks / "models.py"
    sys.argv = [str(models), *sys.argv[1:]]
    runpy.run_path(str(models), run_name="__main__")
