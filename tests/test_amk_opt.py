"""The ``amk-opt`` command line (and stock ``xdsl-opt`` through the ``xdsl.universe`` entry point), run as
subprocesses the way users run them."""

from __future__ import annotations

import re
import subprocess

import pytest
from conftest import REPO, installed_script

AMK_OPT = "amk-opt"
XDSL_OPT = "xdsl-opt"
PIPELINE = "amk-fuse,amk-tile,amk-stage,amk-emit-triton"
PASSES = PIPELINE.split(",")

CHAIN = """\
func.func @chain(%x : !tensor_op.tensor<[37, 100], f32>, %w : !tensor_op.tensor<[100, 75], f32>, %b : !tensor_op.tensor<[75], f32>) -> !tensor_op.tensor<[37, 75], f32> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[37, 100], f32>, !tensor_op.tensor<[100, 75], f32>) -> !tensor_op.tensor<[37, 75], f32>
  %1 = tensor_op.add %0, %b : (!tensor_op.tensor<[37, 75], f32>, !tensor_op.tensor<[75], f32>) -> !tensor_op.tensor<[37, 75], f32>
  %2 = tensor_op.gelu %1 {approximate = "tanh"} : !tensor_op.tensor<[37, 75], f32>
  func.return %2 : !tensor_op.tensor<[37, 75], f32>
}
"""

SYMBOLIC = """\
func.func @norm(%x : !tensor_op.tensor<[B*S, 100], f16>, %w : !tensor_op.tensor<[100, 75], f16>, %g : !tensor_op.tensor<[75], f16>) -> !tensor_op.tensor<[B*S, 75], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[B*S, 100], f16>, !tensor_op.tensor<[100, 75], f16>) -> !tensor_op.tensor<[B*S, 75], f16>
  %1 = tensor_op.rmsnorm %0 weight %g {eps = 1.0e-06 : f64} : !tensor_op.tensor<[B*S, 75], f16> weight !tensor_op.tensor<[75], f16> -> !tensor_op.tensor<[B*S, 75], f16>
  func.return %1 : !tensor_op.tensor<[B*S, 75], f16>
}
"""

BAD_K = CHAIN.replace("%w : !tensor_op.tensor<[100, 75], f32>", "%w : !tensor_op.tensor<[64, 75], f32>").replace(
    "!tensor_op.tensor<[100, 75], f32>) -> !tensor_op.tensor<[37, 75], f32>",
    "!tensor_op.tensor<[64, 75], f32>) -> !tensor_op.tensor<[37, 75], f32>")


def run(tool, *args, input_text=None):
    return subprocess.run([installed_script(tool), *map(str, args)], capture_output=True, text=True, timeout=300,
                          input=input_text)


def ok(result):
    assert result.returncode == 0, f"exit {result.returncode}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


def fails_cleanly(result):
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr and 'File "' not in result.stderr, result.stderr
    assert result.stderr.strip(), "no diagnostic on stderr"
    return result.stderr


@pytest.fixture()
def chain_file(tmp_path):
    path = tmp_path / "chain.mlir"
    path.write_text(CHAIN)
    return path


def test_tools_are_installed():
    for tool in (AMK_OPT, XDSL_OPT):
        installed_script(tool)  # fails the test, naming the tool, where it is missing


def test_parse_and_print_round_trip(chain_file, tmp_path):
    printed = ok(run(AMK_OPT, chain_file))
    assert "tensor_op.matmul" in printed and 'tensor_op.gelu %1 {approximate = "tanh"}' in printed
    again = tmp_path / "again.mlir"
    again.write_text(printed)
    assert ok(run(AMK_OPT, again)).rstrip() == printed.rstrip()


def test_full_pipeline(chain_file):
    output = ok(run(AMK_OPT, "-p", PIPELINE, chain_file))
    assert output.count("memory_staged.kernel @") == 1
    assert "tiled_loop.launch @fused_0" in output
    assert "triton_source" in output
    assert "tensor_op.matmul" not in output  # lowered away


# amk-opt with ``import torch`` made to fail: every pass and target loaded, then the pipeline run on a file.
WITHOUT_TORCH = """\
import sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            raise ImportError(f"{name} imported")

sys.meta_path.insert(0, NoTorch())
from amk import opt
for load in [*opt.AMK_PASSES.values(), *opt.AMK_TARGETS.values()]:
    load()
sys.argv = ["amk-opt", *sys.argv[1:]]
opt.main()
"""


def test_passes_run_without_pytorch(chain_file):
    """The IR, its passes and the emitters import no PyTorch (1.5 s of each amk-opt run, half of it, and of every lit
    test): what the runtime, the reference and the frontend need of it stays with them."""
    import sys

    result = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, "-p", PIPELINE, "-t",
                             "triton", str(chain_file)], capture_output=True, text=True, timeout=300)
    assert "@triton.jit" in ok(result)

def test_pipeline_stages_one_at_a_time(chain_file, tmp_path):
    """Each pass's output is valid input for the next invocation."""
    path = chain_file
    for index, name in enumerate(PASSES):
        output = ok(run(AMK_OPT, "-p", name, path))
        path = tmp_path / f"after-{index}.mlir"
        path.write_text(output)
    assert "memory_staged.kernel" in path.read_text()


def test_triton_target_prints_python_that_compiles(chain_file):
    source = ok(run(AMK_OPT, "-p", PIPELINE, "-t", "triton", chain_file))
    compile(source, "<amk-opt -t triton>", "exec")
    assert "@triton.jit" in source and "def launch(" in source
    assert "tl.dot(" in source
    assert re.search(r"^import triton\.language as tl$", source, re.M)


def test_triton_target_on_symbolic_shapes(tmp_path):
    path = tmp_path / "symbolic.mlir"
    path.write_text(SYMBOLIC)
    source = ok(run(AMK_OPT, "-p", PIPELINE, "-t", "triton", path))
    compile(source, "<amk-opt -t triton>", "exec")
    assert "@triton.jit" in source


def test_triton_target_from_staged_ir(chain_file, tmp_path):
    """``-t triton`` on memory_staged IR emits the kernel without running the emit pass first."""
    staged = tmp_path / "staged.mlir"
    staged.write_text(ok(run(AMK_OPT, "-p", "amk-fuse,amk-tile,amk-stage", chain_file)))
    source = ok(run(AMK_OPT, "-t", "triton", staged))
    compile(source, "<amk-opt -t triton>", "exec")
    assert "@triton.jit" in source


def test_print_ir_after_all(chain_file):
    output = ok(run(AMK_OPT, "-p", PIPELINE, "--print-ir-after-all", chain_file))
    headers = re.findall(r"^// -----// IR after (\S+) //----- //$", output, re.M)
    assert headers == ["input", *PASSES]
    sections = re.split(r"^// -----// IR after \S+ //----- //$", output, flags=re.M)[1:]
    for name, section in zip(headers, sections):
        assert section.strip().startswith("builtin.module"), name
    assert "tensor_op.fused" in sections[1] and "tiled_loop.kernel" in sections[2]
    assert "memory_staged.kernel" in sections[3]


@pytest.mark.parametrize("body", [
    "%1 = tensor_op.add %1, %x : ({t}, {t}) -> {t}\n  func.return %1 : {t}",  # defined from itself
    "%b = tensor_op.relu %a : {t}\n  %a = tensor_op.exp %x : {t}\n  func.return %b : {t}",  # lines out of order
])
def test_a_value_read_before_it_is_defined_is_refused_before_any_pass(tmp_path, body):
    """Such IR verified, then looped in amk-tile (RecursionError) or failed an assertion while lowering; printed back
    without passes, it went through unremarked."""
    t = "!tensor_op.tensor<[8, 8], f32>"
    path = tmp_path / "misordered.mlir"
    path.write_text(f"func.func @f(%x : {t}) -> {t} {{\n  {body.format(t=t)}\n}}\n")
    for args in ([], ["-p", PIPELINE, "-t", "triton"]):
        message = fails_cleanly(run(AMK_OPT, *args, path))
        assert "before it is defined" in message, message


def test_an_empty_dump_ir_dir_is_refused(chain_file):
    """``--dump-ir-dir ""`` dumped nothing, silently."""
    assert "must be a directory path" in fails_cleanly(run(AMK_OPT, "-p", PIPELINE, "--dump-ir-dir", "", chain_file))


def test_a_file_as_dump_ir_dir_is_refused_by_name(chain_file):
    """A file's path gave only the OS's ``File exists``, which does not say that the flag takes a directory."""
    message = fails_cleanly(run(AMK_OPT, "-p", PIPELINE, "--dump-ir-dir", chain_file, chain_file))
    assert "must be a directory" in message and str(chain_file) in message


def test_dump_ir_dir(chain_file, tmp_path):
    directory = tmp_path / "dump"
    ok(run(AMK_OPT, "-p", PIPELINE, "--dump-ir-dir", directory, chain_file))
    names = sorted(p.name for p in directory.iterdir())
    assert names == [f"{i:02d}-{label}.mlir" for i, label in enumerate(["input", *PASSES])]
    for path in sorted(directory.iterdir()):
        text = path.read_text()
        assert text.startswith("builtin.module"), path.name
        reprinted = ok(run(AMK_OPT, path))
        assert reprinted.rstrip() == text.rstrip(), path.name


def test_bad_ir_matmul_k_mismatch(tmp_path):
    path = tmp_path / "bad.mlir"
    path.write_text(BAD_K)
    result = run(AMK_OPT, path)
    assert result.returncode == 1
    stderr = fails_cleanly(result)
    assert "tensor_op.matmul" in stderr and "100" in stderr and "64" in stderr
    assert stderr.startswith("amk-opt: error:")


def test_bad_ir_through_the_pipeline(tmp_path):
    path = tmp_path / "bad.mlir"
    path.write_text(BAD_K)
    result = run(AMK_OPT, "-p", PIPELINE, path)
    assert result.returncode == 1
    assert "tensor_op.matmul" in fails_cleanly(result)


@pytest.mark.parametrize("text, expected", [
    ("func.func @f(%x : !tensor_op.tensor<[4, 4], f32>) {\n  %0 = tensor_op.frob %x : !tensor_op.tensor<[4, 4], f32>"
     "\n  func.return\n}\n", "tensor_op.frob is not registered"),
    ("func.func @f(%x : !tensor_op.tensor<[4, 4], f32>) {\n  %0 = tensor_op.relu %x : \n}\n", "type expected"),
    ("func.func @f(%x : !tensor_op.tensor<[4, 4], f32>, %g : !tensor_op.tensor<[5], f32>) {\n"
     "  %0 = tensor_op.rmsnorm %x weight %g {eps = 1.0e-05 : f64} : !tensor_op.tensor<[4, 4], f32> weight "
     "!tensor_op.tensor<[5], f32> -> !tensor_op.tensor<[4, 4], f32>\n  func.return\n}\n", "tensor_op.rmsnorm"),
], ids=["unknown-op", "syntax", "norm-weight-mismatch"])
def test_bad_ir_other_errors(tmp_path, text, expected):
    path = tmp_path / "bad.mlir"
    path.write_text(text)
    result = run(AMK_OPT, path)
    assert result.returncode == 1
    assert expected in fails_cleanly(result)


def test_bad_pass_option(chain_file, tmp_path):
    tiled = tmp_path / "tiled.mlir"
    tiled.write_text(ok(run(AMK_OPT, "-p", "amk-fuse,amk-tile", chain_file)))
    stderr = fails_cleanly(run(AMK_OPT, "-p", "amk-stage{block_m=48}", tiled))
    assert "48" in stderr and "power of two" in stderr


def test_stage_of_a_kernel_that_does_not_exist(chain_file, tmp_path):
    tiled = tmp_path / "tiled.mlir"
    tiled.write_text(ok(run(AMK_OPT, "-p", "amk-fuse,amk-tile", chain_file)))
    stderr = fails_cleanly(run(AMK_OPT, "-p", "amk-stage{kernel=typo}", tiled))
    assert "amk-stage: no kernel named 'typo'; kernels: fused_0" in stderr, stderr
    assert "memory_staged.kernel" in ok(run(AMK_OPT, "-p", "amk-stage{kernel=fused_0}", tiled))



@pytest.mark.parametrize("option, message", [
    ("num_warps=3", "amk-stage: num_warps must be one of 1, 2, 4, 8, 16, 32, got 3"),
    ("block_m=48", "amk-stage: block_m must be a power of two"),
    ("num_stages=-1", "amk-stage: num_stages must be a positive int, got -1"),
    ("tma=2", "amk-stage: tma must be 0 or 1, got 2"),
])
def test_stage_options_are_checked_as_a_configuration_is(chain_file, tmp_path, option, message):
    """Each option other than 0 (the heuristic's) is checked as a tuned configuration's field, named as the option."""
    tiled = tmp_path / "tiled.mlir"
    tiled.write_text(ok(run(AMK_OPT, "-p", "amk-fuse,amk-tile", chain_file)))
    assert message in fails_cleanly(run(AMK_OPT, "-p", f"amk-stage{{{option}}}", tiled))

def test_unknown_pass(chain_file):
    stderr = fails_cleanly(run(AMK_OPT, "-p", "amk-frobnicate", chain_file))
    assert "amk-frobnicate" in stderr


@pytest.mark.parametrize("pipeline", ["amk-fuse{", ",,", "amk fuse", "amk-fuse}"])
def test_a_malformed_pipeline(chain_file, pipeline):
    """xDSL's parse error of the -p string is a BaseException: it ended amk-opt with a 30-line traceback."""
    stderr = fails_cleanly(run(AMK_OPT, "-p", pipeline, chain_file))
    assert stderr.startswith("amk-opt: error: Error parsing pass pipeline specification"), stderr


def test_missing_input_file(tmp_path):
    stderr = fails_cleanly(run(AMK_OPT, tmp_path / "missing.mlir"))
    assert "missing.mlir" in stderr


def test_reads_stdin():
    output = ok(run(AMK_OPT, "-p", "amk-fuse", input_text=CHAIN))
    assert "tensor_op.fused" in output


def test_xdsl_opt_parses_tensor_op(chain_file):
    output = ok(run(XDSL_OPT, chain_file))
    assert "tensor_op.matmul" in output and "tensor_op.gelu" in output


def test_xdsl_opt_runs_amk_passes(chain_file):
    output = ok(run(XDSL_OPT, "-p", "amk-fuse,amk-tile", chain_file))
    assert "tiled_loop.kernel" in output


def test_triton_target_without_pipeline(chain_file):
    result = run(AMK_OPT, "-t", "triton", chain_file)
    if result.returncode == 0:
        assert "@triton.jit" in result.stdout
        compile(result.stdout, "<amk-opt -t triton>", "exec")
    else:
        assert "amk-" in fails_cleanly(result)


def test_every_registered_pass_has_a_lit_test():
    """Each pass amk-opt offers has FileCheck tests of its own under tests/filecheck/passes/<name>/."""
    from amk.opt import AMK_PASSES

    missing = [name for name in AMK_PASSES if not list((REPO / "tests" / "filecheck" / "passes" / name).glob("*.mlir"))]
    assert not missing, f"passes without a lit test: {missing}"
