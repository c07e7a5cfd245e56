"""Bad input to the public API raises the right ``amk.errors`` type, with a one-line message that names the problem
and what is accepted; never a Triton, xDSL or bare Python error from the internals."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import DEVICE

import amk
from amk import errors
from amk.environment import fp8_supported
from amk.errors import (
    AmkError,
    CompilationError,
    DeviceError,
    DTypeError,
    InvalidArgumentError,
    ShapeError,
    UnsupportedOpError,
)

FP32 = torch.float32
OPS = ["matmul", "add_bias", "relu"]
SHAPES = [(32, 64), (64, 48), (48,)]


def expect(error_type, call, *substrings):
    """``call()`` raises ``error_type`` whose message contains every substring (case-insensitive) on one line."""
    with pytest.raises(error_type) as info:
        call()
    error = info.value
    assert isinstance(error, AmkError), f"{type(error).__module__}.{type(error).__name__} is not an amk error"
    message = str(error)
    assert message.strip(), "empty error message"
    assert "\n" not in message.strip(), f"message is not a single line: {message!r}"
    for internal in ('File "', "Traceback", "xdsl.", "triton."):
        assert internal not in message, f"internals leak into the message: {message!r}"
    for substring in substrings:
        assert substring.lower() in message.lower(), f"{substring!r} not in {message!r}"
    return message


def build(ops=OPS, shapes=SHAPES, dtype=FP32, **kwargs):
    return lambda: amk.build_fused_kernel(ops, shapes, dtype, **kwargs)


# --------------------------------------------------------------------------------------------------------------------
# The op list
# --------------------------------------------------------------------------------------------------------------------


def test_unknown_op_lists_supported_ops():
    message = expect(UnsupportedOpError, build(["matmul", "frobnicate"], [(32, 64), (64, 48)]),
                     "ops[1]", "frobnicate", "supported ops")
    from amk.oplist import OPS as VOCABULARY

    for name in VOCABULARY:
        assert name in message


def test_unknown_op_is_also_a_value_error():
    with pytest.raises(ValueError):
        build(["gemm"], [(32, 64), (64, 48)])()


@pytest.mark.parametrize("entry", [3, None, ("relu", {}, 1), {"op": "relu"}, ("relu",), (("relu",), {}),
                                   ("relu", "tanh")],
                         ids=["int", "none", "triple", "dict", "1-tuple", "nested-tuple", "params-not-dict"])
def test_op_entry_of_wrong_form(entry):
    expect(InvalidArgumentError, build(["matmul", entry], [(32, 64), (64, 48)]),
           "ops[1]", "name or a (name, params) pair")


@pytest.mark.parametrize("ops", ["relu", [], None, 42, b"relu"], ids=["str", "empty", "none", "int", "bytes"])
def test_ops_not_a_list(ops):
    expect(InvalidArgumentError, build(ops, [(32, 64)]), "ops must be a non-empty list")


@pytest.mark.parametrize("entry, key, accepted", [
    (("relu", {"alpha": 1.0}), "alpha", "none"),
    (("gelu", {"approx": "tanh"}), "approx", "approximate"),
    (("layernorm", {"epsilon": 1e-6}), "epsilon", "eps"),
    (("sum", {"keep_dim": True}), "keep_dim", "keepdim"),
    (("leaky_relu", {"slope": 0.2}), "slope", "negative_slope"),
])
def test_unknown_op_parameter(entry, key, accepted):
    expect(InvalidArgumentError, build(["matmul", entry], [(32, 64), (64, 48)]),
           "ops[1]", entry[0], f"unknown parameter '{key}'", "accepted", accepted)


@pytest.mark.parametrize("op", ["sum", "softmax"])
def test_dim_and_axis_that_disagree(op):
    """``axis`` is NumPy's name for ``dim``: both, naming two dims, built with ``dim`` alone, silently."""
    expect(InvalidArgumentError, build(["matmul", (op, {"dim": 0, "axis": 1})], [(32, 64), (64, 48)]),
           "ops[1]", op, "dim=0", "axis=1", "give one of them")


@pytest.mark.parametrize("entry, key, type_name", [
    (("scale", {"factor": "2"}), "factor", "str"),
    (("scale", {"factor": True}), "factor", "bool"),
    (("sum", {"dim": 1.0}), "dim", "float"),
    (("sum", {"keepdim": 1}), "keepdim", "int"),
    (("gelu", {"approximate": True}), "approximate", "bool"),
    (("matmul", {"transpose_b": "yes"}), "transpose_b", "str"),
    (("cast", {"dtype": "float16"}), "dtype", "str"),
    (("clamp", {"min": None}), "min", "NoneType"),
])
def test_wrong_parameter_type(entry, key, type_name):
    ops = [entry] if entry[0] == "matmul" else ["matmul", entry]
    index = 0 if entry[0] == "matmul" else 1
    expect(InvalidArgumentError, build(ops, [(32, 64), (64, 48)]),
           f"ops[{index}]", entry[0], f"parameter '{key}'", "must be", f"got {type_name}")


@pytest.mark.parametrize("entry, accepted", [
    (("scale", {"factor": "2"}), ("float", "number", "int")),
    (("sum", {"keepdim": 1}), ("bool",)),
], ids=["scale-factor", "sum-keepdim"])
def test_wrong_parameter_type_names_accepted_type(entry, accepted):
    message = expect(InvalidArgumentError, build(["matmul", entry], [(32, 64), (64, 48)]), "must be")
    wrong = type(entry[1][next(iter(entry[1]))]).__name__
    rest = message.split("got")[0].replace(wrong, "")
    assert any(name in rest for name in accepted), message


def test_a_number_parameter_beyond_float64_names_the_bound():
    expect(InvalidArgumentError, build(["matmul", ("scale", {"factor": 10 ** 400})], [(32, 64), (64, 48)]),
           "ops[1]", "scale", "'factor'", "float64")


def test_scale_without_factor():
    expect(InvalidArgumentError, build(["matmul", "scale"], [(32, 64), (64, 48)]), "scale", "'factor'")


def test_cast_without_dtype():
    expect(InvalidArgumentError, build(["cast"], [(32, 64)]), "cast", "'dtype'")


def test_clamp_without_bounds():
    expect(InvalidArgumentError, build(["clamp"], [(32, 64)]), "clamp", "min", "max")


def test_gelu_unknown_approximation():
    expect(UnsupportedOpError, build([("gelu", {"approximate": "fast"})], [(32, 64)]), "gelu", "'fast'", "tanh",
           "none")


def test_cast_to_integer_dtype():
    expect(DTypeError, build([("cast", {"dtype": torch.int32})], [(32, 64)]), "torch.int32", "torch.float16")


def test_clamp_min_greater_than_max():
    expect(InvalidArgumentError, build([("clamp", {"min": 1.0, "max": 0.0})], [(32, 64)]), "clamp", "min", "max")


def test_hardtanh_min_greater_than_max():
    """It raised a ShapeError from the IR verifier ("does not fit its inputs"); clamp's check names the bounds."""
    expect(InvalidArgumentError, build([("hardtanh", {"min_val": 2, "max_val": -2})], [(32, 64)]),
           "min_val (2) must not exceed max_val (-2)")


def test_an_op_with_operands_after_a_cast_names_the_dtypes():
    """It raised a ShapeError on the IR's element types ("f32 vs f16"), not saying that operands take the chain's
    dtype."""
    expect(DTypeError, build([("cast", {"dtype": torch.float32}), "mul"], [(4, 8), (4, 8)], torch.float16),
           "ops[1] (mul)", "chain's dtype torch.float16", "torch.float32 after a cast")


def test_clamp_min_greater_than_max_names_the_problem():
    """Whatever its class, the message of the min > max error names both bounds."""
    with pytest.raises(AmkError) as info:
        build([("clamp", {"min": 1.0, "max": 0.0})], [(32, 64)])()
    assert "min (1.0) must not exceed max (0.0)" in str(info.value)


# --------------------------------------------------------------------------------------------------------------------
# input_shapes
# --------------------------------------------------------------------------------------------------------------------


def test_matmul_contraction_mismatch():
    message = expect(ShapeError, build(["matmul", "relu"], [(32, 64), (32, 48)]), "ops[0]", "matmul", "64", "32",
                     "contraction")
    assert "(32, 48)" in message.replace("'", "") or "32, 48" in message.replace("'", "")


def test_matmul_transpose_b_mismatch():
    expect(ShapeError, build([("matmul", {"transpose_b": True})], [(32, 64), (64, 48)]), "matmul", "64", "48")


@pytest.mark.parametrize("ops, shapes, substrings", [
    (OPS, [(32, 64), (64, 48), (47,)], ["ops[1]", "add_bias", "48", "47", "broadcast"]),
    (["matmul", "add"], [(32, 64), (64, 48), (31, 48)], ["ops[1]", "add", "32", "31"]),
    (["layernorm"], [(32, 64), (63,)], ["ops[0]", "layernorm", "63", "64"]),
    (["rmsnorm", "matmul"], [(32, 64), (32,), (64, 48)], ["ops[0]", "rmsnorm", "32", "64"]),
    (["matmul"], [(32, 64), (64,)], ["ops[0]", "matmul", "rank"]),
    (["matmul"], [(64,), (64, 48)], ["ops[0]", "matmul", "rank"]),
    ([("sum", {"dim": 2})], [(32, 64)], ["ops[0]", "sum", "axis 2", "rank-2"]),
    ([("softmax", {"dim": -3})], [(32, 64)], ["ops[0]", "softmax", "axis -3"]),
    # past int64: the IR's i64 wrapped 2**63 to -2**63 in the message, and quoted xDSL's range text for 10**30
    ([("softmax", {"dim": 2**63})], [(32, 64)], ["ops[0]", "dim=9223372036854775808", "out of range"]),
    ([("sum", {"axis": 10**30})], [(32, 64)], ["ops[0]", "axis=1" + "0" * 30, "out of range"]),
], ids=["bias", "residual", "ln-gamma", "rms-weight", "matmul-rank-w", "matmul-rank-x", "sum-axis", "softmax-axis",
        "dim-past-int64", "axis-past-int64"])
def test_shapes_inconsistent_with_chain(ops, shapes, substrings):
    expect(ShapeError, build(ops, shapes), *substrings)


@pytest.mark.parametrize("shapes, given", [(SHAPES + [(48,)], 4), (SHAPES[:2], 2), (SHAPES[:1], 1)],
                         ids=["too-many", "too-few", "one"])
def test_wrong_number_of_shapes(shapes, given):
    expect(ShapeError, build(OPS, shapes), f"{given} input shapes given", "takes", "3", "matmul, add_bias, relu")


def test_wrong_number_of_shapes_with_optional_operands():
    expect(ShapeError, build(["matmul", "layernorm"], [(32, 64), (64, 48), (48,), (48,), (48,)]),
           "5 input shapes given", "between 2 and 4")


@pytest.mark.parametrize("shape, word", [((0, 64), "empty"), ((32, 0), "empty"), ((-32, 64), "negative"),
                                         ((32, -1), "negative")])
def test_shape_with_zero_or_negative_dim(shape, word):
    expect(ShapeError, build(OPS, [shape, (64, 48), (48,)]), "input_shapes[0]", word, str(shape[0]))


@pytest.mark.parametrize("shape", [(32.0, 64), (32, "64"), (32, None), (True, 64), "32x64", 32, None,
                                   (32, torch.tensor(64))],
                         ids=["float", "str-dim", "none-dim", "bool-dim", "str", "int", "none", "tensor-dim"])
def test_non_int_dims(shape):
    expect(InvalidArgumentError, build(OPS, [shape, (64, 48), (48,)]), "input_shapes[0]", "tuple of ints")


@pytest.mark.parametrize("shapes", [None, [], "32,64", 5], ids=["none", "empty", "str", "int"])
def test_input_shapes_not_a_list(shapes):
    expect(InvalidArgumentError, build(OPS, shapes), "input_shapes must be a non-empty list")



def test_tensors_given_as_shapes_are_named_by_their_shape():
    """Tensors passed where their shapes go: the message names each by its type and shape, on one line (their reprs
    ran to 16 lines, a NumPy array's to 32)."""
    tensors = [torch.randn(32, 64), torch.randn(64, 48), torch.randn(48)]
    expect(InvalidArgumentError, build(OPS, tensors), "input_shapes[0]", "torch.Tensor of shape (32, 64)", ".shape")
    expect(InvalidArgumentError, build(OPS, tensors[0]), "input_shapes must be", "torch.Tensor of shape (32, 64)")
    expect(InvalidArgumentError, build(OPS, [tensors[0].numpy(), (64, 48), (48,)]), "numpy.ndarray of shape (32, 64)")

def test_torch_size_shapes_are_accepted():
    kernel = amk.build_fused_kernel(["relu"], [torch.Size([4, 8])], FP32, autotune=False)
    assert kernel(torch.randn(4, 8, device=DEVICE)).shape == (4, 8)


# --------------------------------------------------------------------------------------------------------------------
# dtype, backend and the tuning options
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.int32, torch.float64, torch.bool, torch.complex64],
                         ids=["int32", "float64", "bool", "complex64"])
def test_unsupported_dtype(dtype):
    expect(DTypeError, build(dtype=dtype), str(dtype), "torch.float32", "torch.float16", "torch.bfloat16")


@pytest.mark.parametrize("dtype", ["float16", None, float, 16], ids=["str", "none", "python-float", "int"])
def test_dtype_not_a_torch_dtype(dtype):
    expect(DTypeError, build(dtype=dtype), "dtype must be a torch.dtype", "torch.float16")


def test_dtype_error_is_a_type_error():
    with pytest.raises(TypeError):
        build(dtype="float16")()


@pytest.mark.parametrize("backend", ["cuda", "Triton", "", None])
def test_bad_backend(backend):
    expect(InvalidArgumentError, build(backend=backend), "backend", "not supported", "triton")


@pytest.mark.parametrize("autotune", ["yes", 1, None, 0.0])
def test_autotune_not_bool(autotune):
    expect(InvalidArgumentError, build(autotune=autotune), "autotune must be True or False")


def test_verify_not_bool():
    expect(InvalidArgumentError, build(verify="no"), "verify")


@pytest.mark.parametrize("config", [{"search_budget": 4}, "bayesian", 8], ids=["dict", "str", "int"])
def test_tuner_config_wrong_type(config):
    expect(InvalidArgumentError, build(tuner_config=config), "tuner_config must be an amk.TunerConfig",
           type(config).__name__)


def test_tuner_config_accepted():
    kernel = amk.build_fused_kernel(["relu"], [(4, 8)], FP32, tuner_config=amk.TunerConfig(search_budget=2))
    assert kernel(torch.randn(4, 8, device=DEVICE)).shape == (4, 8)


@pytest.mark.parametrize("grid, substrings", [
    ({"BLOCK_M": [32]}, ["'BLOCK_M'", "not a tunable parameter", "BLOCK_SIZE_M", "num_warps"]),
    ({"block_size_m": [32]}, ["'block_size_m'", "accepted", "BLOCK_SIZE_M"]),
    ({"BLOCK_SIZE_M": [48]}, ["BLOCK_SIZE_M", "power of two", "48"]),
    ({"BLOCK_SIZE_N": [32, 96]}, ["BLOCK_SIZE_N", "power of two", "96"]),
    ({"num_warps": [3]}, ["num_warps", "one of 1, 2, 4, 8, 16, 32", "3"]),
    ({"SPLIT_N": [2, 3]}, ["SPLIT_N", "power of two", "3"]),
    ({"SPLIT_K": [6]}, ["SPLIT_K", "power of two", "6"]),
    ({"GROUP_SIZE_M": [8, 3]}, ["GROUP_SIZE_M", "powers of two", "3"]),
    ({"BLOCK_SIZE_N": [1 << 21]}, ["BLOCK_SIZE_N", "power of two from 1 to", str(1 << 21)]),
    ({"BLOCK_SIZE_M": []}, ["BLOCK_SIZE_M", "non-empty list of positive ints"]),
    ({"BLOCK_SIZE_M": [0]}, ["BLOCK_SIZE_M", "positive ints"]),
    ({"BLOCK_SIZE_K": [-16]}, ["BLOCK_SIZE_K", "positive ints"]),
    ({"BLOCK_SIZE_M": [32.0]}, ["BLOCK_SIZE_M", "positive ints"]),
    ({"BLOCK_SIZE_M": [True]}, ["BLOCK_SIZE_M", "positive ints"]),
    ({"BLOCK_SIZE_M": "32"}, ["BLOCK_SIZE_M", "positive ints"]),
    ({}, ["parameter_grid must be a non-empty dict"]),
    ([32, 64], ["parameter_grid must be a non-empty dict"]),
    ("BLOCK_SIZE_M=32", ["parameter_grid must be a non-empty dict"]),
], ids=["unknown-key", "lowercase-key", "not-pow2", "one-not-pow2", "warps-not-pow2", "split-n-not-pow2",
        "split-k-not-pow2", "group-not-pow2", "block-too-large", "empty-list", "zero",
        "negative", "float", "bool", "str-values", "empty-dict", "list", "str"])
def test_bad_parameter_grid(grid, substrings):
    expect(InvalidArgumentError, build(parameter_grid=grid), *substrings)


@pytest.mark.parametrize("ops, shapes, grid", [
    (["relu"], [(40, 80)], {"BLOCK_SIZE_N": [2**20]}),
    (OPS, SHAPES, {"BLOCK_SIZE_M": [1024], "BLOCK_SIZE_N": [2048]})], ids=["row-kernel", "matmul"])
def test_a_parameter_grid_whose_tile_is_larger_than_triton_takes(ops, shapes, grid):
    """Each size is allowed alone; their tile (8 x 2**20, 1024 x 2048) is past Triton's 2**20 elements, which Triton
    refused at the kernel's first launch, with its own error."""
    expect(CompilationError, build(ops, shapes, autotune=False, parameter_grid=grid), "tile", "1048576",
           "smaller block sizes")


def test_a_parameter_grid_for_rows_wider_than_16384_is_accepted():
    """One row of 32768 columns a program: a 1 x 32768 tile (the grid's values are checked one by one, not paired
    with another parameter's default)."""
    kernel = amk.build_fused_kernel(["softmax"], [(2, 32768)], FP32, autotune=False,
                                    parameter_grid={"BLOCK_SIZE_M": [1], "BLOCK_SIZE_N": [32768]})
    x = torch.randn(2, 32768, device=DEVICE)
    torch.testing.assert_close(kernel(x), torch.softmax(x, -1))


def test_parameter_grid_accepted_and_used():
    grid = {"BLOCK_SIZE_M": [16], "BLOCK_SIZE_N": [32, 64], "BLOCK_SIZE_K": 16}
    kernel = amk.build_fused_kernel(["matmul", "relu"], [(16, 32), (32, 32)], FP32, parameter_grid=grid,
                                    autotune=False)
    assert kernel.config["BLOCK_SIZE_M"] == 16 and kernel.config["BLOCK_SIZE_K"] == 16
    assert kernel.config["BLOCK_SIZE_N"] in (32, 64)


@pytest.mark.parametrize("kwargs, substrings", [
    ({"search_budget": 0}, ["search_budget", "integer >= 1", "0"]),
    ({"search_budget": -4}, ["search_budget", "-4"]),
    ({"search_budget": "8"}, ["search_budget", "'8'"]),
    ({"search_budget": 8.0}, ["search_budget", "8.0"]),
    ({"search_budget": True}, ["search_budget", "True"]),
    ({"warmup_runs": -1}, ["warmup_runs", "-1"]),
    ({"measure_runs": 0}, ["measure_runs", "0"]),
    ({"measure_runs": 2.5}, ["measure_runs", "2.5"]),
    ({"enable_warp_specialization": "yes"}, ["enable_warp_specialization", "True or False"]),
    ({"enable_warp_specialization": 1}, ["enable_warp_specialization", "True or False"]),
    ({"vendor_gemm": "no"}, ["vendor_gemm", "True or False"]),
    ({"target_cache_dir": 5}, ["target_cache_dir", "path", "5"]),
    ({"search": "grid"}, ["search", "exhaustive", "random", "bayesian", "'grid'"]),
    ({"search": None}, ["search", "bayesian"]),
    # the deprecated name of search (it warns: tests/test_strategies.py) names itself
    pytest.param({"strategy": "grid"}, ["strategy", "exhaustive", "random", "bayesian", "'grid'"],
                 marks=pytest.mark.filterwarnings("ignore::DeprecationWarning")),
    pytest.param({"strategy": None}, ["strategy", "bayesian"], marks=pytest.mark.filterwarnings("ignore::DeprecationWarning")),
])
def test_tuner_config_invalid_values(kwargs, substrings):
    expect(InvalidArgumentError, lambda: amk.TunerConfig(**kwargs), "TunerConfig", *substrings)


def test_tuner_config_valid_values():
    config = amk.TunerConfig(search_budget=1, warmup_runs=0, measure_runs=1, enable_warp_specialization=True,
                             vendor_gemm=False, target_cache_dir="/tmp/amk-test", search="exhaustive")
    assert config.search == "exhaustive" and not config.vendor_gemm


def test_tuner_config_unknown_field_is_a_type_error_naming_the_fields():
    """An argument TunerConfig does not have is a TypeError, as Python's own, and an amk error listing its fields."""
    with pytest.raises(TypeError) as raised:
        amk.TunerConfig(budget=4, bogus=1)
    assert isinstance(raised.value, errors.InvalidArgumentError), raised.value
    assert re.fullmatch(r"TunerConfig takes no argument named bogus, budget; its arguments: search_budget, "
                        r"warmup_runs, .*, search", str(raised.value)), raised.value
    with pytest.raises(errors.UnknownArgumentError, match="at most 7 positional arguments, got 8"):
        amk.TunerConfig(*range(8))
    assert amk.TunerConfig(4).search_budget == 4


# --------------------------------------------------------------------------------------------------------------------
# Call time
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kernel():
    return amk.build_fused_kernel(OPS, SHAPES, FP32, autotune=False)


@pytest.fixture()
def tensors():
    return [torch.randn(s, device=DEVICE) for s in SHAPES]


@pytest.mark.parametrize("count", [0, 1, 2, 4])
def test_call_wrong_number_of_tensors(kernel, tensors, count):
    args = (tensors + [tensors[-1]])[:count]
    expect(InvalidArgumentError, lambda: kernel(*args), "takes 3 tensors", f"got {count}")


@pytest.mark.parametrize("make, type_name", [
    (lambda t: t.tolist(), "list"),
    (lambda t: t.cpu().numpy(), "ndarray"),
    (lambda t: None, "NoneType"),
    (lambda t: 1.5, "float"),
], ids=["list", "numpy", "none", "float"])
def test_call_non_tensor_argument(kernel, tensors, make, type_name):
    tensors[0] = make(tensors[0])
    expect(InvalidArgumentError, lambda: kernel(*tensors), "argument 0", "torch.Tensor", type_name)



@pytest.mark.parametrize("transform", [torch.vmap, torch.func.grad], ids=["vmap", "grad"])
def test_torch_func_transforms_are_refused(transform):
    """torch.vmap ended in PyTorch's "Cannot access storage of BatchedTensorImpl" from inside the kernel's launch,
    torch.func.grad in autograd.Function's setup_context message."""
    kernel = amk.build_fused_kernel(["relu"], [(8, 16)], FP32, autotune=False)
    x = torch.randn(8, 16, device=DEVICE)
    if transform is torch.vmap:
        expect(InvalidArgumentError, lambda: transform(kernel)(x.expand(3, 8, 16)), "torch.func's transforms")
    else:
        expect(InvalidArgumentError, lambda: transform(lambda t: kernel(t).sum())(x), "torch.autograd")
    torch.testing.assert_close(kernel(x), torch.relu(x))  # and outside them, as before


def test_torchscript_tracing_is_refused():
    """After a first call, torch.jit.trace recorded no launch and its module returned that call's output for every
    later input."""
    kernel = amk.build_fused_kernel(["relu"], [(8, 16)], FP32, autotune=False)
    x = torch.randn(8, 16, device=DEVICE)
    kernel(x)
    expect(InvalidArgumentError, lambda: torch.jit.trace(kernel, (x,)), "torch.jit.trace", "torch.export")

@pytest.mark.parametrize("index, dtype", [(0, torch.float16), (1, torch.bfloat16), (2, torch.float64),
                                          (0, torch.int32)])
def test_call_wrong_dtype(kernel, tensors, index, dtype):
    tensors[index] = tensors[index].to(dtype)
    message = expect(DTypeError, lambda: kernel(*tensors), f"argument {index}", str(dtype), "built for torch.float32")
    # the way to another dtype, where amk builds for it (.half() leaves a kernel, an nn.Module, as it is)
    assert (f"kernel.with_dtype({dtype})" in message) == (dtype in (torch.float16, torch.bfloat16)), message


@pytest.mark.parametrize("index", [0, 1, 2])
def test_call_wrong_device(kernel, tensors, index):
    tensors[index] = tensors[index].to("meta")
    expect(DeviceError, lambda: kernel(*tensors), f"argument {index}", "meta", kernel.device.type)


@pytest.mark.parametrize("index, shape", [(0, (32, 65)), (0, (2, 32, 64)), (0, (64,)), (1, (64, 49)), (2, (49,)),
                                          (2, (1, 48))],
                         ids=["x-K", "x-rank", "x-rank1", "w-N", "bias-N", "bias-rank"])
def test_call_wrong_non_batch_shape(kernel, tensors, index, shape):
    tensors[index] = torch.randn(shape, device=DEVICE)
    message = expect(ShapeError, lambda: kernel(*tensors), f"argument {index}", str(shape), str(SHAPES[index]))
    assert "leading dims" in message


def test_call_weight_contraction_change(kernel, tensors):
    """A weight whose K differs from x's K cannot be bound, whatever the check that catches it."""
    tensors[1] = torch.randn(40, 48, device=DEVICE)
    expect(ShapeError, lambda: kernel(*tensors), "40")


def test_call_batch_dims_that_disagree():
    ops, shapes = ["matmul", "add"], [(32, 64), (64, 48), (32, 48)]
    fused = amk.build_fused_kernel(ops, shapes, FP32, autotune=False)
    expect(ShapeError, lambda: fused(*(torch.randn(s, device=DEVICE) for s in [(20, 64), (64, 48), (32, 48)])),
           "add", "20", "32")


@pytest.mark.parametrize("shape", [(0, 64), (0, 0)])
def test_call_empty_tensor(kernel, tensors, shape):
    tensors[0] = torch.randn(shape, device=DEVICE)
    expect(ShapeError, lambda: kernel(*tensors), "argument 0", "empty")


def test_a_tensor_with_the_negative_bit_is_read_as_its_values(kernel, tensors):
    """``z.conj().imag`` is a float tensor whose memory holds the negated values (PyTorch's negative bit): the kernel
    read the memory and computed relu(-x @ w + b), on the checked path and on the hot path after a plain call."""
    negated = torch.randn(*SHAPES[0], dtype=torch.complex64, device=DEVICE).conj().imag
    assert negated.is_neg()
    for first in (negated, tensors[0]):  # the checked path, then the hot path of the same shapes
        kernel(first, *tensors[1:])
        expected = torch.relu(negated.double() @ tensors[1].double() + tensors[2].double())
        torch.testing.assert_close(kernel(negated, *tensors[1:]).double(), expected, rtol=1e-4, atol=1e-4)


def test_a_view_whose_offsets_pass_2_to_the_31_is_read_right():
    """Eight columns of a tensor of more than 2**31 elements (allocated, never touched but for them): the kernel, built
    for [3, 8] (32-bit offsets), read row 2 at 2 * (2**30 + 8), wrapped past 2**31 (a segfault in the interpreter).
    The launcher reads such a view through a copy; on the checked path, then on the hot path."""
    kernel = amk.build_fused_kernel(["relu"], [(3, 8)], torch.float16, autotune=False)
    backing = torch.empty(3, 2**30 + 8, dtype=torch.float16, device=DEVICE)
    x = backing[:, :8]
    x.copy_(torch.randn(3, 8, device=DEVICE))
    for _ in range(2):
        assert torch.equal(kernel(x), torch.relu(x))


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("make, name", [(lambda t: t.to_sparse(), "sparse_coo"), (lambda t: t.to_sparse_csr(),
                                        "sparse_csr")], ids=["coo", "csr"])
def test_call_with_a_sparse_tensor(kernel, tensors, make, name):
    tensors[0] = make(tensors[0])
    expect(InvalidArgumentError, lambda: kernel(*tensors), "argument 0", name, "dense")


def test_call_with_keyword_arguments(kernel, tensors):
    expect(InvalidArgumentError, lambda: kernel(*tensors[:2], bias=tensors[2]), "positional", "'bias'")


def test_a_kernel_keeps_its_parameter_grid_as_checked():
    """A kernel kept the caller's grid: a copy built after the caller changed it got another configuration, and one
    given as a read-only mapping could not be copied or pickled."""
    import copy
    import pickle
    import types

    grid = {"BLOCK_SIZE_M": [16]}
    fused = amk.build_fused_kernel(OPS, SHAPES, FP32, autotune=False, parameter_grid=grid)
    grid["BLOCK_SIZE_M"] = [64]
    assert copy.deepcopy(fused).config["BLOCK_SIZE_M"] == fused.config["BLOCK_SIZE_M"] == 16
    frozen = amk.build_fused_kernel(OPS, SHAPES, FP32, autotune=False,
                                    parameter_grid=types.MappingProxyType({"BLOCK_SIZE_M": [16]}))
    assert pickle.loads(pickle.dumps(frozen)).config["BLOCK_SIZE_M"] == 16


def test_call_still_works_after_errors(kernel, tensors):
    for bad in ([tensors[0].half(), *tensors[1:]], tensors[:2]):
        with pytest.raises(AmkError):
            kernel(*bad)
    output = kernel(*tensors)
    expected = torch.relu(tensors[0].double() @ tensors[1].double() + tensors[2].double())
    torch.testing.assert_close(output.double(), expected, rtol=1e-4, atol=1e-4)


def test_inputs_requiring_grad_give_an_output_with_pytorchs_gradients(kernel, tensors):
    """Not an error: with grad mode on, the output carries a grad history whose backward recomputes the chain."""
    leaves = [t.clone().requires_grad_() for t in tensors]
    kernel(*leaves).sum().backward()
    reference = [t.double().requires_grad_() for t in tensors]
    torch.relu(reference[0] @ reference[1] + reference[2]).sum().backward()
    for leaf, want in zip(leaves, reference):
        torch.testing.assert_close(leaf.grad.double(), want.grad, rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        assert not kernel(*leaves).requires_grad


def test_bad_inputs_from_one_thread_leave_the_others_correct(kernel, tensors):
    """Errors are raised in the thread that passed the bad tensors; calls in other threads at the same time are
    unaffected."""
    import threading

    expected = torch.relu(tensors[0] @ tensors[1] + tensors[2])
    outcomes: dict[int, object] = {}
    start = threading.Barrier(4)

    def call(thread: int) -> None:
        start.wait()
        try:
            arguments = [tensors[0].half(), *tensors[1:]] if thread == 0 else tensors
            outcomes[thread] = [kernel(*arguments) for _ in range(3)]
        except AmkError as error:
            outcomes[thread] = error

    threads = [threading.Thread(target=call, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert isinstance(outcomes[0], DTypeError)
    for index in (1, 2, 3):
        for output in outcomes[index]:
            torch.testing.assert_close(output, expected, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------------------------------------------------
# Verification helpers and the error classes
# --------------------------------------------------------------------------------------------------------------------


def test_verify_reference_not_callable(kernel):
    expect(InvalidArgumentError, lambda: amk.verify(kernel, 5), "reference_fn must be callable")


def test_verify_unsupported_dtype(kernel):
    from amk.verification import reference_for

    expect(InvalidArgumentError, lambda: amk.verify(kernel, reference_for(kernel.ops, 3), dtypes=[torch.int32]),
           "cannot verify dtype torch.int32", "torch.float16")


def test_verify_plain_callable_needs_inputs():
    expect(InvalidArgumentError, lambda: amk.verify(torch.relu, torch.relu), "needs inputs=")


@pytest.mark.parametrize("call, substrings", [
    (lambda k, t: amk.verify(None, torch.relu, inputs=t), ["kernel must be", "NoneType"]),
    (lambda k, t: amk.verify(k, torch.relu, dtypes=torch.float16), ["dtypes must be", "list of torch dtypes"]),
    (lambda k, t: amk.verify(k, torch.relu, dtypes=[]), ["dtypes must be"]),
    (lambda k, t: amk.verify(torch.relu, torch.relu, inputs=[]), ["inputs must be", "non-empty list"]),
    (lambda k, t: amk.verify(k, torch.relu, inputs=t[0]), ["inputs must be", "Tensor"]),
    (lambda k, t: amk.verify(k, torch.relu, raise_on_failure="no"), ["raise_on_failure must be True or False"]),
    (lambda k, t: amk.verify(lambda x: (x, x), torch.relu, inputs=t[:1]), ["returned 2 tensor(s)", "reference_fn 1"]),
    (lambda k, t: amk.verify(torch.relu, lambda x: x.sum().item(), inputs=t[:1]), ["reference_fn returned a float"]),
    (lambda k, t: amk.verify(k, lambda *inputs: None), ["reference_fn returned a NoneType"]),  # no ``return``
    (lambda k, t: amk.verify(lambda x: (x, x), lambda x: (x, None), inputs=t[:1]), ["reference_fn returned a None"]),
    # these raised PyTorch's errors from inside the comparison, or compared the real parts alone
    (lambda k, t: amk.verify(torch.relu, torch.relu, inputs=[torch.randn(0, 4)]), ["inputs[0] is empty", "dense"]),
    (lambda k, t: amk.verify(torch.relu, torch.relu, inputs=[torch.randn(2, 4, device="meta")]), ["meta device"]),
    (lambda k, t: amk.verify(torch.relu, torch.relu, inputs=[torch.eye(3).to_sparse()]), ["inputs[0]", "not a dense"]),
    (lambda k, t: amk.verify(torch.neg, torch.neg, inputs=[torch.randn(3, dtype=torch.complex64)]), ["complex"]),
], ids=["kernel-none", "dtypes-one", "dtypes-empty", "inputs-empty", "inputs-tensor", "raise_on_failure",
        "outputs-count", "reference-float", "reference-none", "reference-none-among-outputs", "input-empty",
        "input-meta", "input-sparse", "input-complex"])
def test_verify_bad_arguments(kernel, tensors, call, substrings):
    """These raised TypeError, IndexError or AttributeError from inside verify, or a count of a tensor's rows."""
    expect(InvalidArgumentError, lambda: call(kernel, tensors), *substrings)


def test_verify_compares_each_output_of_a_callable(tensors):
    report = amk.verify(lambda x: (torch.relu(x), x * 2), lambda x: (torch.relu(x), x * 2), inputs=tensors[:1])
    assert len(report.results) == 2 and report.passed



def test_verify_casts_given_inputs_to_each_dtype(kernel, tensors):
    """Inputs of the kernel's dtype with other dtypes to verify: each variant gets them cast to its dtype (they were
    passed as they were, and the fp32 variant's dtype check blamed the user's kernel)."""
    from amk.verification import reference_for

    report = amk.verify(kernel, reference_for(kernel.ops, 3), inputs=tensors, dtypes=[torch.float32, torch.float16])
    assert [result.dtype for result in report.results] == [torch.float32, torch.float16] and report.passed


@pytest.mark.parametrize("data", [None, {}, {"results": [1]}, {"results": [{"dtype": "nope"}]},
                                  {"results": [{"dtype": "cuda", "max_abs_error": 0, "mean_abs_error": 0,
                                                "relative_l2_error": 0, "tolerance": 1, "skipped": None}]}],
                         ids=["none", "empty", "not-a-result", "unknown-dtype", "not-a-dtype"])
def test_verification_report_from_something_else(data):
    """These raised TypeError, KeyError or AttributeError from inside from_dict."""
    expect(InvalidArgumentError, lambda: amk.VerificationReport.from_dict(data), "VerificationReport.to_dict()")

def test_verify_failure_raises_verification_error(kernel):
    from amk.verification import reference_for

    reference = reference_for(kernel.ops, 3)
    with pytest.raises(errors.VerificationError) as info:
        amk.verify(kernel, lambda *t: reference(*t) + 1.0)
    assert "FAILED" in str(info.value)
    assert info.value.report is not None and not info.value.report.passed


def test_error_hierarchy():
    for cls in (UnsupportedOpError, ShapeError, DTypeError, DeviceError, InvalidArgumentError, errors.FusionError,
                errors.CompilationError, errors.VerificationError):
        assert issubclass(cls, AmkError)
    assert issubclass(ShapeError, ValueError) and issubclass(DTypeError, TypeError)
    assert issubclass(errors.VerificationError, AssertionError)


@pytest.mark.skipif(fp8_supported(), reason="this GPU runs fp8 kernels")
@pytest.mark.parametrize("ops,dtype", [(["relu"], torch.float8_e4m3fn),
                                       ([("cast", {"dtype": torch.float8_e4m3fn}), "relu"], torch.float32)],
                         ids=["fp8 chain", "cast to fp8"])
def test_fp8_where_it_cannot_run_is_refused(ops, dtype):
    """Triton's CPU interpreter converts to fp8 wrongly (0.49 became 0.25; a matmul's relative error 0.14): the
    kernels ran silently, and verification skipped fp8."""
    with pytest.raises(DTypeError, match="fp8 .* need a CUDA GPU of compute capability 8.9 or newer"):
        amk.build_fused_kernel(ops, [(4, 8)], dtype, autotune=False)


def test_a_shape_bound_to_an_optional_operand_is_said_so():
    """rmsnorm's optional weight took the matmul's (32, 16), and the error named only the weight's rank."""
    with pytest.raises(ShapeError, match=r"rmsnorm took 1 optional operand\(s\)"):
        amk.build_fused_kernel(["rmsnorm", "matmul", "layernorm"], [(4, 32), (32, 16), (16,)], FP32, autotune=False)


def test_rotate_half_of_an_odd_last_dim():
    expect(UnsupportedOpError, build(["rotate_half"], [(32, 75)]), "rotate_half", "known even number", "[32, 75]")
