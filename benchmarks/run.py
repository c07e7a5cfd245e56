"""The amk benchmark suite: each workload under eager, torch.compile (default and max-autotune-no-cudagraphs), the
cuBLAS GEMM alone and amk, in one process on the same inputs, correctness checked first.

    python benchmarks/run.py                       # every workload, every contender (needs a GPU)
    python benchmarks/run.py --workloads A,G --contenders eager,compile,amk
    python benchmarks/run.py --small               # tiny shapes: a smoke test of the suite itself (CPU is fine)
    python benchmarks/run.py --extra-shapes        # each workload family at two other shapes
    python benchmarks/run.py --render FILE.json    # rewrite a results file's table and chart from its JSON

Writes ``benchmarks/results/<stem>.json`` and ``.md`` (table: times, amk's speedup against each contender, the
fraction of the floor amk reaches) and, with matplotlib, ``.png``. Times are medians in
milliseconds (``triton.testing.do_bench``; ``do_bench_cudagraph`` for the CUDA-graph columns). The floor is
max(FLOPs / 790 TFLOP/s, bytes / 4.3 TB/s), the ceilings measured on the H200.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

import amk
from amk.benchmarking import environment, save_rows, time_ms
from amk.runtime import default_device

PEAK_FLOPS = 790e12
PEAK_BYTES = 4.3e12
CONTENDERS = ("eager", "compile", "compile_max_autotune", "cublas", "amk")


@dataclass
class Workload:
    name: str
    title: str
    ops: list
    shapes: list[tuple[int, ...]]
    small_shapes: list[tuple[int, ...]]
    dtype: torch.dtype
    eager: Callable
    flops: Callable[[list[tuple[int, ...]]], float]
    gemm: Callable | None = None
    cuda_graphs: bool = False
    weight: int | None = 1
    module: Callable | None = None  # builds the tensor_op module when the workload is not an op chain

    def variants(self) -> list[Workload]:
        """The same family (ops, dtype, build path) at two other shapes: ``A2``, ``A3``, ..."""
        return [dataclasses.replace(self, name=f"{self.name}{index}", shapes=shapes)
                for index, shapes in enumerate(EXTRA_SHAPES[self.name], start=2)]


def _gemm_flops():
    def flops(shapes):
        return 2.0 * math.prod(shapes[0][:-1]) * shapes[1][0] * shapes[1][1]

    return flops


WORKLOADS = {
    "A": Workload("A", "x@W + bias -> GELU -> LayerNorm, fp16", ["matmul", "add_bias", "gelu", "layernorm"],
                  [(16384, 4096), (4096, 4096), (4096,), (4096,), (4096,)],
                  [(64, 128), (128, 128), (128,), (128,), (128,)], torch.float16,
                  lambda x, w, b, g, be: F.layer_norm(F.gelu(x @ w + b), (w.shape[1],), g, be), _gemm_flops(),
                  gemm=lambda x, w, *rest: x @ w),
    "B": Workload("B", "x@W + bias -> ReLU, fp16", ["matmul", "add_bias", "relu"],
                  [(65536, 4096), (4096, 4096), (4096,)], [(64, 128), (128, 128), (128,)], torch.float16,
                  lambda x, w, b: torch.relu(x @ w + b), _gemm_flops(), gemm=lambda x, w, *rest: x @ w),
    "C": Workload("C", "x@W + residual -> RMSNorm, bf16", ["matmul", "add", "rmsnorm"],
                  [(32768, 8192), (8192, 8192), (32768, 8192)], [(64, 128), (128, 128), (64, 128)], torch.bfloat16,
                  lambda x, w, r: F.rms_norm(x @ w + r, (w.shape[1],)), _gemm_flops(), gemm=lambda x, w, *rest: x @ w),
    "D": Workload("D", "RMSNorm(x)*g @ W + residual, M=16, bf16", ["rmsnorm", "matmul", "add"],
                  [(16, 4096), (4096,), (4096, 4096), (16, 4096)], [(16, 128), (128,), (128, 128), (16, 128)],
                  torch.bfloat16, lambda x, g, w, r: F.rms_norm(x, (x.shape[1],), g) @ w + r,
                  lambda s: 2.0 * s[0][0] * s[2][0] * s[2][1], cuda_graphs=True, weight=2),
    "E": Workload("E", "RMSNorm(x)*g @ W + residual, M=1, bf16", ["rmsnorm", "matmul", "add"],
                  [(1, 4096), (4096,), (4096, 4096), (1, 4096)], [(1, 128), (128,), (128, 128), (1, 128)],
                  torch.bfloat16, lambda x, g, w, r: F.rms_norm(x, (x.shape[1],), g) @ w + r,
                  lambda s: 2.0 * s[0][0] * s[2][0] * s[2][1], cuda_graphs=True, weight=2),
    "F": Workload("F", "SwiGLU MLP (silu(x@Wg)*(x@Wu))@Wd + x, M=16, bf16", [],
                  [(16, 4096), (4096, 14336), (4096, 14336), (14336, 4096)],
                  [(16, 128), (128, 256), (128, 256), (256, 128)], torch.bfloat16,
                  lambda x, wg, wu, wd: (F.silu(x @ wg) * (x @ wu)) @ wd + x,
                  lambda s: 2.0 * s[0][0] * (2 * s[1][0] * s[1][1] + s[3][0] * s[3][1]), cuda_graphs=True,
                  weight=None, module=lambda shapes, dtype: swiglu_module(shapes, dtype)),
    "G": Workload("G", "softmax(q@k * 128^-0.5), fp16", ["matmul", ("scale", {"factor": 128 ** -0.5}), "softmax"],
                  [(8192, 128), (128, 8192)], [(64, 32), (32, 128)], torch.float16,
                  lambda q, k: torch.softmax((q @ k) * 128 ** -0.5, dim=-1), _gemm_flops(),
                  gemm=lambda q, k: q @ k, weight=None),
}

# Two more shapes per workload family: other widths, a LayerNorm/RMSNorm over a width that is not a power of two,
# other batch sizes for the decode kernels.
EXTRA_SHAPES = {
    "A": [[(8192, 2048), (2048, 2048), (2048,), (2048,), (2048,)],
          [(4096, 8192), (8192, 3072), (3072,), (3072,), (3072,)]],
    "B": [[(16384, 2048), (2048, 8192), (8192,)], [(8192, 4096), (4096, 11008), (11008,)]],
    "C": [[(8192, 4096), (4096, 4096), (8192, 4096)], [(16384, 2048), (2048, 5120), (16384, 5120)]],
    "D": [[(4, 4096), (4096,), (4096, 11008), (4, 11008)], [(32, 8192), (8192,), (8192, 8192), (32, 8192)]],
    "E": [[(1, 8192), (8192,), (8192, 8192), (1, 8192)], [(1, 2048), (2048,), (2048, 5632), (1, 5632)]],
    "F": [[(1, 4096), (4096, 14336), (4096, 14336), (14336, 4096)], [(32, 2048), (2048, 5632), (2048, 5632), (5632, 2048)]],
    "G": [[(4096, 64), (64, 4096)], [(16384, 128), (128, 16384)]],
}


def swiglu_module(shapes, dtype):
    """The SwiGLU MLP as tensor_op IR (two matmuls of x, SiLU, product, down projection, residual)."""
    from xdsl.dialects import func
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.ir import Block, Region

    from amk.dialects import tensor_op
    from amk.dialects.tensor_op import TensorType
    from amk.dtypes import to_ir

    element = to_ir(dtype)
    block = Block(arg_types=[TensorType(s, element) for s in shapes])
    x, w_gate, w_up, w_down = block.args
    for arg, name in zip(block.args, ["x", "w_gate", "w_up", "w_down"]):
        arg.name_hint = name
    gate = tensor_op.MatmulOp(x, w_gate)
    activated = tensor_op.SiluOp(gate.output)
    up = tensor_op.MatmulOp(x, w_up)
    hidden = tensor_op.MulOp(activated.output, up.output)
    down = tensor_op.MatmulOp(hidden.output, w_down)
    out = tensor_op.AddOp(down.output, x)
    for op in (gate, activated, up, hidden, down, out, func.ReturnOp(out.output)):
        block.add_op(op)
    function = func.FuncOp("swiglu", ([a.type for a in block.args], [out.output.type]), Region(block))
    return ModuleOp([function])


class ModuleKernel:
    """A compiled tensor_op module called like a FusedKernel (for workloads that are not op chains)."""

    def __init__(self, workload: Workload, shapes, budget: int):
        from amk.pipeline import compile_module
        from amk.runtime import interpreting
        from amk.tuner import autotune_chooser

        self.tuning_log: dict = {}
        chooser = None
        if torch.cuda.is_available() and not interpreting():
            chooser = autotune_chooser(amk.TunerConfig(search_budget=budget), None,
                                       lambda k, c, t: self.tuning_log.update({k.sym_name.data: [x.as_dict() for x in t]}))
        self.compiled = (compile_module(workload.module(shapes, workload.dtype), chooser) if chooser
                         else compile_module(workload.module(shapes, workload.dtype)))
        self.num_kernels = len(self.compiled.kernels)
        self.config = {name: k.config.user_view() for name, k in self.compiled.kernels.items()}

    def __call__(self, *tensors):
        return self.compiled.program(*tensors)[0]


def tensor_bytes(shapes, dtype, output_shape) -> int:
    size = torch.empty((), dtype=dtype).element_size()
    return size * (sum(math.prod(s) for s in shapes) + math.prod(output_shape))


def make_inputs(workload: Workload, shapes, device) -> list[torch.Tensor]:
    generator = torch.Generator(device="cpu").manual_seed(0)
    tensors = []
    for index, shape in enumerate(shapes):
        values = torch.randn(shape, generator=generator)
        if index == workload.weight:
            values = values / math.sqrt(shape[0])  # keeps x @ W of order 1
        if len(shape) == 1:
            values = 1 + 0.1 * values  # biases and norm weights as trained models have them
        tensors.append(values.to(device=device, dtype=workload.dtype))
    return tensors


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item(), (out - ref).abs().max().item()


def run_workload(workload: Workload, contenders: list[str], small: bool, graphs: bool, budget: int) -> dict:
    device = default_device()
    shapes = workload.small_shapes if small else workload.shapes
    inputs = make_inputs(workload, shapes, device)
    start = time.perf_counter()
    if workload.module is not None:
        kernel = ModuleKernel(workload, shapes, budget)
    else:
        kernel = amk.build_fused_kernel(workload.ops, shapes, workload.dtype,
                                        tuner_config=amk.TunerConfig(search_budget=budget))
    build_s = time.perf_counter() - start
    reference = workload.eager(*[t.double() if device.type == "cpu" else t.float() for t in inputs])
    title = workload.title if workload.name in WORKLOADS else f"{workload.title} at {' x '.join(map(str, shapes[:2]))}"
    result = {"workload": workload.name, "title": title, "shapes": shapes, "dtype": str(workload.dtype),
              "amk_build_s": round(build_s, 2), "amk_kernels": kernel.num_kernels, "amk_config": kernel.config,
              "amk_torch_ops": getattr(kernel, "torch_ops", []), "amk_program_times": getattr(kernel, "program_times", {}),
              "times_ms": {}, "graph_times_ms": {}, "errors": {}, "tuning_log": getattr(kernel, "tuning_log", {})}
    out = kernel(*inputs)
    result["errors"]["amk"] = relative_error(out, reference)
    output_shape = tuple(out.shape)
    flops = workload.flops(shapes)
    bytes_moved = tensor_bytes(shapes, workload.dtype, output_shape)
    result["floor_ms"] = max(flops / PEAK_FLOPS, bytes_moved / PEAK_BYTES) * 1e3
    functions = {"amk": lambda: kernel(*inputs), "eager": lambda: workload.eager(*inputs)}
    if "compile" in contenders:
        compiled = torch.compile(workload.eager)
        functions["compile"] = lambda: compiled(*inputs)
    if "compile_max_autotune" in contenders:
        tuned = torch.compile(workload.eager, mode="max-autotune-no-cudagraphs")
        functions["compile_max_autotune"] = lambda: tuned(*inputs)
    if "cublas" in contenders and workload.gemm is not None:
        functions["cublas"] = lambda: workload.gemm(*inputs)
    for name in [c for c in contenders if c in functions]:
        fn = functions[name]
        if name != "cublas":
            value = fn() if name != "amk" else out
            result["errors"].setdefault(name, relative_error(value, reference))
        result["times_ms"][name] = time_ms(fn)
        if graphs and workload.cuda_graphs and device.type == "cuda":
            try:
                result["graph_times_ms"][name] = time_ms(fn, cuda_graph=True)
            except Exception as error:  # a contender that cannot be captured is reported, not fatal
                result["graph_times_ms"][name] = f"not capturable: {type(error).__name__}: {error}"[:200]
    return result


def baseline_rows(workload: Workload, shapes, budget: int) -> tuple[list[torch.Tensor], torch.Tensor, list[dict]]:
    """For diagnostics that time a hand-written kernel beside the contenders, on the GPU: the inputs, the float64
    reference, and one row per contender (eager, torch.compile, amk tuned with ``budget``, the cuBLAS GEMM alone),
    each checked against the reference before it is timed."""
    inputs = make_inputs(workload, shapes, "cuda")
    reference = workload.eager(*[t.double() for t in inputs])
    compiled = torch.compile(workload.eager)
    built = amk.build_fused_kernel(workload.ops, shapes, workload.dtype,
                                   tuner_config=amk.TunerConfig(search_budget=budget))
    contenders = {"eager": lambda: workload.eager(*inputs), "compile": lambda: compiled(*inputs),
                  "amk": lambda: built(*inputs), "cublas_gemm": lambda: workload.gemm(*inputs)}
    rows = []
    for label, function in contenders.items():
        out = function().double()
        error = None if label == "cublas_gemm" else ((out - reference).norm() / reference.norm()).item()
        rows.append({"shapes": shapes, "contender": label, "rel_err": error, "ms": time_ms(function),
                     "config": built.config if label == "amk" else None})
        print(json.dumps(rows[-1]), flush=True)
    return inputs, reference, rows


def probe_parser(description: str) -> argparse.ArgumentParser:
    """The command line every G diagnostic shares: ``--variants``, ``--budget`` and ``--out``."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="1", help="1: G's own shapes; 2, 3: its extra shapes")
    parser.add_argument("--budget", type=int, default=12, help="amk's autotuning candidates")
    parser.add_argument("--out", help="JSON results file")
    return parser


def probe_shapes(parser: argparse.ArgumentParser, variants: str) -> list[list[tuple[int, ...]]]:
    """The shapes a G diagnostic measures: ``variants`` lists 1 (G's own), 2 and 3 (its extra shapes). Exits through
    ``parser`` on a bad list, or without a GPU."""
    chosen = variants.split(",")
    if any(variant not in ("1", "2", "3") for variant in chosen):
        parser.error(f"--variants {variants!r}: a comma-separated list of 1, 2 and 3")
    if not torch.cuda.is_available():
        parser.error("this diagnostic times GPU kernels: it needs a GPU")
    return [[tuple(s) for s in (WORKLOADS["G"].shapes if variant == "1" else EXTRA_SHAPES["G"][int(variant) - 2])]
            for variant in chosen]


def probe_row(shapes, contender: str, config: dict, measure: Callable[[], dict]) -> dict:
    """One configuration's row of a diagnostic: what ``measure()`` returns, or the error of a configuration that does
    not compile (shared memory, say: reported, not fatal); printed as it is made."""
    row = {"shapes": shapes, "contender": contender, "config": config}
    try:
        row |= measure()
    except Exception as failure:
        row["error"] = repr(failure)[:300]
    print(json.dumps(row), flush=True)
    return row


def run_probe(args: argparse.Namespace, shape_sets, measure: Callable, configs: list) -> None:
    """A G diagnostic's whole run: ``measure(shapes, configs, budget)`` for each shape set, the rows saved to
    ``--out`` when given, then each contender's best time per shape."""
    rows = [row for shapes in shape_sets for row in measure(shapes, configs, args.budget)]
    if args.out:
        save_rows(args.out, rows)
    best = {}
    for row in rows:
        if row.get("ms") is not None:
            key = (str(row["shapes"]), row["contender"])
            best[key] = min(best.get(key, math.inf), row["ms"])
    for (shapes, contender), ms in sorted(best.items()):
        print(f"{shapes} {contender}: {ms:.4f} ms")


OTHERS = [c for c in CONTENDERS if c != "amk"]


def table(results: list[dict]) -> str:
    """Times, amk's speedup against each contender (above 1x amk is faster) and the fraction of the floor amk
    reaches."""
    lines = ["| workload | floor | " + " | ".join(CONTENDERS) + " | amk rel. error | "
             + " | ".join(f"amk vs {c}" for c in OTHERS) + " | amk / floor |",
             "|---" * (2 * len(CONTENDERS) + 3) + "|"]
    for r in results:
        for label, times in (("", r["times_ms"]), (" (graphs)", r["graph_times_ms"])):
            if not times:
                continue
            amk_ms = times.get("amk") if isinstance(times.get("amk"), float) else None
            cells = [f"{times[c]:.4f}" if isinstance(times.get(c), float) else "—" for c in CONTENDERS]
            speedups = [f"{times[c] / amk_ms:.2f}x" if amk_ms and isinstance(times.get(c), float) else "—"
                        for c in OTHERS]
            floor = f"{r['floor_ms'] / amk_ms:.0%}" if amk_ms else "—"
            lines.append(f"| {r['workload']}{label}: {r['title']} | {r['floor_ms']:.4f} | " + " | ".join(cells)
                         + f" | {r['errors']['amk'][0]:.2e} | " + " | ".join(speedups) + f" | {floor} |")
    return "\n".join(lines)


def chart(results: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    figure, axis = plt.subplots(figsize=(10, 4))
    width = 0.8 / len(CONTENDERS)
    for index, contender in enumerate(CONTENDERS):
        values = [r["floor_ms"] / r["times_ms"][contender] if isinstance(r["times_ms"].get(contender), float) else 0
                  for r in results]
        axis.bar([i + index * width for i in range(len(results))], values, width, label=contender)
    axis.set_xticks([i + 0.4 for i in range(len(results))], [r["workload"] for r in results])
    axis.set_ylabel("fraction of the roofline floor (higher is better)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated, from " + ", ".join(WORKLOADS))
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help="comma-separated, from " + ", ".join(CONTENDERS))
    parser.add_argument("--small", action="store_true", help="tiny shapes (a smoke test; CPU is fine)")
    parser.add_argument("--extra-shapes", action="store_true",
                        help="run each workload family at its two extra shapes (A2, A3, ...) instead")
    parser.add_argument("--no-graphs", action="store_true", help="skip the CUDA-graph measurements")
    parser.add_argument("--budget", type=int, default=24, help="autotuning candidates per kernel")
    parser.add_argument("--out", default="benchmarks/results", help="directory for the results files")
    parser.add_argument("--stem", default=None, help="results file name without extension")
    parser.add_argument("--render", metavar="JSON", help="measure nothing: rewrite the table and chart of a results "
                        "file from its JSON (after a change to their format)")
    args = parser.parse_args(argv)
    if args.render:
        path = Path(args.render)
        write_reports(json.loads(path.read_text()), path.parent, path.stem)
        return
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    unknown = [n for n in names if n not in WORKLOADS] + [c for c in contenders if c not in CONTENDERS]
    if unknown:
        parser.error(f"unknown workloads or contenders: {', '.join(unknown)}")
    workloads = [WORKLOADS[name] for name in names]
    if args.extra_shapes:
        workloads = [variant for workload in workloads for variant in workload.variants()]
    results = []
    for workload in workloads:
        print(f"== workload {workload.name}: {workload.title}", flush=True)
        results.append(run_workload(workload, contenders, args.small, not args.no_graphs, args.budget))
        print(json.dumps({k: v for k, v in results[-1].items() if k != "tuning_log"}, default=str), flush=True)
    env = environment()
    stem = args.stem or f"bench-{env['date'][:10]}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    document = {"environment": env, "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
                "results": results}
    (out / f"{stem}.json").write_text(json.dumps(document, indent=2, default=str))
    print(write_reports(document, out, stem))


def write_reports(document: dict, out: Path, stem: str) -> str:
    """``<stem>.md`` (the table) and ``<stem>.png`` (the chart) of a results document; returns the Markdown."""
    env, results = document["environment"], document["results"]
    markdown = (f"# amk benchmarks ({env['gpu']})\n\ntorch {env['torch']}, triton {env['triton']}, amk {env['amk']}, "
                f"{env['date']}\n\nCommand: `python benchmarks/{document['command']}`\n\nMedian ms.\n\n{table(results)}\n")
    (out / f"{stem}.md").write_text(markdown)
    chart(results, out / f"{stem}.png")
    return markdown


if __name__ == "__main__":
    main()
