"""Diagnostic: what a kernel of symbolic sizes pays for its 64-bit offsets and its bounds masks.

    python benchmarks/probes/index_width.py --out benchmarks/results/<stem>.json [--shape 8,16,512,64] [--keys-bound]

amk.compile's kernels are symbolic in the dynamic sizes, so amk-stage cannot prove a buffer below 2^31 elements nor
a row count a multiple of the tile: every access widens its index vectors to 64 bits and masks rows (and symbolic
columns). Attention's probabilities (softmax(q k^T / 8), chunk_recompute over the batch) measured 0.056 ms with
static sizes and 0.122 ms symbolic (2026-12-04-h200-batched-attention-symbolic-e432ca3). Here the symbolic kernel's
emitted source is timed as emitted, with its row masks at every launch, with 32-bit index vectors, without masks,
with both changes, and with 64-bit tile bases and 32-bit offsets within the tile, on sizes where no mask is needed
(every output checked against float64 first), to say which one costs; each size made a number in turn, and all of
them. With ``--keys-bound`` the keys' length is a number from the start, as in amk.compile's builds since
amk-bind-sizes: there the row masks against the symbolic query length were the cost (0.068 ms against 0.057
without), which amk-stage's ``mask_if_uneven`` now drops at launches whose lengths divide the row tile. GPU only.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch
from xdsl.parser import Parser

from amk.benchmarking import time_ms
from amk.lowering.configs import KernelConfig
from amk.pipeline import compile_module, make_context
from amk.runtime import load_source

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import ATTENTION_IR, save_rows  # noqa: E402


def _keyword_arguments(source: str, keyword: str) -> list[tuple[int, int, str]]:
    """(start, end, value) of every ``, keyword=value`` argument in ``source``, the value running to the next comma or
    closing parenthesis outside brackets."""
    found = []
    for match in re.finditer(rf", {keyword}=", source):
        depth, end = 0, match.end()
        while depth or source[end] not in ",)":
            depth += (source[end] in "([") - (source[end] in ")]")
            end += 1
        found.append((match.start(), end, source[match.end():end]))
    return found


def _edit_arguments(source: str, keyword: str, edit) -> str:
    """``source`` with each ``, keyword=value`` argument replaced by ``edit(value)`` (its whole text)."""
    for start, end, value in reversed(_keyword_arguments(source, keyword)):
        source = source[:start] + edit(value) + source[end:]
    return source


def without_masks(source: str) -> str:
    return _edit_arguments(_edit_arguments(source, "mask", lambda value: ""), "other", lambda value: "")


VARIANTS = {
    "as emitted": lambda source: source,
    "row masks at every launch": lambda source: re.sub(r"even_tiles = .*", "even_tiles = False", source),
    "32-bit index vectors": lambda source: source.replace(".to(tl.int64)", ""),
    "no masks": without_masks,
}
VARIANTS["32-bit index vectors, no masks"] = lambda source: without_masks(VARIANTS["32-bit index vectors"](source))


def with_tile_bases(source: str) -> str:
    """``source`` with each widened index vector ``(offset + tl.arange(0, size)).to(tl.int64) * stride`` split into a
    64-bit scalar ``offset.to(tl.int64) * stride`` and 32-bit offsets within the tile ``tl.arange(0, size) * stride``:
    the 2^31 safety of the tile's base, the cheap arithmetic of 32-bit vectors inside it."""
    index_vectors = {name: (start, size) for name, start, size in
                     re.findall(r"^\s*(\w+) = (.+?) \+ tl\.arange\(0, (\w+)\)$", source, flags=re.M)}

    def split(match: re.Match) -> str:
        name, broadcast, stride = match.groups()
        start, size = index_vectors[name]
        base = "" if start == "0" else f"tl.cast({start}, tl.int64) * {stride} + "
        return f"{base}tl.arange(0, {size}){broadcast} * {stride}"

    return re.sub(r"\b(\w+)\.to\(tl\.int64\)(\[[^\]]*\]) \* (\w+)", split, source)


VARIANTS["64-bit tile bases, 32-bit offsets in the tile"] = with_tile_bases
VARIANTS["64-bit tile bases, no masks"] = lambda source: without_masks(with_tile_bases(source))


def with_values(source: str, values: dict[str, int]) -> str:
    """``source`` with the kernels' uses of the size parameters ``values`` replaced by those numbers (the parameters
    stay in the signatures; the launcher is left as it is)."""
    kernels, launcher = source.split("\ndef launch(", 1)
    lines = []
    for line in kernels.splitlines():
        if line.strip().rstrip(",") not in values:
            for name, value in values.items():
                line = re.sub(rf"\b{name}\b", str(value), line)
        lines.append(line)
    return "\n".join(lines) + "\ndef launch(" + launcher


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shape", default="8,16,512,64", help="batch,heads,length,head_dim")
    parser.add_argument("--keys-bound", action="store_true",
                        help="the keys' length a number in the kernel, as amk-bind-sizes makes it in amk.compile's "
                             "builds: what the other sizes, its masks and its 64-bit offsets then cost")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    b, h, s, d = (int(v) for v in args.shape.split(","))
    config = KernelConfig(BLOCK_M=128, BLOCK_N=64, BLOCK_K=64, SPLIT_N=2, num_warps=4, num_stages=3)
    keys = s if args.keys_bound else "T"
    module = Parser(make_context(), ATTENTION_IR.format(b="B", h="H", s="S", t=keys, d=d, scale=d ** -0.5)).parse_module()
    compiled = compile_module(module, lambda kernel: config, reduction_strategy="chunk_recompute",
                              size_hints={"B": b, "H": h, "S": s, "T": s})
    (kernel,) = compiled.kernels.values()
    static_module = Parser(make_context(), ATTENTION_IR.format(b=b, h=h, s=s, t=s, d=d, scale=d ** -0.5)).parse_module()
    (static_kernel,) = compile_module(static_module, lambda kernel: config,
                                      reduction_strategy="chunk_recompute").kernels.values()
    torch.manual_seed(0)
    q, k = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(2))
    expected = torch.softmax(q.double() @ k.double().transpose(-2, -1) * d ** -0.5, dim=-1)
    views = [q.reshape(b * h, s, d), k.reshape(b * h, s, d).transpose(1, 2)]
    chunks = 2
    sizes = {"S": s, "dim_3": chunks, "dim_0": b * h} | ({} if args.keys_bound else {"T": s})
    variants = dict(VARIANTS) | {f"{name} as a number": (lambda source, n=name: with_values(source, {n: sizes[n]}))
                                 for name in sizes}
    variants["every size a number"] = lambda source: with_values(source, sizes)
    variants["the kernel of static sizes"] = lambda source: static_kernel.source
    rows = []
    for name, transform in variants.items():
        source = transform(kernel.source)
        launch = load_source(source, f"index_width_{len(rows)}").launch
        out = torch.empty(b * h, s, s, device="cuda", dtype=torch.float16)
        partials = [torch.empty(b * h, s, chunks, device="cuda", dtype=torch.float32) for _ in range(2)]
        launch(*views, out, *partials)
        error = ((out.reshape(b, h, s, s).double() - expected).norm() / expected.norm()).item()
        row = {"variant": name, "int64_casts": source.count(".to(tl.int64)"), "masks": source.count("mask="),
               "rel_err": error, "ms": time_ms(lambda f=launch, o=out, p=partials: f(*views, o, *p))}
        print(row, flush=True)
        rows.append(row)
    save_rows(args.out, rows)


if __name__ == "__main__":
    main()
