"""Where amk runs: on a GPU or in Triton's interpreter, the default device, and the cache directory.

A leaf module (it imports no other part of amk but its errors) with no effect at import. :func:`initialize` makes the
process ready to run kernels: without CUDA it switches Triton to its interpreter (``TRITON_INTERPRET=1``) unless the
variable is set, and refuses a process left with nowhere to run them (no CUDA and the interpreter off); when something
imported triton before that (TorchDynamo does), it mends ``triton.language`` for the interpreter. It is called where
that must have happened: ``amk.compile`` and the backend, loading an emitted kernel (``runtime.load_source``, which
every build and cache hit of ``build_fused_kernel`` goes through), the cache's probe of Triton's version, and the
compile workers' loading; it runs once per process.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import platformdirs
import torch

from amk.errors import DeviceError

_INITIALIZED = threading.Event()
_LOCK = threading.Lock()


def initialize() -> None:
    """Prepare the process to run kernels (idempotent and thread-safe; see the module's docstring). Raises
    :class:`~amk.errors.DeviceError` where they have nowhere to run: no CUDA, and ``TRITON_INTERPRET`` set to off."""
    if _INITIALIZED.is_set():
        return
    with _LOCK:
        if _INITIALIZED.is_set():
            return
        if not torch.cuda.is_available():
            os.environ.setdefault("TRITON_INTERPRET", "1")
            if not interpreting():
                raise DeviceError(
                    f"TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')!r} turns Triton's interpreter off, and there "
                    "is no CUDA GPU here: amk's kernels have nowhere to run; set TRITON_INTERPRET=1 (or leave it "
                    "unset) to run them on the CPU in the interpreter, or run on a machine with a CUDA GPU")
        _repair_interpreter()
        _INITIALIZED.set()


def _repair_interpreter() -> None:
    """Without CUDA, kernels run in Triton's interpreter, which needs ``TRITON_INTERPRET=1`` before triton is imported:
    the ``@jit`` helpers of ``triton.language`` (``tl.cdiv``, ``tl.sigmoid``...) are then interpreted functions. When
    something imported triton first, they are compiled ``JITFunction``s that the interpreter refuses to call; wrap them
    as the interpreter would have."""
    if "triton" not in sys.modules or not interpreting():  # in this order: interpreting() imports triton
        return
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    wrapped: dict[int, InterpretedFunction] = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("triton.language") or module is None:
            continue
        for attribute, value in list(vars(module).items()):
            if isinstance(value, JITFunction):
                if id(value) not in wrapped:
                    wrapped[id(value)] = InterpretedFunction(value.fn)
                setattr(module, attribute, wrapped[id(value)])


def interpreting() -> bool:
    """Whether kernels run in Triton's interpreter (on CPU tensors): ``TRITON_INTERPRET`` as the installed Triton
    reads it, through its own setting (which values mean on is Triton's to say, and differs between versions)."""
    from triton import knobs

    return knobs.runtime.interpret


def being_traced() -> bool:
    """Whether this call is traced as part of a model's compile (by TorchDynamo, which reads ``is_dynamo_compiling``
    as True, or by torch.export), not run: then a compiled module or kernel is traced as PyTorch ops. Not
    ``torch.compiler.is_compiling()``, a flag of the process that is True in every thread while any thread compiles
    (a compiled module called then ran its PyTorch ops instead of its kernels)."""
    return torch.compiler.is_dynamo_compiling() or torch.compiler.is_exporting()


def float32_matmul_precision() -> str:
    """PyTorch's precision for fp32 matmuls on CUDA, named as ``torch.get_float32_matmul_precision()`` names it:
    ``"highest"`` (IEEE fp32, PyTorch's default) or ``"high"`` (TF32; ``"medium"`` is TF32 on CUDA too). Read as
    cuBLAS and Inductor read it, from ``torch.backends.cuda.matmul.fp32_precision``, which the legacy setters and the
    newer API (``torch.backends.fp32_precision``, ``torch.backends.cuda.matmul.fp32_precision``) both set:
    ``get_float32_matmul_precision()`` raises once the newer API has been used, and misses it where the two disagree."""
    # The getter torch.backends.cuda.matmul.fp32_precision calls, without its Python __getattr__ (0.5 us of the
    # 0.75 a CUDA-graph replay paid to read it on the 2-core CPU)
    getter = getattr(torch._C, "_get_fp32_precision_getter", None)
    if getter is None:  # a torch without the newer API, whose "medium" is TF32 on CUDA as well
        return "highest" if torch.get_float32_matmul_precision() == "highest" else "high"
    return "high" if getter("cuda", "matmul") == "tf32" else "highest"


@functools.cache
def renew_in_forked_children(renew: Callable[[], None]) -> None:
    """Have ``renew`` run in every child this process forks from now on (registered once per function; its callers
    register on first use, nothing at import): a lock another thread holds at the fork stays held in the child, which
    has only the forking thread, and its first use there would wait forever. ``renew`` gives the module a new lock."""
    os.register_at_fork(after_in_child=renew)


def fp8_supported() -> bool:
    """Whether fp8 (e4m3) kernels can run here: on a CUDA GPU of compute capability 8.9 or newer (not in Triton's CPU
    interpreter, which converts to fp8 wrongly)."""
    return torch.cuda.is_available() and not interpreting() and torch.cuda.get_device_capability() >= (8, 9)


def default_device() -> torch.device:
    """Where kernels run: CUDA when there is a GPU and the interpreter is off, else the CPU."""
    return torch.device("cuda") if torch.cuda.is_available() and not interpreting() else torch.device("cpu")


_ANCHORED_CACHE_DIRS: dict[str, Path] = {}  # each AMK_CACHE_DIR value read -> the directory it named then


def absolute_directory(path: str | os.PathLike) -> Path:
    """``path`` as the directory it names now: ``~`` expanded (a path from a ``.env`` file or a string in Python is
    not expanded by a shell, and a literal ``~`` folder is a trap for ``rm -rf ~``), relative to the current
    directory."""
    return Path(os.path.abspath(os.path.expanduser(os.fspath(path))))


def resolve_root(override: str | os.PathLike | None = None) -> Path:
    """The cache directory (not created): ``override``, else ``AMK_CACHE_DIR``, else the user cache directory.

    An ``AMK_CACHE_DIR`` that is empty or only blanks counts as unset (``AMK_CACHE_DIR= amk ...`` means "the
    default"), never as the current directory. ``override`` is checked by ``TunerConfig`` (a non-empty path)."""
    if override is not None:
        return absolute_directory(override)
    environment = os.environ.get("AMK_CACHE_DIR", "")
    if environment.strip():
        # A relative one names a directory under the current directory of its first use: a later os.chdir does not
        # move the cache (as TunerConfig anchors its target_cache_dir when made).
        return _ANCHORED_CACHE_DIRS.setdefault(environment, absolute_directory(environment))
    return Path(platformdirs.user_cache_dir("amk"))


def cache_root(override: str | os.PathLike | None = None) -> Path:
    """The cache directory: ``override`` (a TunerConfig's target_cache_dir), ``AMK_CACHE_DIR``, or the default."""
    root = resolve_root(override)
    root.mkdir(parents=True, exist_ok=True)
    return root
