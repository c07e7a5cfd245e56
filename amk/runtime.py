"""Running compiled programs: loading emitted Triton sources, viewing tensors as kernel arguments, launching.

Without CUDA the kernels run in Triton's interpreter on CPU tensors (``TRITON_INTERPRET=1`` is set here, before any
kernel is defined).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from xdsl.dialects import func
from xdsl.ir import Operation

from amk import reference
from amk.dialects import tiled_loop
from amk.dtypes import to_torch
from amk.errors import CompilationError
from amk.lowering.configs import KernelConfig
from amk.symbolic import Dim, to_python

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def default_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() and not interpreting() else torch.device("cpu")


def source_directory() -> Path:
    """Where emitted sources are written (Triton needs a real file to read a kernel's source)."""
    from amk.cache import cache_root

    directory = cache_root() / "sources"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def load_source(source: str, name: str):
    """Import emitted source as a module; the file name is the hash of the source, so a module is written once."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    module_name = f"amk_generated_{name}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    path = source_directory() / f"{module_name}.py"
    if not path.exists() or path.read_text() != source:
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(source)
        os.replace(temporary, path)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # a syntax or definition error in generated code is a compiler bug
        raise CompilationError(f"emitted kernel {name} failed to load: {error}") from error
    sys.modules[module_name] = module
    return module


class ShapeFunction:
    """Evaluates a list of symbolic dims from symbol values, compiled once to a Python lambda."""

    def __init__(self, dims: Sequence[Dim]):
        self.static = all(d.is_static for d in dims)
        if self.static:
            self.value = tuple(d.value for d in dims)
        else:
            symbols = sorted({s for d in dims for s in d.free_symbols})
            body = ", ".join(to_python(d, "_cdiv") for d in dims)
            self.function = eval(f"lambda {', '.join(symbols)}: ({body},)",
                                 {"_cdiv": lambda a, b: -(-a // b)})
            self.symbols = symbols

    def __call__(self, bindings: dict[str, int]) -> tuple[int, ...]:
        if self.static:
            return self.value
        return self.function(*(bindings[s] for s in self.symbols))


@dataclass
class KernelArgument:
    """How one launch operand or result is viewed as a kernel argument (``kind``: input, output, scratch, counter)."""

    view: str
    shape: ShapeFunction
    kind: str = "input"
    dtype: torch.dtype | None = None


@dataclass
class CompiledKernel:
    name: str
    config: KernelConfig
    source: str
    source_path: str
    launch: Callable
    arguments: list[KernelArgument]

    @property
    def inputs(self) -> list[KernelArgument]:
        return [a for a in self.arguments if a.kind == "input"]

    @property
    def outputs(self) -> list[KernelArgument]:
        return [a for a in self.arguments if a.kind == "output"]

    @property
    def workspace(self) -> list[KernelArgument]:
        return [a for a in self.arguments if a.kind in ("scratch", "counter")]


def kernel_arguments(kernel: tiled_loop.KernelOp, constants: dict[str, int]) -> list[KernelArgument]:
    """How to view or allocate each argument of ``kernel`` once its tile sizes are ``constants``."""
    args = kernel.body.block.args
    views = [v.data for v in kernel.arg_views.data] if kernel.arg_views is not None else [""] * len(args)
    kinds = (["input"] * kernel.num_inputs.value.data + ["output"] * len(kernel.outputs) + kernel.workspace_kinds)
    return [KernelArgument(view, ShapeFunction([d.subs(constants) for d in arg.type.dims]), kind,
                           to_torch(arg.type.element_type))
            for arg, view, kind in zip(args, views, kinds)]


class Program:
    """A ``func.func`` whose fused groups are ``tiled_loop.launch`` ops of compiled kernels; other ops run in PyTorch."""

    def __init__(self, function: func.FuncOp, kernels: dict[str, CompiledKernel]):
        self.function = function
        self.kernels = kernels
        self.workspaces: dict[tuple, torch.Tensor] = {}
        self.arg_shapes = [arg.type.dims for arg in function.body.block.args]
        self.steps = [op for op in function.body.block.ops]
        self.result_shapes = {
            r: ShapeFunction(r.type.dims) for op in self.steps for r in op.results
        }

    def bind(self, tensors: Sequence[torch.Tensor]) -> dict[str, int]:
        bindings: dict[str, int] = {}
        for dims, tensor in zip(self.arg_shapes, tensors):
            for dim, size in zip(dims, tensor.shape):
                if not dim.is_static and dim.text in dim.free_symbols:
                    bindings[dim.text] = int(size)
        return bindings

    def __call__(self, *tensors: torch.Tensor) -> list[torch.Tensor]:
        env: dict = dict(zip(self.function.body.block.args, tensors))
        bindings = self.bind(tensors)
        for op in self.steps:
            if isinstance(op, func.ReturnOp):
                return [env[v] for v in op.arguments]
            args = [env[v] for v in op.operands]
            if isinstance(op, tiled_loop.LaunchOp):
                results = self.launch(op, args, bindings)
            else:
                results = [reference.evaluate(op, args)]
            env.update(zip(op.results, results))
        raise AssertionError("function without func.return")

    def launch(self, op: tiled_loop.LaunchOp, args: list[torch.Tensor], bindings: dict[str, int]) -> list[torch.Tensor]:
        kernel = self.kernels[op.kernel.string_value()]
        views = [tensor.t() if spec.view == "transpose" else tensor.reshape(spec.shape(bindings))
                 for tensor, spec in zip(args, kernel.inputs)]
        device = args[0].device
        results = []
        for spec, value in zip(kernel.outputs, op.outputs):
            result = torch.empty(self.result_shapes[value](bindings), dtype=spec.dtype, device=device)
            results.append(result)
            views.append(result.view(spec.shape(bindings)))
        for index, spec in enumerate(kernel.workspace):
            views.append(self.workspace_buffer(kernel.name, index, spec, spec.shape(bindings), device))
        kernel.launch(*views)
        return results

    def workspace_buffer(self, kernel: str, index: int, spec: KernelArgument, shape, device) -> torch.Tensor:
        """Workspace is allocated once per shape and reused: counters are zeroed once (kernels leave them zero)."""
        key = (kernel, index, tuple(shape), device)
        buffer = self.workspaces.get(key)
        if buffer is None:
            allocate = torch.zeros if spec.kind == "counter" else torch.empty
            buffer = self.workspaces[key] = allocate(shape, dtype=spec.dtype, device=device)
        return buffer


def kernel_ops(module) -> dict[str, Operation]:
    return {op.sym_name.data: op for op in module.walk() if isinstance(op, tiled_loop.KernelOp)}
