"""Everything amk writes goes under the cache directory it was given (issue 22): the store's folders and the emitted
sources that Triton imports; an empty or unusable ``target_cache_dir`` is an InvalidArgumentError; an empty
``AMK_CACHE_DIR`` means the default directory, never the current one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

import amk
from amk import cache
from amk.errors import InvalidArgumentError
from amk.runtime import default_device, load_source, source_directory, sources_under

OPS = ["matmul", "add_bias", "relu"]
SHAPES = [(2, 8, 32), (32, 16), (16,)]
DEVICE = default_device()


@pytest.fixture
def user_cache(tmp_path, monkeypatch) -> Path:
    """The user cache directory redirected to an empty folder (and AMK_CACHE_DIR unset), so that a stray write to
    the default cache is seen; the process-wide stores of earlier tests are kept out of the way."""
    monkeypatch.delenv("AMK_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    monkeypatch.setattr(cache, "_STORES", {})
    assert cache.resolve_root() == tmp_path / "user-cache" / "amk"
    return tmp_path / "user-cache"


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def build(target=None, **options):
    config = amk.TunerConfig(target_cache_dir=target) if target is not None else None
    return amk.build_fused_kernel(OPS, SHAPES, torch.float16, autotune=False, tuner_config=config, **options)


def run(kernel):
    generator = torch.Generator().manual_seed(0)
    tensors = [torch.randn(shape, generator=generator).to(DEVICE, torch.float16) for shape in SHAPES]
    expected = torch.relu(tensors[0].float() @ tensors[1].float() + tensors[2].float())
    assert torch.allclose(kernel(*tensors).float(), expected, atol=2e-2, rtol=2e-2)


def test_target_cache_dir_holds_every_file_sources_included(tmp_path, user_cache):
    target = tmp_path / "project-cache"
    kernel = build(target)
    run(kernel)
    assert kernel.source_paths and all(Path(p).parent == target / "sources" for p in kernel.source_paths)
    assert all(Path(p).is_file() for p in kernel.source_paths)
    written = {p.relative_to(target).parts[0] for p in files_under(target)}
    assert {"entries", "configs", "index", "sources"} <= written
    assert files_under(user_cache) == []  # nothing outside the directory given


def test_two_cache_directories_in_one_process_each_get_their_sources(tmp_path, user_cache):
    """The same kernel source built for two directories is written (and imported) under each: a module imported
    from the first must not stand in for the second."""
    first, second = build(tmp_path / "one"), build(tmp_path / "two")
    assert first.source == second.source
    assert Path(first.source_paths[0]).parent == tmp_path / "one" / "sources"
    assert Path(second.source_paths[0]).parent == tmp_path / "two" / "sources"
    run(second)
    assert files_under(user_cache) == []


def test_warm_start_writes_its_sources_under_its_directory(tmp_path, user_cache):
    """A cache hit (no pass runs) imports the entry's sources from the directory of the store it came from."""
    original = tmp_path / "original"
    assert not build(original).cache_hit
    copy = tmp_path / "copy"
    shutil.copytree(original, copy, ignore=shutil.ignore_patterns("sources"))
    kernel = build(copy)
    assert kernel.cache_hit
    assert Path(kernel.source_paths[0]).parent == copy / "sources"
    run(kernel)
    assert files_under(user_cache) == []


def test_relative_target_cache_dir_is_fixed_at_build_time(tmp_path, user_cache, monkeypatch):
    monkeypatch.chdir(tmp_path)
    kernel = build("relative-cache")
    monkeypatch.chdir(tmp_path / "relative-cache")  # a later chdir neither moves the sources nor the store
    assert Path(kernel.source_paths[0]).parent == tmp_path / "relative-cache" / "sources"
    run(kernel)
    assert not (tmp_path / "relative-cache" / "relative-cache").exists()


def test_a_relative_amk_cache_dir_is_fixed_at_its_first_use(tmp_path, user_cache, monkeypatch):
    """A relative AMK_CACHE_DIR was resolved again at every build: after an os.chdir, a kernel's copy for another
    dtype went to a second cache under the new directory."""
    monkeypatch.setenv("AMK_CACHE_DIR", f"relative-env-cache-{tmp_path.name}")  # a value of this test's own
    monkeypatch.chdir(tmp_path)
    kernel = build()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    other = kernel.with_dtype(torch.float32)
    assert all(Path(path).is_relative_to(tmp_path / os.environ["AMK_CACHE_DIR"]) for path in other.source_paths)
    assert not any((tmp_path / "elsewhere").iterdir())


@pytest.mark.parametrize("value, message", [
    ("", "non-empty path"),
    ("   ", "non-empty path"),
    (b"/tmp/cache", "non-empty path"),
    (3, "non-empty path"),
    (True, "non-empty path"),
    ("bad\0path", "non-empty path"),
])
def test_unusable_target_cache_dir_values_are_rejected(value, message):
    with pytest.raises(InvalidArgumentError, match=message) as error:
        amk.TunerConfig(target_cache_dir=value)
    assert repr(value) in str(error.value)  # the message names the value


def test_target_cache_dir_that_is_a_file_is_rejected(tmp_path):
    existing = tmp_path / "a-file"
    existing.write_text("not a directory")
    with pytest.raises(InvalidArgumentError, match="exists and is not a directory"):
        amk.TunerConfig(target_cache_dir=existing)
    with pytest.raises(InvalidArgumentError, match="is under the file"):
        amk.TunerConfig(target_cache_dir=existing / "below")


def test_target_cache_dir_that_does_not_exist_yet_is_created(tmp_path, user_cache):
    target = tmp_path / "new" / "nested"
    assert Path(amk.TunerConfig(target_cache_dir=target).target_cache_dir) == target  # made absolute, as a str
    build(target)
    assert (target / "sources").is_dir()


def test_empty_target_cache_dir_writes_nothing_in_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgumentError):
        build("")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["", "  "])
def test_empty_amk_cache_dir_means_the_default(tmp_path, user_cache, monkeypatch, value):
    working = tmp_path / "working"
    working.mkdir()
    monkeypatch.chdir(working)
    monkeypatch.setenv("AMK_CACHE_DIR", value)
    assert cache.resolve_root() == user_cache / "amk"
    kernel = build()
    assert list(working.iterdir()) == []  # not configs/ entries/ index/ locks/ in the current directory
    assert Path(kernel.source_paths[0]).parent == user_cache / "amk" / "sources"


def test_load_source_takes_the_directory_explicitly_or_from_the_scope(tmp_path, user_cache):
    source = "def launch():\n    return 42\n"
    explicit = load_source(source, "probe", tmp_path / "explicit")
    assert Path(explicit.__file__).parent == tmp_path / "explicit" / "sources"
    with sources_under(tmp_path / "scoped"):
        assert source_directory() == tmp_path / "scoped" / "sources"
        scoped = load_source(source, "probe")
    assert Path(scoped.__file__).parent == tmp_path / "scoped" / "sources"
    assert scoped.launch() == explicit.launch() == 42
    assert source_directory() == user_cache / "amk" / "sources"  # the scope ended


def test_unwritable_target_cache_dir_keeps_sources_in_a_private_temporary_directory(tmp_path, user_cache,
                                                                                     monkeypatch):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only directories")
    target = tmp_path / "read-only"
    target.mkdir()
    target.chmod(0o500)
    monkeypatch.setattr(cache, "_WARNED", False)  # the warning is given once per process
    try:
        with pytest.warns(RuntimeWarning, match="cannot be written"):
            kernel = build(target)
        assert not Path(kernel.source_paths[0]).is_relative_to(user_cache)
        assert files_under(target) == [] and files_under(user_cache) == []
        run(kernel)
    finally:
        target.chmod(0o700)


def test_amk_compile_writes_its_sources_under_target_cache_dir(tmp_path, user_cache):
    target = tmp_path / "compile-cache"

    def layer(x, w, b):
        return torch.relu(x @ w + b)

    compiled = amk.compile(layer, autotune=False, verify=False, tuner_config=amk.TunerConfig(target_cache_dir=target))
    generator = torch.Generator().manual_seed(1)
    x, w, b = (torch.randn(shape, generator=generator).to(DEVICE) for shape in [(4, 32), (32, 16), (16,)])
    torch.testing.assert_close(compiled(x, w, b), layer(x, w, b), atol=1e-4, rtol=1e-4)
    assert files_under(target / "sources")
    assert files_under(user_cache) == []


def test_amk_cache_dir_that_is_a_file_degrades_to_memory_with_one_warning(tmp_path, user_cache, monkeypatch):
    """The environment is not an argument to reject: a cache path there that cannot be used keeps kernels in memory
    (and sources in a private temporary directory), with one warning."""
    existing = tmp_path / "a-file"
    existing.write_text("not a directory")
    monkeypatch.setenv("AMK_CACHE_DIR", str(existing))
    monkeypatch.setattr(cache, "_WARNED", False)
    with pytest.warns(RuntimeWarning, match="cannot be written"):
        kernel = build()
    assert not Path(kernel.source_paths[0]).is_relative_to(tmp_path)
    assert existing.read_text() == "not a directory" and files_under(user_cache) == []
    run(kernel)


def test_a_kernel_rebuilt_for_another_dtype_stays_in_its_cache_directory(tmp_path, monkeypatch):
    """verify(..., dtypes=[other]) rebuilds the chain for that dtype: in the directory the kernel was built in."""
    monkeypatch.setenv("AMK_CACHE_DIR", str(tmp_path / "default"))
    kernel = amk.build_fused_kernel(["matmul", "add_bias", "relu"], [(4, 16), (16, 8), (8,)], torch.float32,
                                    autotune=False, tuner_config=amk.TunerConfig(target_cache_dir=tmp_path / "mine"))
    other = kernel.with_dtype(torch.float16)
    assert all(Path(path).is_relative_to(tmp_path / "mine") for path in other.source_paths)
    assert not (tmp_path / "default").exists()


@pytest.mark.parametrize("bad", ["", "   ", 3])
def test_clear_cache_refuses_what_is_not_a_cache_directory(bad, tmp_path, monkeypatch):
    """An empty path would clear the current directory's cache folders: refused, as for target_cache_dir."""
    from amk.errors import InvalidArgumentError
    from amk.frontend.compile import clear_cache

    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgumentError, match="clear_cache's cache_dir must be a non-empty path"):
        clear_cache(bad)


def test_files_are_written_readable_as_the_umask_allows(tmp_path, user_cache):
    """amk's files were mkstemp's 0600 whatever the umask: a cache filled as root (a container image) gave another
    user no hit, only a rebuild and a warning."""
    previous = os.umask(0o022)
    try:
        build(tmp_path / "shared")
    finally:
        os.umask(previous)
    modes = {path.name: oct(path.stat().st_mode & 0o777) for path in files_under(tmp_path / "shared")
             if path.parent.name != "locks"}  # (filelock's own)
    assert modes and set(modes.values()) == {"0o644"}, modes


def test_a_leading_tilde_is_the_home_directory(tmp_path, user_cache, monkeypatch):
    """``~`` from a .env file or a Python string made a folder named ``~`` in the current directory."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert amk.TunerConfig(target_cache_dir="~/amk-config").target_cache_dir == str(tmp_path / "home" / "amk-config")
    monkeypatch.setenv("AMK_CACHE_DIR", "~/amk-environment")
    assert cache.resolve_root() == tmp_path / "home" / "amk-environment"
    assert not (tmp_path / "~").exists()


def test_a_damaged_source_file_or_its_bytecode_is_replaced(tmp_path, user_cache):
    """A sources/ file that is not UTF-8 raised UnicodeDecodeError at every build of its kernel, and a truncated
    bytecode file of it ("marshal data too short") failed every load: both until ``amk cache clear``."""
    import importlib.util
    import py_compile

    from amk import runtime

    source = "def launch():\n    return 7\n"
    first = load_source(source, "damaged", tmp_path)
    path = Path(first.__file__)
    runtime._LOADED_SOURCES.clear()  # as a new process finds the file
    path.write_bytes(b"\xff\xfe not utf-8")
    assert load_source(source, "damaged", tmp_path).launch() == 7
    runtime._LOADED_SOURCES.clear()
    bytecode = Path(importlib.util.cache_from_source(str(path)))
    py_compile.compile(str(path), cfile=str(bytecode), doraise=True)
    bytecode.write_bytes(bytecode.read_bytes()[:20])  # its header still matches the source
    assert load_source(source, "damaged", tmp_path).launch() == 7
