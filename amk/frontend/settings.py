"""The settings of one compilation (:class:`Settings`: autotuning, tuner configuration, IR dumps, verification, the
fusion pipeline, a report callback, the row counts whose size buckets are built ahead, whether attention written op
by op runs as PyTorch's fused attention) and :func:`make_settings`, which validates what ``amk.compile``,
``amk.explain`` and the backend's ``options`` pass; bad values raise :class:`amk.errors.InvalidArgumentError`."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, fields

from amk.errors import InvalidArgumentError
from amk.opt import PASS_INPUT_LEVEL

DEFAULT_PIPELINE = "amk-duplicate-norm-prologues,amk-fuse"
# Passes a pipeline may not name: the lowering, which always runs after it, and amk-bind-sizes, which amk.compile
# runs itself for the sizes a bucket keeps exact (a size bound in the pipeline would serve every size of the bucket)
RESERVED_PASSES = ("amk-bind-sizes", *PASS_INPUT_LEVEL)


@dataclass(frozen=True)
class Settings:
    autotune: bool = True
    tuner_config: object | None = None
    dump_ir: str | None = None
    verify: bool = True
    pipeline: str | None = None
    report: Callable | None = None
    tune_sizes: tuple[int, ...] = ()
    sdpa_attention: bool = True

    @property
    def fusion_pipeline(self) -> str:
        return self.pipeline if self.pipeline else DEFAULT_PIPELINE

    @property
    def dump_directory(self) -> str | None:
        return self.dump_ir if self.dump_ir is not None else (os.environ.get("AMK_DUMP_IR") or None)

    def as_backend_options(self) -> dict:
        """These settings as the ``options`` of ``torch.compile(backend="amk")``, from which it makes them again."""
        options = {field.name: getattr(self, field.name) for field in fields(self)}
        options["tune_sizes"] = self.tune_sizes or None  # the empty tuple is what None validates to
        return options


def _check_pipeline(pipeline) -> None:
    if pipeline is None:
        return
    if not isinstance(pipeline, str) or not pipeline.strip():
        raise InvalidArgumentError(f"pipeline must be a pass pipeline string such as {DEFAULT_PIPELINE!r}, "
                                   f"got {pipeline!r}")
    from amk.pipeline import fusion_passes

    passes = fusion_passes(pipeline)
    reserved = [p.name for p in passes if p.name in RESERVED_PASSES]
    if reserved:
        raise InvalidArgumentError(f"pipeline {pipeline!r} names {', '.join(reserved)}: the pipeline holds the "
                                   "tensor_op passes only (amk-tile, amk-stage and amk-emit-triton always run after it, "
                                   "and amk.compile binds the sizes it keeps exact itself)")


def make_settings(autotune=True, tuner_config=None, dump_ir=None, verify=True, pipeline=None, report=None,
                  tune_sizes=None, sdpa_attention=True) -> Settings:
    """Validated settings; bad values raise :class:`amk.errors.InvalidArgumentError`."""
    from amk.build import check_build_arguments
    from amk.frontend.buckets import check_tune_sizes
    from amk.tuner import check_directory_argument

    check_build_arguments(autotune, verify, tuner_config)
    check_directory_argument(dump_ir, "dump_ir", none_means="no dumps (or AMK_DUMP_IR's directory)")
    if dump_ir is not None:
        dump_ir = os.fspath(dump_ir)
    _check_pipeline(pipeline)
    if report is not None and not callable(report):
        raise InvalidArgumentError("report must be callable")
    if not isinstance(sdpa_attention, bool):
        raise InvalidArgumentError(f"sdpa_attention must be True or False, got {sdpa_attention!r}")
    return Settings(autotune, tuner_config, dump_ir, verify, pipeline, report, check_tune_sizes(tune_sizes),
                    sdpa_attention)
