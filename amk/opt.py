"""``amk-opt``: xDSL's opt driver with the amk dialects, passes and the Triton and Gluon targets registered.

Also provides the ``xdsl.universe`` entry point, so stock ``xdsl-opt`` sees the same dialects and passes.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import re
import sys
import warnings
from collections.abc import Callable

from xdsl.passes import ModulePass, PassPipeline
from xdsl.universe import Universe
from xdsl.utils.exceptions import (
    ArgSpecParseError,
    DiagnosticException,
    ParseError,
    PassFailedException,
    VerifyException,
)
from xdsl.xdsl_opt_main import xDSLOptMain


def _lazy(module: str, name: str) -> Callable[[], object]:
    return lambda: getattr(importlib.import_module(module), name)


AMK_DIALECTS: dict[str, Callable] = {
    "tensor_op": _lazy("amk.dialects.tensor_op", "TensorOpDialect"),
    "tiled_loop": _lazy("amk.dialects.tiled_loop", "TiledLoopDialect"),
    "memory_staged": _lazy("amk.dialects.memory_staged", "MemoryStagedDialect"),
}

AMK_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "amk-bind-sizes": _lazy("amk.passes.bind_sizes", "BindSizesPass"),
    "amk-duplicate-norm-prologues": _lazy("amk.passes.duplicate_norm_prologues", "DuplicateNormProloguesPass"),
    "amk-fuse": _lazy("amk.passes.fuse", "FusePass"),
    "amk-vendor-epilogues": _lazy("amk.passes.vendor_epilogues", "VendorEpiloguesPass"),
    "amk-tile": _lazy("amk.lowering.tile", "TilePass"),
    "amk-fold-exponent-scales": _lazy("amk.lowering.fold_exponent_scales", "FoldExponentScalesPass"),
    "amk-stage": _lazy("amk.lowering.stage", "StagePass"),
    "amk-emit-triton": _lazy("amk.lowering.emit_triton", "EmitTritonPass"),
    "amk-emit-gluon": _lazy("amk.lowering.emit_gluon", "EmitGluonPass"),
}

AMK_TARGETS: dict[str, Callable] = {
    "triton": _lazy("amk.lowering.emit_triton", "TritonTarget"),
    "gluon": _lazy("amk.lowering.emit_gluon", "GluonTarget"),
}


# The passes registered by register_pass, by name (their definitions are part of the cache key, see amk.build).
REGISTERED_PASSES: dict[str, type[ModulePass]] = {}


# What a pass pipeline string parses as a pass name.
_PASS_NAME = re.compile(r"[A-Za-z0-9_-]+")


def register_pass(pass_class: type[ModulePass]) -> type[ModulePass]:
    """Make a user's pass available to ``amk-opt -p`` and to ``pipeline=`` strings (usable as a decorator); one of a
    name already registered (amk's own passes included) replaces it, with a warning: ``amk-fuse``'s replacement is
    then what every build runs (given a ``vendor_gemm`` field, it also forms the vendor-GEMM program)."""
    from amk.errors import InvalidArgumentError

    if not (isinstance(pass_class, type) and issubclass(pass_class, ModulePass)) or inspect.isabstract(pass_class):
        raise InvalidArgumentError("register_pass takes a ModulePass subclass with an apply(ctx, op) method (as a "
                                   f"decorator of the class, without parentheses), got {pass_class!r}")
    name = getattr(pass_class, "name", None)
    if not isinstance(name, str) or not _PASS_NAME.fullmatch(name):
        raise InvalidArgumentError(f"register_pass: {pass_class.__qualname__}.name must be a pass name, made of "
                                   f"letters, digits, '-' and '_' (a pipeline string names it), got {name!r}")
    if pass_class.name in AMK_PASSES and REGISTERED_PASSES.get(pass_class.name) is not pass_class:
        warnings.warn(f"register_pass: {pass_class.__qualname__} replaces the pass named {pass_class.name!r}",
                      stacklevel=2)
    AMK_PASSES[pass_class.name] = lambda: pass_class
    REGISTERED_PASSES[pass_class.name] = pass_class
    return pass_class


# Shares the dicts above, so passes registered later are seen by ``xdsl-opt`` too.
AMK_UNIVERSE = Universe(all_dialects=AMK_DIALECTS, all_passes=AMK_PASSES, all_targets=AMK_TARGETS)


# The IR levels in lowering order, each with the op that marks it and the pass that lowers to it.
LEVELS = [
    ("tensor_op", None, None),
    ("fused tensor_op", "tensor_op.fused", "amk-fuse"),
    ("tiled_loop", "tiled_loop.kernel", "amk-tile"),
    ("memory_staged", "memory_staged.kernel", "amk-stage"),
]
LOWERING = [maker for _, _, maker in LEVELS[1:]]
# The level each lowering pass reads (an index into LEVELS).
PASS_INPUT_LEVEL = {"amk-tile": 1, "amk-fold-exponent-scales": 2, "amk-stage": 2, "amk-emit-triton": 3,
                    "amk-emit-gluon": 3}


def ir_level(module) -> int:
    """The level of ``module`` (an index into LEVELS): that of the deepest level's op it holds."""
    names = {op.name for op in module.walk()}
    return max((index for index, (_, marker, _) in enumerate(LEVELS) if marker in names), default=0)


def check_pass_input(pass_name: str, module, passes_run: list[str]) -> None:
    """Raise :class:`amk.errors.InvalidArgumentError` when a lowering pass gets IR with nothing of the level it reads
    (it would silently do nothing). Not when the pass making that level ran earlier in the pipeline: then there was
    just nothing to lower, and ``-t triton`` says so."""
    if pass_name not in PASS_INPUT_LEVEL:
        return
    wanted = PASS_INPUT_LEVEL[pass_name]
    _, marker, maker = LEVELS[wanted]
    if maker in passes_run or any(op.name == marker for op in module.walk()):
        return
    from amk.errors import InvalidArgumentError

    level = ir_level(module)
    hint = (f"run -p {','.join(LOWERING[level:wanted] + [pass_name])}" if level < wanted
            else "it is already lowered past what this pass reads")
    raise InvalidArgumentError(f"{pass_name} lowers {marker} ops (made by {maker}), and its input has none: the input "
                               f"is {LEVELS[level][0]} IR; {hint}")


def explain_no_kernel(module, passes_run: list[str]) -> str:
    """Why ``-t triton`` found no ``memory_staged.kernel`` in ``module`` after ``passes_run``."""
    level = ir_level(module)
    if "amk-fuse" in passes_run and level == 0:
        return ("no kernel to emit: amk-fuse fused nothing (it formed no tensor_op.fused region), so -t triton has "
                "no kernel to print; -t mlir shows the IR")
    pipeline = f"-p {','.join(passes_run)}" if passes_run else "no passes"
    return (f"-t triton prints memory_staged.kernel ops, and the IR after {pipeline} is {LEVELS[level][0]} IR: "
            f"add {','.join(LOWERING[level:])} to the pipeline")


class AmkOptMain(xDSLOptMain):
    """The opt driver: xDSL's flags plus ``--print-ir-after-all`` and ``--dump-ir-dir``."""

    def register_all_dialects(self):
        super().register_all_dialects()
        for name, factory in AMK_DIALECTS.items():
            if name not in self.ctx.registered_dialect_names:
                self.ctx.register_dialect(name, factory)

    def register_all_passes(self):
        super().register_all_passes()
        for name, factory in AMK_PASSES.items():
            self.register_pass(name, factory)

    def register_all_targets(self):
        super().register_all_targets()
        self.available_targets.update(AMK_TARGETS)

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser):
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument(
            "--print-ir-after-all", action="store_true",
            help="print the IR after every pass (the last one included) to stdout",
        )
        arg_parser.add_argument(
            "--dump-ir-dir", metavar="DIR", default=None, type=_directory_path,
            help="write the input IR and the IR after every pass to DIR as numbered .mlir files",
        )

    def setup_pipeline(self):
        super().setup_pipeline()
        if self.args.print_ir_after_all or self.args.dump_ir_dir:
            from amk.ir_dump import IRDumper

            dumper = IRDumper(directory=self.args.dump_ir_dir,
                              stream=sys.stdout if self.args.print_ir_after_all else None)
            self.pipeline = PassPipeline(self.pipeline.passes, dumper)
        self.pipeline = PassPipeline(self.pipeline.passes, self._checking(self.pipeline.callback))

    def _checking(self, callback):
        """``callback``, after checking that the next pass gets IR of the level it lowers; records the passes run on
        the current module (``--split-input-file`` runs the pipeline once per part) for ``-t triton``'s message."""
        self.passes_run: list[str] = []

        def check_then_call(previous_pass, module, next_pass):
            if previous_pass is None:
                self.passes_run = []
            else:
                self.passes_run.append(previous_pass.name)
            if callback is not None:
                callback(previous_pass, module, next_pass)
            if next_pass is not None:
                check_pass_input(next_pass.name, module, self.passes_run)

        return check_then_call

    def apply_passes(self, prog):
        check_defined_before_use(prog)
        super().apply_passes(prog)

    def output_resulting_program(self, prog):
        if self.args.target == "triton" and not any(op.name == "memory_staged.kernel" for op in prog.walk()):
            from amk.errors import FusionError

            raise FusionError(explain_no_kernel(prog, self.passes_run))
        return super().output_resulting_program(prog)


def check_defined_before_use(module) -> None:
    """Raise a VerifyException where an op reads a value that its own block defines only at or after it (a value
    defined from itself, lines out of order): xDSL's verifier does not check that, and the passes then loop or fail
    on an assertion."""
    for op in module.walk():
        for region in op.regions:
            for block in region.blocks:
                defined = set()
                for user in block.ops:
                    for index, operand in enumerate(user.operands):
                        if operand.owner.parent_block() is block and operand not in defined:
                            value = f"%{operand.name_hint}" if operand.name_hint else f"its operand {index}"
                            raise VerifyException(f"'{user.name}' reads {value} before it is defined: each value is "
                                                  "defined above its uses in a block")
                    defined.update(user.results)


def main() -> None:
    """Run amk-opt; bad input ends with the diagnostic and exit status 1, not a traceback."""
    from amk.errors import AmkError

    try:
        AmkOptMain().run()
        sys.stdout.flush()  # so that a closed pipe is noticed here, not at interpreter exit
    except BrokenPipeError:
        # The reader went away (`amk-opt ... | head`): as Python's documentation says (library/signal.html, "Note on
        # SIGPIPE"), point stdout at devnull so that the flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except (AmkError, ParseError, VerifyException, DiagnosticException, PassFailedException, ValueError,
            OSError, ArgSpecParseError) as error:  # (a malformed -p, a BaseException)
        print(f"amk-opt: error: {error}", file=sys.stderr)
        sys.exit(1)


def _directory_path(text: str) -> str:
    """``--dump-ir-dir``'s value: a directory's path, not an empty string (which would dump nothing, silently) nor a
    file's."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must be a directory path, got an empty one")
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"must be a directory (created where missing), got the file {text!r}")
    return text


if __name__ == "__main__":
    main()
