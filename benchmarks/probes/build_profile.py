"""Where a cold build's wall time goes, by function: the building thread's stack sampled every few milliseconds.

    python benchmarks/probes/build_profile.py --build B --out /tmp/build-profile-B.json --log /tmp/build-B.log
    python benchmarks/probes/build_profile.py --row fp32_linear_layernorm --log /tmp/row.log  # a model row, first call

cProfile cannot say it: the tuner's dispatching threads interleave with the building thread, and Python 3.12's
cProfile then charges one thread's time to another's frames (a build of B it put at 10 s ran 18 s). Here a sampling
thread reads the building thread's stack (``sys._current_frames``) and charges the wall time since its last sample
to every function on it (inclusive) and to the innermost one (exclusive). The build runs in this process with empty
amk and Triton caches, as ``benchmarks/build_time.py`` builds it (``workloads.build_kernel``); with ``--row``, the
first call of ``amk.compile`` on a row of ``benchmarks/models.py`` instead (its buckets' build phases and what ran).
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from workloads import BUILDS, ROWS, build_kernel  # noqa: E402


class StackSampler:
    """Samples ``thread_id``'s stack every ``interval`` seconds while running (a context manager)."""

    def __init__(self, thread_id: int, interval: float = 0.005):
        self.thread_id, self.interval = thread_id, interval
        self.inclusive: collections.Counter[str] = collections.Counter()
        self.exclusive: collections.Counter[str] = collections.Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _name(frame) -> str:
        path = frame.f_code.co_filename
        for marker in ("site-packages/", "/lib/python3"):
            path = path.split(marker)[-1]
        return f"{path}:{frame.f_code.co_firstlineno}({frame.f_code.co_name})"

    def _run(self) -> None:
        last = time.perf_counter()
        while not self.stop.wait(self.interval):
            now = time.perf_counter()
            frame, seen, innermost = sys._current_frames().get(self.thread_id), set(), True
            while frame is not None:
                name = self._name(frame)
                if innermost:
                    self.exclusive[name] += now - last
                    innermost = False
                if name not in seen:
                    self.inclusive[name] += now - last
                    seen.add(name)
                frame = frame.f_back
            last = now

    def __enter__(self) -> StackSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def first_row_call(row_name: str) -> tuple[str, dict[str, float]]:
    """The first call of ``amk.compile`` on a model row (its full sizes) and the build phases of its buckets, summed;
    prints what ``amk.explain`` says ran."""
    import torch

    import amk

    module, shapes = ROWS[row_name].build(False)
    dtype = ROWS[row_name].dtype
    module = module.to(device="cuda", dtype=dtype).eval()
    inputs = [torch.randn(shape, device="cuda", dtype=dtype) for shape in shapes]
    compiled = amk.compile(module)
    with torch.no_grad():
        compiled(*inputs)
    torch.cuda.synchronize()
    phases: collections.Counter[str] = collections.Counter()
    for graph in amk.explain(compiled).graphs:
        for subgraph in graph.subgraphs:
            for bucket in subgraph.buckets:
                phases.update(bucket.build_phases)
    return row_name, dict(phases)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", choices=BUILDS, default="B")
    parser.add_argument("--row", choices=ROWS, help="profile the first call of amk.compile on this model row instead")
    parser.add_argument("--after", choices=ROWS, help="with --row: first call this row, unprofiled, so that the "
                        "profiled row finds the compile workers running (and the same caches), as the rows after "
                        "the first of benchmarks/models.py do")
    parser.add_argument("--top", type=int, default=45, help="functions listed, by inclusive time")
    parser.add_argument("--out", type=Path, help="write every function's seconds as JSON here")
    parser.add_argument("--log", type=Path, help="write amk's log (DEBUG) here, each line with the milliseconds since "
                        "the start (every candidate's time, the refinements, the race of whole programs, the compile "
                        "workers' start and jobs)")
    args = parser.parse_args()
    if args.after and not args.row:
        parser.error("--after goes with --row")
    if args.log:
        handler = logging.FileHandler(args.log, mode="w")
        handler.setFormatter(logging.Formatter("%(relativeCreated)9.0f ms  %(message)s"))
        logging.getLogger("amk").addHandler(handler)
        logging.getLogger("amk").setLevel(logging.DEBUG)
    scratch = tempfile.mkdtemp(prefix="amk-build-profile-")  # empty caches: amk and Triton read these when they build
    os.environ["AMK_CACHE_DIR"], os.environ["TRITON_CACHE_DIR"] = f"{scratch}/amk", f"{scratch}/triton"
    if args.after:
        first_row_call(args.after)
    started = time.perf_counter()
    with StackSampler(threading.get_ident()) as sampler:
        name, phases = first_row_call(args.row) if args.row else (args.build, build_kernel(args.build)[0].build_phases)
    wall = time.perf_counter() - started
    print(f"{name}: {wall:.1f} s from the call (inputs included), phases "
          + ", ".join(f"{phase} {seconds:.1f}" for phase, seconds in phases.items()))
    print("inclusive s  exclusive s  function")
    for name, seconds in sampler.inclusive.most_common(args.top):
        print(f"{seconds:11.2f}  {sampler.exclusive.get(name, 0.0):11.2f}  {name}")
    if args.out:
        args.out.write_text(json.dumps({"build": name, "wall_s": wall, "phases": phases,
                                        "inclusive_s": dict(sampler.inclusive.most_common()),
                                        "exclusive_s": dict(sampler.exclusive.most_common())}, indent=1))


if __name__ == "__main__":
    main()
