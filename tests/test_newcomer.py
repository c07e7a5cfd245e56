"""What a newcomer meets first (issue 22, "newcomer friction"): docs whose commands work from a fresh shell, readable
tutorial code, no warnings on ordinary inputs, a verification report that reads right, and command-line tools that
say what went wrong without a traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings

import pytest
import torch
from conftest import CPU_ONLY, REPO, installed_script

import amk
from amk.frontend.compile import STATS
from amk.verification import DTypeResult

TUTORIAL = REPO / "docs" / "tutorial-fusion-pass.md"
CLI_DOC = REPO / "docs" / "cli.md"
IR_DUMPS = REPO / "docs" / "ir-dumps.md"
ACTIVATE = "source .venv/bin/activate"
# A command of .venv run by its bare name: it works only once the environment is active.
BARE_COMMAND = re.compile(r"^(\w+=\S+ )*(python|amk-opt|amk|lit|pytest|mkdocs|xdsl-opt)\b")

NOTHING_FUSED = """\
func.func @f(%x : !tensor_op.tensor<[4, 8], f32>) -> !tensor_op.tensor<[4, 8], f32> {
  %0 = tensor_op.relu %x : !tensor_op.tensor<[4, 8], f32>
  func.return %x : !tensor_op.tensor<[4, 8], f32>
}
"""
CHAIN = """\
func.func @f(%x : !tensor_op.tensor<[16, 32], f32>, %w : !tensor_op.tensor<[32, 8], f32>) -> !tensor_op.tensor<[16, 8], f32> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[16, 32], f32>, !tensor_op.tensor<[32, 8], f32>) -> !tensor_op.tensor<[16, 8], f32>
  %1 = tensor_op.relu %0 : !tensor_op.tensor<[16, 8], f32>
  func.return %1 : !tensor_op.tensor<[16, 8], f32>
}
"""


def fenced_blocks(text: str, lang: str) -> list[tuple[int, str]]:
    """(offset in ``text``, body) of every ```` ```lang ```` block."""
    return [(m.start(), m.group(1)) for m in re.finditer(rf"^```{lang}[^\n]*\n(.*?)^```$", text, re.M | re.S)]


def amk_opt(*args, input_text: str) -> subprocess.CompletedProcess:
    return subprocess.run([installed_script("amk-opt"), *args], input=input_text, capture_output=True, text=True, timeout=120)


def into_closed_pipe(command: list[str]) -> subprocess.CompletedProcess:
    """Run ``command`` with stdout a pipe that nobody reads any more (``command | head -1`` once head has quit)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(command, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)


# 1. The docs' commands work from a fresh shell: the environment is activated before the first bare command.
@pytest.mark.parametrize("page", [TUTORIAL, CLI_DOC, IR_DUMPS], ids=lambda p: p.name)
def test_docs_activate_the_environment_before_bare_commands(page):
    text = page.read_text()
    bare = [(offset, line) for offset, body in fenced_blocks(text, "bash") for line in body.splitlines()
            if BARE_COMMAND.match(line.strip())]
    assert bare, f"{page.name} shows no command at all: this test looks at the wrong thing"
    activated_at = text.find(ACTIVATE)
    assert activated_at >= 0, f"{page.name} runs {bare[0][1]!r} but never says `{ACTIVATE}`"
    early = [line for offset, line in bare if offset < activated_at]
    assert not early, f"{page.name} runs {early} before it says `{ACTIVATE}`"


# 2. The tutorial's code is inline (readable in the repository view), each block a checked copy of its file.
def test_tutorial_code_is_inline_not_included():
    text = TUTORIAL.read_text()
    assert "--8<--" not in text, "a snippet include shows as a bare '--8<--' line in the repository view"
    assert text.count("<!-- inline copy of examples/tutorial_fusion_pass.py:") >= 8


# 2. The amk.compile script of the tutorial runs as the tutorial says to run it.
def test_tutorial_compile_script_runs_as_written(tmp_path):
    text = TUTORIAL.read_text()
    script = next(body for _, body in fenced_blocks(text, "py") if "import tutorial_fusion_pass" in body)
    command = next(line.strip() for _, body in fenced_blocks(text, "bash") for line in body.splitlines()
                   if "quick_gelu_model.py" in line)
    assert command == "PYTHONPATH=examples python quick_gelu_model.py"
    (tmp_path / "quick_gelu_model.py").write_text(script)
    # examples first, as the command says; an inherited PYTHONPATH stays after it (where amk is installed with
    # pip install --target, as on the GPU machine)
    python_path = os.pathsep.join(filter(None, [str(REPO / "examples"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": python_path, "AMK_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "quick_gelu_model.py"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    dump = tmp_path / "dumps" / "graph01_fused_0" / "01-tutorial-fuse-quick-gelu.mlir"
    assert "tutorial.quick_gelu" in dump.read_text()


# 3. Linear + LayerNorm under amk.compile on the CPU: no numpy warning from the padding rows of partial tiles.
@CPU_ONLY
def test_linear_layernorm_compiles_and_runs_without_warnings():
    class LinearNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(64, 96)
            self.norm = torch.nn.LayerNorm(96)

        def forward(self, x):
            return self.norm(self.fc(x))

    torch.manual_seed(0)
    model = LinearNorm()
    x = torch.randn(4, 16, 64)  # 64 rows: a symbolic row count tiled by 128 leaves padding rows
    calls_before = STATS.kernel_calls
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=DeprecationWarning)  # (torch's own, not ours)
        compiled = amk.compile(model)
        y = compiled(x)
    assert STATS.kernel_calls > calls_before, "the model ran in PyTorch, not in an amk kernel"
    torch.testing.assert_close(y, model(x), rtol=1e-4, atol=1e-4)


@CPU_ONLY
@pytest.mark.parametrize("ops,shapes", [
    (["matmul", "add_bias", "layernorm"], [(100, 64), (64, 96), (96,), (96,), (96,)]),
    (["matmul", "softmax"], [(100, 64), (64, 96)]),
    (["matmul", "logsumexp"], [(100, 64), (64, 96)]),
    (["rmsnorm"], [(37, 300), (300,)]),
])
def test_kernels_with_partial_row_tiles_run_without_warnings(ops, shapes):
    """build_fused_kernel's kernels too: rows that do not fill the last tile (100 rows in tiles of 16 or more)."""
    kernel = amk.build_fused_kernel(ops, shapes, torch.float32, autotune=False)
    tensors = [torch.randn(shape) for shape in shapes]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernel(*tensors)
        kernel(*tensors)  # the hot path as well


# 4. The verification line says that the tolerance bounds the relative L2 error.
def test_verification_line_compares_rel_l2_with_the_tolerance():
    passed = DTypeResult(torch.float16, 1.925e-3, 2.3e-4, 2.7e-4, 1e-3).line()
    assert passed.endswith("rel_l2=2.700e-04 <= 1e-03  ok"), passed
    assert "max_abs=1.925e-03" in passed and "(tolerance" not in passed
    failed = DTypeResult(torch.float32, 1e-6, 1e-7, 3e-5, 1e-5).line()
    assert failed.endswith("rel_l2=3.000e-05 > 1e-05  FAILED"), failed


# 5. -t triton after a pipeline that fused nothing says so, instead of "lower first".
def test_triton_target_says_nothing_was_fused():
    result = amk_opt("-p", "amk-fuse,amk-tile,amk-stage", "-t", "triton", input_text=NOTHING_FUSED)
    assert result.returncode == 1
    assert result.stderr.startswith("amk-opt: error: no kernel to emit: amk-fuse fused nothing"), result.stderr
    assert "lower first" not in result.stderr and "Traceback" not in result.stderr


def test_triton_target_names_the_passes_still_missing():
    result = amk_opt("-p", "amk-fuse", "-t", "triton", input_text=CHAIN)
    assert result.returncode == 1
    assert "the IR after -p amk-fuse is fused tensor_op IR: add amk-tile,amk-stage" in result.stderr, result.stderr


# 6. A lowering pass given IR of the wrong level says which level it reads, with no traceback.
@pytest.mark.parametrize("pipeline, message", [
    ("amk-stage", "amk-stage lowers tiled_loop.kernel ops (made by amk-tile), and its input has none: the input is "
                  "tensor_op IR; run -p amk-fuse,amk-tile,amk-stage"),
    ("amk-tile", "amk-tile lowers tensor_op.fused ops (made by amk-fuse), and its input has none: the input is "
                 "tensor_op IR; run -p amk-fuse,amk-tile"),
    ("amk-fuse,amk-stage", "amk-stage lowers tiled_loop.kernel ops (made by amk-tile), and its input has none: the "
                           "input is fused tensor_op IR; run -p amk-tile,amk-stage"),
])
def test_lowering_pass_on_the_wrong_level_is_an_error(pipeline, message):
    result = amk_opt("-p", pipeline, input_text=CHAIN)
    assert result.returncode == 1, result.stdout
    assert result.stderr == f"amk-opt: error: {message}\n"


def test_pipeline_that_fuses_nothing_still_prints_ir():
    """The level check does not refuse a pipeline whose fusion found nothing: the passes after it had nothing to
    lower, which is not an error for -t mlir."""
    result = amk_opt("-p", "amk-fuse,amk-tile,amk-stage", input_text=NOTHING_FUSED)
    assert result.returncode == 0, result.stderr
    assert "tensor_op.relu" in result.stdout


# 7. docs/ir-dumps.md shows how to get the chain.mlir it uses, and that command writes the page's tensor_op IR.
def test_ir_dumps_page_makes_its_chain_mlir(tmp_path):
    text = IR_DUMPS.read_text()
    block = next(body for _, body in fenced_blocks(text, "bash") if "chain.mlir" in body)
    first_use = block.index("chain.mlir")
    command = block[:block.index("\n", first_use)]
    assert command.rstrip().endswith("> chain.mlir"), "the first command that names chain.mlir should write it"
    scripts = os.path.dirname(installed_script("amk-opt"))
    env = {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, check=True, timeout=120)
    documented = next(body for _, body in fenced_blocks(text, 'mlir title="Output"') if "@fused_chain(" in body)
    assert (tmp_path / "chain.mlir").read_text().strip() == documented.strip()


# 8. A lit test about an open bug is marked XFAIL, so that fixing the bug makes lit report it (XPASS) and its header
# cannot go stale.
def test_known_bug_lit_tests_are_expected_failures():
    stale = [str(path.relative_to(REPO)) for path in (REPO / "tests" / "filecheck").rglob("*.mlir")
             if "Known bug (open)" in (text := path.read_text()) and "XFAIL:" not in text]
    assert not stale, f"'Known bug (open)' without an XFAIL line (is the bug fixed?): {stale}"


# 9. The license is an SPDX expression (a license table makes setuptools warn on every install).
def test_license_is_an_spdx_string():
    tomllib = pytest.importorskip("tomllib")  # (Python 3.11+)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    setuptools = next(r for r in project["build-system"]["requires"] if r.startswith("setuptools"))
    minimum = tuple(int(part) for part in re.search(r">=([\d.]+)", setuptools).group(1).split("."))
    assert minimum >= (77,), "setuptools reads the SPDX string form of `license` from version 77 on"


# 10. Output into a closed pipe (`amk cache ... | head -1`) ends quietly, as Python documents for SIGPIPE.
@pytest.mark.parametrize("command", [["amk", "cache", "export", "-"], ["amk", "cache", "path"]],
                         ids=lambda c: " ".join(c[1:]))
def test_amk_into_a_closed_pipe_is_quiet(command, tmp_path):
    result = into_closed_pipe([installed_script(command[0]), *command[1:], "--cache-dir", str(tmp_path)])
    assert result.returncode == 1
    assert result.stderr == "", result.stderr


def test_amk_opt_into_a_closed_pipe_is_quiet(tmp_path):
    source = tmp_path / "chain.mlir"
    source.write_text(CHAIN)
    result = into_closed_pipe([installed_script("amk-opt"), str(source), "-p", "amk-fuse"])
    assert result.returncode == 1
    assert result.stderr == "", result.stderr
