"""``amk-emit-triton``: one readable Triton kernel plus its launcher from a ``memory_staged.kernel``.

The emitter reads only the ``memory_staged`` level (with the ``tiled_loop`` compute ops it keeps) and knows nothing
of the original op chain: every fused op reached it as primitive tile ops tagged with their ``origin``, which become
the comments of the generated code. Tile values are named after their SSA names (``x_tile``, ``acc``, ``rstd``).
Global buffers are addressed by pointer arithmetic with explicit strides (no block pointers, so the code runs on
Triton 3.6 and 3.9); masks and 64-bit offsets are emitted exactly where ``amk-stage`` asked for them. A staged copy
marked ``descriptor`` also gets a tensor-descriptor (TMA) load, chosen at compile time through the ``USE_TMA``
constexpr, which the launcher sets when every such operand's layout can be read by TMA (else the pointer load runs).
Masks marked ``mask_if_uneven`` (a symbolic extent at an aligned offset) are written as
``None if EVEN_TILES else (...)``: the launcher sets the ``EVEN_TILES`` constexpr when every such extent is a multiple
of its tile size, and Triton compiles that case without them.
A ``persistent`` kernel launches one program per SM, each walking the output tiles in grouped order.
The source is written line by line through an :class:`~amk.lowering.indented_writer.IndentedWriter` (as Inductor's
``IndentedBuffer``): a loop or branch body is written inside ``with self.code.indent():``.

The pass stores the source on the kernel as ``triton_source``; ``amk-opt -t triton`` prints it instead of the IR.
With ``interpret=true`` the code targets Triton's CPU interpreter, which mishandles bf16 arithmetic: dot operands are
then upcast to fp32 first.
"""

from __future__ import annotations

import functools
import keyword
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO, ClassVar

import sympy
from xdsl.context import Context
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float8E4M3FNType,
    Float16Type,
    Float32Type,
    IntegerType,
    ModuleOp,
    StringAttr,
    i1,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException
from xdsl.utils.target import Target

from amk.dialects import memory_staged, tiled_loop
from amk.dialects.memory_staged import BufferType
from amk.errors import DTypeError
from amk.lowering.indented_writer import IndentedWriter
from amk.lowering.strategies import strategy_named
from amk.symbolic import Dim, Mod, to_python

_BINARY_OPERATORS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
                     "eq": "==", "ne": "!="}
# NaN propagates through max and min as in torch.maximum / torch.relu / torch.clamp (Triton's default drops it).
_BINARY_FUNCTIONS = {"max": "tl.maximum", "min": "tl.minimum"}
_PROPAGATE_NAN = "propagate_nan=tl.PropagateNan.ALL"
_UNARY_FUNCTIONS = {"exp": "tl.exp", "exp2": "tl.exp2", "log": "tl.log", "erf": "tl.erf", "sqrt": "tl.sqrt",
                    "rsqrt": "tl.rsqrt", "abs": "tl.abs", "sigmoid": "tl.sigmoid"}
# Names of the modules and builtins the source uses, and the launcher's own locals.
_RESERVED = {"tl", "triton", "torch", "pid", "grid", "launch", "float", "range", "min", "max", "even_tiles", "use_tma"}


def triton_name(element_type: Attribute) -> str:
    """``tl.<name>`` for an element type."""
    if isinstance(element_type, Float32Type):
        return "float32"
    if isinstance(element_type, Float16Type):
        return "float16"
    if isinstance(element_type, BFloat16Type):
        return "bfloat16"
    if isinstance(element_type, Float8E4M3FNType):
        return "float8e4nv"
    if isinstance(element_type, IntegerType) and element_type.width.data in (1, 32):
        return f"int{element_type.width.data}"
    raise DTypeError(f"element type {element_type} has no Triton equivalent")


def _identifier(text: str) -> str:
    name = re.sub(r"\W", "_", text).strip("_") or "t"
    if name[0].isdigit():
        name = "t" + name
    return name + "_" if keyword.iskeyword(name) or name in _RESERVED else name


def _literal(value: float) -> str:
    if math.isinf(value) or math.isnan(value):  # repr's inf and nan are no Python names
        return f'float("{value}")'
    return repr(float(value))


# Interpreter only: round fp32 to the nearest bf16 (ties to even) in integer arithmetic, so that the interpreter's
# truncating conversion is exact. NaN is passed through untouched (adding to its bits could wrap it to zero).
_BF16_RTNE = '''@triton.jit
def _round_to_bf16(x):
    bits = x.to(tl.uint32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return tl.where(x != x, x, rounded.to(tl.float32, bitcast=True)).to(tl.bfloat16)'''


_SM_COUNT = '''_SM_COUNTS = {}


def _sm_count():
    device = torch.cuda.current_device()
    if device not in _SM_COUNTS:
        _SM_COUNTS[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SM_COUNTS[device]'''

# The interpreter runs one program at a time: a few persistent programs exercise the tile loop.
_SM_COUNT_INTERPRETED = '''def _sm_count():
    return 3'''

_RESIDENT_PROGRAMS = '''def _resident_programs(tiles_per_strip):
    """Whole row strips of programs, at most one per SM, so that every program of the launch is resident at once."""
    sms = _sm_count()
    if tiles_per_strip > sms:
        raise RuntimeError(f"a row strip has {tiles_per_strip} tiles but the GPU has {sms} SMs: use a larger BLOCK_N")
    return sms // tiles_per_strip * tiles_per_strip'''


_TMA_READABLE = '''def _tma_readable(tensor):
    """TMA copies tiles of rows that are contiguous, start 16-byte aligned and lie a multiple of 16 bytes apart (and
    so do the matrices of a batch), no closer than a row is long (an expanded or overlapping view is read with
    pointers)."""
    return (tensor.stride(-1) == 1 and tensor.data_ptr() % 16 == 0
            and all(stride * tensor.element_size() % 16 == 0 for stride in tensor.stride()[:-1])
            and all(tensor.stride(i) >= tensor.shape[i + 1] * tensor.stride(i + 1) for i in range(tensor.dim() - 1)))'''


_OFFSETS_FIT_INT32 = '''def _offsets_fit_int32(tensor):
    """Whether every element of ``tensor`` lies less than 2**31 elements past its first (the kernel's offsets into it
    are 32-bit): not so for a view into a larger tensor, such as a few columns of one with 2**31 elements."""
    return tensor.is_contiguous() or sum(max(size - 1, 0) * stride
                                         for size, stride in zip(tensor.shape, tensor.stride())) < 2**31'''


_TMA_WORKSPACE = '''def _tma_workspace(size, alignment, stream):
    """Global memory for the tensor descriptors a kernel builds on the device."""
    return torch.empty(size, device="cuda", dtype=torch.int8)'''


_RELAUNCH = "Launched after every program of the launch before it has finished."


@dataclass(frozen=True)
class _Mask:
    """The bounds mask of one global access: terms every launch needs, and terms a launch with ``EVEN_TILES`` drops."""

    always: tuple[str, ...]
    uneven: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.always or self.uneven)

    def __str__(self) -> str:
        every = " & ".join(self.always + self.uneven)
        if not self.uneven:
            return every
        return f"{' & '.join(self.always) or 'None'} if EVEN_TILES else {every}"

    @property
    def other(self) -> str:
        """A masked load's value where the mask is false (none where no mask is left)."""
        return "0.0" if self.always or not self.uneven else "None if EVEN_TILES else 0.0"


@dataclass
class _Launch:
    """One ``@triton.jit`` function of a kernel and how it is launched."""

    name: str
    grid: Sequence[Dim]
    program_ids: list[str]
    group_size: str | None
    description: str
    ops: list[Operation]


def split_launches(kernel) -> list[tuple[tiled_loop.RelaunchOp | None, list[Operation]]]:
    """A kernel's (tile-level or staged) launches: its body's ops up to the first ``tiled_loop.relaunch`` (with None),
    then each relaunch with the ops up to the next."""
    ops = list(kernel.body.block.ops)
    cuts = [i for i, op in enumerate(ops) if isinstance(op, tiled_loop.RelaunchOp)]
    ends = [*cuts, len(ops)]
    return [(None, ops[:ends[0]])] + [(ops[cut], ops[cut + 1:end]) for cut, end in zip(cuts, ends[1:])]


def unflattened_ids(flat: str, program_ids: Sequence[str], extents: Sequence[str]) -> list[str]:
    """Lines setting ``program_ids`` from ``flat``, the one program index of a grid of several axes whose first
    extents (all but the last's) are ``extents``, each a name or parenthesized: the first axis varies fastest, as on a
    grid's own axes."""
    lines = []
    for axis, pid in enumerate(program_ids):
        index = " // ".join([flat, *extents[:axis]])
        lines.append(f"{pid} = {index} % {extents[axis]}" if axis < len(extents) else f"{pid} = {index}")
    return lines


@functools.lru_cache(maxsize=16384)
def _python_of(text: str, parameters: tuple[tuple[str, str], ...], known: frozenset[str],
               cdiv_name: str) -> str | set[str]:
    """Python for the dim ``text`` with each dim of ``parameters`` replaced by its kernel parameter, or the symbols
    left that no argument, loop or constant provides. Remembered: every candidate of a kernel prints the same
    expressions, and sympy's substitution and printing made a fifth of a candidate's emission."""
    value = Dim(text).expr
    for dim_text, param in parameters:
        value = value.subs(Dim(dim_text).expr, sympy.Symbol(param, integer=True, positive=True))
    leftover = {str(s) for s in value.free_symbols} - known
    if leftover:
        return leftover
    in_kernel = cdiv_name.startswith("tl.")
    if in_kernel:
        _check_divisions_in_kernel(value, text)
    return to_python(value, cdiv_name, "tl.minimum" if in_kernel else "min", "tl.maximum" if in_kernel else "max")


def _check_divisions_in_kernel(value: sympy.Expr, text: str) -> None:
    """Triton's ``//`` and ``%`` truncate toward zero where Python's floor: a kernel computes a size's floor, ceiling
    or remainder only where sympy proves what it divides nonnegative (and the divisor positive)."""
    for division in value.atoms(sympy.floor, sympy.ceiling, Mod):
        dividend = division.args[0]
        divisor = division.args[1] if isinstance(division, Mod) else sympy.Integer(1)
        if not (dividend.is_nonnegative and divisor.is_positive):
            raise ValueError(f"the size {text} divides {dividend}, which may be negative, inside a kernel (Triton's "
                             "// and % truncate toward zero where Python's floor)")


class TritonEmitter:
    """Generates the source of one kernel and its launcher."""

    # Whether masks marked mask_if_uneven are dropped at launches whose extents divide their tiles (EVEN_TILES).
    drops_uneven_masks: ClassVar[bool] = True

    def __init__(self, kernel: memory_staged.KernelOp, interpret: bool = False, fp32_dot: str = "ieee"):
        self.kernel = kernel
        self.fp32_dot = fp32_dot
        self.negated_columns: dict[Operation, str] = {}  # rotate_half loads: their columns' negation, by load
        # The kernel's tiling strategy: what its docstring says, whether its programs must be resident at once.
        self.tiling = strategy_named(kernel.strategy.data)
        self.interpret = interpret
        self.constants = kernel.constant_values
        self.names: dict[SSAValue, str] = {}
        self.taken: set[str] = set()
        self.inline: dict[SSAValue, str] = {}
        # The source being written: a kernel's body while emit_kernel runs (blocks open with `with self.code.indent()`).
        self.code = IndentedWriter()
        self.last_origin: str | None = None
        self.kernel_name = f"{kernel.sym_name.data}_kernel"
        self.taken.add(self.kernel_name)
        # Loop variables keep their IR names: no tile value may take one (Triton rejects a name whose type changes
        # inside a loop or a branch).
        self.taken.update(op.iv.data for op in kernel.walk() if isinstance(op, tiled_loop.ForOp))
        self.args = list(kernel.body.block.args)
        for arg in self.args:
            self.names[arg] = self.fresh(f"{arg.name_hint or 'arg'}")
            # the kernel's parameters named after it (a dim named x_ptr must not become a second x_ptr)
            self.taken.update([f"{self.names[arg]}_ptr",
                               *(f"stride_{self.names[arg]}_{axis}" for axis in range(len(arg.type.dims)))])
        self.dims = self._dim_params()
        self.needs_bf16_rounding = False
        # (buffer, tile shape) -> name of the tensor descriptor of the launch being emitted
        self.descriptors: dict[tuple[SSAValue, tuple[Dim, ...]], str] = {}
        # (extent, tile size) of every mask the kernel drops under EVEN_TILES, for the launcher's check
        self.even_checks: dict[tuple[Dim, Dim], None] = {}

    # -- names and expressions ---------------------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        base = _identifier(hint)
        name, index = base, 1
        while name in self.taken:
            name = f"{base}_{index}"
            index += 1
        self.taken.add(name)
        return name

    def name(self, value: SSAValue) -> str:
        if value in self.inline:
            return self.inline[value]
        if value not in self.names:
            owner = value.owner
            hint = value.name_hint or (owner.attributes["origin"].data.split(" ")[0]
                                       if isinstance(owner, Operation) and "origin" in owner.attributes else "t")
            self.names[value] = self.fresh(hint)
        return self.names[value]

    def _dim_params(self) -> dict[str, tuple[str, int, int]]:
        """Symbolic buffer dims become integer kernel arguments: text -> (param name, arg index, axis)."""
        params: dict[str, tuple[str, int, int]] = {}
        for index, arg in enumerate(self.args):
            for axis, dim in enumerate(arg.type.dims):
                if not dim.is_static and dim.text not in params:
                    name = dim.text if re.fullmatch(r"[A-Za-z_]\w*", dim.text) else f"dim_{len(params)}"
                    params[dim.text] = (self.fresh(name), index, axis)
        return params

    def expr(self, dim: Dim, cdiv_name: str = "tl.cdiv") -> str:
        """Python for ``dim`` inside the kernel (``tl.`` helpers) or, with ``cdiv_name="triton.cdiv"``, the launcher."""
        text = _python_of(dim.text, self._dim_parameters, self._known_symbols, cdiv_name)
        if isinstance(text, set):
            raise ValueError(f"kernel {self.kernel.sym_name.data}: no argument provides {', '.join(sorted(text))}")
        return text

    @functools.cached_property
    def _dim_parameters(self) -> tuple[tuple[str, str], ...]:
        """Each symbolic dim the arguments' shapes give (its text), with the kernel parameter holding it (longest text
        first, so that ``B*S`` is replaced before ``B``)."""
        return tuple((text, param) for text, (param, _, _) in sorted(self.dims.items(), key=lambda item: -len(item[0])))

    @functools.cached_property
    def _known_symbols(self) -> frozenset[str]:
        loops = {op.iv.data for op in self.kernel.walk() if isinstance(op, tiled_loop.ForOp)}
        relaunched = {p.data for op in self.kernel.walk() if isinstance(op, tiled_loop.RelaunchOp)
                      for p in op.program_ids.data}
        return frozenset(set(self.constants) | {p.data for p in self.kernel.program_ids.data} | relaunched | loops
                         | {p for p, _, _ in self.dims.values()})

    @functools.cached_property
    def narrow_inputs(self) -> list[SSAValue]:
        """The inputs the kernel reads with 32-bit offsets (``amk-stage`` chose them for buffers of fewer than 2**31
        elements), whose strides a call may still make wider: a view into a larger tensor."""
        inputs = self.args[:self.kernel.num_inputs.value.data]
        narrow = {op.source for op in self.kernel.walk()
                  if isinstance(op, memory_staged.LoadOp | memory_staged.StageOp) and not op.wide_index}
        return [buffer for buffer in inputs if buffer in narrow]

    @functools.cached_property
    def even_tiles(self) -> bool:
        """Whether the kernel takes the ``EVEN_TILES`` constexpr (it has masks it drops when the extents divide)."""
        return self.drops_uneven_masks and any(any(op.uneven_axes) for op in self.kernel.walk()
                                               if isinstance(op, memory_staged.GlobalAccessOp))

    def comment_origin(self, op: Operation) -> None:
        origin = op.attributes["origin"].data if "origin" in op.attributes else None
        if origin is not None and origin != self.last_origin:
            self.code.writeline(f"# {origin}")
        self.last_origin = origin

    # -- kernel ------------------------------------------------------------------------------------------------------
    def stride(self, arg_index: int, axis: int) -> str:
        return f"stride_{self.names[self.args[arg_index]]}_{axis}"

    def launches(self) -> list[_Launch]:
        """The kernel's launches: its body up to the first ``tiled_loop.relaunch``, then each relaunch's ops over its
        grid."""
        kernel = self.kernel
        launches = []
        for relaunch, ops in split_launches(kernel):
            if relaunch is None:
                launches.append(_Launch(self.kernel_name, kernel.grid.dims, [p.data for p in kernel.program_ids.data],
                                        kernel.group_size.data if kernel.group_size is not None else None,
                                        self.describe(), ops))
                continue
            note = relaunch.attributes.get("note")
            launches.append(_Launch(f"{kernel.sym_name.data}_{relaunch.launch_label}_kernel", relaunch.grid.dims,
                                    [p.data for p in relaunch.program_ids.data], None,
                                    note.data if note is not None else _RELAUNCH, ops))
        return launches

    def emit_kernel(self, launch: _Launch) -> IndentedWriter:
        params = [f"{self.names[a]}_ptr" for a in self.args]
        params += [self.stride(i, axis) for i, a in enumerate(self.args) for axis in range(a.type.rank)]
        params += [p for p, _, _ in self.dims.values()]
        params += [f"{c}: tl.constexpr" for c in self.constants]
        params += ["USE_TMA: tl.constexpr"] if self.descriptor_stages() else []
        params += ["EVEN_TILES: tl.constexpr"] if self.even_tiles else []
        code = self.code = IndentedWriter()
        self.last_origin = None
        code.writeline("@triton.jit")
        code.writeline(f"def {launch.name}(")
        with code.indent():
            code.writelines(f"{p}," for p in params)
        code.writeline("):")
        with code.indent():
            code.writeline(f'"""{launch.description}"""')
            self.emit_descriptors(launch)
            self.emit_program_ids(launch)
            # A persistent kernel's body is the body of the tile loop that emit_program_ids opened.
            with code.indent(1 if self.persistent(launch) else 0):
                for op in launch.ops:
                    self.emit_op(op)
        return code

    def persistent(self, launch: _Launch) -> bool:
        """Kernels whose strategy needs its programs resident at once (strip_sync), and ``persistent`` grids of tiles
        in grouped order, run as many programs as the GPU has SMs (or as can be resident), each walking the tiles."""
        if self.tiling.resident_programs:
            return True
        return self.kernel.persistent is not None and launch.group_size is not None

    def descriptor_stages(self, ops: Sequence[Operation] | None = None) -> list[memory_staged.StageOp]:
        """The staged copies that go through tensor descriptors (in ``ops``, or in the whole kernel)."""
        roots = ops if ops is not None else [self.kernel]
        return [op for root in roots for op in root.walk()
                if isinstance(op, memory_staged.StageOp) and op.descriptor is not None]

    def descriptor_name(self, op: memory_staged.StageOp) -> str:
        """One descriptor per (buffer, tile shape): ``x_desc``."""
        return self.descriptors[(op.source, op.result.type.dims)]

    def read_transposed(self, buffer: SSAValue) -> bool:
        """Whether the kernel argument ``buffer`` is a transposed view (``nn.Linear``'s weight ``[N, K]`` read as
        ``W^T``, strides ``(1, K)``): TMA reads such a tile through a descriptor of the operand's own rows, then
        transposes it (as Hopper GEMMs read a K-major B)."""
        views = self.kernel.arg_views
        return views is not None and views.data[self.args.index(buffer)].data == "transpose"

    def descriptor_offsets(self, op: memory_staged.StageOp) -> str:
        """Where the descriptor load of ``op``'s tile starts: its offsets, the last two swapped for a transposed view
        (a tile of the operand's own rows; a batch index stays first)."""
        offsets = [self.expr(d) for d in op.offsets.dims]
        if self.read_transposed(op.source):
            offsets[-2:] = offsets[:-3:-1]
        return ", ".join(offsets)

    def emit_descriptors(self, launch: _Launch) -> None:
        self.descriptors = {}
        stages = self.descriptor_stages(launch.ops)
        if not stages:
            return
        code = self.code
        code.writeline("# tensor descriptors: the copy engine (TMA) fetches the staged operand tiles, zero-filling what "
                       "lies out of bounds; USE_TMA is False when the launcher found a layout TMA cannot read")
        code.writeline("if USE_TMA:")
        with code.indent():
            for op in stages:
                key = (op.source, op.result.type.dims)
                if key in self.descriptors:
                    continue
                buffer: BufferType = op.source.type
                name = self.descriptors[key] = self.fresh(f"{self.names[op.source]}_desc")
                arg_index = self.args.index(op.source)
                dims, tile = list(buffer.dims), list(op.result.type.dims)
                row_stride = self.stride(arg_index, 0)
                if self.read_transposed(op.source):  # the descriptor of W [N, K]: its tiles are [BLOCK_N, BLOCK_K]
                    dims, tile, row_stride = dims[::-1], tile[::-1], self.stride(arg_index, 1)
                shape = ", ".join(self.expr(d) for d in dims)
                block = ", ".join(self.expr(d) for d in tile)
                code.writeline(f"{name} = tl.make_tensor_descriptor({self.names[op.source]}_ptr, shape=[{shape}], "
                               f"strides=[{row_stride}, 1], block_shape=[{block}])")

    def describe(self) -> str:
        strategy = self.kernel.strategy.data
        text = self.tiling.description
        if self.kernel.persistent is not None:
            text += " Persistent: one program per SM walks the tiles."
        return f"Generated by amk ({strategy}). {text}"

    def emit_program_ids(self, launch: _Launch) -> None:
        """The program ids of ``launch``; a persistent launch's ids open its tile loop, whose body (at one level
        deeper) the kernel's ops then fill."""
        kernel, code = self.kernel, self.code
        pids, grid = launch.program_ids, launch.grid
        if self.persistent(launch) and launch.group_size is not None:
            tile = self.fresh("tile")
            code.writeline(f"# persistent launch: one program per SM walks the output tiles in grouped order "
                           f"({launch.group_size} row tiles share each column tile of the weight in L2); Triton "
                           "pipelines the next tile's loads under this tile's epilogue")
            self.emit_tile_counts(grid)
            code.writeline(f"num_pid_in_group = {launch.group_size} * num_pid_n")
            # Flattening the tile loop with its K loop is what lets Triton pipeline across tiles; its pass fails on a
            # tile body with a branch (strip_finish's finisher), which then stays a plain loop. Triton's Hopper warp
            # specialization takes only an unflattened loop (a flattened one compiles without specialized warps).
            branchy = any(isinstance(op, tiled_loop.IfOp) for root in launch.ops for op in root.walk())
            options = (", warp_specialize=True" if kernel.warp_specialize is not None
                       else "" if branchy else ", flatten=True")
            code.writeline(f"for {tile} in tl.range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)"
                           f"{options}):")
            with code.indent():
                self.emit_grouped_ids(tile, launch)
        elif self.persistent(launch):
            if self.interpret:
                raise ValueError(f"kernel {kernel.sym_name.data}: strip_sync programs wait for each other, which "
                                 "Triton's interpreter (one program at a time) cannot run; tile with tile_stats")
            pid_m, pid_n = pids
            tile = self.fresh("tile")
            code.writeline("# persistent launch: at most one program per SM, all resident, walking the tiles in "
                           "row-strip order, so the tiles of a strip run side by side")
            self.emit_tile_counts(grid)
            code.writeline(f"for {tile} in tl.range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):")
            with code.indent():
                code.writeline(f"{pid_m} = {tile} // num_pid_n")
                code.writeline(f"{pid_n} = {tile} % num_pid_n")
        elif launch.group_size is not None:
            code.writeline(f"# grouped launch order: {launch.group_size} row tiles in a row share each column tile of "
                           "the weight in L2")
            code.writeline("pid = tl.program_id(0)")
            self.emit_tile_counts(grid)
            if self.kernel.batched:
                code.writeline(f"{pids[2]} = pid // (num_pid_m * num_pid_n)  # the batch index")
                code.writeline("pid = pid % (num_pid_m * num_pid_n)")
            code.writeline(f"num_pid_in_group = {launch.group_size} * num_pid_n")
            self.emit_grouped_ids("pid", launch)
        elif len(pids) == 1:
            code.writeline(f"{pids[0]} = tl.program_id(0)")
        else:
            self.emit_flat_ids(launch)
        self.taken.update(pids)

    def emit_flat_ids(self, launch: _Launch) -> None:
        """The program ids of a grid of several axes, launched as one: CUDA caps a grid's second and third axes at
        65535 programs (a batch of heads exceeds that), the first at 2**31 - 1."""
        flat = self.fresh("flat")
        self.code.writeline(f"{flat} = tl.program_id(0)  # one flat axis: CUDA caps the others at 65535 programs")
        extents = [self.fresh(f"num_{pid}") for pid in launch.program_ids[:-1]]
        self.code.writelines(f"{extent} = {self.expr(dim)}" for extent, dim in zip(extents, launch.grid))
        self.code.writelines(unflattened_ids(flat, launch.program_ids, extents))

    def emit_grouped_ids(self, flat: str, launch: _Launch) -> None:
        """(pid_m, pid_n) of the flat tile index ``flat`` in grouped order."""
        group = launch.group_size
        pid_m, pid_n = launch.program_ids[:2]
        self.code.writelines([f"first_pid_m = ({flat} // num_pid_in_group) * {group}",
                              f"group_size_m = min(num_pid_m - first_pid_m, {group})",
                              f"{pid_m} = first_pid_m + (({flat} % num_pid_in_group) % group_size_m)",
                              f"{pid_n} = ({flat} % num_pid_in_group) // group_size_m"])

    def emit_tile_counts(self, grid: Sequence[Dim]) -> None:
        """``num_pid_m`` and ``num_pid_n``: the row and column tile counts of a 2-D grid walked from a flat id."""
        self.code.writeline(f"num_pid_m = {self.expr(grid[0])}")
        self.code.writeline(f"num_pid_n = {self.expr(grid[1])}")

    def emit_op(self, op: Operation) -> None:
        handler = getattr(self, f"emit_{op.name.replace('.', '_')}", None)
        if handler is None:
            raise NotImplementedError(f"the Triton emitter cannot emit {op.name}")
        self.comment_origin(op)
        handler(op)

    def emit_block(self, ops: Iterable[Operation]) -> None:
        """The ops of a loop or branch body, one level deeper; origin comments restart inside and after it."""
        self.last_origin = None
        with self.code.indent():
            for op in ops:
                self.emit_op(op)
        self.last_origin = None

    def assign(self, value: SSAValue, text: str) -> None:
        self.code.writeline(f"{self.name(value)} = {text}")

    def arange(self, size: str, axis: int) -> str:
        """The indices ``0 .. size - 1`` along ``axis`` of a 2-D tile (Gluon places them in a layout)."""
        return f"tl.arange(0, {size})"

    def full(self, shape: str, value: str, dtype: str) -> str:
        """A tile of ``shape`` (a tuple's text) filled with ``value`` (Gluon places it in a layout)."""
        return f"tl.full(({shape}), {value}, tl.{dtype})"

    def barrier(self) -> str:
        """A barrier of the program's threads (in Gluon, of the partition's warps)."""
        return "tl.debug_barrier()"

    def loop_range(self, bounds: str, stages: int | None) -> str:
        """The iterable of a loop over ``bounds``, software-pipelined over ``stages`` when given."""
        return f"tl.range({bounds}" + (f", num_stages={stages})" if stages else ")")

    # compute ops
    def emit_tiled_loop_full(self, op: tiled_loop.FullOp) -> None:
        tile = op.result.type
        uses = [use.operation for use in op.result.uses]
        scalar = tile.dims == (Dim(1), Dim(1)) and tile.element_type != i1
        if scalar and not any(isinstance(u, tiled_loop.ForOp | tiled_loop.YieldOp) for u in uses):
            self.inline[op.result] = _literal(op.number)
            return
        value = "1" if tile.element_type == i1 and op.number else _literal(op.number)
        shape = ", ".join(self.expr(d) for d in tile.dims)
        self.assign(op.result, self.full(shape, value, triton_name(tile.element_type)))

    def emit_tiled_loop_binary(self, op: tiled_loop.BinaryOp) -> None:
        fn = op.fn.data
        lhs, rhs = self.name(op.lhs), self.name(op.rhs)
        if fn in _BINARY_FUNCTIONS:
            text = f"{_BINARY_FUNCTIONS[fn]}({lhs}, {rhs}, {_PROPAGATE_NAN})"
        elif fn == "div" and isinstance(op.result.type.element_type, Float32Type):
            # Triton's fp32 `/` is div.full.f32 (up to 2 ulp off); PyTorch divides with IEEE rounding, and a mean of
            # equal values, count / count in a statistics merge, must come out exact (LayerNorm of a constant row: 0)
            text = f"tl.math.div_rn({lhs}, {rhs})"
        else:
            text = f"{lhs} {_BINARY_OPERATORS[fn]} {rhs}"
        self.assign(op.result, text)

    def emit_tiled_loop_unary(self, op: tiled_loop.UnaryOp) -> None:
        fn = op.fn.data
        x = self.name(op.input)
        self.assign(op.result, f"-{x}" if fn == "neg" else f"{_UNARY_FUNCTIONS[fn]}({x})")

    def emit_tiled_loop_select(self, op: tiled_loop.SelectOp) -> None:
        self.assign(op.result, f"tl.where({self.name(op.cond)}, {self.name(op.true_value)}, {self.name(op.false_value)})")

    def emit_tiled_loop_cast(self, op: tiled_loop.CastOp) -> None:
        self.assign(op.result, self.convert(op.input, op.result.type.element_type))

    def emit_tiled_loop_transpose(self, op: tiled_loop.TransposeOp) -> None:
        self.assign(op.result, f"tl.trans({self.name(op.input)})")

    def emit_tiled_loop_rotate_half(self, op: tiled_loop.RotateHalfOp) -> None:
        # Each group's halves as the last axis of two, split, and joined back swapped: a permutation of registers.
        rows, cols = (self.expr(d) for d in op.input.type.dims)
        group = op.group.value.data
        halves = self.fresh("halves")
        self.code.writeline(f"{halves} = tl.permute(tl.reshape({self.name(op.input)}, "
                            f"[{rows}, ({cols}) // {group}, 2, {group // 2}]), [0, 1, 3, 2])")
        first, second = self.fresh(f"{halves}_first"), self.fresh(f"{halves}_second")
        self.code.writeline(f"{first}, {second} = tl.split({halves})")
        self.assign(op.result, f"tl.reshape(tl.permute(tl.join(-{second}, {first}), [0, 1, 3, 2]), [{rows}, {cols}])")

    def emit_tiled_loop_diagonal(self, op: tiled_loop.DiagonalOp) -> None:
        size = self.expr(op.input.type.dims[0])
        on_diagonal = f"tl.arange(0, {size})[:, None] == tl.arange(0, {size})[None, :]"
        self.assign(op.result, f"tl.sum(tl.where({on_diagonal}, {self.name(op.input)}, 0.0), axis=1, keep_dims=True)")

    def emit_tiled_loop_reduce(self, op: tiled_loop.ReduceOp) -> None:
        if op.input.type.dims[1] == Dim(1):  # a row of one column reduces to itself (which may be a literal)
            self.inline[op.result] = self.name(op.input)
            return
        self.assign(op.result, f"tl.{op.fn.data}({self.name(op.input)}, axis=1, keep_dims=True)")

    def emit_tiled_loop_in_bounds(self, op: tiled_loop.InBoundsOp) -> None:
        tile = op.result.type
        terms = []
        for axis, (offset, extent, size) in enumerate(zip(op.offsets.dims, op.extents.dims, tile.dims)):
            if size == Dim(1):
                continue
            index = f"({self.expr(offset)} + {self.arange(self.expr(size), axis)})"
            terms.append(f"{index}[{':, None' if axis == 0 else 'None, :'}] < {self.expr(extent)}")
        self.assign(op.result, " & ".join(terms) or "True")

    # memory ops
    def emit_memory_staged_accumulator(self, op: memory_staged.AccumulatorOp) -> None:
        shape = ", ".join(self.expr(d) for d in op.result.type.dims)
        self.assign(op.result, f"tl.zeros(({shape}), dtype=tl.float32)")

    def emit_memory_staged_dot(self, op: memory_staged.DotOp) -> None:
        lhs, rhs = self.name(op.lhs), self.name(op.rhs)
        element = op.lhs.type.element_type
        extra = ""
        if isinstance(element, Float32Type):
            extra = f', input_precision="{self.fp32_dot}"'
        elif self.interpret and triton_name(element) == "bfloat16":
            # The interpreter holds bf16 as raw bits; an fp32 dot of the upcast tiles is exact.
            lhs, rhs = f"{lhs}.to(tl.float32)", f"{rhs}.to(tl.float32)"
        self.assign(op.result, f"tl.dot({lhs}, {rhs}, {self.name(op.acc)}{extra})")

    def pointers(self, op: memory_staged.GlobalAccessOp, buffer_value: SSAValue, tile_dims) -> tuple[str, _Mask]:
        """Emit index vectors; return (pointer expression, mask)."""
        buffer: BufferType = buffer_value.type
        arg_index = self.args.index(buffer_value)
        base = self.names[buffer_value]
        offsets_text, masks, uneven = [], [], []
        if buffer.rank == 1:
            axes = [1] if tile_dims[0] == Dim(1) else [0]
        elif buffer.rank >= 3:  # a batched kernel's: its batch indices are one offset for the whole tile
            axes = [None] * (buffer.rank - 2) + [0, 1]
            batch_map = op.batch_map if isinstance(op, memory_staged.LoadOp) else None
            for axis, offset in enumerate(op.offsets.dims[:-2]):
                batch = self.expr(offset)
                if batch_map is not None:  # the kernel's batch index mapped to the operand's matrix
                    batch = self.mapped_rows(batch, *batch_map)
                offsets_text.append(f"({batch}).to(tl.int64) * {self.stride(arg_index, axis)}" if op.wide_index
                                    else f"({batch}) * {self.stride(arg_index, axis)}")
        else:
            axes = [0, 1]
        row_map = op.row_map if isinstance(op, memory_staged.LoadOp) else None
        for buffer_axis, (tile_axis, offset) in enumerate(zip(axes, op.offsets.dims)):
            if tile_axis is None:
                continue
            size = tile_dims[tile_axis]
            index_name = self.fresh(f"{base}_{'rows' if tile_axis == 0 else 'cols'}")
            self.code.writeline(f"{index_name} = {self.expr(offset)} + {self.arange(self.expr(size), tile_axis)}")
            broadcast = "[:, None]" if tile_axis == 0 else "[None, :]"
            addressed = index_name
            if row_map is not None and buffer.rank == 2 and buffer_axis == 0:
                addressed = self.fresh(f"{base}_source_rows")  # the space's rows mapped to the operand's own
                self.code.writeline(f"{addressed} = {self.mapped_rows(index_name, *row_map)}")
            if getattr(op, "rotate_half", None) is not None and buffer_axis == buffer.rank - 1:
                addressed = self.rotated_columns(op, index_name, op.rotate_half.value.data, buffer.dims[-1].value)
            if getattr(op, "column_period", None) is not None and buffer_axis == buffer.rank - 1:
                addressed = self.fresh(f"{base}_source_cols")  # the space's columns, modulo the source's row
                self.code.writeline(f"{addressed} = {index_name} % {op.column_period.value.data}")
            widened = f"{addressed}.to(tl.int64)" if op.wide_index else addressed
            offsets_text.append(f"{widened}{broadcast} * {self.stride(arg_index, buffer_axis)}")
            if op.masked_axes[buffer_axis]:
                extent = row_map[0] if row_map is not None and buffer_axis == 0 else buffer.dims[buffer_axis]
                term = f"({index_name}{broadcast} < {self.expr(extent)})"
                if self.even_tiles and op.uneven_axes[buffer_axis]:
                    uneven.append(term)
                    self.even_checks[(extent, size)] = None
                else:
                    masks.append(term)
        return f"{base}_ptr + " + " + ".join(offsets_text), _Mask(tuple(masks), tuple(uneven))

    def mapped_rows(self, rows: str, extent: Dim, terms) -> str:
        """The operand rows that the space's ``rows`` read (``broadcast_rows``: the space's ``extent`` rows, triples of
        divisor, period and stride), or the operand's matrix that a batch index reads (``broadcast_batch``). A divisor
        no argument gives (a mask's ``H*T`` beside rows ``B*H*T`` and ``B``) is the quotient of the space's rows by
        one that it gives."""
        parts = []
        for divisor, period, stride in terms:
            if divisor == Dim(1):
                index = rows
            else:
                try:
                    index = f"({rows} // ({self.expr(divisor)}))"
                except ValueError:
                    quotient = Dim(extent.expr / divisor.expr)
                    index = f"({rows} // (({self.expr(extent)}) // ({self.expr(quotient)})))"
            index = f"({index} % ({self.expr(period)}))"
            parts.append(index if stride == Dim(1) else f"{index} * ({self.expr(stride)})")
        return " + ".join(parts)

    def rotated_columns(self, op: memory_staged.LoadOp, columns: str, group: int, row_length: int) -> str:
        """The source columns that a ``rotate_half`` load of groups of ``group`` columns reads for ``columns`` (rows
        of ``row_length``); the columns whose value it negates are recorded for :meth:`emit_load`."""
        half = group // 2
        rotated, negated = self.fresh(f"{columns}_rotated"), self.fresh(f"{columns}_negated")
        if group == row_length:
            self.code.writeline(f"{rotated} = ({columns} + {half}) % {group}")
            self.code.writeline(f"{negated} = {columns} < {half}")
        else:
            within = self.fresh(f"{columns}_in_group")
            self.code.writeline(f"{within} = {columns} % {group}")
            self.code.writeline(f"{rotated} = {columns} - {within} + ({within} + {half}) % {group}")
            self.code.writeline(f"{negated} = {within} < {half}")
        self.negated_columns[op] = negated
        return rotated

    def emit_load(self, op, buffer_value: SSAValue, tile_dims) -> None:
        pointers, mask = self.pointers(op, buffer_value, tile_dims)
        masked = f", mask={mask}, other={mask.other}" if mask else ""
        if getattr(op, "coherent", None) is not None and op.coherent.value.data:
            masked += ', cache_modifier=".cg"'  # written by other programs of this launch: skip the L1 cache
        loaded = f"tl.load({pointers}{masked})"
        negated = self.negated_columns.pop(op, None)
        if negated is not None:  # rotate_half: the half moved first is negated
            read = self.fresh(f"{self.names[buffer_value]}_read")
            self.code.writeline(f"{read} = {loaded}")
            if self.interpret and triton_name(buffer_value.type.element_type) == "bfloat16":
                # The interpreter holds bf16 as raw bits: negated in fp32 (exactly) and rounded back (exactly).
                loaded = f"tl.where({negated}[None, :], -{read}.to(tl.float32), {read}.to(tl.float32)).to(tl.bfloat16)"
            else:
                loaded = f"tl.where({negated}[None, :], -{read}, {read})"
        self.assign(op.results[0], loaded)

    def emit_memory_staged_load(self, op: memory_staged.LoadOp) -> None:
        self.emit_load(op, op.source, op.result.type.dims)

    def emit_memory_staged_stage(self, op: memory_staged.StageOp) -> None:
        if op.descriptor is None:
            self.emit_load(op, op.source, op.result.type.dims)
            return
        load = f"{self.descriptor_name(op)}.load([{self.descriptor_offsets(op)}])"
        if self.read_transposed(op.source):
            load = f"tl.trans({load})"
        code = self.code
        code.writeline("if USE_TMA:")
        with code.indent():
            self.assign(op.result, load)
        code.writeline("else:")
        with code.indent():
            self.emit_load(op, op.source, op.result.type.dims)

    def emit_memory_staged_store(self, op: memory_staged.StoreOp) -> None:
        pointers, mask = self.pointers(op, op.dest, op.value.type.dims)
        masked = f", mask={mask}" if mask else ""
        self.code.writeline(f"tl.store({pointers}, {self.convert(op.value, op.dest.type.element_type)}{masked})")

    def convert(self, value: SSAValue, element_type) -> str:
        """``value`` converted to ``element_type``. Triton's interpreter truncates fp32 to bf16 (the GPU rounds to
        nearest even), so interpreted kernels round through :data:`_BF16_RTNE` first."""
        target = triton_name(element_type)
        if self.interpret and target == "bfloat16" and isinstance(value.type.element_type, Float32Type):
            self.needs_bf16_rounding = True
            return f"_round_to_bf16({self.name(value)})"
        return f"{self.name(value)}.to(tl.{target})"

    # structure
    def emit_tiled_loop_for(self, op: tiled_loop.ForOp) -> None:
        pipelined = (any(isinstance(o, memory_staged.StageOp) for o in op.body.block.ops)
                     or "pipelined" in op.attributes)
        results = [self.name(r) for r in op.results]
        for result, init in zip(results, op.inits):
            self.code.writeline(f"{result} = {self.name(init)}")
        for arg, result in zip(op.body.block.args, results):
            self.names[arg] = result
        if "note" in op.attributes:
            self.code.writeline(f"# {op.attributes['note'].data}")
        bounds = f"{self.expr(op.lower)}, {self.expr(op.upper)}, {self.expr(op.step)}"
        stages = self.kernel.num_stages.value.data if pipelined else None
        self.code.writeline(f"for {op.iv.data} in {self.loop_range(bounds, stages)}:")
        self.emit_block(op.body.block.ops)

    def counter(self, op: tiled_loop.LastArrivalOp | tiled_loop.StripBarrierOp) -> tuple[str, str]:
        """The pointer to the op's counter and the count it waits for."""
        arg_index = self.args.index(op.counters)
        pointer = f"{self.names[op.counters]}_ptr + ({self.expr(op.offsets.dims[0])}) * {self.stride(arg_index, 0)}"
        return pointer, self.expr(op.count.dims[0])

    def emit_tiled_loop_last_arrival(self, op: tiled_loop.LastArrivalOp) -> None:
        pointer, count = self.counter(op)
        arrived = self.fresh("arrived")
        code = self.code
        code.writeline("# make this program's stores visible, then count it in; the last arrival resets the counter")
        code.writeline(self.barrier())
        code.writeline(f'{arrived} = tl.atomic_add({pointer}, 1, sem="acq_rel", scope="gpu")')
        self.assign(op.result, f"{arrived} == {count} - 1")
        code.writeline(f"tl.store({pointer}, 0, mask={self.name(op.result)})")

    def emit_tiled_loop_strip_barrier(self, op: tiled_loop.StripBarrierOp) -> None:
        pointer, count = self.counter(op)
        arrived, left = self.fresh("arrived"), self.fresh("left")
        code = self.code
        code.writeline("# make this tile's statistics visible, then wait for every tile of its row strip")
        code.writeline(self.barrier())
        code.writeline(f'tl.atomic_add({pointer}, 1, sem="release", scope="gpu")')
        code.writeline(f'{arrived} = tl.atomic_add({pointer}, 0, sem="acquire", scope="gpu")')
        code.writeline(f"while {arrived} < {count}:")
        with code.indent():
            code.writeline(f'{arrived} = tl.atomic_add({pointer}, 0, sem="acquire", scope="gpu")')
        code.writeline("# every tile of the strip has passed: the last to leave resets the counter for the next launch")
        code.writeline(f'{left} = tl.atomic_add({pointer}, 1, sem="relaxed", scope="gpu")')
        code.writeline(f"tl.store({pointer}, 0, mask={left} == 2 * ({count}) - 1)")

    def emit_tiled_loop_if(self, op: tiled_loop.IfOp) -> None:
        self.code.writeline(f"if {self.name(op.cond)}:")
        self.emit_block(op.body.block.ops)

    def emit_tiled_loop_yield(self, op: tiled_loop.YieldOp) -> None:
        loop = op.parent_op()
        for result, value in zip(loop.results, op.values):
            if self.name(result) != self.name(value):
                self.code.writeline(f"{self.name(result)} = {self.name(value)}")

    # -- launcher ----------------------------------------------------------------------------------------------------
    def emit_launcher(self, launches: list[_Launch]) -> IndentedWriter:
        names = [self.names[a] for a in self.args]
        what = " then ".join(launch.name for launch in launches)
        args = [f"{n}" for n in names]
        args += [f"{names[i]}.stride({axis})" for i, a in enumerate(self.args) for axis in range(a.type.rank)]
        args += [p for p, _, _ in self.dims.values()]
        args += [f"{c}={v}" for c, v in self.constants.items()]
        args += [f"num_warps={self.kernel.num_warps.value.data}", f"num_stages={self.kernel.num_stages.value.data}"]
        if self.kernel.exact_products is not None:
            args.append("enable_fp_fusion=False")  # no x * c - m contracted to one FMA (memory_staged.KernelOp)
        # What TMA reads of each staged operand: a transposed view's operand rows (the view transposed back).
        staged = list(dict.fromkeys(f"{names[self.args.index(op.source)]}.t()" if self.read_transposed(op.source)
                                    else names[self.args.index(op.source)] for op in self.descriptor_stages()))
        code = self.launcher_head(what)
        with code.indent():
            self.emit_narrow_input_copies(code)
            if self.even_tiles:
                checks = " and ".join(f"{self.expr(extent, 'triton.cdiv')} % "
                                      f"{self.substitute_constants(self.expr(size, 'triton.cdiv'))} == 0"
                                      for extent, size in self.even_checks)
                code.writeline(f"even_tiles = {checks}")
                args.append("EVEN_TILES=even_tiles")
            if staged:
                readable = " and ".join(f"_tma_readable({name})" for name in staged)
                code.writeline(f"use_tma = {readable}")
                if not self.interpret:
                    code.writeline("if use_tma:")
                    with code.indent():
                        code.writeline("triton.set_allocator(_tma_workspace)")
                args.append("USE_TMA=use_tma")
            for launch in launches:
                axes = [self.substitute_constants(self.expr(d, "triton.cdiv")) for d in launch.grid]
                if self.persistent(launch) and launch.group_size is not None:
                    code.writeline(f"grid = (min({' * '.join(axes)}, _sm_count()),)")
                elif self.persistent(launch):
                    code.writeline(f"grid = (min({' * '.join(axes)}, _resident_programs({axes[1]})),)")
                else:
                    # One flat axis; the kernel recovers its program ids (emit_program_ids).
                    code.writeline(f"grid = ({' * '.join(axes)},)")
                self.write_launch(code, launch.name, args)
        return code

    def emit_narrow_input_copies(self, code: IndentedWriter, skipped: Sequence[SSAValue] = ()) -> None:
        """In the launcher: each input read with 32-bit offsets (but those in ``skipped``) copied where a call's
        strides take its offsets past 2**31 (a view into a larger tensor), which would wrap."""
        for buffer in self.narrow_inputs:
            if buffer not in skipped:
                name = self.names[buffer]
                code.writeline(f"if not _offsets_fit_int32({name}):  # read through a copy of its elements alone")
                with code.indent():
                    code.writeline(f"{name} = {name}.contiguous()")

    def launcher_head(self, what: str) -> IndentedWriter:
        """``def launch(...)`` of ``what`` (its kernels' names), its docstring and the symbolic dims read from the
        tensors; the caller writes the rest, one level deeper."""
        names = [self.names[a] for a in self.args]
        code = IndentedWriter()
        code.writeline(f"def launch({', '.join(names)}):")
        with code.indent():
            code.writeline(f'"""Launch {what} on tensors already viewed as its arguments (inputs, then outputs)."""')
            for text, (param, index, axis) in self.dims.items():
                code.writeline(f"{param} = {names[index]}.shape[{axis}]  # {text}")
        return code

    @staticmethod
    def write_launch(code: IndentedWriter, kernel_name: str, args: list[str]) -> None:
        """``kernel_name[grid](args...)``, an argument a line."""
        code.writeline(f"{kernel_name}[grid](")
        with code.indent():
            code.writelines(f"{a}," for a in args)
        code.writeline(")")

    def substitute_constants(self, text: str) -> str:
        for name, value in self.constants.items():
            text = re.sub(rf"\b{name}\b", str(value), text)
        return text

    def emit(self) -> str:
        launches = self.launches()
        # The kernels first: emitting them decides which helpers the file needs (the bf16 rounding).
        functions = [self.emit_kernel(launch) for launch in launches]
        code = IndentedWriter()
        code.writelines(["# Generated by amk from memory_staged IR: edit the IR or the passes, not this file.",
                         "import torch",
                         "import triton",
                         "import triton.language as tl"])
        helpers = []
        if self.needs_bf16_rounding:
            helpers.append(_BF16_RTNE)
        if any(self.persistent(launch) for launch in launches):
            helpers.append(_SM_COUNT_INTERPRETED if self.interpret else _SM_COUNT)
        if self.tiling.resident_programs:
            helpers.append(_RESIDENT_PROGRAMS)
        if self.narrow_inputs:
            helpers.append(_OFFSETS_FIT_INT32)
        if self.descriptor_stages():
            helpers += [_TMA_READABLE, _TMA_WORKSPACE]
        # Two blank lines between top-level definitions.
        for helper in helpers:
            code.writelines(["", ""])
            code.writelines(helper.splitlines())
        for function in [*functions, self.emit_launcher(launches)]:
            code.writelines(["", ""])
            code.splice(function)
        return code.getvalue()


# How an fp32 tl.dot may compute: "ieee" (fp32-accurate, PyTorch's "highest"), "tf32x3" (three TF32 products,
# fp32-accurate within rounding) or "tf32" (one TF32 product, PyTorch's "high").
FP32_DOTS = ("ieee", "tf32x3", "tf32")


def emit_triton(kernel: memory_staged.KernelOp, interpret: bool = False, fp32_dot: str = "ieee") -> str:
    """The Python source (kernel and ``launch`` function) for one staged kernel; ``fp32_dot`` is the
    ``input_precision`` of its fp32 dots (one of :data:`FP32_DOTS`)."""
    return TritonEmitter(kernel, interpret, fp32_dot).emit()


@dataclass(frozen=True)
class EmitTritonPass(ModulePass):
    """Attach the Triton source of every ``memory_staged.kernel`` as its ``triton_source`` attribute.

    ``fp32_dot``: how fp32 matmul tiles are multiplied (``ieee``, the default, ``tf32x3`` or ``tf32``)."""

    name = "amk-emit-triton"

    interpret: bool = False
    fp32_dot: str = "ieee"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.fp32_dot not in FP32_DOTS:
            raise PassFailedException(f"amk-emit-triton: fp32_dot must be one of {', '.join(FP32_DOTS)}, "
                                      f"got {self.fp32_dot!r}")
        for kernel in op.walk():
            if isinstance(kernel, memory_staged.KernelOp):
                kernel.attributes["triton_source"] = StringAttr(emit_triton(kernel, self.interpret, self.fp32_dot))


@dataclass(frozen=True)
class KernelSourceTarget(Target):
    """``amk-opt -t NAME``: print one source of every kernel: its ``attribute`` when an emission pass has run, else
    what :meth:`emit_source` writes."""

    attribute: ClassVar[str]

    def emit_source(self, kernel: memory_staged.KernelOp) -> str:
        raise NotImplementedError

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        kernels = [op for op in module.walk() if isinstance(op, memory_staged.KernelOp)]
        if not kernels:
            raise ValueError(f"-t {self.name} needs memory_staged.kernel ops: lower first with "
                             "-p amk-fuse,amk-tile,amk-stage")
        for kernel in kernels:
            source = kernel.attributes.get(self.attribute)
            output.write(source.data if source is not None else self.emit_source(kernel))


@dataclass(frozen=True)
class TritonTarget(KernelSourceTarget):
    """``amk-opt -t triton``: print the Triton source of every kernel (emitting it if the pass has not run)."""

    name = "triton"
    attribute = "triton_source"

    def emit_source(self, kernel: memory_staged.KernelOp) -> str:
        return emit_triton(kernel)
