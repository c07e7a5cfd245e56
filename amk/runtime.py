"""Running compiled programs: loading emitted Triton sources, viewing tensors as kernel arguments, launching.

Without CUDA the kernels run in Triton's interpreter on CPU tensors: :func:`load_source` prepares the process for
that (:func:`amk.environment.initialize`) before any kernel is defined.
"""

from __future__ import annotations

import importlib.util
import keyword
import os
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import torch

from amk.environment import cache_root, initialize

# Where kernels run, as the examples and tests have always imported it from here.
from amk.environment import default_device as default_device
from amk.environment import interpreting as interpreting
from amk.errors import CompilationError
from amk.lowering.configs import KernelConfig
from amk.replay import LaunchReplay, viewed
from amk.sources import emitted_module_name, import_source_file, write_source
from amk.workspace import Workspace, contiguous_strides, output_allocator, serialized

if TYPE_CHECKING:
    from xdsl.dialects import func
    from xdsl.ir import Operation

    from amk.dialects import tiled_loop
    from amk.symbolic import Dim

# The IR, xDSL and sympy are imported where a function needs them: a warm start from the persistent cache runs a
# launch plan of static shapes and needs none of them.

# The cache directory whose sources/ folder receives the sources emitted while a build runs (``sources_under``). A
# context variable, not a process global: builds for different cache directories may run in other threads at once,
# and the passes and the tuner that emit sources between them need not carry the directory.
_SOURCE_CACHE_DIRECTORY: ContextVar[str | os.PathLike | None] = ContextVar("amk_source_cache_directory", default=None)


@contextmanager
def sources_under(cache_directory: str | os.PathLike | None):
    """Sources loaded by :func:`load_source` without a directory go to ``<cache_directory>/sources`` while this is
    active (in this thread or task); None keeps the default (``AMK_CACHE_DIR`` or the user cache directory)."""
    token = _SOURCE_CACHE_DIRECTORY.set(cache_directory)
    try:
        yield
    finally:
        _SOURCE_CACHE_DIRECTORY.reset(token)


def sources_cache_directory() -> str | None:
    """The cache directory :func:`sources_under` set in this thread or task (None: the default one)."""
    directory = _SOURCE_CACHE_DIRECTORY.get()
    return None if directory is None else os.fspath(directory)


def source_directory(cache_directory: str | os.PathLike | None = None) -> Path:
    """Where emitted sources are written (Triton needs a real file to read a kernel's source): ``sources/`` in
    ``cache_directory``, else in the one :func:`sources_under` set, else in the default cache directory; or a
    private temporary directory when that cannot be written."""
    if cache_directory is None:
        cache_directory = _SOURCE_CACHE_DIRECTORY.get()
    try:
        directory = Path(os.path.abspath(cache_root(cache_directory))) / "sources"  # a later chdir keeps it
        directory.mkdir(parents=True, exist_ok=True)
        return directory
    except OSError:
        return _fallback_source_directory()


_FALLBACK_SOURCES: list[Path] = []


def _fallback_source_directory() -> Path:
    if not _FALLBACK_SOURCES:
        _FALLBACK_SOURCES.append(Path(tempfile.mkdtemp(prefix="amk-sources-")))
    return _FALLBACK_SOURCES[0]


_LOADED_SOURCES: dict[tuple[Path, str], ModuleType] = {}  # (sources folder, module name) -> the imported module


def load_source(source: str, name: str, cache_directory: str | os.PathLike | None = None):
    """Import emitted source as a module from a file in :func:`source_directory` (``cache_directory``'s). The file
    name is the hash of the source, so a module is written and imported once per sources folder."""
    initialize()  # before the module's @triton.jit runs: the interpreter must be chosen by then
    module_name = emitted_module_name(source, name)
    directory = source_directory(cache_directory)
    loaded = _LOADED_SOURCES.get((directory, module_name))
    if loaded is not None:
        return loaded
    path = directory / f"{module_name}.py"
    try:
        write_source(path, source)
    except OSError:  # an unwritable cache directory: a private temporary directory serves as well
        path = _fallback_source_directory() / f"{module_name}.py"
        path.write_bytes(source.encode())
    try:
        module = import_source_file(module_name, path, source)
    except Exception as error:
        # Python's bytecode of the file, when damaged (a process killed while writing it), fails every import:
        # without it the source is compiled again. Otherwise a syntax or definition error in generated code is a
        # compiler bug.
        bytecode = Path(importlib.util.cache_from_source(str(path)))
        if not bytecode.exists():
            raise CompilationError(f"emitted kernel {name} failed to load: {error}") from error
        bytecode.unlink(missing_ok=True)
        try:
            module = import_source_file(module_name, path, source)
        except Exception as again:
            raise CompilationError(f"emitted kernel {name} failed to load: {again}") from again
    _LOADED_SOURCES[directory, module_name] = module
    sys.modules.setdefault(module_name, module)  # the same source under another cache directory shares the name
    return module


_NAME = re.compile(r"[A-Za-z_]\w*", re.ASCII)
_TERM = r"(?:[A-Za-z_]\w*|\d+)"
_SUM_OF_PRODUCTS = re.compile(rf"{_TERM}(?:\s*[*+]\s*{_TERM})*", re.ASCII)


class ShapeFunction:
    """Evaluates a list of symbolic dims from symbol values, compiled once to a Python lambda."""

    def __init__(self, dims: Sequence[Dim]):
        self.texts = [d.text for d in dims]
        self.static = all(d.is_static for d in dims)
        if self.static:
            self.value = tuple(d.value for d in dims)
        else:
            from amk.symbolic import to_python

            symbols = sorted({s for d in dims for s in d.free_symbols})
            body = ", ".join(to_python(d, "_cdiv") for d in dims)
            self.function = eval(f"lambda {', '.join(symbols)}: ({body},)",
                                 {"_cdiv": lambda a, b: -(-a // b)})
            self.symbols = symbols

    def __call__(self, bindings: dict[str, int]) -> tuple[int, ...]:
        if self.static:
            return self.value
        return self.function(*(bindings[s] for s in self.symbols))

    @classmethod
    def from_texts(cls, texts: Sequence[str]) -> ShapeFunction:
        """From canonical dim texts (as in a cached launch plan). Static shapes, and sums and products of sizes and
        integers (``M``, ``s0*s1``: Python computes them as sympy does), need no sympy: a warm start from the cache
        spent a third of its own time parsing such texts."""
        shape = cls.__new__(cls)
        shape.texts = list(texts)
        if all(t.isascii() and t.isdigit() for t in texts):
            shape.static, shape.value = True, tuple(int(t) for t in texts)
            return shape
        names = sorted({name for text in texts for name in _NAME.findall(text)})
        if all(_SUM_OF_PRODUCTS.fullmatch(t) for t in texts) and not any(
                keyword.iskeyword(name) or name.startswith("_") for name in names):
            shape.static, shape.symbols = False, names
            shape.function = eval(f"lambda {', '.join(names)}: ({', '.join(texts)},)", {"__builtins__": {}})
            return shape
        from amk.symbolic import Dim

        return cls([Dim(t) for t in texts])


@dataclass
class KernelArgument:
    """How one launch operand or result is viewed as a kernel argument (``kind``: input, output, scratch, counter)."""

    view: str
    shape: ShapeFunction
    kind: str = "input"
    dtype: torch.dtype | None = None

    def viewer(self, bindings: dict[str, int]) -> Callable[[torch.Tensor], torch.Tensor]:
        """How a call hands the kernel a tensor it views otherwise: transposed (``nn.Linear``'s weight ``[N, K]``
        read as ``W^T``; a batched matmul's keys ``[..., N, K]`` as ``[..., K, N]``), or reshaped to the kernel's
        dims (found here, for ``bindings``)."""
        shape = self.shape(bindings)
        if self.view == "transpose" and len(shape) == 2:
            return torch.Tensor.t
        if self.view == "transpose":
            *batch, k, n = shape
            return lambda tensor: tensor.reshape(*batch, n, k).transpose(-2, -1)
        return lambda tensor: tensor.reshape(shape)

    def call_strides(self, shape: Sequence[int]) -> tuple[int, ...]:
        """The strides of the tensor (of ``shape``) a program's call hands the kernel as this argument, its operands
        contiguous: a transposed view's are swapped (``W^T``, ``[K, N]`` with strides ``(1, K)``); a reshaped
        operand, an output and workspace are contiguous. Triton specializes a kernel on its strides (a stride of 1
        becomes a constant): candidates timed or compiled ahead on other strides are another binary from the one the
        calls run."""
        if self.view == "transpose":
            *batch, k, n = shape
            *outer, row, col = contiguous_strides((*batch, n, k))
            return (*outer, col, row)
        return contiguous_strides(shape)


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
    from amk.dtypes import to_torch

    args = kernel.body.block.args
    views = [v.data for v in kernel.arg_views.data] if kernel.arg_views is not None else [""] * len(args)
    kinds = (["input"] * kernel.num_inputs.value.data + ["output"] * len(kernel.outputs) + kernel.workspace_kinds)
    return [KernelArgument(view, ShapeFunction([d.subs(constants) for d in arg.type.dims]), kind,
                           to_torch(arg.type.element_type))
            for arg, view, kind in zip(args, views, kinds)]


_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


@dataclass
class Step:
    """One op of a program's function over numbered values: a kernel launch, an op run in PyTorch, or the return."""

    kind: str  # "launch", "op" or "return"
    operands: list[int]
    outputs: list[int]
    result_dims: list[list[str]]
    kernel: str | None = None
    op: Operation | None = None  # for "op" steps; parsed from ``ir`` on first use when loaded from a plan
    ir: str | None = None

    def operation(self) -> Operation:
        if self.op is None:
            self._module, self.op = _parse_op(self.ir)  # the module keeps the op's context alive
        return self.op


def function_steps(function: func.FuncOp) -> tuple[list[dict], list[Step]]:
    """The arguments (value id and dim texts) and the steps of ``function``."""
    from xdsl.dialects import func

    from amk.dialects import tiled_loop

    ids: dict = {}

    def number(value) -> int:
        return ids.setdefault(value, len(ids))

    args = [{"id": number(arg), "dims": [d.text for d in arg.type.dims]} for arg in function.body.block.args]
    steps = []
    for op in function.body.block.ops:
        kind = "return" if isinstance(op, func.ReturnOp) else "launch" if isinstance(op, tiled_loop.LaunchOp) else "op"
        steps.append(Step(kind, [number(v) for v in op.operands], [number(r) for r in op.results],
                          [[d.text for d in r.type.dims] for r in op.results],
                          op.kernel.string_value() if kind == "launch" else None, op if kind == "op" else None))
    return args, steps


class Program:
    """A ``func.func`` whose fused groups are ``tiled_loop.launch`` ops of compiled kernels; other ops run in PyTorch.

    The function becomes a list of :class:`Step` over numbered values. :meth:`plan` describes the program as JSON
    (steps, each kernel's argument views, dims, kinds and dtypes; ops run in PyTorch as generic IR) and
    :meth:`from_plan` rebuilds it from that description without running any pass (the persistent cache's warm start).
    """

    def __init__(self, function: func.FuncOp | None, kernels: dict[str, CompiledKernel], *,
                 args: list[dict] | None = None, steps: list[Step] | None = None):
        self.function = function
        self.kernels = kernels
        self.workspaces: dict[tuple, Workspace] = {}
        if function is not None:
            args, steps = function_steps(function)
        self.args = args
        self.arg_ids = [arg["id"] for arg in args]
        self.arg_shapes = [arg["dims"] for arg in args]
        self.steps = steps
        self.result_shapes = {
            value: ShapeFunction.from_texts(dims) for step in steps for value, dims in zip(step.outputs, step.result_dims)
        }
        # Work done once, not per call: where the argument shapes show symbols, and which kernel arguments already
        # have the shape the kernel views them with (no reshape or view needed at launch).
        self.symbol_positions = [(index, axis, dim) for index, dims in enumerate(self.arg_shapes)
                                 for axis, dim in enumerate(dims) if _SYMBOL.fullmatch(dim)]
        value_dims = {arg["id"]: arg["dims"] for arg in args}
        value_dims.update((value, dims) for step in steps for value, dims in zip(step.outputs, step.result_dims))
        self.as_is = {
            id(step): [value_dims[value] == spec.shape.texts and spec.view != "transpose"
                       for value, spec in zip(step.operands + step.outputs,
                                              self.kernels[step.kernel].inputs + self.kernels[step.kernel].outputs)]
            for step in steps if step.kind == "launch"}

    def plan(self) -> dict:
        """The JSON-serializable launch plan."""
        steps = [{"kind": s.kind, "operands": s.operands, "outputs": s.outputs, "result_dims": s.result_dims,
                  "kernel": s.kernel, "ir": (s.ir or _op_text(s.op)) if s.kind == "op" else None} for s in self.steps]
        kernels = {name: [{"view": a.view, "dims": a.shape.texts, "kind": a.kind,
                           "dtype": None if a.dtype is None else str(a.dtype).removeprefix("torch.")}
                          for a in kernel.arguments]
                   for name, kernel in self.kernels.items()}
        return {"args": self.args, "steps": steps, "kernels": kernels}

    @classmethod
    def from_plan(cls, plan: dict, kernels: dict[str, CompiledKernel]) -> Program:
        """The program described by ``plan`` (see :meth:`plan`); ``kernels`` from :func:`kernel_from_plan`."""
        steps = [Step(s["kind"], list(s["operands"]), list(s["outputs"]), [list(d) for d in s["result_dims"]],
                      s.get("kernel"), None, s.get("ir")) for s in plan["steps"]]
        for step in steps:
            if step.kind not in ("launch", "op", "return") or (step.kind == "launch" and step.kernel not in kernels) \
                    or (step.kind == "op" and not isinstance(step.ir, str)):
                raise ValueError(f"bad step in launch plan: {step.kind} {step.kernel}")
        return cls(None, kernels, args=[{"id": int(a["id"]), "dims": list(a["dims"])} for a in plan["args"]],
                   steps=steps)

    def bind(self, tensors: Sequence[torch.Tensor]) -> dict[str, int]:
        return {dim: int(tensors[index].shape[axis]) for index, axis, dim in self.symbol_positions}

    def __call__(self, *tensors: torch.Tensor, bindings: dict[str, int] | None = None) -> list[torch.Tensor]:
        """Run on ``tensors``; ``bindings`` gives symbol values the argument shapes do not show (e.g. ``s0`` when
        only ``s0*s1`` appears)."""
        env: dict[int, torch.Tensor] = dict(zip(self.arg_ids, tensors))
        bindings = self.bind(tensors) | (bindings or {})
        for step in self.steps:
            if step.kind == "return":
                return [env[v] for v in step.operands]
            args = [env[v] for v in step.operands]
            if step.kind == "launch":
                results = self.launch(step, args, bindings)
            else:
                from amk import reference

                results = [reference.evaluate(step.operation(), args)]
            env.update(zip(step.outputs, results))
        raise AssertionError("function without func.return")

    def fast_path(self, bindings: dict[str, int], device: torch.device, operands: Sequence | None = None) -> Callable:
        """For a program of kernel launches and of ops run in PyTorch: a function of the argument tensors (or, given
        ``operands``, of a call's arguments: see :func:`straight_line`) that
        allocates each launch's outputs and launches, with the output shapes and dtypes, the views the kernels take
        of their operands (a transposed weight, rows flattened; see :meth:`KernelArgument.viewer`) and the workspace
        buffers found once, here, for ``bindings`` on ``device`` (an op run in PyTorch, such as a matmul left to the
        vendor library, is called as it is), written out as one function (:func:`straight_line`). On a GPU each launch
        is a :class:`~amk.replay.LaunchReplay`: from the second call on, Triton's compiled kernels are launched
        directly, on the call's tensors themselves where the views are of their memory (the replay makes the views only
        where a launch needs them)."""
        launches = self.steps[:-1]
        plans = []
        for step in launches:
            if step.kind == "op":
                from amk import reference  # with the op's IR, only for programs that have such ops

                op = step.operation()
                plans.append((reference.bound(op), step.operands, step.outputs, None, None, None))
                continue
            kernel = self.kernels[step.kernel]
            shapes = [self.result_shapes[value](bindings) for value in step.outputs]
            outputs = [(shape, contiguous_strides(shape), spec.dtype) for shape, spec in zip(shapes, kernel.outputs)]
            views = [None if same else spec.viewer(bindings)
                     for spec, same in zip(kernel.inputs + kernel.outputs, self.as_is[id(step)])]
            views = views if any(view is not None for view in views) else None
            workspace = self.workspace(kernel, bindings, device)
            workspace = workspace if workspace.specs else None
            if device.type == "cuda":  # the replay makes the views where a launch needs them (LaunchReplay)
                launch, views = LaunchReplay(kernel.launch, len(step.operands), views), None
            else:
                launch = serialized(kernel.launch)
            plans.append((launch, step.operands, step.outputs, outputs, workspace, views))
        return straight_line(plans, self.arg_ids, self.steps[-1].operands, output_allocator(device), operands)

    def launch(self, op: Step, args: list[torch.Tensor], bindings: dict[str, int]) -> list[torch.Tensor]:
        kernel = self.kernels[op.kernel]
        as_is = self.as_is[id(op)]
        views = [tensor if same else spec.viewer(bindings)(tensor)
                 for tensor, spec, same in zip(args, kernel.inputs, as_is)]
        device = args[0].device
        results = []
        for spec, value, same in zip(kernel.outputs, op.outputs, as_is[len(args):]):
            result = torch.empty(self.result_shapes[value](bindings), dtype=spec.dtype, device=device)
            results.append(result)
            views.append(result if same else result.view(spec.shape(bindings)))
        views.extend(self.workspace(kernel, bindings, device)())
        if device.type == "cuda":
            kernel.launch(*views)
        else:
            serialized(kernel.launch)(*views)
        return results

    def workspace(self, kernel: CompiledKernel, bindings: dict[str, int], device: torch.device) -> Workspace:
        """The workspace of ``kernel`` at the shapes ``bindings`` give, on ``device``: buffers per thread and stream,
        never shared by calls in flight (see :mod:`amk.workspace`)."""
        shapes = tuple(spec.shape(bindings) for spec in kernel.workspace)
        key = (kernel.name, shapes, device)
        workspace = self.workspaces.get(key)
        if workspace is None:
            specs = [(shape, spec.dtype, spec.kind == "counter") for shape, spec in zip(shapes, kernel.workspace)]
            workspace = self.workspaces.setdefault(key, Workspace(specs, device))
        return workspace


def straight_line(plans: list[tuple], arg_ids: list[int], returned: list[int], allocate: Callable,
                  operands: Sequence | None = None) -> Callable:
    """A program's hot path as one generated Python function of its argument tensors, as Inductor writes a compiled
    graph's ``call``: a line per allocation and launch, each value a local variable; it returns a tuple of the
    program's results. ``operands``, when given, says per program argument where a call finds it: an int is the
    position of the call's argument that is that tensor (a compiled graph passes sizes and other tensors too), a
    tensor is the argument itself (a constant). ``plans`` holds, per step,
    ``(launch, operand ids, result ids, outputs, workspace, views)``: ``outputs`` None for an op run in PyTorch (its
    launch returns its result), else each result's ``(shape, strides, dtype)`` to allocate; ``workspace`` a
    :class:`~amk.workspace.Workspace` or None; ``views`` the viewers :func:`~amk.replay.viewed` applies to the launch's
    tensors, or None. A loop over the plans with a table of values cost 4.9 us a call of four steps on a 2-core CPU,
    this function 0.5 (the table, the tuple unpacking and the empty workspaces are what it leaves out)."""
    from amk.lowering.indented_writer import IndentedWriter

    names: dict = {"allocate": allocate, "viewed": viewed}
    code = IndentedWriter()
    code.writeline("def run(tensors):")
    with code.indent():
        if operands is None:
            if arg_ids:
                code.writeline("".join(f"v{value}, " for value in arg_ids) + "= tensors")
        else:
            for value, source in zip(arg_ids, operands, strict=True):
                if isinstance(source, int):
                    code.writeline(f"v{value} = tensors[{source}]")
                else:
                    names[f"v{value}"] = source  # read as a global
        for index, (launch, operands, ids, outputs, workspace, views) in enumerate(plans):
            names[f"step_{index}"] = launch
            if outputs is None:  # an op run in PyTorch: it allocates its own result
                code.writeline(f"v{ids[0]} = step_{index}({', '.join(f'v{value}' for value in operands)})")
                continue
            for value, (shape, strides, dtype) in zip(ids, outputs):
                names[f"dtype_{value}"] = dtype
                shape, strides = tuple(map(int, shape)), tuple(map(int, strides))
                code.writeline(f"v{value} = allocate({shape}, {strides}, dtype_{value})")
            tensors = ", ".join(f"v{value}" for value in [*operands, *ids])
            if views is not None:
                names[f"views_{index}"] = views
                tensors = f"*viewed([{tensors}], views_{index})"
            if workspace is not None:
                names[f"workspace_{index}"] = workspace
                tensors += f", *workspace_{index}()"
            code.writeline(f"step_{index}({tensors})")
        code.writeline(f"return ({''.join(f'v{value}, ' for value in returned)})")
    exec(compile(code.getvalue(), "<amk fast path>", "exec"), names)
    return names["run"]


@dataclass
class CompiledProgram:
    """A compiled op chain: the program to run, the IR text at every level, the kernels."""

    program: Program
    ir: dict[str, str]
    kernels: dict[str, CompiledKernel] = field(default_factory=dict)

    @property
    def source(self) -> str:
        return "\n\n".join(k.source for k in self.kernels.values())


def compiled_from_entry(entry, cache_directory: str | os.PathLike | None = None) -> CompiledProgram:
    """The runnable program of a cache entry (its ``sources``, ``configs``, ``plan`` and ``ir``): loads the kernel
    sources under ``cache_directory`` and rebuilds the launch plan; no pass runs. Raises on a plan or a source that
    does not load."""
    kernels = {}
    for name, source in entry.sources.items():
        loaded = load_source(source, name, cache_directory)
        kernels[name] = kernel_from_plan(name, entry.plan, KernelConfig.from_dict(entry.configs[name]), source,
                                         loaded.__file__, loaded.launch)
    return CompiledProgram(Program.from_plan(entry.plan, kernels), dict(entry.ir), kernels)


def kernel_from_plan(name: str, plan: dict, config: KernelConfig, source: str, source_path: str,
                     launch: Callable) -> CompiledKernel:
    """A :class:`CompiledKernel` from its arguments in a :meth:`Program.plan` and its loaded source."""
    arguments = []
    for spec in plan["kernels"][name]:
        dtype = None if spec["dtype"] is None else getattr(torch, spec["dtype"])
        if dtype is not None and not isinstance(dtype, torch.dtype):
            raise ValueError(f"bad dtype {spec['dtype']!r} in launch plan")
        arguments.append(KernelArgument(spec["view"], ShapeFunction.from_texts(spec["dims"]), spec["kind"], dtype))
    return CompiledKernel(name, config, source, source_path, launch, arguments)


def _op_text(op: Operation) -> str:
    """An op run in PyTorch, alone in a ``func.func`` in generic form (its operands become the arguments)."""
    from io import StringIO

    from xdsl.dialects import func
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.ir import Block, Region
    from xdsl.printer import Printer

    block = Block(arg_types=[v.type for v in op.operands])
    clone = op.clone(value_mapper=dict(zip(op.operands, block.args)))
    block.add_op(clone)
    block.add_op(func.ReturnOp(*clone.results))
    function = func.FuncOp("step", ([v.type for v in op.operands], [r.type for r in op.results]), Region(block))
    stream = StringIO()
    Printer(stream=stream, print_generic_format=True).print_op(ModuleOp([function]))
    return stream.getvalue()


def _parse_op(text: str):
    from xdsl.dialects import func
    from xdsl.parser import Parser

    from amk.context import make_context
    from amk.reference import REFERENCE

    ctx = make_context()
    # An op step runs by its reference: a user's op may have one without its dialect in AMK_DIALECTS (which only
    # amk-opt needs), and a cache hit parses the step's stored text.
    for op_class in REFERENCE:
        if ctx.get_optional_op(op_class.name) is None:
            ctx.load_op(op_class)
    module = Parser(ctx, text).parse_module()
    function = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    return module, function.body.block.first_op

