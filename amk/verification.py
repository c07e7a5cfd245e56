"""Verification of kernels against PyTorch on fresh random inputs, per dtype.

Errors are measured against a float64 reference computed from the very inputs the kernel saw (rounded to the
kernel's dtype), as the maximum and mean absolute error and the relative L2 error ``||out - ref|| / ||ref||``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch
from xdsl.dialects import func
from xdsl.ir import Operation

from amk import reference
from amk.dialects import tensor_op
from amk.dtypes import from_normal_draw, to_torch
from amk.environment import fp8_supported
from amk.errors import InvalidArgumentError, VerificationError
from amk.numerics import non_finite_agree
from amk.oplist import bind_operands

# Relative L2 error allowed per dtype (fp32 matmuls use IEEE fp32 dots, not tf32).
TOLERANCES = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2, torch.float8_e4m3fn: 1.2e-1}
# fp32 kernels built under PyTorch's "high" precision multiply in TF32, whose 10-bit mantissa is fp16's.
TF32_TOLERANCE = TOLERANCES[torch.float16]


@dataclass
class DTypeResult:
    dtype: torch.dtype
    max_abs_error: float = math.nan
    mean_abs_error: float = math.nan
    relative_l2_error: float = math.nan
    tolerance: float = math.nan
    skipped: str | None = None

    @property
    def passed(self) -> bool:
        return self.skipped is not None or self.relative_l2_error <= self.tolerance

    def line(self) -> str:
        name = str(self.dtype).replace("torch.", "")
        if self.skipped:
            return f"{name:>14}  skipped: {self.skipped}"
        # The tolerance bounds the relative L2 error alone: the comparison is spelled out next to it so that a
        # max_abs above the tolerance does not read as a failure.
        status, relation = ("ok", "<=") if self.passed else ("FAILED", ">")
        return (f"{name:>14}  max_abs={self.max_abs_error:.3e}  mean_abs={self.mean_abs_error:.3e}  "
                f"rel_l2={self.relative_l2_error:.3e} {relation} {self.tolerance:.0e}  {status}")


@runtime_checkable
class BuiltChain(Protocol):
    """What :func:`verify` needs of a kernel built from an op chain (an :class:`amk.FusedKernel`): its op list and
    shapes (for inputs and their scales), its dtype, its device, the float32 matmul precision it was built at, and the
    same chain built for another dtype."""

    ops: list
    shapes: list
    dtype: torch.dtype
    device: torch.device
    float32_matmul_precision: str

    def with_dtype(self, dtype: torch.dtype) -> BuiltChain: ...


@dataclass
class VerificationReport:
    results: list[DTypeResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def __str__(self) -> str:
        return "verification against PyTorch (float64 reference):\n" + "\n".join(r.line() for r in self.results)

    def to_dict(self) -> dict:
        """The report as JSON-serializable data (how a cache entry keeps it)."""
        return {"results": [{"dtype": str(r.dtype).removeprefix("torch."), "max_abs_error": r.max_abs_error,
                             "mean_abs_error": r.mean_abs_error, "relative_l2_error": r.relative_l2_error,
                             "tolerance": r.tolerance, "skipped": r.skipped} for r in self.results]}

    @classmethod
    def from_dict(cls, data: dict) -> VerificationReport:
        """The report :meth:`to_dict` made; anything else is an :class:`InvalidArgumentError`."""
        try:
            results = [DTypeResult(getattr(torch, r["dtype"]), r["max_abs_error"], r["mean_abs_error"],
                                   r["relative_l2_error"], r["tolerance"], r["skipped"]) for r in data["results"]]
        except (KeyError, TypeError, AttributeError) as error:
            raise InvalidArgumentError(f"not what VerificationReport.to_dict() makes ({type(error).__name__}: {error}): "
                                       "a dict whose 'results' lists one dict per dtype") from None
        if not all(isinstance(r.dtype, torch.dtype) for r in results):
            raise InvalidArgumentError("not what VerificationReport.to_dict() makes: a result's dtype names no torch "
                                       "dtype")
        return cls(results)


def compare(output: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype,
            tolerance: float | None = None) -> DTypeResult:
    """``output`` against ``expected``, judged at ``tolerance`` (None: ``dtype``'s in ``TOLERANCES``)."""
    tolerance = TOLERANCES.get(dtype, 1e-2) if tolerance is None else tolerance
    out, ref = output.double(), expected.double()
    if out.shape != ref.shape:
        raise VerificationError(f"output shape {tuple(out.shape)} differs from the reference's {tuple(ref.shape)}")
    if not non_finite_agree(out, ref):
        return DTypeResult(dtype, math.inf, math.inf, math.inf, tolerance)
    difference = (out - ref).abs()
    finite = torch.isfinite(ref)
    difference = torch.where(finite, difference, torch.zeros_like(difference))
    ref_norm = torch.linalg.vector_norm(torch.where(finite, ref, torch.zeros_like(ref))).item()
    relative = torch.linalg.vector_norm(difference).item() / max(ref_norm, 1e-30)
    return DTypeResult(dtype, difference.max().item(), difference.mean().item(), relative, tolerance)


def compare_with_pytorch(output: torch.Tensor, pytorch_output: torch.Tensor, dtype: torch.dtype,
                         precise: Callable[[], torch.Tensor | None] | None = None) -> DTypeResult:
    """``output`` against PyTorch's result of the same computation in ``dtype``. PyTorch's result has rounding errors
    of its own (a bf16 Linear rounds its output to bf16 before the norm that follows; a fused kernel keeps fp32): where
    the two differ by more than the dtype's tolerance and ``precise()`` computes the same in float64 (None where it
    cannot), ``output`` is judged against that instead and passes within the tolerance or twice PyTorch's own error,
    whichever is larger (the rule of ``benchmarks/models.py``)."""
    result = compare(output, pytorch_output, dtype)
    if result.passed or precise is None:
        return result
    reference = precise()
    if reference is None:
        return result
    pytorch_error = compare(pytorch_output, reference, dtype).relative_l2_error
    judged = compare(output, reference, dtype)
    if math.isfinite(pytorch_error):  # PyTorch overflowing where float64 does not excuses nothing
        judged.tolerance = max(judged.tolerance, 2 * pytorch_error)
    return judged


def random_inputs(shapes: Sequence[tuple[int, ...]], dtype: torch.dtype | Sequence[torch.dtype], device,
                  scales: Sequence[float] | None = None, seed: int | None = None) -> list[torch.Tensor]:
    """Fresh standard-normal inputs (never zeros) of ``dtype`` (or ``dtype[i]`` each), each scaled by ``scales[i]``
    when given, drawn on ``device`` (a GEMM's operands of a few hundred million values took seconds to draw on the
    CPU); a boolean input (a mask) is true where its draw is positive, about half of it."""
    dtypes = [dtype] * len(shapes) if isinstance(dtype, torch.dtype) else list(dtype)
    generator = torch.Generator(device=device)
    generator.manual_seed(seed if seed is not None else torch.seed() % 2**31)
    tensors = []
    for index, shape in enumerate(shapes):
        values = torch.randn(shape, generator=generator, dtype=torch.float32, device=device)
        if scales is not None:
            values.mul_(scales[index])
        tensors.append(from_normal_draw(values, dtypes[index]).to(dtypes[index]))
        del values
    return tensors


def reference_for(op_list, shape_count: int, dtype: torch.dtype | None = None) -> Callable:
    """The eager PyTorch computation of an op list (evaluated op by op from its ``tensor_op`` IR), in the dtype of the
    tensors it is called with: float64 tensors give the float64 reference.

    A cast rounds to its target dtype and the value goes on in the wider of the two dtypes (a kernel too rounds at a
    cast and goes on in fp32 registers), so ops after a cast meet operands of matching precision and PyTorch's
    low-precision CPU kernels do not stand in for the float64 math. ``dtype`` is the chain's element type (that of
    the kernel built from it); by default the one :func:`reference_dtype` infers.
    """

    def run(*tensors: torch.Tensor) -> torch.Tensor:
        function = reference_function(op_list, [tuple(t.shape) for t in tensors], dtype)
        return evaluate_function(function, tensors, evaluate=evaluate_reference)[0]

    return run


def reference_dtype(op_list, shape_count: int) -> torch.dtype:
    """An element type in which the op list's IR verifies. Operands share the chain's element type, so an op with
    operands after a cast needs the chain's type to be the cast's: that of the last cast followed by such an op, or
    float32 (any type will do) when there is none."""
    from amk.oplist import bind_operands, normalize_ops

    ops = normalize_ops(op_list)
    current, chosen = None, torch.float32
    for (name, params), count in zip(ops, bind_operands(ops, shape_count)):
        if count and current is not None:
            chosen = current
        if name == "cast":
            current = params["dtype"]
    return chosen


def reference_function(op_list, shapes: Sequence[tuple[int, ...]], dtype: torch.dtype | None = None) -> func.FuncOp:
    """The ``func.func`` of an op list's ``tensor_op`` IR that :func:`reference_for` evaluates."""
    from amk.oplist import build_module

    module = build_module(op_list, shapes, dtype or reference_dtype(op_list, len(shapes)))
    return next(op for op in module.walk() if isinstance(op, func.FuncOp))


def _wider(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    try:
        return torch.promote_types(a, b)
    except RuntimeError:  # (no promotion rules for the float8 types)
        return a if a.itemsize >= b.itemsize else b


def evaluate_reference(op: Operation, args: list[torch.Tensor]) -> torch.Tensor:
    """:func:`amk.reference.evaluate`, except that a cast rounds to its target and keeps the wider dtype."""
    if isinstance(op, tensor_op.CastOp):
        (x,) = args
        target = to_torch(op.output.type.element_type)
        return x.to(target).to(_wider(x.dtype, target))
    return reference.evaluate(op, args)


def evaluate_function(function: func.FuncOp, tensors: Sequence[torch.Tensor],
                      evaluate: Callable | None = None) -> list[torch.Tensor]:
    """Run a ``tensor_op`` function op by op with ``evaluate(op, operand tensors)`` (by default
    :func:`amk.reference.evaluate`)."""
    evaluate = evaluate or reference.evaluate
    env = dict(zip(function.body.block.args, tensors))
    for op in function.body.block.ops:
        if isinstance(op, func.ReturnOp):
            return [env[v] for v in op.arguments]
        env.update(zip(op.results, [evaluate(op, [env[v] for v in op.operands])]))
    raise AssertionError("function without func.return")


def input_scales(ops, shapes) -> list[float]:
    """Each matmul's weight (whichever input it is: a chain may start with a norm and its weight) is scaled by
    1/sqrt(K) so that outputs stay O(1) in every dtype (``ops`` as normalized: ``(name, params)`` pairs)."""
    scales = [1.0] * len(shapes)
    position = 1  # the chain's input is input 0; each op then takes its own operands in order
    for (name, params), count in zip(ops, bind_operands(list(ops), len(shapes))):
        if name == "matmul":
            scales[position] = 1.0 / math.sqrt(shapes[position][-1 if params.get("transpose_b") else 0])
        position += count
    return scales


def verify(kernel, reference_fn: Callable, inputs: Sequence[torch.Tensor] | None = None,
           dtypes: Sequence[torch.dtype] | None = None, raise_on_failure: bool = True) -> VerificationReport:
    """Run ``kernel`` and ``reference_fn`` on the same inputs and compare.

    ``kernel`` is a :class:`amk.FusedKernel` (rebuilt for each dtype in ``dtypes``; fresh random inputs unless
    ``inputs`` are given, whose floating-point tensors are then cast to each of those dtypes) or any callable (then
    ``inputs`` are required). Raises :class:`amk.errors.VerificationError`
    carrying the report when an error exceeds its dtype's tolerance (``TOLERANCES``; the matmuls of an fp32 kernel
    built under PyTorch's "high" float32 matmul precision, whose dots are TF32, at ``TF32_TOLERANCE``).
    """
    _check_verify_arguments(kernel, reference_fn, inputs, dtypes, raise_on_failure)
    report = VerificationReport()
    if not isinstance(kernel, BuiltChain):
        if inputs is None:
            raise InvalidArgumentError("verify needs inputs= when the kernel is not an amk.FusedKernel")
        dtype = inputs[0].dtype
        report.results.extend(_compared(kernel(*inputs), reference_fn(*[t.double() for t in inputs]), dtype))
    else:
        for dtype in dtypes or [kernel.dtype]:
            if dtype not in TOLERANCES:
                raise InvalidArgumentError(f"cannot verify dtype {dtype}; supported: {', '.join(map(str, TOLERANCES))}")
            if dtype == torch.float8_e4m3fn and not fp8_supported():
                report.results.append(DTypeResult(dtype, skipped="fp8 needs a GPU of compute capability 8.9 or newer"))
                continue
            variant = kernel if dtype == kernel.dtype else kernel.with_dtype(dtype)
            tensors = ([t.to(dtype) if t.is_floating_point() else t for t in inputs] if inputs is not None else
                       random_inputs(kernel.shapes, dtype, variant.device, input_scales(kernel.ops, kernel.shapes)))
            output = variant(*tensors)
            expected = reference_fn(*[t.double() for t in tensors])
            tf32 = (dtype == torch.float32 and variant.float32_matmul_precision != "highest"
                    and any(name == "matmul" for name, _ in kernel.ops))
            report.results.extend(_compared(output, expected, dtype, TF32_TOLERANCE if tf32 else None))
    if raise_on_failure and not report.passed:
        raise VerificationError(str(report), report)
    return report


def _check_verify_arguments(kernel, reference_fn, inputs, dtypes, raise_on_failure) -> None:
    """Raise :class:`InvalidArgumentError` naming the first argument of :func:`verify` that it cannot take."""
    if not isinstance(kernel, BuiltChain) and not callable(kernel):
        raise InvalidArgumentError(f"kernel must be an amk.FusedKernel or a callable, got {type(kernel).__name__}")
    if not callable(reference_fn):
        raise InvalidArgumentError("reference_fn must be callable")
    if inputs is not None and (not isinstance(inputs, list | tuple) or not inputs
                               or not all(isinstance(t, torch.Tensor) for t in inputs)):
        raise InvalidArgumentError("inputs must be None (random inputs) or a non-empty list of the kernel's tensors, "
                                   f"got {type(inputs).__name__}")
    for index, tensor in enumerate(inputs or ()):
        # (what the comparison reads: the values of dense, non-empty tensors of real numbers)
        problem = ("is on the meta device (no values)" if tensor.is_meta else
                   f"is {tensor.layout} (not a dense tensor)" if tensor.layout != torch.strided else
                   "is empty" if tensor.numel() == 0 else
                   f"is {tensor.dtype} (complex)" if tensor.is_complex() else None)
        if problem:
            raise InvalidArgumentError(f"inputs[{index}] {problem}; verify compares dense, non-empty tensors of real "
                                       "numbers (on the CPU or the GPU)")
    if dtypes is not None and (not isinstance(dtypes, list | tuple) or not dtypes
                               or not all(isinstance(d, torch.dtype) for d in dtypes)):
        raise InvalidArgumentError(f"dtypes must be None (the kernel's dtype) or a non-empty list of torch dtypes such "
                                   f"as [torch.float16, torch.bfloat16], got {dtypes!r}")
    if not isinstance(raise_on_failure, bool):
        raise InvalidArgumentError(f"raise_on_failure must be True or False, got {raise_on_failure!r}")


def _compared(output, expected, dtype: torch.dtype, tolerance: float | None = None) -> list[DTypeResult]:
    """Each output of a kernel (a tensor or a tuple of them) against the reference's (the same structure)."""
    outputs = list(output) if isinstance(output, tuple | list) else [output]
    references = list(expected) if isinstance(expected, tuple | list) else [expected]
    if len(outputs) != len(references):
        raise InvalidArgumentError(f"the kernel returned {len(outputs)} tensor(s) and reference_fn {len(references)}")
    for who, values in (("the kernel", outputs), ("reference_fn", references)):
        wrong = [value for value in values if not isinstance(value, torch.Tensor)]
        if wrong:  # a list, not next(..., None): a reference that forgot its ``return`` gives None
            raise InvalidArgumentError(f"{who} returned a {type(wrong[0]).__name__}; verify compares tensors")
    return [compare(have, want, dtype, tolerance) for have, want in zip(outputs, references, strict=True)]
