"""``amk``: the command line. ``amk cache list|show|clear|export|import|path`` manage the persistent kernel cache.

Every subcommand takes ``--cache-dir`` (default: ``AMK_CACHE_DIR``, else the user cache directory; an empty path is
refused, as ``TunerConfig.target_cache_dir`` refuses it: it would be the current directory). Bad input is reported in
one line on stderr with exit code 1, never with a traceback. Nothing asks for confirmation (CI has no stdin):
``clear`` clears, but removes nothing from a directory whose cache folders hold anything amk does not write there
(``Store.clear``): one that is not an amk cache.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from amk.cache import Store, resolve_root
from amk.errors import AmkError, CacheError
from amk.tuner import check_directory_argument


def _root(args) -> Path:
    """The cache directory: ``--cache-dir`` (checked as ``TunerConfig.target_cache_dir`` is), else the default."""
    check_directory_argument(args.cache_dir, "--cache-dir")
    return resolve_root(args.cache_dir)


def _store(args) -> Store:
    return Store(_root(args), strict=True)


def _shapes(shapes) -> str:
    try:
        return "[" + ", ".join("x".join(str(d) for d in shape) for shape in shapes) + "]"
    except TypeError:
        return "?"


def _ops(ops) -> str:
    try:
        return ",".join(op[0] if isinstance(op, list) and not op[1] else f"{op[0]}{json.dumps(op[1])}" for op in ops)
    except (TypeError, IndexError, KeyError):
        return "?"


def cmd_list(args) -> int:
    store = _store(args)
    entries = store.entries()
    if not entries:
        print(f"no cache entries in {store.root}", file=sys.stderr)
        return 0
    for key, doc in entries:
        if doc is None:
            print(f"{key[:12]}  (unreadable entry.json)")
            continue
        device = doc.get("device", {}).get("name", "?") if isinstance(doc.get("device"), dict) else "?"
        print(f"{key[:12]}  {_ops(doc.get('ops', []))}  {_shapes(doc.get('shapes', []))}  {doc.get('dtype', '?')}  "
              f"{device}  {doc.get('created', '?')}")
    return 0


def _tuning_summary(name: str, trials) -> str:
    if not isinstance(trials, list) or not trials:
        return f"  {name}: no tuning log (heuristic, recorded or imported configuration)"
    counts: dict[str, int] = {}
    for trial in trials:
        status = trial.get("status", "?") if isinstance(trial, dict) else "?"
        counts[status] = counts.get(status, 0) + 1
    ok = [t for t in trials if isinstance(t, dict) and t.get("status") == "ok" and t.get("time_ms") is not None]
    reused = sum(1 for t in trials if isinstance(t, dict) and t.get("reused"))
    line = f"  {name}: {len(trials)} trials (" + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ")"
    if reused:
        line += f", {reused} reused from earlier timings"
    if ok:
        best = min(ok, key=lambda t: t["time_ms"])
        line += f"; best {best['time_ms']:.4f} ms with {json.dumps(best.get('config'))}"
    return line


def cmd_show(args) -> int:
    store = _store(args)
    key = store.find(args.key)
    doc = store.entry_document(key)  # checked against its checksum: what amk wrote
    if doc is not None:
        configs = {name: k.get("config") for name, k in doc.get("kernels", {}).items() if isinstance(k, dict)}
        print(f"entry {key}\ndirectory: {store.entry_dir(key)}\nentry.json:")
    else:
        doc = store.load_config(key)
        if doc is None:
            raise CacheError(f"the config record of {key[:12]} is unreadable")
        configs = doc.get("kernels", {})
        print(f"config record {key} (no compiled entry: the next build compiles with this config)\nrecord:")
    print(json.dumps(doc, indent=2, sort_keys=True, default=str))
    print("config:")
    for name, config in configs.items():
        fields = " ".join(f"{k}={v}" for k, v in config.items()) if isinstance(config, dict) else str(config)
        print(f"  {name}: {fields}")
    print("tuning:")
    log = doc.get("tuning_log") or {}
    for name in configs:
        print(_tuning_summary(name, log.get(name) if isinstance(log, dict) else None))
    verification = doc.get("verification")
    if isinstance(verification, dict):
        print("verification:")
        for result in verification.get("results", []):
            print(f"  {result.get('dtype')}: rel_l2={result.get('relative_l2_error')} "
                  f"(must be <= {result.get('tolerance')})" + (f" skipped: {result['skipped']}"
                                                               if result.get("skipped") else ""))
    return 0


def cmd_clear(args) -> int:
    store = _store(args)
    count = store.clear(everything=args.all)
    kept = "and every tuned config and timing" if args.all else "(tuned configs and timings are kept)"
    print(f"removed {count} entries {kept} from {store.root}")
    return 0


def cmd_export(args) -> int:
    document = _store(args).export()
    text = json.dumps(document, indent=1, sort_keys=True, default=str) + "\n"
    if args.file == "-":
        sys.stdout.write(text)
    else:
        try:
            Path(args.file).write_text(text)
        except OSError as error:
            raise CacheError(f"cannot write {args.file}: {error.strerror or error}") from None
        print(f"exported {len(document['configs'])} tuned configs and {len(document['timings'])} timing tables "
              f"to {args.file}")
    return 0


def cmd_import(args) -> int:
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise CacheError(f"cannot read {args.file}: {getattr(error, 'strerror', None) or error}") from None
    try:
        document = json.loads(text)
    except ValueError as error:
        raise CacheError(f"{args.file} is not valid JSON ({error})") from None
    store = _store(args)
    configs, timings, dropped = store.import_(document)
    print(f"imported {configs} tuned configs and {timings} timing tables into {store.root}"
          + (f"; {dropped} entries built with other configs were dropped" if dropped else ""))
    return 0


def cmd_path(args) -> int:
    print(_root(args))
    return 0


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="amk", description="AutoMegaKernel command line")
    commands = main.add_subparsers(dest="command", required=True)
    cache = commands.add_parser("cache", help="manage the persistent kernel cache (see docs/cache.md)")
    actions = cache.add_subparsers(dest="action", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--cache-dir", default=None,
                        help="the cache directory (default: $AMK_CACHE_DIR, else the user cache directory)")

    actions.add_parser("list", parents=[common], help="one line per entry: key, ops, shapes, dtype, device, created"
                       ).set_defaults(run=cmd_list)
    show = actions.add_parser("show", parents=[common], help="an entry's metadata, configs and tuning summary")
    show.add_argument("key", help="a key or a unique prefix of one")
    show.set_defaults(run=cmd_show)
    clear = actions.add_parser("clear", parents=[common],
                               help="remove every entry (never asks; refuses a directory holding files amk did not write)")
    clear.add_argument("--yes", "-y", action="store_true", help="accepted for scripts; clear never asks anyway")
    clear.add_argument("--all", action="store_true", help="also remove tuned configs and timings")
    clear.set_defaults(run=cmd_clear)
    export = actions.add_parser("export", parents=[common], help="write tuned configs and timings to one JSON file")
    export.add_argument("file", help="the file to write ('-' for stdout)")
    export.set_defaults(run=cmd_export)
    import_ = actions.add_parser("import", parents=[common], help="merge tuned configs and timings from a file")
    import_.add_argument("file", help="a file written by `amk cache export` ('-' for stdin)")
    import_.set_defaults(run=cmd_import)
    actions.add_parser("path", parents=[common], help="print the cache directory").set_defaults(run=cmd_path)
    return main


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        status = args.run(args)
        sys.stdout.flush()  # so that a closed pipe is noticed here, not at interpreter exit
        return status
    except BrokenPipeError:
        # The reader went away (`amk cache show KEY | head`): not an error of ours. As Python's documentation says
        # (library/signal.html, "Note on SIGPIPE"), point stdout at devnull so the flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except AmkError as error:  # a CacheError, or an InvalidArgumentError such as an empty --cache-dir
        print(f"amk: error: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # an unreadable cache directory and the like
        print(f"amk: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
