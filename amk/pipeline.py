"""The compiler pipeline: ``tensor_op`` module → fused → ``tiled_loop`` → ``memory_staged`` → Triton → Program.

Every step is a registered pass (``amk-fuse``, ``amk-tile``, ``amk-fold-exponent-scales``, ``amk-stage``,
``amk-emit-triton``, or ``amk-emit-gluon`` for a configuration with ``GLUON``); this module runs
them in order, keeps the IR text of every level, and loads the emitted kernels.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline
from xdsl.utils.exceptions import ArgSpecParseError

from amk.build_phases import phase
from amk.context import make_context
from amk.dialects import memory_staged, tiled_loop
from amk.errors import CompilationError, InvalidArgumentError
from amk.ir_dump import IRDumper, module_text
from amk.lowering.configs import KernelConfig
from amk.lowering.emit_gluon import EmitGluonPass
from amk.lowering.emit_triton import EmitTritonPass
from amk.lowering.fold_exponent_scales import FoldExponentScalesPass
from amk.lowering.stage import StagePass, config_for
from amk.lowering.tile import TilePass, size_hints_option, size_symbols
from amk.opt import AMK_PASSES, PASS_INPUT_LEVEL
from amk.passes.duplicate_norm_prologues import DuplicateNormProloguesPass
from amk.passes.vendor_epilogues import VendorEpiloguesPass
from amk.runtime import CompiledKernel, CompiledProgram, Program, interpreting, kernel_arguments, load_source

ConfigChooser = Callable[[tiled_loop.KernelOp], KernelConfig]


def fusion_passes(pipeline: str | None, vendor_gemm: bool = False) -> list[ModulePass]:
    """The passes that run on ``tensor_op`` IR: ``amk-fuse`` by default (the pass registered under that name, a
    user's replacement included), or a pipeline string's passes; ``vendor_gemm`` sets that option of the passes
    that have it (``amk-fuse``), leaves out ``amk-duplicate-norm-prologues`` (with the matmuls in the vendor
    library, a norm cloned per matmul would run as a kernel per clone) and runs ``amk-vendor-epilogues`` first (the
    pass registered under that name: a Linear's bias and ReLU or tanh GELU in the vendor GEMM's epilogue) unless the
    pipeline names it. A pipeline that does not parse or names an unknown pass or option raises
    :class:`amk.errors.InvalidArgumentError`."""
    pipeline = pipeline or "amk-fuse"
    try:
        passes = PassPipeline.parse_spec(AMK_PASSES, pipeline).passes
    except (Exception, ArgSpecParseError) as error:  # xDSL's parse errors (ArgSpecParseError is a BaseException)
        raise InvalidArgumentError(f"pipeline {pipeline!r} is not valid ({_one_line(error)}): pass names separated "
                                   "by commas, without blanks, each with its options in braces, as in "
                                   "'amk-fuse{vendor_gemm=true}' (booleans true or false); the tensor_op passes "
                                   f"available: {', '.join(sorted(set(AMK_PASSES) - set(PASS_INPUT_LEVEL)))}") from None
    if not vendor_gemm:
        return list(passes)
    name = VendorEpiloguesPass.name
    epilogues = [] if any(p.name == name for p in passes) else [AMK_PASSES[name]()()]
    return epilogues + [replace(p, vendor_gemm=True) if "vendor_gemm" in {f.name for f in fields(p)} else p
                        for p in passes if not isinstance(p, DuplicateNormProloguesPass)]


def _one_line(error: BaseException) -> str:
    """xDSL's pipeline parse error on one line: its diagram (the spec, a caret under the place, the complaint under
    it) as the complaint and the character it points at."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    place = next((line for line in lines if line.startswith("pass-pipeline:")), None)
    if place is None:
        return " ".join(lines)
    return f"{lines[-1][:1].lower()}{lines[-1][1:]} at character {place.rsplit(':', 1)[-1]}"


def heuristic_config(kernel: tiled_loop.KernelOp, size_hints: Mapping[str, int] | None = None) -> KernelConfig:
    """The strategy's heuristic configuration of ``kernel``, for the sizes ``size_hints`` give its symbols."""
    return config_for(kernel, {}, size_hints)


@dataclass
class StagedKernel:
    """One kernel lowered with one configuration: its ``memory_staged`` module and Triton source."""

    module: ModuleOp
    source: str


def stage_and_emit(kernel: tiled_loop.KernelOp, config: KernelConfig, fp32_dot: str = "ieee") -> StagedKernel:
    """Run ``amk-stage`` (with ``config``) and ``amk-emit-triton`` (its ``fp32_dot``, or ``tf32x3`` where the
    configuration asks for it: ``TF32X3``), or ``amk-emit-gluon`` where it asks for ``GLUON``, on a copy of one
    tile-level kernel."""
    if config.TF32X3:
        fp32_dot = "tf32x3"
    with phase("emit"):
        ctx = make_context()
        module = ModuleOp([kernel.clone()])
        StagePass.for_config(config).apply(ctx, module)
        module.verify()
        _check_tile_sizes(module, config)
        if config.GLUON:
            EmitGluonPass().apply(ctx, module)
        else:
            EmitTritonPass(interpret=interpreting(), fp32_dot=fp32_dot).apply(ctx, module)
    staged = next(op for op in module.walk() if isinstance(op, memory_staged.KernelOp))
    source = staged.attributes.pop("gluon_source" if config.GLUON else "triton_source").data
    return StagedKernel(module, source)


def _check_tile_sizes(module: ModuleOp, config: KernelConfig) -> None:
    """Raises :class:`amk.errors.CompilationError` where ``config`` gives a tile more elements than Triton's largest
    tensor (a ``parameter_grid``, or an imported configuration: each size is checked alone before the kernel is known,
    by :func:`amk.lowering.configs.check_values`), which Triton would refuse at the kernel's first launch."""
    from triton.language import TRITON_MAX_TENSOR_NUMEL

    kernel = next(op for op in module.walk() if isinstance(op, memory_staged.KernelOp))
    blocks = {key: value for key, value in config.user_view().items() if key.startswith("BLOCK_SIZE")}
    constants = {name: attr.value.data for name, attr in kernel.constants.data.items()}
    for op in kernel.walk():
        for result in op.results:
            if isinstance(result.type, tiled_loop.TileType):
                dims = [dim.subs(constants) for dim in result.type.dims]
                elements = math.prod(dim.value for dim in dims if dim.is_static)
                if elements > TRITON_MAX_TENSOR_NUMEL:
                    raise CompilationError(
                        f"kernel {kernel.sym_name.data} ({kernel.strategy.data}) with block sizes {blocks} holds a "
                        f"{' x '.join(dim.text for dim in dims)} tile, {elements} elements; Triton's tensors hold at "
                        f"most {TRITON_MAX_TENSOR_NUMEL}: choose smaller block sizes")


def compile_module(module: ModuleOp, choose_config: ConfigChooser = heuristic_config, *, pipeline: str | None = None,
                   dumper: IRDumper | None = None, reduction_strategy: str = "auto",
                   merge_chunk: int = 0, vendor_gemm: bool = False, fp32_dot: str = "ieee",
                   size_hints: Mapping[str, int] | None = None) -> CompiledProgram:
    """Run the whole pipeline on a module holding one ``func.func`` of ``tensor_op`` ops.

    ``choose_config(kernel)`` picks each kernel's configuration (the heuristic, or the autotuner);
    ``reduction_strategy``, ``merge_chunk`` and ``size_hints`` are ``amk-tile``'s options of those names,
    ``vendor_gemm`` ``amk-fuse``'s (for the default pipeline), ``fp32_dot`` ``amk-emit-triton``'s.
    """
    ctx = make_context()
    ir = {"tensor_op": module_text(module)}
    if dumper is not None:
        dumper(None, module, None)

    def run(pass_: ModulePass) -> None:
        with phase("emit"):
            pass_.apply(ctx, module)
            module.verify()
        if dumper is not None:
            dumper(pass_, module, None)

    for pass_ in fusion_passes(pipeline, vendor_gemm):
        run(pass_)
    ir["fused"] = module_text(module)
    # The bucket's sizes that a fusion pass wrote into the types as numbers (amk-bind-sizes) are no symbols to hint.
    symbols = size_symbols(module)
    hints = {symbol: value for symbol, value in (size_hints or {}).items() if symbol in symbols}
    run(TilePass(reduction_strategy=reduction_strategy, merge_chunk=merge_chunk, size_hints=size_hints_option(hints)))
    run(FoldExponentScalesPass())
    ir["tiled_loop"] = module_text(module)
    function = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    kernels: dict[str, CompiledKernel] = {}
    staged_kernels = []
    kernel_ops = [op for op in module.walk() if isinstance(op, tiled_loop.KernelOp)]
    # A chooser that tunes may search every kernel before it settles any: each kernel's refinement then knows what
    # the whole program's kernels take (amk.tuner.autotune_chooser).
    search = getattr(choose_config, "search", None)
    if search is not None:
        for kernel in kernel_ops:
            search(kernel)
    for kernel in kernel_ops:
        name = kernel.sym_name.data
        config = choose_config(kernel)
        staged = stage_and_emit(kernel, config, fp32_dot)
        staged_kernels.append(staged)
        arguments = kernel_arguments(kernel, config.constants([p.data for p in kernel.tile_params.data]))
        with phase("emit"):
            loaded = load_source(staged.source, name)
        kernels[name] = CompiledKernel(name, config, staged.source, loaded.__file__, loaded.launch, arguments)
    staged_module = ModuleOp([op.clone() for s in staged_kernels for op in s.module.body.block.ops] + [function.clone()])
    ir["memory_staged"] = module_text(staged_module)
    if dumper is not None:
        dumper(StagePass(), staged_module, None)
    ir["triton"] = "\n\n".join(k.source for k in kernels.values())
    return CompiledProgram(Program(function, kernels), ir, kernels)
