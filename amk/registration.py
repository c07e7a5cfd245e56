"""Checks shared by amk's registries (lowering rules, references, strategies' ops): what a registration's arguments
must be, and how messages name the functions registered. A leaf: xDSL and ``amk.errors`` only, so that the passes
and ``amk-opt`` load without PyTorch."""

from __future__ import annotations

from xdsl.ir import Operation

from amk.errors import InvalidArgumentError


def callable_name(fn) -> str:
    """A function's name, or a partial's or callable object's type name (for messages about registrations)."""
    return getattr(fn, "__qualname__", type(fn).__qualname__)


def check_registration(registrar: str, op_class, fn=None) -> None:
    """``registrar``'s arguments: an op class (an xDSL ``Operation`` subclass with a name) and, given, a callable.
    A string or an instance as the key broke every later build (the cache key reads the class's name), and
    ``@register_elementwise`` without its ``(MyOp)`` registered nothing."""
    if not (isinstance(op_class, type) and issubclass(op_class, Operation) and isinstance(op_class.name, str)):
        hint = (f" ({callable_name(op_class)} is a function: the decorator takes the op class first, "
                f"@{registrar}(MyOp))" if callable(op_class) and not isinstance(op_class, type) else "")
        raise InvalidArgumentError(f"{registrar} takes an op class (an xDSL Operation subclass with a name, such as "
                                   f"the tensor_op ones), got {op_class!r}{hint}")
    if fn is not None and not callable(fn):
        raise InvalidArgumentError(f"{registrar}({op_class.__name__}, ...) takes a function, got {fn!r}")
