"""What the benchmark suite and its probes share: the workloads A-G (ops, shapes, dtype, eager reference, FLOPs),
their extra shapes, their inputs, the H200's ceilings for the roofline floor, error and traffic measures, the
command line, rows and results files of the probes under ``benchmarks/probes/``, the rows of the model benchmark
(``ROWS``: ``nn.Module``s written as people write them, measured by ``models.py`` and profiled by the probes).

``run.py`` and every script of ``benchmarks/`` import this module and nothing else of ``benchmarks/``; a probe puts
``benchmarks/`` on ``sys.path`` first (``sys.path.insert(0, str(Path(__file__).resolve().parents[1]))``). Timing is
the library's one timer, :func:`amk.benchmarking.time_ms`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import amk
from amk.benchmarking import environment, time_ms

# The H200's measured ceilings: the floor of a workload is max(FLOPs / PEAK_FLOPS, bytes / PEAK_BYTES).
PEAK_FLOPS = 790e12
PEAK_BYTES = 4.3e12


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


def relative_error(out, ref) -> tuple[float, float]:
    """Relative L2 error and maximum absolute error of ``out`` against ``ref``: tensors, or tuples of them (a module's
    outputs, such as the query, key and value projections, judged together)."""
    out, ref = _flat(out), _flat(ref)
    return ((out - ref).norm() / ref.norm()).item(), (out - ref).abs().max().item()


def _flat(value) -> torch.Tensor:
    return torch.cat([t.double().flatten() for t in value]) if isinstance(value, tuple | list) else value.double()


# How each contender of the model benchmarks compiles a module (models.py adds amk.compile under CUDA graphs).
COMPILERS: dict[str, Callable[[nn.Module], Callable]] = {
    "eager": lambda module: module,
    "compile": torch.compile,
    "max_autotune": lambda module: torch.compile(module, mode="max-autotune-no-cudagraphs"),
    "reduce_overhead": lambda module: torch.compile(module, mode="reduce-overhead"),
    "amk": amk.compile,
}


def gpu_slug(gpu_name: str) -> str:
    """``NVIDIA H200`` -> ``h200``; ``cpu`` without a GPU."""
    if not torch.cuda.is_available():
        return "cpu"
    words = re.findall(r"[a-z0-9]+", gpu_name.lower())
    return "-".join(word for word in words if word != "nvidia") or "gpu"


@contextlib.contextmanager
def fresh_caches():
    """amk's, Inductor's and Triton's caches in a new temporary folder while a script measures (so that first calls
    are cold), the environment put back and the folder removed afterwards."""
    caches = Path(tempfile.mkdtemp(prefix="amk-models-"))
    variables = {"AMK_CACHE_DIR": "amk", "TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}
    saved = {variable: os.environ.get(variable) for variable in variables}
    os.environ.update({variable: str(caches / folder) for variable, folder in variables.items()})
    try:
        yield caches
    finally:
        for variable, value in saved.items():
            if value is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = value
        shutil.rmtree(caches, ignore_errors=True)


# What benchmarks/build_time.py and probes/build_profile.py build: the workloads and the usage examples' chains
# (examples/usage/), each with the settings its user gives (the defaults, except example 3's).
EXAMPLE3_TUNER = dict(search_budget=40, warmup_runs=15, measure_runs=40, enable_warp_specialization=True)
EXAMPLE3_GRID = {"BLOCK_SIZE_M": [32, 64, 128], "BLOCK_SIZE_N": [64, 128, 256], "BLOCK_SIZE_K": [32, 64],
                 "num_warps": [4, 8, 16], "num_stages": [2, 3, 4, 5], "GROUP_SIZE_M": [8]}
# The usage examples as (workload whose ops, dtype and eager reference they share, their input shapes, settings).
EXAMPLES = {
    "example1": ("A", [(32, 512, 4096), (4096, 4096), (4096,), (4096,), (4096,)], {}),
    "example2": ("B", [(64, 1024, 4096), (4096, 4096), (4096,)], {}),
    "example3": ("C", [(16, 2048, 8192), (8192, 8192), (16, 2048, 8192)],
                 {"tuner": EXAMPLE3_TUNER, "grid": EXAMPLE3_GRID}),
}
BUILDS = ["A", "B", "C", "G", *EXAMPLES]


def build_kernel(name: str, cache_dir: str | None = None):
    """``name``'s kernel as its user builds it (in ``cache_dir`` when given), with inputs for it."""
    base, shapes, settings = EXAMPLES[name] if name in EXAMPLES else (name, WORKLOADS[name].shapes, {})
    workload = WORKLOADS[base]
    tuner = amk.TunerConfig(**settings.get("tuner", {}), target_cache_dir=cache_dir)
    kernel = amk.build_fused_kernel(workload.ops, shapes, workload.dtype, tuner_config=tuner,
                                    parameter_grid=settings.get("grid"))
    return kernel, workload, shapes, make_inputs(workload, shapes, "cuda")


class ModuleKernel:
    """A compiled tensor_op module called like a FusedKernel (for workloads that are not op chains)."""

    def __init__(self, workload: Workload, shapes, budget: int, cache_dir: str | None = None):
        from amk.pipeline import compile_module
        from amk.runtime import interpreting
        from amk.tuner import autotune_chooser

        self.tuning_log: dict = {}
        chooser = None
        if torch.cuda.is_available() and not interpreting():
            chooser = autotune_chooser(amk.TunerConfig(search_budget=budget, target_cache_dir=cache_dir), None,
                                       lambda k, c, t: self.tuning_log.update({k.sym_name.data: [x.as_dict() for x in t]}))
        self.compiled = (compile_module(workload.module(shapes, workload.dtype), chooser) if chooser
                         else compile_module(workload.module(shapes, workload.dtype)))
        self.num_kernels = len(self.compiled.kernels)
        self.config = {name: k.config.user_view() for name, k in self.compiled.kernels.items()}

    def __call__(self, *tensors):
        return self.compiled.program(*tensors)[0]


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


def chosen_names(parser: argparse.ArgumentParser, text: str, known, what: str) -> list[str]:
    """The names in ``text``, a comma-separated list of ``known`` ones (rows, contenders); exits through ``parser``
    naming those it does not know, or where it names none."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        parser.error(f"unknown {what} {', '.join(unknown) or '(none given)'}; choose from {', '.join(known)}")
    return names


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


def save_rows(path, rows: list[dict]) -> None:
    """Write a diagnostic's measurements as a results file: the environment, the command line and the rows."""
    with open(path, "w") as handle:
        json.dump({"environment": environment(), "command": " ".join(["python", *sys.argv]), "rows": rows}, handle,
                  indent=1)


# --- The model benchmark's rows (benchmarks/models.py): modules as people write them ------------------------------

class LinearActivation(nn.Module):
    def __init__(self, features: int, activation: type[nn.Module]):
        super().__init__()
        self.fc = nn.Linear(features, features)
        self.activation = activation()

    def forward(self, x):
        return self.activation(self.fc(x))


class LinearResidualReLU(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.fc = nn.Linear(features, features)

    def forward(self, x, residual):
        return F.relu(self.fc(x) + residual)


class LinearNorm(nn.Module):
    def __init__(self, features: int, norm: type[nn.Module]):
        super().__init__()
        self.fc = nn.Linear(features, features)
        self.norm = norm(features)

    def forward(self, x):
        return self.norm(self.fc(x))


class LinearSoftmax(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.fc = nn.Linear(features, features)

    def forward(self, x):
        return torch.softmax(self.fc(x), dim=-1)


class LinearLogSumExp(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.fc = nn.Linear(features, features)

    def forward(self, x):
        return torch.logsumexp(self.fc(x), dim=-1)


class GPT2MLP(nn.Module):
    """GPT-2's block MLP: c_fc, tanh GELU, c_proj, dropout."""

    def __init__(self, d_model: int):
        super().__init__()
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.act = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * d_model, d_model)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class Conv1D(nn.Module):
    """Hugging Face GPT-2's projection, as its modeling code writes it: a Linear whose weight is ``[K, N]``."""

    def __init__(self, outputs: int, inputs: int):
        super().__init__()
        self.outputs = outputs
        self.weight = nn.Parameter(torch.randn(inputs, outputs) / inputs**0.5)
        self.bias = nn.Parameter(torch.randn(outputs) / 10)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.outputs,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class NewGELUActivation(nn.Module):
    """Hugging Face's ``gelu_new`` (GPT-2's activation): the tanh GELU written out."""

    def forward(self, input):
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


class HuggingFaceGPT2MLP(nn.Module):
    """GPT-2's block MLP as Hugging Face's ``GPT2MLP`` writes it: Conv1D, ``gelu_new``, Conv1D, dropout."""

    def __init__(self, intermediate_size: int, embed_dim: int):
        super().__init__()
        self.c_fc = Conv1D(intermediate_size, embed_dim)
        self.c_proj = Conv1D(embed_dim, intermediate_size)
        self.act = NewGELUActivation()
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states):
        return self.dropout(self.c_proj(self.act(self.c_fc(hidden_states))))


class BertFFN(nn.Module):
    """BERT's intermediate and output layers: Linear, GELU, Linear, dropout, residual, LayerNorm."""

    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output = nn.Linear(intermediate, hidden)
        self.dropout = nn.Dropout(0.1)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, hidden_states):
        h = self.output(F.gelu(self.intermediate(hidden_states)))
        return self.norm(self.dropout(h) + hidden_states)


class ViTMLP(nn.Module):
    """A ViT block's MLP (timm's ``Mlp``): fc1, GELU, dropout, fc2, dropout."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(0.0)

    def forward(self, x):
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class LlamaMLP(nn.Module):
    """A Llama decoder layer's second half: RMSNorm, gate and up projections, SiLU(gate) * up, down projection,
    residual."""

    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.post_attention_layernorm = nn.RMSNorm(hidden, eps=1e-5)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class LlamaRMSNorm(nn.Module):
    """Hugging Face's ``LlamaRMSNorm`` (Mistral's, Qwen2's): computed in fp32, cast back, then the weight."""

    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaQKV(nn.Module):
    """A Llama decoder layer's first ops: the input norm, then the query, key and value projections (grouped-query
    attention: keys and values ``kv`` wide)."""

    def __init__(self, hidden: int, kv: int):
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(hidden)
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, kv, bias=False)
        self.v_proj = nn.Linear(hidden, kv, bias=False)

    def forward(self, x):
        h = self.input_layernorm(x)
        return self.q_proj(h), self.k_proj(h), self.v_proj(h)


def rotate_half(x):
    """Hugging Face's Llama: the last dim's halves swapped, the one moved first negated."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class LlamaRotaryQKV(LlamaQKV):
    """:class:`LlamaQKV` then what Hugging Face's ``LlamaAttention`` does before attending: the heads split by a view
    and a transpose, and the rotary embeddings (``apply_rotary_pos_emb``: cos and sin ``[B, S, head_dim]``
    unsqueezed over the heads) applied to the queries and keys."""

    def __init__(self, hidden: int, kv: int, head_dim: int = 128):
        super().__init__(hidden, kv)
        self.head_dim = head_dim

    def forward(self, x, cos, sin):
        batch, seq, _ = x.shape
        q, k, v = (p.view(batch, seq, -1, self.head_dim).transpose(1, 2) for p in super().forward(x))
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v


class SwiGLUResidual(nn.Module):
    """Workload F's computation as a module: SiLU(gate) * up, down projection, residual, without a norm."""

    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return x + self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class NormLinearResidual(nn.Module):
    """Workloads D and E as a module: RMSNorm with weight, a projection without bias, a residual input."""

    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.RMSNorm(hidden)
        self.proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x, residual):
        return self.proj(self.norm(x)) + residual


class AttentionScores(nn.Module):
    """Multi-head attention probabilities: softmax(q k^T / sqrt(head_dim))."""

    def __init__(self, head_dim: int):
        super().__init__()
        self.scale = head_dim ** -0.5

    def forward(self, q, k):
        return torch.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1)


class BertAttentionScores(nn.Module):
    """Hugging Face's BERT eager attention probabilities: the scores divided by sqrt(head_dim), plus the extended
    padding mask ``[B, 1, 1, S]`` that the model computes once and hands every layer, then softmax."""

    def __init__(self, head_dim: int):
        super().__init__()
        self.head_dim = head_dim

    def forward(self, q, k, mask):
        scores = torch.matmul(q, k.transpose(-1, -2))
        scores = scores / math.sqrt(self.head_dim)
        return nn.functional.softmax(scores + mask, dim=-1)


class BertSelfAttention(nn.Module):
    """Hugging Face's ``BertSelfAttention`` (eager, in evaluation): the query, key and value projections, each split
    into heads by ``view`` and ``permute(0, 2, 1, 3)``, the scores divided by sqrt(head_dim) plus the extended padding
    mask ``[B, 1, 1, S]``, softmax, the context ``probs @ v`` and the heads merged back."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.num_attention_heads = heads
        self.attention_head_size = hidden // heads
        self.all_head_size = hidden
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)

    def transpose_for_scores(self, x):
        x = x.view(x.size()[:-1] + (self.num_attention_heads, self.attention_head_size))
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_probs = nn.functional.softmax(attention_scores + attention_mask, dim=-1)
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (self.all_head_size,))


class CausalAttentionScores(nn.Module):
    """nanoGPT's causal attention probabilities: the scores masked with -inf where a lower-triangular buffer is 0."""

    def __init__(self, head_dim: int, block_size: int):
        super().__init__()
        self.scale = head_dim ** -0.5
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, q, k):
        length = q.size(-2)
        scores = (q @ k.transpose(-2, -1)) * self.scale
        scores = scores.masked_fill(self.bias[:, :, :length, :length] == 0, float("-inf"))
        return torch.softmax(scores, dim=-1)


# AttentionScores as tensor_op IR for the probes, its sizes (and the symbols amk.compile gives them) filled in with
# ``format(b=, h=, s=, t=, d=, scale=)``.
ATTENTION_IR = """
func.func @attention(%q : !tensor_op.tensor<[{b}, {h}, {s}, {d}], f16>, %k : !tensor_op.tensor<[{b}, {h}, {t}, {d}], f16>)
    -> !tensor_op.tensor<[{b}, {h}, {s}, {t}], f16> {{
  %0 = tensor_op.matmul %q, %k {{transpose_rhs = true}} : (!tensor_op.tensor<[{b}, {h}, {s}, {d}], f16>,
      !tensor_op.tensor<[{b}, {h}, {t}, {d}], f16>) -> !tensor_op.tensor<[{b}, {h}, {s}, {t}], f16>
  %1 = tensor_op.scale %0 {{factor = {scale} : f64}} : !tensor_op.tensor<[{b}, {h}, {s}, {t}], f16>
  %2 = tensor_op.softmax %1 {{axis = -1 : i64}} : !tensor_op.tensor<[{b}, {h}, {s}, {t}], f16>
  func.return %2 : !tensor_op.tensor<[{b}, {h}, {s}, {t}], f16>
}}
"""


# --- The rows ------------------------------------------------------------------------------------------------------

@dataclass
class Row:
    name: str
    title: str
    dtype: torch.dtype
    module: Callable[..., nn.Module]  # called with ``sizes`` (or ``small_sizes``)
    sizes: dict
    inputs: Callable[..., list[tuple[int, ...]]]  # the input shapes, from the same sizes
    small_sizes: dict
    decode: bool = False  # decode-sized: reduce-overhead is a contender

    def build(self, small: bool) -> tuple[nn.Module, list[tuple[int, ...]]]:
        sizes = self.small_sizes if small else self.sizes
        return self.module(**sizes), self.inputs(**sizes)


def linear_row(name: str, title: str, dtype: torch.dtype, module: type[nn.Module], features: int = 4096,
               residual: bool = False, **extra) -> Row:
    """A row of a Linear-first module at batch 1024 (the issue's), ``features`` wide; ``residual`` modules take a
    second input of the output's shape."""
    def shapes(rows, features):
        return [(rows, features)] * (2 if residual else 1)

    return Row(name, title, dtype, lambda rows, features: module(features, **extra),
               {"rows": 1024, "features": features}, shapes, {"rows": 8, "features": 32})


ROWS = {row.name: row for row in [
    linear_row("fp32_linear_relu", "Linear + ReLU, fp32, 8192 features", torch.float32, LinearActivation,
               features=8192, activation=nn.ReLU),
    linear_row("fp32_linear_gelu", "Linear + GELU, fp32", torch.float32, LinearActivation, activation=nn.GELU),
    linear_row("fp32_linear_layernorm", "Linear + LayerNorm, fp32", torch.float32, LinearNorm, norm=nn.LayerNorm),
    linear_row("fp16_linear_residual_relu", "Linear + residual + ReLU, fp16", torch.float16, LinearResidualReLU,
               residual=True),
    linear_row("bf16_linear_silu", "Linear + SiLU, bf16", torch.bfloat16, LinearActivation, activation=nn.SiLU),
    linear_row("fp16_linear_layernorm", "Linear + LayerNorm, fp16", torch.float16, LinearNorm, norm=nn.LayerNorm),
    linear_row("bf16_linear_rmsnorm", "Linear + RMSNorm (nn.RMSNorm, with weight), bf16", torch.bfloat16, LinearNorm,
               norm=nn.RMSNorm),
    linear_row("fp16_linear_softmax", "Linear + softmax, fp16", torch.float16, LinearSoftmax),
    linear_row("fp16_linear_logsumexp", "Linear + logsumexp over rows, fp16", torch.float16, LinearLogSumExp),
    Row("gpt2_mlp", "GPT-2 MLP (d=1024), 8 x 512 tokens, fp16", torch.float16,
        lambda batch, seq, d: GPT2MLP(d), {"batch": 8, "seq": 512, "d": 1024},
        lambda batch, seq, d: [(batch, seq, d)], {"batch": 2, "seq": 4, "d": 32}),
    Row("gpt2_mlp_hf", "GPT-2 MLP as Hugging Face writes it (Conv1D, gelu_new written out; d=1024), 8 x 512 tokens, "
        "fp16", torch.float16, lambda batch, seq, d: HuggingFaceGPT2MLP(4 * d, d), {"batch": 8, "seq": 512, "d": 1024},
        lambda batch, seq, d: [(batch, seq, d)], {"batch": 2, "seq": 4, "d": 32}),
    Row("bert_ffn", "BERT-base FFN (Linear, GELU, Linear, residual, LayerNorm), 32 x 128 tokens, fp16",
        torch.float16, lambda batch, seq, d, inner: BertFFN(d, inner),
        {"batch": 32, "seq": 128, "d": 768, "inner": 3072},
        lambda batch, seq, d, inner: [(batch, seq, d)], {"batch": 2, "seq": 4, "d": 32, "inner": 64}),
    Row("vit_mlp", "ViT-B/16 MLP, 64 images x 197 tokens, bf16", torch.bfloat16,
        lambda batch, seq, d, inner: ViTMLP(d, inner), {"batch": 64, "seq": 197, "d": 768, "inner": 3072},
        lambda batch, seq, d, inner: [(batch, seq, d)], {"batch": 2, "seq": 5, "d": 32, "inner": 64}),
    *[Row(f"llama_mlp_{stage}", f"Llama-3-8B MLP (RMSNorm, gate/up, SiLU * up, down, residual), {what}, bf16",
          torch.bfloat16, lambda batch, seq, d, inner: LlamaMLP(d, inner),
          {"batch": batch, "seq": seq, "d": 4096, "inner": 14336},
          lambda batch, seq, d, inner: [(batch, seq, d)], {"batch": min(batch, 2), "seq": min(seq, 4), "d": 32,
                                                            "inner": 64}, decode=seq == 1)
      for stage, batch, seq, what in (("prefill", 1, 4096, "prefill of 4096 tokens"),
                                      ("decode_m1", 1, 1, "decode, 1 sequence"),
                                      ("decode_m16", 16, 1, "decode, 16 sequences"))],
    *[Row(f"llama_qkv_{stage}", f"Llama-3-8B attention inputs (Hugging Face's RMSNorm, q/k/v projections), {what}, "
          "bf16", torch.bfloat16, lambda batch, seq, d, kv: LlamaQKV(d, kv),
          {"batch": batch, "seq": seq, "d": 4096, "kv": 1024},
          lambda batch, seq, d, kv: [(batch, seq, d)], {"batch": min(batch, 2), "seq": min(seq, 4), "d": 32, "kv": 16},
          decode=seq == 1)
      for stage, batch, seq, what in (("prefill", 1, 4096, "prefill of 4096 tokens"),
                                      ("decode_m16", 16, 1, "decode, 16 sequences"))],
    *[Row(f"llama_rope_qkv_{stage}", f"Llama-3-8B attention inputs with rotary embeddings as Hugging Face applies "
          f"them (RMSNorm, q/k/v projections, heads transposed, q * cos + rotate_half(q) * sin), {what}, bf16",
          torch.bfloat16, lambda batch, seq, d, kv, head_dim: LlamaRotaryQKV(d, kv, head_dim),
          {"batch": batch, "seq": seq, "d": 4096, "kv": 1024, "head_dim": 128},
          lambda batch, seq, d, kv, head_dim: [(batch, seq, d), (batch, seq, head_dim), (batch, seq, head_dim)],
          {"batch": min(batch, 2), "seq": min(seq, 4), "d": 32, "kv": 16, "head_dim": 8}, decode=seq == 1)
      for stage, batch, seq, what in (("prefill", 1, 4096, "prefill of 4096 tokens"),
                                      ("decode_m16", 16, 1, "decode, 16 sequences"))],
    # benchmarks/run.py's decode workloads written as modules: amk.compile against build_fused_kernel's D, E, F
    *[Row(f"norm_linear_residual_m{rows}", f"RMSNorm + Linear + residual (workload {workload} as a module), decode, "
          f"{rows} row{'s' if rows > 1 else ''}, bf16", torch.bfloat16, lambda rows, d: NormLinearResidual(d),
          {"rows": rows, "d": 4096}, lambda rows, d: [(rows, d), (rows, d)], {"rows": rows, "d": 32}, decode=True)
      for rows, workload in ((16, "D"), (1, "E"))],
    Row("swiglu_decode_m16", "SwiGLU MLP + residual, no norm (workload F as a module), decode, 16 rows, bf16",
        torch.bfloat16, lambda rows, d, inner: SwiGLUResidual(d, inner), {"rows": 16, "d": 4096, "inner": 14336},
        lambda rows, d, inner: [(rows, d)], {"rows": 16, "d": 32, "inner": 64}, decode=True),
    Row("attention_scores", "attention probabilities softmax(q k^T / 8), 8 x 16 heads x 512 x 64, fp16",
        torch.float16, lambda batch, heads, seq, head_dim: AttentionScores(head_dim),
        {"batch": 8, "heads": 16, "seq": 512, "head_dim": 64},
        lambda batch, heads, seq, head_dim: [(batch, heads, seq, head_dim)] * 2,
        {"batch": 1, "heads": 2, "seq": 8, "head_dim": 16}),
    Row("bert_attention_scores", "BERT-base attention probabilities with Hugging Face's padding mask [B, 1, 1, S] "
        "(softmax(q k^T / 8 + mask)), 32 x 12 heads x 128 x 64, fp16", torch.float16,
        lambda batch, heads, seq, head_dim: BertAttentionScores(head_dim),
        {"batch": 32, "heads": 12, "seq": 128, "head_dim": 64},
        lambda batch, heads, seq, head_dim: [(batch, heads, seq, head_dim)] * 2 + [(batch, 1, 1, seq)],
        {"batch": 2, "heads": 2, "seq": 8, "head_dim": 16}),
    Row("bert_self_attention", "BERT-base self-attention as Hugging Face writes it (q/k/v Linear, heads split by "
        "view and permute, scores / 8 + padding mask, softmax, probs @ v, heads merged), 32 x 128 tokens, fp16",
        torch.float16, lambda batch, seq, d, heads: BertSelfAttention(d, heads),
        {"batch": 32, "seq": 128, "d": 768, "heads": 12},
        lambda batch, seq, d, heads: [(batch, seq, d), (batch, 1, 1, seq)],
        {"batch": 2, "seq": 8, "d": 32, "heads": 2}),
    Row("causal_attention_scores", "causal attention probabilities as nanoGPT masks them (masked_fill of a tril buffer "
        "== 0 with -inf, softmax), 8 x 16 heads x 512 x 64, fp16", torch.float16,
        lambda batch, heads, seq, head_dim: CausalAttentionScores(head_dim, seq),
        {"batch": 8, "heads": 16, "seq": 512, "head_dim": 64},
        lambda batch, heads, seq, head_dim: [(batch, heads, seq, head_dim)] * 2,
        {"batch": 1, "heads": 2, "seq": 8, "head_dim": 16}),
]}
