"""The documentation is tested: README.md and every page under docs/.

Conventions for code blocks in those files:

- ```` ```python ````: executed, each file's blocks in order in one namespace that starts empty (a file's blocks import
  what they use, as a reader who copies them runs them), on the CPU (Triton's interpreter), with the repository root
  as the working directory. Python that must not run here (it needs a GPU, or shows an API of another component)
  is fenced ```` ```py ````.
- a block with ``title="Output"`` (```` ```text title="Output" ````, ```` ```mlir title="Output" ````, ...) right
  after a python block: that block's stdout must match it; ``...`` stands for any text.
- ```` ```mlir ````: must parse and verify with ``amk-opt`` (blocks using the tutorial's dialect, with the tutorial's
  driver ``python examples/tutorial_fusion_pass.py opt``). A block whose first line is ``// expect-error: MESSAGE``
  must instead fail verification with MESSAGE (``amk-opt --verify-diagnostics``); one whose first line starts with
  ``// no-parse`` is not checked.
- ``--8<-- "path[:section]"`` lines (pymdownx.snippets) are expanded from the named file, as the site build does.
- a block right after a line ``<!-- inline copy of path[:section] ... -->`` holds that file's text (or the named
  ``--8<-- [start:section]`` ... ``[end:section]`` part of it) inline, readable in the repository view, where a
  snippet include is not; the test checks the copy against the file, so the two cannot drift apart. The tutorial's
  code is the code of examples/tutorial_fusion_pass.py this way.

The site itself is built with ``mkdocs build --strict`` (broken links and pages missing from the nav fail).
"""

from __future__ import annotations

import contextlib
import difflib
import io
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO, find_script, installed_script

DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
TUTORIAL_DRIVER = [sys.executable, str(REPO / "examples" / "tutorial_fusion_pass.py"), "opt"]

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w+-]*)(?P<info>[^`]*)$")
SNIPPET = re.compile(r'^[ \t]*-{1,}8<-{1,}[ \t]+"(?P<target>[^"]+)"[ \t]*$')
INLINE_COPY = re.compile(r"^[ \t]*<!--[ \t]*inline copy of[ \t]+(?P<target>\S+)")
SECTION_MARKER = re.compile(r"-{1,}8<-{1,}[ \t]+\[[ \t]*(start|end)[ \t]*:[ \t]*([a-z][-_0-9a-z]*)[ \t]*\]")


@dataclass
class CodeBlock:
    path: Path
    line: int
    lang: str
    info: str
    text: str
    copy_of: str | None = None  # ``path[:section]`` when the block is an inline copy of (part of) that file

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def snippet(target: str) -> str:
    """The text pymdownx.snippets inserts for ``path``, ``path:section`` or ``path:start:end`` (1-based lines)."""
    parts = target.split(":")
    lines = (REPO / parts[0]).read_text().splitlines()
    if len(parts) == 2:
        name = parts[1]
        inside, selected = False, []
        for line in lines:
            marker = SECTION_MARKER.search(line)
            if marker and marker.group(2) == name:
                inside = marker.group(1) == "start"
                continue
            if inside and not marker:
                selected.append(line)
        assert selected, f"section {name!r} not found in {parts[0]}"
        return "\n".join(selected)
    if len(parts) == 3:
        start, end = int(parts[1] or 1), int(parts[2] or len(lines))
        return "\n".join(lines[start - 1:end])
    return "\n".join(line for line in lines if not SECTION_MARKER.search(line))


def expand_snippets(text: str) -> str:
    return "\n".join(snippet(m.group("target")) if (m := SNIPPET.match(line)) else line for line in text.splitlines())


def code_blocks(path: Path) -> list[CodeBlock]:
    blocks, lines, index = [], path.read_text().splitlines(), 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        indent, fence = match.group("indent"), match.group("fence")
        body, index = [], index + 1
        while index < len(lines) and not (lines[index].strip().startswith(fence) and lines[index].strip() == fence[0] * len(lines[index].strip())):
            body.append(lines[index][len(indent):] if lines[index].startswith(indent) else lines[index].lstrip())
            index += 1
        opening = index - len(body) - 1
        copy = INLINE_COPY.match(lines[opening - 1]) if opening > 0 else None
        blocks.append(CodeBlock(path, index - len(body), match.group("lang"), match.group("info").strip(),
                                expand_snippets("\n".join(body)), copy.group("target") if copy else None))
        index += 1
    return blocks


def matches_output(expected: str, actual: str) -> bool:
    """``expected`` with ``...`` standing for any text, compared line-stripped."""
    def normalize(text: str) -> str:
        return "\n".join(line.rstrip() for line in text.strip().splitlines())

    pattern = ".*?".join(re.escape(piece) for piece in normalize(expected).split("..."))
    return re.fullmatch(pattern, normalize(actual), re.DOTALL) is not None


def files_with(lang: str) -> list[Path]:
    return [p for p in DOC_FILES if any(b.lang == lang for b in code_blocks(p))]


def _id(path: Path) -> str:
    return str(path.relative_to(REPO))


DOCS_MODULE = "__docs__"  # the __name__ of the namespace doc code runs in


def _made_by_docs(key, value) -> bool:
    """Whether a registry entry was created by doc code (its op class, function or factory's product lives there)."""
    things = [key, value]
    if callable(value) and not isinstance(value, type):
        try:
            things.append(value())  # registry factories take no arguments; rules and references do
        except TypeError:
            pass
    return any(getattr(thing, "__module__", None) == DOCS_MODULE for thing in things)


@pytest.fixture()
def isolated_registries():
    """Docs register passes, dialects, lowering rules, references and tiling strategies (the tutorials do): undo
    exactly that afterwards, keeping what real modules registered meanwhile (the front end registers a pass on
    import)."""
    from amk import opt, reference
    from amk.lowering import rules, strategies

    registries = (opt.AMK_PASSES, opt.AMK_DIALECTS, rules.ELEMENTWISE_RULES, rules.ROW_REDUCTIONS, reference.REFERENCE,
                  strategies.STRATEGIES)
    saved = [dict(registry) for registry in registries]
    yield
    for registry, before in zip(registries, saved):
        for key, value in list(registry.items()):
            if key in before:
                registry[key] = before[key]
            elif _made_by_docs(key, value):
                del registry[key]


@pytest.mark.parametrize("path", files_with("python"), ids=_id)
def test_python_blocks_run(path, isolated_registries, monkeypatch):
    monkeypatch.chdir(REPO)
    namespace = {"__name__": DOCS_MODULE}
    blocks = code_blocks(path)
    for index, block in enumerate(blocks):
        if block.lang != "python":
            continue
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            try:
                exec(compile(block.text, block.where, "exec"), namespace)
            except Exception as error:
                raise AssertionError(f"the python block at {block.where} failed: {type(error).__name__}: {error}\n"
                                     f"its output:\n{stdout.getvalue()}") from error
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        if following is not None and 'title="Output"' in following.info:
            assert matches_output(following.text, stdout.getvalue()), (
                f"the output of the python block at {block.where} differs from the block at {following.where}:\n"
                f"--- printed:\n{stdout.getvalue()}\n--- documented:\n{following.text}")


def _mlir_checks() -> list[tuple[CodeBlock, str]]:
    checks = []
    for path in files_with("mlir"):
        for block in code_blocks(path):
            if block.lang != "mlir":
                continue
            first = block.text.lstrip().splitlines()[0] if block.text.strip() else ""
            if first.startswith("// no-parse"):
                continue
            kind = "error" if first.startswith("// expect-error:") else "parse"
            checks.append((block, kind))
    return checks


def _tool(block: CodeBlock) -> list[str]:
    return TUTORIAL_DRIVER if "tutorial." in block.text else [installed_script("amk-opt")]


def _start(tool: list[str], flags: list[str], text: str) -> subprocess.Popen:
    process = subprocess.Popen([*tool, *flags], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=REPO)
    process.stdin.write(text)
    process.stdin.close()
    return process


def _finish(process: subprocess.Popen) -> tuple[int, str, str]:
    out, err = process.stdout.read(), process.stderr.read()
    return process.wait(timeout=300), out, err


def _expected_error(block: CodeBlock) -> str:
    return block.text.lstrip().splitlines()[0].removeprefix("// expect-error:").strip()


def _check_one(block: CodeBlock, kind: str, result: tuple[int, str, str]) -> str | None:
    code, out, err = result
    if kind == "parse" and code != 0:
        return f"{block.where}: does not parse/verify:\n{err.strip()}"
    if kind == "error" and (code != 0 or _expected_error(block) not in out):
        return f"{block.where}: expected the error {_expected_error(block)!r}, got:\n{out.strip()}\n{err.strip()}"
    return None


def test_mlir_blocks_parse():
    """Every IR block parses and verifies (or fails with the documented message). amk-opt's start-up dominates, so
    the blocks of one kind go through one ``--split-input-file`` run per tool; only a failing batch is rerun block by
    block to say which block is wrong."""
    checks = _mlir_checks()
    assert checks, "no mlir blocks found"
    batches: dict[tuple[str, tuple[str, ...]], list[CodeBlock]] = {}
    for block, kind in checks:
        batches.setdefault((kind, tuple(_tool(block))), []).append(block)
    running = {}
    for (kind, tool), blocks in batches.items():
        flags = ["--split-input-file"] + (["--verify-diagnostics"] if kind == "error" else [])
        running[(kind, tool)] = _start(list(tool), flags, "\n// -----\n".join(b.text for b in blocks))
    failures = []
    for (kind, tool), process in running.items():
        blocks = batches[(kind, tool)]
        code, out, err = _finish(process)
        parts = re.split(r"^// -----$", out, flags=re.MULTILINE)
        if kind == "parse" and code == 0:
            continue
        if kind == "error" and code == 0 and len(parts) == len(blocks) and all(
                _expected_error(b) in part for b, part in zip(blocks, parts)):
            continue
        flags = ["--verify-diagnostics"] if kind == "error" else []
        singles = [(block, _start(list(tool), flags, block.text)) for block in blocks]
        failures += [f for block, p in singles if (f := _check_one(block, kind, _finish(p)))]
        if not failures:  # every block passes alone: the batch failed for a reason of its own
            failures.append(f"the batch of {kind} blocks failed:\n{err.strip()}")
    assert not failures, "\n\n".join(failures)


def _inline_copies() -> list[CodeBlock]:
    return [block for path in DOC_FILES for block in code_blocks(path) if block.copy_of]


def _without_end_blank_lines(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


@pytest.mark.parametrize("block", _inline_copies(), ids=lambda block: f"{block.where}:{block.copy_of}")
def test_inline_copy_matches_its_file(block):
    """A code block marked ``<!-- inline copy of path[:section] -->`` is exactly that text of the file (blank lines at
    either end aside): edit the file and the page together."""
    expected = _without_end_blank_lines(snippet(block.copy_of))
    actual = _without_end_blank_lines(block.text)
    if actual != expected:
        diff = "\n".join(difflib.unified_diff(expected.splitlines(), actual.splitlines(), block.copy_of, block.where,
                                              lineterm=""))
        raise AssertionError(f"the block at {block.where} differs from {block.copy_of}:\n{diff}")


TUTORIALS = [("tutorial-fusion-pass.md", "examples/tutorial_fusion_pass.py"),
             ("tutorial-tiling-strategy.md", "examples/tutorial_tiling_strategy.py")]


@pytest.mark.parametrize("page,example", TUTORIALS, ids=[page for page, _ in TUTORIALS])
def test_tutorial_text_is_the_example_file(page, example):
    """Following a tutorial's code blocks in order reproduces its example file exactly."""
    page = REPO / "docs" / page
    targets = [block.copy_of for block in code_blocks(page)
               if block.copy_of and block.copy_of.startswith(f"{example}:")]
    assert targets, f"the tutorial holds no inline copy of a section of {example}"

    def squeeze(text: str) -> str:  # blank lines between sections do not count
        return re.sub(r"\n{2,}", "\n", text.strip())

    assembled = "\n".join(snippet(target) for target in targets)
    assert squeeze(assembled) == squeeze(snippet(example))


def test_readme_op_list_is_complete():
    """The op table in the README names every op of the op-list front end."""
    from amk.oplist import OPS

    readme = (REPO / "README.md").read_text()
    missing = [name for name in OPS if f"`{name}`" not in readme]
    assert not missing, f"ops missing from the README's op list: {missing}"


def test_result_figures_come_from_committed_results():
    """Every figure in the results tables of README.md and docs/benchmarks.md appears in a committed results file."""
    committed = "\n".join(p.read_text() for p in (REPO / "benchmarks" / "results").glob("*.md"))
    for path in (REPO / "README.md", REPO / "docs" / "benchmarks.md"):
        text = path.read_text()
        rows = [line for line in text.splitlines() if line.startswith("|") and re.search(r"\d\.\d{3}", line)]
        assert rows, f"no results table in {path.name}"
        for row in rows:
            for figure in re.findall(r"(?<![\w.])\d+\.\d+x?(?![\w.])", row):
                assert figure in committed, f"{path.name}: {figure} (in {row!r}) is in no file of benchmarks/results"


def test_site_builds_strict(tmp_path):
    """``mkdocs build --strict``: broken links, missing anchors, pages left out of the nav and missing snippets fail."""
    mkdocs = find_script("mkdocs")
    if mkdocs is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[dev]' installs it)")
    result = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "site" / "tutorial-fusion-pass" / "index.html").exists()
    assert (tmp_path / "site" / "tutorial-tiling-strategy" / "index.html").exists()


def update_outputs(path: Path) -> list[str]:
    """Rewrite the exact ``title="Output"`` blocks of ``path`` (those without ``...``) with what their python blocks
    print now; return the places of wildcard blocks that no longer match (to be edited by hand)."""
    import os

    os.chdir(REPO)
    namespace = {"__name__": DOCS_MODULE}
    blocks = code_blocks(path)
    lines = path.read_text().splitlines()
    replacements, stale = [], []
    for index, block in enumerate(blocks):
        if block.lang != "python":
            continue
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            exec(compile(block.text, block.where, "exec"), namespace)
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        if following is None or 'title="Output"' not in following.info:
            continue
        if matches_output(following.text, stdout.getvalue()):
            continue
        if "..." in following.text:
            stale.append(following.where)
            continue
        body = following.text.splitlines()
        # ``line`` is the 1-based line of the opening fence, so the 0-based index of the block's first line
        replacements.append((following.line, len(body), stdout.getvalue().rstrip("\n").splitlines()))
    for start, length, new in sorted(replacements, reverse=True):
        lines[start:start + length] = [line.rstrip() for line in new]
    path.write_text("\n".join(lines) + "\n")
    return stale


if __name__ == "__main__":
    # python tests/test_docs.py --update [FILE ...]: refresh the exact Output blocks after a change of the compiler's
    # output (review the diff!); the default is every doc file.
    if sys.argv[1:2] != ["--update"]:
        sys.exit("usage: python tests/test_docs.py --update [FILE ...]")
    for name in sys.argv[2:] or [str(p) for p in files_with("python")]:
        for where in update_outputs(Path(name).resolve()):
            print(f"{where}: the documented output (with '...') no longer matches; edit it by hand")
