"""``amk-opt``: xDSL's opt driver with the amk dialects, passes and the Triton target registered.

Also provides the ``xdsl.universe`` entry point, so stock ``xdsl-opt`` sees the same dialects and passes.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

from xdsl.passes import ModulePass, PassPipeline
from xdsl.universe import Universe
from xdsl.utils.exceptions import DiagnosticException, ParseError, PassFailedException, VerifyException
from xdsl.xdsl_opt_main import xDSLOptMain


def _lazy(module: str, name: str) -> Callable[[], object]:
    return lambda: getattr(importlib.import_module(module), name)


AMK_DIALECTS: dict[str, Callable] = {
    "tensor_op": _lazy("amk.dialects.tensor_op", "TensorOpDialect"),
    "tiled_loop": _lazy("amk.dialects.tiled_loop", "TiledLoopDialect"),
    "memory_staged": _lazy("amk.dialects.memory_staged", "MemoryStagedDialect"),
}

AMK_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "amk-duplicate-norm-prologues": _lazy("amk.passes.duplicate_norm_prologues", "DuplicateNormProloguesPass"),
    "amk-fuse": _lazy("amk.passes.fuse", "FusePass"),
    "amk-tile": _lazy("amk.lowering.tile", "TilePass"),
    "amk-stage": _lazy("amk.lowering.stage", "StagePass"),
    "amk-emit-triton": _lazy("amk.lowering.emit_triton", "EmitTritonPass"),
}

AMK_TARGETS: dict[str, Callable] = {
    "triton": _lazy("amk.lowering.emit_triton", "TritonTarget"),
}


def register_pass(pass_class: type[ModulePass]) -> type[ModulePass]:
    """Make a user's pass available to ``amk-opt -p`` and to ``pipeline=`` strings (usable as a decorator)."""
    AMK_PASSES[pass_class.name] = lambda: pass_class
    return pass_class


# Shares the dicts above, so passes registered later are seen by ``xdsl-opt`` too.
AMK_UNIVERSE = Universe(all_dialects=AMK_DIALECTS, all_passes=AMK_PASSES, all_targets=AMK_TARGETS)


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
            "--dump-ir-dir", metavar="DIR", default=None,
            help="write the input IR and the IR after every pass to DIR as numbered .mlir files",
        )

    def setup_pipeline(self):
        super().setup_pipeline()
        if self.args.print_ir_after_all or self.args.dump_ir_dir:
            from amk.ir_dump import IRDumper

            dumper = IRDumper(directory=self.args.dump_ir_dir,
                              stream=sys.stdout if self.args.print_ir_after_all else None)
            self.pipeline = PassPipeline(self.pipeline.passes, dumper)


def main() -> None:
    """Run amk-opt; bad input ends with the diagnostic and exit status 1, not a traceback."""
    try:
        AmkOptMain().run()
    except (ParseError, VerifyException, DiagnosticException, PassFailedException, ValueError, OSError) as error:
        print(f"amk-opt: error: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
