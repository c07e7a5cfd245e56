"""The exceptions amk raises for bad input. Each message names what was wrong and what is accepted.

See docs/errors.md for the catalogue.
"""


class AmkError(Exception):
    """Base of every amk error."""


class UnsupportedOpError(AmkError, ValueError):
    """An op name or op parameter that amk does not know."""


class ShapeError(AmkError, ValueError):
    """Input shapes that do not fit the op chain, or call-time tensors that do not match the build."""


class DTypeError(AmkError, TypeError):
    """An unsupported dtype, or tensors whose dtype differs from the build."""


class DeviceError(AmkError, ValueError):
    """Tensors on a device the kernel was not built for, or on different devices."""


class InvalidArgumentError(AmkError, ValueError):
    """A malformed argument to a public entry point (wrong type, bad option value)."""


class UnknownArgumentError(InvalidArgumentError, TypeError):
    """An argument that a configuration (``TunerConfig``) does not have: also a TypeError, as Python's own is."""


class FusionError(AmkError):
    """The op chain cannot be turned into the requested kernel."""


class CompilationError(AmkError):
    """Code generation or the Triton compile of a kernel failed."""


class VerificationError(AmkError, AssertionError):
    """A kernel's output differs from the PyTorch reference beyond the dtype's tolerance."""

    def __init__(self, message: str, report=None):
        super().__init__(message)
        self.report = report


class CacheError(AmkError):
    """A problem with the on-disk kernel cache that amk cannot work around."""
