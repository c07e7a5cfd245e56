# --8<-- [start:header]
"""Tutorial: a new tiling strategy in one file (docs/tutorial-tiling-strategy.md walks through this file).

``single_row`` tiles a row reduction without a matmul (a LayerNorm, a softmax) so that each program owns one row and
sweeps it twice in column tiles: a first sweep folds the row's statistics, a second normalizes. Compared with
``row_strip`` (several rows per program) it launches one program per row, which keeps more SMs busy when the rows
are few and long.

    python examples/tutorial_tiling_strategy.py --small      # compile a LayerNorm with it and check it (CPU)
    python examples/tutorial_tiling_strategy.py opt FILE -p 'amk-fuse,amk-tile{reduction_strategy=single_row}'
"""

from __future__ import annotations

import argparse
import sys

import torch

import amk
from amk.lowering.configs import KernelConfig, bounded
from amk.lowering.kernel_lowering import BLOCK_N
from amk.lowering.strategies import TilingStrategy, register_strategy
from amk.oplist import build_module
from amk.opt import main as amk_opt_main
from amk.pipeline import compile_module
from amk.runtime import default_device

# --8<-- [end:header]


# --8<-- [start:strategy]
@register_strategy
class SingleRow(TilingStrategy):
    name = "single_row"  # the kernel's strategy attribute, and amk-tile{reduction_strategy=single_row}
    description = "Each program owns one row: a first sweep over its column tiles reduces, a second normalizes."
    row_reduction = True  # it lowers row reductions: amk-tile's reduction_strategy option may name it
    priority = None  # auto never takes it: asked for by name only
    without_matmul = None

    def instead(self, plan):
        """With a matmul (a K loop per column tile) take row_strip; without a row reduction let auto choose."""
        return super().instead(plan) or ("row_strip" if plan.matmul is not None else None)

    def grid(self, plan):
        """One program per row strip of BLOCK_M rows; the configuration makes BLOCK_M 1."""
        return self.row_strips(plan)

    def build(self, lowering):
        """The kernel body, from the toolkit every strategy shares (amk.lowering.kernel_lowering)."""
        lowering.reduce_over_columns(lowering.plan.main, "n", BLOCK_N)  # sweep 1: the row's statistics
        lowering.finish_rows()  # sweep 2: compute each tile again and normalize it

    def default_config(self, rows, cols, contraction, element_bytes):
        return KernelConfig(BLOCK_M=1, BLOCK_N=bounded(cols, 1024, 16), num_warps=4, num_stages=1)

    def search_space(self, rows, has_dot, contraction, limits, warp_specialization):
        return {"BLOCK_M": [1], "BLOCK_N": [256, 512, 1024, 2048], "num_warps": [2, 4, 8], "num_stages": [1]}

# --8<-- [end:strategy]


# --8<-- [start:demo]
def demo(small: bool) -> amk.VerificationReport:
    """A bias + LayerNorm tiled with single_row, verified against PyTorch."""
    rows, cols = (6, 300) if small else (64, 16384)
    shapes = [(rows, cols), (cols,), (cols,), (cols,)]
    compiled = compile_module(build_module(["add_bias", "layernorm"], shapes, torch.float32),
                              reduction_strategy="single_row")
    print('strategy = "single_row"' in compiled.ir["tiled_loop"])
    inputs = [torch.randn(shape, device=default_device()) for shape in shapes]
    report = amk.verify(lambda *tensors: compiled.program(*tensors)[0],
                        lambda x, bias, gamma, beta: torch.nn.functional.layer_norm(x + bias, (cols,), gamma, beta),
                        inputs=inputs)
    print(report)
    return report


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["opt"]:
        # amk-opt, with the strategy registered above
        sys.argv = [f"{sys.argv[0]} opt", *argv[1:]]
        amk_opt_main()
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="small shapes for the CPU interpreter")
    demo(parser.parse_args(argv).small)

# --8<-- [end:demo]


# --8<-- [start:entry]
if __name__ == "__main__":
    main()
# --8<-- [end:entry]
