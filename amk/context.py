"""The xDSL context that knows amk's dialects (loaded lazily, as registered in :mod:`amk.opt`)."""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects import builtin, func

from amk.opt import AMK_DIALECTS


def make_context() -> Context:
    ctx = Context()
    ctx.load_dialect(builtin.Builtin)
    ctx.load_dialect(func.Func)
    for name, factory in AMK_DIALECTS.items():
        ctx.register_dialect(name, factory)
    return ctx
