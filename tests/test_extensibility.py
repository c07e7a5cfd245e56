"""The levels are real: a new ``tensor_op`` op defined here, with one lowering rule and one PyTorch reference
registered, fuses into a matmul epilogue and runs correctly; no pass and no emitter knows its name.

The op is ``test.square_plus_one`` (``x * x + 1``), a subclass of ``ElementwiseUnaryOp``; a binary
``test.hypot`` (``sqrt(a*a + b*b)``) checks the same for an op with a second tensor operand.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from conftest import DEVICE, REPO, rel_l2
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, f16, f32
from xdsl.ir import Block, Region
from xdsl.irdl import irdl_op_definition
from xdsl.passes import ModulePass

import amk
from amk import oplist, reference
from amk.dialects import tensor_op
from amk.dialects.tensor_op import TensorType
from amk.errors import CompilationError
from amk.lowering import rules
from amk.pipeline import compile_module
from amk.verification import TOLERANCES, evaluate_function

M, K, N = 37, 100, 75


@irdl_op_definition
class SquarePlusOneOp(tensor_op.ElementwiseUnaryOp):
    """``x * x + 1``: ``%y = test.square_plus_one %x : T``."""

    name = "test.square_plus_one"


@irdl_op_definition
class HypotOp(tensor_op.ElementwiseBinaryOp):
    """``sqrt(lhs * lhs + rhs * rhs)`` with broadcasting."""

    name = "test.hypot"


def square_plus_one_rule(b: rules.TileBuilder, op, x):
    return b.add_(b.mul(x, x), 1.0)


def hypot_rule(b: rules.TileBuilder, op, x, y):
    return b.unary("sqrt", b.add_(b.mul(x, x), b.mul(y, y)))


@pytest.fixture()
def registered():
    """Register the new ops' lowering rules and references; remove them afterwards."""
    added = {SquarePlusOneOp: (square_plus_one_rule, lambda op, x: x * x + 1),
             HypotOp: (hypot_rule, lambda op, a, b: torch.sqrt(a * a + b * b))}
    for op_class, (rule, semantics) in added.items():
        assert op_class not in rules.ELEMENTWISE_RULES and op_class not in reference.REFERENCE
        rules.register_elementwise(op_class)(rule)
        reference.register_reference(op_class, semantics)
    yield
    for op_class in added:
        rules.ELEMENTWISE_RULES.pop(op_class, None)
        reference.REFERENCE.pop(op_class, None)


def build_module(shapes, make_ops):
    """``func.func @chain`` over block arguments of ``shapes`` (f32); ``make_ops(args)`` returns the ops in order."""
    block = Block(arg_types=[TensorType(list(s), f32) for s in shapes])
    for arg, name in zip(block.args, ["x", "w", "y", "z"]):
        arg.name_hint = name
    ops = make_ops(list(block.args))
    for op in ops:
        op.verify()
        block.add_op(op)
    result = ops[-1].results[0]
    block.add_op(func.ReturnOp(result))
    function = func.FuncOp("chain", ([a.type for a in block.args], [result.type]), Region(block))
    return ModuleOp([function])


def inputs(shapes, seed=0):
    generator = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(s, generator=generator).to(DEVICE) for s in shapes]
    if len(shapes) > 1 and len(shapes[1]) == 2:
        tensors[1] = tensors[1] / math.sqrt(shapes[1][0])
    return tensors


def fused_regions(ir_text: str) -> list[str]:
    """The text of each ``tensor_op.fused`` region in printed IR."""
    regions, current, depth = [], None, 0
    for line in ir_text.splitlines():
        if current is None and "tensor_op.fused" in line:
            current, depth = [], 0
        if current is not None:
            current.append(line)
            depth += line.count("{") - line.count("}")
            if depth <= 0 and len(current) > 1:
                regions.append("\n".join(current))
                current = None
    return regions


def outside_regions(ir_text: str) -> str:
    """The printed IR without its ``tensor_op.fused`` regions."""
    for region in fused_regions(ir_text):
        ir_text = ir_text.replace(region, "")
    return ir_text


def test_new_op_fuses_into_matmul_epilogue(registered):
    shapes = [(M, K), (K, N)]
    module = build_module(shapes, lambda a: [
        mm := tensor_op.MatmulOp(a[0], a[1]),
        SquarePlusOneOp(mm.results[0]),
    ])
    function = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    tensors = inputs(shapes)
    expected_via_registry = evaluate_function(function, [t.double() for t in tensors])[0]

    compiled = compile_module(module)

    # exactly one kernel, holding both ops in one fused region
    assert len(compiled.kernels) == 1
    regions = fused_regions(compiled.ir["fused"])
    assert len(regions) == 1
    assert "tensor_op.matmul" in regions[0] and "test.square_plus_one" in regions[0]
    assert compiled.ir["fused"].count("test.square_plus_one") == 1
    # outside the fused region the function runs nothing
    outside = outside_regions(compiled.ir["fused"])
    assert "tensor_op.matmul" not in outside and "test.square_plus_one" not in outside
    # the rule's arithmetic reached the Triton code, attributed to the new op, after the dot
    source = compiled.source
    assert "# square_plus_one" in source
    assert source.index("tl.dot") < source.index("# square_plus_one")
    for level in ("tiled_loop", "memory_staged"):
        assert 'origin = "square_plus_one"' in compiled.ir[level]

    output = compiled.program(*tensors)[0]
    expected = (tensors[0].double() @ tensors[1].double()) ** 2 + 1
    assert rel_l2(output, expected) <= TOLERANCES[torch.float32]
    assert rel_l2(expected_via_registry, expected) < 1e-12


def test_new_op_between_matmul_and_row_reduction(registered):
    """The new op also fuses on both sides of a softmax (before the statistics and in the second sweep)."""
    shapes = [(M, K), (K, N)]
    module = build_module(shapes, lambda a: [
        mm := tensor_op.MatmulOp(a[0], a[1]),
        sq := SquarePlusOneOp(mm.results[0]),
        sm := tensor_op.SoftmaxOp(sq.results[0]),
        SquarePlusOneOp(sm.results[0]),
    ])
    compiled = compile_module(module)
    assert len(compiled.kernels) == 1
    assert len(fused_regions(compiled.ir["fused"])) == 1
    tensors = inputs(shapes, seed=1)
    output = compiled.program(*tensors)[0]
    logits = (tensors[0].double() @ tensors[1].double()) ** 2 + 1
    assert rel_l2(output, torch.softmax(logits, -1) ** 2 + 1) <= TOLERANCES[torch.float32]


def test_new_binary_op_with_residual(registered):
    shapes = [(M, K), (K, N), (M, N)]
    module = build_module(shapes, lambda a: [
        mm := tensor_op.MatmulOp(a[0], a[1]),
        h := HypotOp(mm.results[0], a[2]),
        SquarePlusOneOp(h.results[0]),
    ])
    compiled = compile_module(module)
    assert len(compiled.kernels) == 1
    [region] = fused_regions(compiled.ir["fused"])
    assert "test.hypot" in region and "test.square_plus_one" in region
    tensors = inputs(shapes, seed=2)
    output = compiled.program(*tensors)[0]
    product = tensors[0].double() @ tensors[1].double()
    expected = product ** 2 + tensors[2].double() ** 2 + 1
    assert rel_l2(output, expected) <= TOLERANCES[torch.float32]


def test_new_op_standalone(registered):
    shapes = [(M, N)]
    module = build_module(shapes, lambda a: [SquarePlusOneOp(a[0])])
    compiled = compile_module(module)
    assert len(compiled.kernels) == 1
    tensors = inputs(shapes, seed=3)
    assert rel_l2(compiled.program(*tensors)[0], tensors[0].double() ** 2 + 1) <= TOLERANCES[torch.float32]


def test_without_a_rule_the_op_runs_eagerly():
    """Only the reference registered: the op is not fusable, so the matmul is a kernel and the op runs in PyTorch.
    The lowering registry, not the passes, decides what fuses."""
    reference.register_reference(SquarePlusOneOp, lambda op, x: x * x + 1)
    try:
        shapes = [(M, K), (K, N)]
        created = []
        module = build_module(shapes, lambda a: created.extend([
            mm := tensor_op.MatmulOp(a[0], a[1]),
            SquarePlusOneOp(mm.results[0]),
        ]) or created)
        assert rules.kind_of(created[1]) is None
        compiled = compile_module(module)
        regions = fused_regions(compiled.ir["fused"])
        assert all("test.square_plus_one" not in r for r in regions)
        assert "test.square_plus_one" in outside_regions(compiled.ir["fused"])
        assert "# square_plus_one" not in compiled.source
        tensors = inputs(shapes, seed=4)
        expected = (tensors[0].double() @ tensors[1].double()) ** 2 + 1
        assert rel_l2(compiled.program(*tensors)[0], expected) <= TOLERANCES[torch.float32]
    finally:
        reference.REFERENCE.pop(SquarePlusOneOp, None)


def test_registrations_of_something_else_than_an_op_class_are_refused(monkeypatch):
    """``register_elementwise("hx.op")`` was accepted and then broke every build, of other chains too (the cache key
    reads the class's name); ``@register_elementwise`` without ``(MyOp)`` registered nothing; a tuple set in
    ROW_REDUCTIONS failed every build with a TypeError. Each now names what is accepted."""
    from amk.errors import InvalidArgumentError

    before = dict(rules.ELEMENTWISE_RULES)
    with pytest.raises(InvalidArgumentError, match="takes an op class .* got 'test.op'"):
        rules.register_elementwise("test.op")
    with pytest.raises(InvalidArgumentError, match=r"takes the op class first, @register_elementwise\(MyOp"):
        @rules.register_elementwise
        def bare(b, op, x):
            return x
    with pytest.raises(InvalidArgumentError, match="takes a function"):
        rules.register_elementwise(SquarePlusOneOp)(2.0)
    with pytest.raises(InvalidArgumentError, match="register_reference takes an op class"):
        reference.register_reference("test.op", lambda op, x: x)
    assert rules.ELEMENTWISE_RULES == before
    monkeypatch.setitem(rules.ROW_REDUCTIONS, SquarePlusOneOp, (square_plus_one_rule,))
    with pytest.raises(InvalidArgumentError, match=r"ROW_REDUCTIONS\[SquarePlusOneOp\] must be a .*RowReduction"):
        amk.build_fused_kernel(["relu"], [(M, N)], torch.float32, autotune=False)


def test_a_row_reduction_whose_apply_gives_the_wrong_shape_is_named(monkeypatch):
    """RMSNorm's apply returning its [rows, 1] statistic was stored as the output's first column, the rest left as
    the allocator gave it (values up to 1e37)."""
    import dataclasses

    wrong = dataclasses.replace(rules.ROW_REDUCTIONS[tensor_op.RMSNormOp],
                                apply=lambda b, op, stats, x, operands: stats[0])
    monkeypatch.setitem(rules.ROW_REDUCTIONS, tensor_op.RMSNormOp, wrong)
    module = build_module([(M, N)], lambda a: [tensor_op.RMSNormOp(a[0])])
    with pytest.raises(CompilationError, match=r"row reduction of tensor_op.rmsnorm: its apply .* returned a "
                                               r"\[BLOCK_M, 1\] tile, and it must return a tile of its input's shape"):
        compile_module(module)


def test_a_strategy_that_stores_no_output_is_named(monkeypatch):
    """A row strategy whose build forgot its second sweep compiled, and its kernel returned uninitialized memory."""
    from amk.lowering.configs import KernelConfig
    from amk.lowering.kernel_lowering import BLOCK_N
    from amk.lowering.strategies import STRATEGIES

    class Forgetful(STRATEGIES["row_strip"].__class__):
        name = "forgetful"
        description = "row_strip's statistics without the sweep that stores the output"

        def build(self, lowering):
            lowering.reduce_over_columns(lowering.plan.main, "n", BLOCK_N)

        def default_config(self, rows, cols, contraction, element_bytes):
            return KernelConfig(BLOCK_M=1, BLOCK_N=128, num_warps=4, num_stages=1)

    monkeypatch.setitem(STRATEGIES, Forgetful.name, Forgetful())
    module = build_module([(M, N)], lambda a: [tensor_op.SoftmaxOp(a[0])])
    with pytest.raises(CompilationError, match="tiling strategy forgetful built kernel .* without storing its "
                                               "output"):
        compile_module(module, reduction_strategy="forgetful")


@pytest.mark.parametrize("made", [None, "result", "list"])
def test_an_op_list_entry_whose_builder_gives_no_op_is_named(monkeypatch, made):
    """An OpSpec builder returning None, the op's result or a list failed with ``AttributeError: ... 'verify'``."""
    from amk.errors import InvalidArgumentError

    def build(x, operands, params):
        op = tensor_op.ReluOp(x)
        return {None: None, "result": op.results[0], "list": [op]}[made]

    monkeypatch.setitem(oplist.OPS, "broken", oplist.OpSpec(0, 0, {}, build, "a builder that gives no op"))
    with pytest.raises(InvalidArgumentError, match=r"OPS\['broken'\].build returned .*; it must return one new op"):
        amk.build_fused_kernel(["broken"], [(M, N)], torch.float32, autotune=False)


@pytest.mark.parametrize(("fn", "message"), [
    (lambda op, x: 1 / 0, "raised ZeroDivisionError: division by zero"),
    (lambda op, x: (x,), "returned 'tuple'"),
    (lambda op, x: x.sum(-1), "returned a 1-d tensor; it must return a tensor of the op's value \\(2-d\\)"),
    (lambda x: x, "raised TypeError"),
], ids=["raises", "a tuple", "the wrong rank", "no op argument"])
def test_a_reference_that_gives_no_tensor_of_the_ops_value_is_named(fn, message):
    """A contributor's reference that raised, or gave a tuple or a reduced tensor, surfaced as its own error or an
    IndexError where the op ran."""
    from amk.errors import InvalidArgumentError

    reference.register_reference(SquarePlusOneOp, fn)
    try:
        module = build_module([(M, N)], lambda a: [SquarePlusOneOp(a[0])])
        op = next(op for op in module.walk() if isinstance(op, SquarePlusOneOp))
        with pytest.raises(InvalidArgumentError, match=f"the reference of test.square_plus_one .* {message}"):
            reference.evaluate(op, inputs([(M, N)], seed=7))
    finally:
        reference.REFERENCE.pop(SquarePlusOneOp, None)


def test_an_op_without_a_rule_runs_from_a_cache_hit_too(tmp_path, monkeypatch):
    """The stored program names the op PyTorch runs by its text; parsing it knew only amk-opt's dialects, so the
    cache hit of a build that had worked failed at its call (``Operation test.square_plus_one is not registered``)."""
    reference.register_reference(SquarePlusOneOp, lambda op, x: x * x + 1)
    monkeypatch.setitem(oplist.OPS, "square_plus_one",
                        oplist.OpSpec(0, 0, {}, lambda x, operands, params: SquarePlusOneOp(x), "x * x + 1"))
    try:
        x = inputs([(M, N)], seed=5)[0]
        for cache_hit in (False, True):
            kernel = amk.build_fused_kernel(["sigmoid", "square_plus_one", "tanh"], [(M, N)], torch.float32,
                                            autotune=False, tuner_config=amk.TunerConfig(target_cache_dir=tmp_path))
            assert kernel.cache_hit == cache_hit
            expected = torch.tanh(torch.sigmoid(x.double()) ** 2 + 1)
            assert rel_l2(kernel(x), expected) <= TOLERANCES[torch.float32]
    finally:
        reference.REFERENCE.pop(SquarePlusOneOp, None)


def test_a_rule_changed_after_a_build_is_not_found_in_the_cache(registered, tmp_path, monkeypatch):
    """The cache keys a build by the definitions of what was registered from outside amk (rules, references,
    strategies, passes, op-list entries), as it keys amk's own sources: once the op's rule and reference are changed
    and registered again, its chain is built again instead of found with the kernel of the old rule."""
    monkeypatch.setitem(oplist.OPS, "square_plus_one",
                        oplist.OpSpec(0, 0, {}, lambda x, operands, params: SquarePlusOneOp(x), "x * x + 1"))
    shapes = [(M, K), (K, N)]
    x, w = inputs(shapes, seed=5)
    product = x.double() @ w.double()
    tuner = amk.TunerConfig(target_cache_dir=str(tmp_path))

    def built():
        kernel = amk.build_fused_kernel(["matmul", "square_plus_one"], shapes, torch.float32, autotune=False,
                                        tuner_config=tuner)
        return kernel(x, w)

    assert rel_l2(built(), product ** 2 + 1) <= TOLERANCES[torch.float32]
    # a registration that replaces another says so
    with pytest.warns(UserWarning, match="replaces square_plus_one_rule as the lowering rule of test.square_plus_one"):
        rules.register_elementwise(SquarePlusOneOp)(lambda b, op, x: b.add_(x, 1.0))  # now x + 1
    with pytest.warns(UserWarning, match="as the reference of test.square_plus_one"):
        reference.register_reference(SquarePlusOneOp, lambda op, x: x + 1)
    assert rel_l2(built(), product + 1) <= TOLERANCES[torch.float32]
    with pytest.warns(UserWarning):  # the first rule again: found in the cache
        rules.register_elementwise(SquarePlusOneOp)(square_plus_one_rule)
        reference.register_reference(SquarePlusOneOp, lambda op, x: x * x + 1)
    assert rel_l2(built(), product ** 2 + 1) <= TOLERANCES[torch.float32]


@pytest.mark.parametrize(("rule", "message"), [
    (lambda b, op, x: None, "returned None: a rule returns the tile"),
    (lambda b, op, x: b.reduce("sum", x), "an elementwise rule keeps its operands' (broadcast) shape"),
    (lambda b, op, x: b.binary("gt", x, 0.0), "returned a tile of i1: tiles hold fp32 values"),
    (lambda b, op, x: b.cast(x, f16), "returned a tile of f16"),
], ids=["nothing", "a reduced tile", "a mask", "an fp16 tile"])
def test_a_rule_that_does_not_give_a_tile_of_its_operands_shape_is_named(rule, message):
    """A contributor's rule returning no tile, or a reduced one (which the kernel would store as column 0 of every
    row, with no error), fails where it is called, naming the op and the rule."""
    rules.register_elementwise(SquarePlusOneOp)(rule)
    reference.register_reference(SquarePlusOneOp, lambda op, x: x * x + 1)
    try:
        module = build_module([(M, K), (K, N)], lambda a: [mm := tensor_op.MatmulOp(a[0], a[1]),
                                                            SquarePlusOneOp(mm.results[0])])
        with pytest.raises(CompilationError, match="lowering rule of test.square_plus_one") as raised:
            compile_module(module)
        assert message in str(raised.value)
    finally:
        rules.ELEMENTWISE_RULES.pop(SquarePlusOneOp, None)
        reference.REFERENCE.pop(SquarePlusOneOp, None)


def test_a_strategy_or_pass_registered_under_a_taken_name_replaces_it_with_a_warning(monkeypatch):
    """A contributor's strategy or pass named as one of amk's replaces it for every later build: said, not silent."""
    from amk import opt
    from amk.lowering.strategies import STRATEGIES, register_strategy

    monkeypatch.setitem(STRATEGIES, "row_strip", STRATEGIES["row_strip"])  # restored afterwards
    monkeypatch.setitem(opt.AMK_PASSES, "amk-fuse", opt.AMK_PASSES["amk-fuse"])
    monkeypatch.setattr(opt, "REGISTERED_PASSES", {})
    with pytest.warns(UserWarning, match="Shadow replaces RowStrip.* as the strategy named 'row_strip'"):
        register_strategy(type("Shadow", (type(STRATEGIES["row_strip"]),), {}))
    with pytest.warns(UserWarning, match="ShadowFuse replaces the pass named 'amk-fuse'"):
        opt.register_pass(type("ShadowFuse", (opt.AMK_PASSES["amk-fuse"](),), {}))


@pytest.mark.parametrize(("make", "message"), [
    (lambda: object(), "takes a ModulePass subclass"),
    (lambda: type("NotAPass", (), {"name": "x"}), "takes a ModulePass subclass"),
    (lambda: type("NoApply", (ModulePass,), {"name": "x"}), "takes a ModulePass subclass"),
    (lambda: type("Nameless", (ModulePass,), {"apply": lambda self, ctx, op: None}), r"name must be a pass name.*None"),
    (lambda: type("Comma", (ModulePass,), {"name": "a,b", "apply": lambda self, ctx, op: None}), "'a,b'"),
], ids=["an object", "not a pass", "no apply", "no name", "a comma in the name"])
def test_a_pass_no_pipeline_could_run_is_refused_when_registered(monkeypatch, make, message):
    """register_pass took anything: a nameless class failed with an AttributeError, one named "a,b" or without apply
    only when a pipeline ran it."""
    from amk import opt
    from amk.errors import InvalidArgumentError

    monkeypatch.setattr(opt, "REGISTERED_PASSES", {})
    monkeypatch.setattr(opt, "AMK_PASSES", dict(opt.AMK_PASSES))
    with pytest.raises(InvalidArgumentError, match=message):
        opt.register_pass(make())
    assert not opt.REGISTERED_PASSES


@pytest.mark.parametrize("pipeline", ["amk-fuse{", "amk-fuse}", "amk-frobnicate", "amk-fuse{frob=1}"])
def test_a_bad_pipeline_of_compile_module_names_the_passes_available(pipeline):
    """compile_module's pipeline raised xDSL's ValueError, or its ArgSpecParseError (a BaseException that
    ``except Exception`` lets through)."""
    from amk.errors import InvalidArgumentError

    module = build_module([(M, N)], lambda a: [tensor_op.ReluOp(a[0])])
    with pytest.raises(InvalidArgumentError, match="tensor_op passes available: .*amk-fuse"):
        compile_module(module, pipeline=pipeline)


def test_a_pass_replacing_amk_fuse_is_what_every_build_runs(monkeypatch, tmp_path):
    """A pass registered as amk-fuse ran in amk-opt and amk.compile, while build_fused_kernel's default pipeline kept
    amk's FusePass (and the vendor-GEMM program left the replacement out)."""
    import warnings

    from amk import opt
    from amk.passes.fuse import FusePass
    from amk.passes.vendor_epilogues import VendorEpiloguesPass
    from amk.pipeline import fusion_passes

    ran = []

    @dataclasses.dataclass(frozen=True)
    class CountingFuse(FusePass):
        def apply(self, ctx, op):
            ran.append(self.vendor_gemm)
            super().apply(ctx, op)

    monkeypatch.setitem(opt.AMK_PASSES, "amk-fuse", opt.AMK_PASSES["amk-fuse"])
    monkeypatch.setattr(opt, "REGISTERED_PASSES", {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt.register_pass(CountingFuse)
    assert fusion_passes(None) == [CountingFuse()]
    assert fusion_passes(None, vendor_gemm=True) == [VendorEpiloguesPass(), CountingFuse(True)]
    kernel = amk.build_fused_kernel(["matmul", "relu"], [(8, 16), (16, 8)], torch.float32, autotune=False,
                                    tuner_config=amk.TunerConfig(target_cache_dir=tmp_path))
    assert ran and kernel.num_kernels == 1


def _strategy(**attributes):
    from amk.lowering.strategies import TilingStrategy

    return type("Sketch", (TilingStrategy,), {"name": "sketch", "description": "a sketch", **attributes})


@pytest.mark.parametrize(("make", "message"), [
    (lambda: type("NotAStrategy", (), {"name": "x"}), "takes a TilingStrategy subclass"),
    (lambda: _strategy(description=""), "has no description"),
    (lambda: _strategy(priority=5), "does not override chosen_for"),
    (lambda: _strategy(row_reduction=True), "does not override build"),
], ids=["not a strategy", "no description", "a priority without chosen_for", "a row reduction without build"])
def test_a_strategy_that_could_never_lower_a_kernel_is_refused_when_registered(make, message):
    """Mistakes that surfaced far from the class (an AttributeError at emission, a KeyError naming an op) or never
    (a strategy auto would never take) are refused by register_strategy, saying what to set."""
    from amk.errors import InvalidArgumentError
    from amk.lowering.strategies import STRATEGIES, register_strategy

    with pytest.raises(InvalidArgumentError, match=message):
        register_strategy(make())
    assert "sketch" not in STRATEGIES


def test_a_rule_without_a_reference_says_how_to_register_one():
    """A rule registered and the reference forgotten: the chain fuses, and checking it names what is missing (it was a
    KeyError of the op's class)."""
    from amk.errors import UnsupportedOpError

    rules.register_elementwise(SquarePlusOneOp)(square_plus_one_rule)
    try:
        module = build_module([(M, N)], lambda a: [SquarePlusOneOp(a[0])])
        with pytest.raises(UnsupportedOpError, match=r"register_reference\(SquarePlusOneOp, fn\)"):
            evaluate_function(next(op for op in module.walk() if isinstance(op, func.FuncOp)), inputs([(M, N)], seed=6))
    finally:
        rules.ELEMENTWISE_RULES.pop(SquarePlusOneOp, None)


# Registers rules from a module file of its own (argv[1]) and prints the extensions' fingerprint; with argv[2] "edit",
# rewrites that file after importing it (as an editor does while a notebook runs on) and prints it again.
_FINGERPRINT = r"""
import importlib.util, sys, warnings
warnings.simplefilter("ignore")
from amk.build import extensions_fingerprint
spec = importlib.util.spec_from_file_location("user_rules", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(extensions_fingerprint())
if sys.argv[2:] == ["edit"]:
    with open(sys.argv[1]) as handle:
        text = handle.read()
    with open(sys.argv[1], "w") as handle:
        handle.write(text.replace("b.mul(x, x)", "b.add(x, x)"))
    print(extensions_fingerprint())
"""

_USER_RULES = r"""
import functools
from amk.dialects import tensor_op
from amk.lowering import rules

def scaled(b, op, x, factor):
    return b.mul(b.mul(x, x), factor)

rules.register_elementwise(tensor_op.ReluOp)(functools.partial(scaled, factor=2.0))
made = {}
exec("def square(b, op, x):\n    return [y for y in [b.mul(x, x)]][0]", made)
rules.register_elementwise(tensor_op.TanhOp)(made["square"])

import dataclasses, torch

@dataclasses.dataclass(frozen=True)
class Config:
    factor: float

def configured(config):
    return lambda b, op, x: b.mul(x, config.factor)

class Scaler:
    __slots__ = ("factor",)

    def __init__(self, factor):
        self.factor = torch.tensor(factor)

    def __call__(self, b, op, x):
        return b.mul(x, self.factor.item())

rules.register_elementwise(tensor_op.SigmoidOp)(configured(Config(2.0)))
rules.register_elementwise(tensor_op.ExpOp)(Scaler(2.0))

class Factor:  # hashed by address: a set of them iterates in another order in every process
    def __init__(self, value):
        self.value = value

def product_of(factors):
    def product(b, op, x):
        for factor in sorted(factors, key=lambda f: f.value):
            x = b.mul(x, factor.value)
        return x
    return product

rules.register_elementwise(tensor_op.SiluOp)(product_of(frozenset(Factor(v) for v in (2.0, 3.0, 5.0, 7.0))))
"""


def test_the_fingerprint_of_extensions_is_their_registered_code_in_every_process(tmp_path):
    """The same registrations give the same key in every process (a partial, a function made at run time with a
    comprehension inside, a closure over a dataclass, a callable with slots: no address in the text; a set of objects
    hashed by address, which each process iterates in its own order), and the key
    follows the code registered, not its file, which may have been edited since (a stale kernel would be stored
    under the edited text's key)."""
    path = tmp_path / "user_rules.py"
    path.write_text(_USER_RULES)
    environment = {key: value for key, value in os.environ.items() if key != "AMK_CACHE_DIR"}

    def fingerprints(*args):
        result = subprocess.run([sys.executable, "-c", _FINGERPRINT, str(path), *args], capture_output=True, text=True,
                                timeout=300, env=environment)
        assert result.returncode == 0, result.stderr[-2000:]
        return result.stdout.split()

    (first,), (second,) = fingerprints(), fingerprints()
    assert first and first == second
    registered, after_edit = fingerprints("edit")
    assert registered == first and after_edit == first
    (edited,) = fingerprints()
    assert edited != first


def test_the_fingerprint_follows_what_a_rule_is_bound_to_and_amk_rules_moved_to_another_op():
    """``Scaler(2.0).rule`` and ``Scaler(3.0).rule`` had one fingerprint (a bound method counted as its function),
    and an amk rule registered for another op (sigmoid's for relu) none: the second build loaded the first's kernel,
    computing x * 2 or relu. So had closures over a dataclass or a tensor holding 2 or 3, methods of instances with
    slots, and callable classes differing only in ``__call__``."""
    import warnings

    from amk.build import extensions_fingerprint
    from amk.dialects import tensor_op

    class Scaler:
        def __init__(self, factor):
            self.factor = factor

        def rule(self, b, op, x):
            return b.mul(x, self.factor)

    @dataclasses.dataclass(frozen=True)
    class Config:
        factor: float

    class SlottedScaler:
        __slots__ = ("factor",)

        def __init__(self, factor):
            self.factor = factor

        def rule(self, b, op, x):
            return b.mul(x, self.factor)

    class Doubler:
        def __call__(self, b, op, x):
            return b.mul(x, 2.0)

    Tripler = type("Doubler", (), {"__call__": lambda self, b, op, x: b.mul(x, 3.0)})

    def configured(config):
        return lambda b, op, x: b.mul(x, config.factor)

    def from_tensor(factor):
        return lambda b, op, x: b.mul(x, factor.item())

    original, base = rules.ELEMENTWISE_RULES[tensor_op.ReluOp], extensions_fingerprint()
    registered = (Scaler(2.0).rule, Scaler(3.0).rule, rules.ELEMENTWISE_RULES[tensor_op.SigmoidOp],
                  configured(Config(2.0)), configured(Config(3.0)), SlottedScaler(2.0).rule, SlottedScaler(3.0).rule,
                  Doubler(), Tripler(), from_tensor(torch.tensor(2.0)), from_tensor(torch.tensor(3.0)))
    prints = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # each registration replaces the last one, with a warning
            for rule in registered:
                rules.register_elementwise(tensor_op.ReluOp)(rule)
                prints.append(extensions_fingerprint())
    finally:
        rules.ELEMENTWISE_RULES[tensor_op.ReluOp] = original
    assert len({base, *prints}) == len(registered) + 1, prints
    assert extensions_fingerprint() == base
    # A row reduction by all its fields: column_sums holds functions too.
    rms = rules.ROW_REDUCTIONS[tensor_op.RMSNormOp]
    prints = []
    try:
        for term in (lambda b, x, valid: x, lambda b, x, valid: b.mul(x, x)):
            rules.ROW_REDUCTIONS[tensor_op.RMSNormOp] = dataclasses.replace(
                rms, column_sums=(rules.ColumnSum("sumsq", term, squares=True),))
            prints.append(extensions_fingerprint())
    finally:
        rules.ROW_REDUCTIONS[tensor_op.RMSNormOp] = rms
    assert len({base, *prints}) == 3, prints


def _linked(length):
    head = None
    for _ in range(length):
        head = types.SimpleNamespace(next=head)
    return head


def _shared(depth):
    node = types.SimpleNamespace(value=1)
    for _ in range(depth):
        node = types.SimpleNamespace(left=node, right=node)
    return node


class _Node:
    """An object of the user's (the standard library's are written by their class alone)."""


def _cycle_through_a_set():
    parent, child = _Node(), _Node()
    parent.children, child.parent = {child}, parent
    return parent


@pytest.mark.parametrize("reached", [
    lambda: torch.randn(512, 512), lambda: torch.empty(4, 4, device="meta"), lambda: torch.eye(3).to_sparse(),
    lambda: torch.nn.Linear(1024, 1024), lambda: logging.getLogger("amk"), lambda: _linked(3000),
    lambda: _shared(40), _cycle_through_a_set,
], ids=["a large tensor", "a meta tensor", "a sparse tensor", "a module", "a logger", "a long chain",
        "a shared structure", "a cycle through a set"])
def test_what_a_rule_closes_over_counts_in_a_short_stable_text(reached):
    """What a rule reaches was written out whole, at every build: a module's weights value by value (23 MB), every
    logger of the process (a text that changed when a library made one), a structure sharing its nodes once per
    path (889 MB at 22 levels), a long chain past the recursion limit, a meta tensor's values (an error). A cycle
    back through a set raised RecursionError (each item's sort key was a text of its own, which lost the objects met
    before it)."""
    from amk.build import _definition

    obj = reached()
    rule = (lambda o: lambda b, op, x: b.mul(x, 1.0 if o is None else 2.0))(obj)
    first = _definition(rule)
    logging.getLogger("amk.test.another")
    assert len(first) < 20_000 and _definition(rule) == first


def test_dtypes_devices_and_arrays_count_by_value():
    """float16 and bfloat16, two devices, two arrays closed over: each pair had one text (one cache key)."""
    import numpy

    from amk.build import _definition

    def closing(value):
        return lambda b, op, x: b.mul(x, value)

    for a, b in ((torch.float16, torch.bfloat16), (torch.device("cpu"), torch.device("meta")),
                 (numpy.zeros(3), numpy.ones(3)), (numpy.bool_(True), numpy.bool_(False))):
        assert _definition(closing(a)) != _definition(closing(b)), (a, b)


def test_a_partial_replacing_a_registration_is_named_in_the_warning(registered):
    """A rule or reference that is a partial (no __qualname__) replaces another with the warning, not an
    AttributeError that left the registration undone."""
    import functools

    with pytest.warns(UserWarning, match="partial replaces square_plus_one_rule"):
        rules.register_elementwise(SquarePlusOneOp)(functools.partial(square_plus_one_rule))
    with pytest.warns(UserWarning, match="partial replaces registered.<locals>.<lambda> as the reference"):
        reference.register_reference(SquarePlusOneOp, functools.partial(lambda op, x: x * x + 1))
    assert isinstance(rules.ELEMENTWISE_RULES[SquarePlusOneOp], functools.partial)


def test_registrations_are_cleaned_up():
    assert SquarePlusOneOp not in rules.ELEMENTWISE_RULES and HypotOp not in rules.ELEMENTWISE_RULES
    assert SquarePlusOneOp not in reference.REFERENCE and HypotOp not in reference.REFERENCE


def test_passes_and_emitter_do_not_know_the_new_ops():
    """No file of the passes, the lowering or the emitter mentions the ops defined here."""
    for directory in ("passes", "lowering", "dialects", "amk"):
        for path in (REPO / directory).rglob("*.py"):
            text = Path(path).read_text()
            assert "square_plus_one" not in text and "test.hypot" not in text, path


@pytest.mark.parametrize(("transpose_lhs", "transpose_rhs", "shapes"), [
    (False, True, [(3, 5, 8), (6, 8)]),  # nn.Linear's x @ w.t(), rows of any rank
    (False, False, [(4, 8), (8, 6)]),
    (True, True, [(8, 4), (6, 8)]),
])
def test_an_op_bound_for_the_hot_path_computes_what_its_reference_does(transpose_lhs, transpose_rhs, shapes):
    """``reference.bound`` (a program's step left to PyTorch, prepared once per launcher) multiplies as written."""
    module = build_module(shapes, lambda a: [tensor_op.MatmulOp(a[0], a[1], transpose_lhs=transpose_lhs,
                                                                transpose_rhs=transpose_rhs)])
    op = next(o for o in module.walk() if isinstance(o, tensor_op.MatmulOp))
    a, b = (torch.randn(shape) for shape in shapes)
    expected = (a.transpose(-1, -2) if transpose_lhs else a) @ (b.t() if transpose_rhs else b)
    torch.testing.assert_close(reference.bound(op)(a, b), expected)
    assert (reference.bound(op) is torch.nn.functional.linear) == (transpose_rhs and not transpose_lhs)


def test_an_op_list_entry_or_strategy_of_amks_under_another_name_counts_in_the_fingerprint():
    """``OPS["relu"] = OPS["sigmoid"]`` (a builder defined in amk, under a name of amk's) left the fingerprint as it
    was: a later process building ``["relu"]`` loaded that process's sigmoid kernel from the shared cache. So did a
    strategy of amk's registered under another's name."""
    from amk.build import extensions_fingerprint
    from amk.lowering.strategies import registry
    from amk.oplist import OPS

    base = extensions_fingerprint()
    relu, tile2d = OPS["relu"], registry.STRATEGIES["tile2d"]
    try:
        OPS["relu"] = OPS["sigmoid"]
        remapped = extensions_fingerprint()
        OPS["relu"] = relu
        registry.STRATEGIES["tile2d"] = registry.STRATEGIES["row_strip"]
        moved = extensions_fingerprint()
    finally:
        OPS["relu"], registry.STRATEGIES["tile2d"] = relu, tile2d
    assert len({base, remapped, moved}) == 3
    assert extensions_fingerprint() == base
