"""Diagnostic: softmax(q @ k * scale) (workload G) as two warp-specialized Gluon launches on Hopper, the MMA of one
column tile overlapped with the exponentials of the one before (issue 21, item 3).

    timeout 400 python benchmarks/probes/gluon_softmax_probe.py --out benchmarks/results/<stem>.json [--variants 1,2,3]
        [--configs JSON] [--ablations] [--once] [--emitted]

What this measures before the compiler emits it. amk's chunk_recompute (G's strategy) runs, in each program, the dot of
a column tile and then that tile's exponentials and reductions on the same warps: Triton 3.6 issues the next tile's
MMA only after them (issuing it earlier by hand was slower, `2026-11-30-h200-dot-ahead-probe-G`). Here the same two
launches are written in Gluon, where the wait for an MMA is explicit: a one-warp producer partition TMA-loads the
program's q tile once and the chunk's k tiles into a ring of STAGES shared-memory slots; the consumer warps issue the
wgmma of tile j + 1 (asynchronous) and only then wait for tile j's and fold it into the row statistics (launch 1:
online max and sum, one partial state per row and chunk) or turn it into probabilities (launch 2: the chunks' states
merged first; each tile stored through shared memory with a TMA store, two staging buffers). The tensor cores work on
tile j + 1 while the exponential unit works on tile j (FlashAttention 3's intra-warpgroup overlap); the logits never
cross HBM and the output is written once. Every configuration is checked against the float64 reference before it is
timed; eager, torch.compile and amk's own kernel run in the same process on the same inputs (`baseline_rows`).
Needs a Hopper GPU and triton >= 3.6 (Gluon).

A configuration (``--configs``, a JSON list of ``CONFIG_KEYS`` lists) chooses the form: the tiles, the chunks a row's
columns are split in, the ring's depth; one consumer of ``num_warps`` warps, or 2 or 4 consumer warpgroups of 4 warps
each on its own rows (released from each other); ping-pong turns between two consumers; the next tile's product in
flight (``PIPELINED``, two accumulators) or not; q read into registers for wgmma; one consumer's exponentials on the
FMA pipe. ``--ablations`` times the statistics launch of each configuration without its exponentials and without its
products; ``--once`` runs each configuration once, untimed, for Nsight Compute; ``--emitted`` also times, beside each
configuration written by hand, amk-emit-gluon's kernel of the same form and tiles (where it writes that form), built
from G's IR through the pipeline.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from amk.benchmarking import time_ms

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import (  # noqa: E402
    WORKLOADS,
    baseline_rows,
    make_inputs,
    probe_parser,
    probe_row,
    probe_shapes,
    run_probe,
    save_rows,
)

LOG2E = 1.4426950408889634
SCALE = dict(WORKLOADS["G"].ops[1][1])["factor"]  # the workload's scale, the same for its extra shapes
# Gluon calls renamed after triton 3.6 (the GPU machine's), in either spelling.
_partition_barrier = getattr(gl, "barrier", None) or gl.thread_barrier
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
_PRODUCER_REGISTERS = gl.constexpr(40)
_CONSUMER_REGISTERS = gl.constexpr(232)  # the second consumer warpgroup's, as a worker partition
# With four consumers, each worker consumer's: the 64K registers of a program shared by five warpgroups, the
# producer's 40 given back (the default partition takes the rest, 136).
_QUARTER_REGISTERS = gl.constexpr(112)


@gluon.jit
def _producer(values, BN: gl.constexpr, STAGES: gl.constexpr, CONSUMERS: gl.constexpr):
    """One warp: each consumer's q tile once, then the chunk's k tiles into the ring, up to STAGES ahead of the
    MMAs."""
    (q_desc, k_desc, q_smem, k_ring, q_ready, ready, empty, row0, col0, n_tiles) = values[:10]
    mbarrier.expect(q_ready.index(0), CONSUMERS * q_desc.block_type.nbytes)
    for consumer in gl.static_range(CONSUMERS):
        _tma_load(q_desc, [row0 + consumer * q_desc.block_type.shape[0], 0], q_ready.index(0), q_smem.index(consumer))
    for j in range(n_tiles):
        slot = j % STAGES
        mbarrier.wait(empty.index(slot), ((j // STAGES) & 1) ^ 1)  # a fresh barrier passes phase 1
        mbarrier.expect(ready.index(slot), k_desc.block_type.nbytes)
        _tma_load(k_desc, [0, col0 + j * BN], ready.index(slot), k_ring.index(slot))


@gluon.jit
def _issue(q_tile, k_ring, ready, zero, j, turn, STAGES: gl.constexpr, WG: gl.constexpr, PINGPONG: gl.constexpr,
           MODE: gl.constexpr):
    """Tile j's product, asynchronous, once its k tile is in the ring. PINGPONG: the two consumers issue their
    products in turns (FlashAttention 3's scheduling barriers), consumer 0 first. MODE 2 (an ablation) issues no
    product: the tile is ``zero`` (distinct values) plus j."""
    slot = j % STAGES
    mbarrier.wait(ready.index(slot), (j // STAGES) & 1)
    if PINGPONG:
        mbarrier.wait(turn.index(WG), (j + WG + 1) & 1, pred=j + WG > 0)
    if MODE == 2:
        s = zero + j
    else:
        s = warpgroup_mma(q_tile, k_ring.index(slot), zero, use_acc=False, is_async=True)
    if PINGPONG:
        mbarrier.arrive(turn.index(1 - WG))
    return s


@gluon.jit
def _exp2_on_fma(x):
    """2^x for x <= 0 on the FMA and integer pipes instead of the exponential unit (FlashAttention 4's trick): x =
    n + f with n an integer (rounded by adding 1.5 * 2^23) and |f| <= 1/2, 2^f by its degree-4 Taylor polynomial
    (relative error 4e-5), n added to the exponent bits. Clamped at -125, where 2^x is 0 to fp32's eyes anyway."""
    x = gl.maximum(x, -125.0)
    shifted = x + 12582912.0
    f = x - (shifted - 12582912.0)
    p = 0.0096181291 * f + 0.0555041087
    p = p * f + 0.2402265070
    p = p * f + 0.6931471806
    p = p * f + 1.0
    return (p.to(gl.int32, bitcast=True) + (shifted.to(gl.int32, bitcast=True) << 23)).to(gl.float32, bitcast=True)


@gluon.jit
def _exp2(x, ON_FMA: gl.constexpr):
    if ON_FMA:
        y = _exp2_on_fma(x)
    else:
        y = gl.exp2(x)
    return y


@gluon.jit
def _consume(s, empty, j, m_i, l_i, scale_log2, out_smem, out_desc, row0, col0, num_outstanding: gl.constexpr,
             BN: gl.constexpr, STAGES: gl.constexpr, WRITE: gl.constexpr, WG: gl.constexpr, MODE: gl.constexpr,
             STAGED: gl.constexpr, ON_FMA: gl.constexpr):
    """Tile j once its product is done (the one issued after it may stay in flight): its ring slot released, then
    folded into the rows' running maximum and sum (launch 1: base 2, the scale folded into the exponent) or written as
    probabilities with the rows' final maximum and reciprocal sum in ``m_i`` / ``l_i`` (launch 2: through one of the
    consumer's STAGED staging buffers, the one stored STAGED tiles ago, and a TMA store)."""
    s = warpgroup_mma_wait(num_outstanding, deps=(s,))
    mbarrier.arrive(empty.index(j % STAGES))
    if WRITE:
        p = _exp2(s * scale_log2 - gl.expand_dims(m_i, 1), ON_FMA) * gl.expand_dims(l_i, 1)
        buffer = out_smem.index(STAGED * WG + j % STAGED)
        tma.store_wait(STAGED - 1)  # the store that read this buffer is done (only its issuing thread waits)
        _partition_barrier()
        buffer.store(p.to(gl.float16))
        fence_async_shared()
        _tma_store(out_desc, [row0, col0 + j * BN], buffer)
    elif MODE == 1:  # an ablation: the products and the maximum, no exponentials
        m_i = gl.maximum(m_i, gl.max(s, axis=1) * scale_log2)
        l_i = l_i + gl.sum(s, axis=1)
    else:
        m_new = gl.maximum(m_i, gl.max(s, axis=1) * scale_log2)
        p = _exp2(s * scale_log2 - gl.expand_dims(m_new, 1), ON_FMA)
        l_i = l_i * gl.exp2(m_i - m_new) + gl.sum(p, axis=1)
        m_i = m_new
    return m_i, l_i


@gluon.jit
def _consumer(values, BM: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, WARPS: gl.constexpr,
              WRITE: gl.constexpr, PINGPONG: gl.constexpr, MODE: gl.constexpr, STAGED: gl.constexpr,
              PIPELINED: gl.constexpr, Q_REGS: gl.constexpr, POLY: gl.constexpr, WG: gl.constexpr):
    """The MMA warps of consumer WG (``values``: the kernel's tensors and numbers it reads, as the kernel lists them).
    PIPELINED: tile j + 1's wgmma in flight while tile j is consumed. Two accumulators, the loop unrolled by two so that neither is copied into the other (ptxas serializes every wgmma when registers of one in flight are
    read, as a loop-carried swap does). Launch 1 stores one (max, sum) state per row for its chunk; launch 2 merges the
    row's chunk states first. Consumer WG takes the program's rows WG * BM .. (WG + 1) * BM. Not PIPELINED: one
    accumulator (twice the rows in the same registers), each tile's product waited for before it is consumed, so
    that only the other consumer's work overlaps it. Q_REGS: the q tile is read from shared memory into registers
    once (wgmma's A from registers), so that each product reads only k from shared memory. POLY: consumer 1 computes
    its exponentials on the FMA pipe, consumer 0 on the exponential unit."""
    (q_desc, k_desc, q_smem, k_ring, q_ready, ready, empty, row0, col0, n_tiles, m_ptr, l_ptr, rows_total, cols_total,
     chunk, chunks, scale_log2, out_ptr, out_stride, out_smem, turn) = values
    on_fma: gl.constexpr = POLY and WG == 1
    row0 = row0 + WG * BM
    q_tile = q_smem.index(WG)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1],
                                                         instr_shape=[16, BN, 16])
    rows_layout: gl.constexpr = gl.SliceLayout(1, acc_layout)
    rows = row0 + gl.arange(0, BM, rows_layout)
    m_i = gl.full((BM,), float("-inf"), gl.float32, rows_layout)
    l_i = gl.zeros((BM,), gl.float32, rows_layout)
    out_desc = None
    if WRITE:
        out_desc = tma.make_tensor_descriptor(out_ptr, [rows_total, cols_total], [out_stride, 1], [BM, BN],
                                              gl.NVMMASharedLayout.get_default_for([BM, BN], gl.float16))
        for other in range(chunks):
            m_i = gl.maximum(m_i, gl.load(m_ptr + other * rows_total + rows))
        for other in range(chunks):
            l_i += gl.load(l_ptr + other * rows_total + rows) * gl.exp2(gl.load(m_ptr + other * rows_total + rows) - m_i)
        l_i = 1.0 / l_i
    zero = gl.zeros((BM, BN), dtype=gl.float32, layout=acc_layout)
    if MODE == 2:  # distinct values, as the products would be
        zero += (gl.expand_dims(gl.arange(0, BM, rows_layout), 1)
                 + gl.expand_dims(gl.arange(0, BN, gl.SliceLayout(0, acc_layout)), 0) * 0.01).to(gl.float32)
    mbarrier.wait(q_ready.index(0), 0)
    if Q_REGS:
        q_tile = q_tile.load(gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2))
    if not PIPELINED:
        for j in range(n_tiles):
            s = _issue(q_tile, k_ring, ready, zero, j, turn, STAGES, WG, PINGPONG, MODE)
            m_i, l_i = _consume(s, empty, j, m_i, l_i, scale_log2, out_smem, out_desc, row0, col0, 0, BN, STAGES,
                                WRITE, WG, MODE, STAGED, on_fma)
    else:
        s_a = _issue(q_tile, k_ring, ready, zero, 0, turn, STAGES, WG, PINGPONG, MODE)
        for pair in range(0, (n_tiles - 1) // 2):
            j = 1 + 2 * pair
            s_b = _issue(q_tile, k_ring, ready, zero, j, turn, STAGES, WG, PINGPONG, MODE)
            m_i, l_i = _consume(s_a, empty, j - 1, m_i, l_i, scale_log2, out_smem, out_desc, row0, col0, 1, BN, STAGES,
                                WRITE, WG, MODE, STAGED, on_fma)
            s_a = _issue(q_tile, k_ring, ready, zero, j + 1, turn, STAGES, WG, PINGPONG, MODE)
            m_i, l_i = _consume(s_b, empty, j, m_i, l_i, scale_log2, out_smem, out_desc, row0, col0, 1, BN, STAGES,
                                WRITE, WG, MODE, STAGED, on_fma)
        if n_tiles % 2 == 0:
            s_b = _issue(q_tile, k_ring, ready, zero, n_tiles - 1, turn, STAGES, WG, PINGPONG,
                         MODE)
            m_i, l_i = _consume(s_a, empty, n_tiles - 2, m_i, l_i, scale_log2, out_smem, out_desc, row0, col0, 1, BN,
                                STAGES, WRITE, WG, MODE, STAGED, on_fma)
            m_i, l_i = _consume(s_b, empty, n_tiles - 1, m_i, l_i, scale_log2, out_smem, out_desc, row0, col0, 0, BN,
                                STAGES, WRITE, WG, MODE, STAGED, on_fma)
        else:
            m_i, l_i = _consume(s_a, empty, n_tiles - 1, m_i, l_i, scale_log2, out_smem, out_desc, row0, col0, 0, BN,
                                STAGES, WRITE, WG, MODE, STAGED, on_fma)
    if WRITE:
        tma.store_wait(0)
    else:
        gl.store(m_ptr + chunk * rows_total + rows, m_i)
        gl.store(l_ptr + chunk * rows_total + rows, l_i)


@gluon.jit
def softmax_kernel(q_ptr, k_ptr, m_ptr, l_ptr, out_ptr, rows_total, cols_total, q_stride, k_stride, out_stride,
                   tiles_per_chunk, chunks, scale_log2, WRITE: gl.constexpr,
                   BM: gl.constexpr, BN: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr, WARPS: gl.constexpr,
                   CONSUMERS: gl.constexpr, PINGPONG: gl.constexpr, MODE: gl.constexpr, STAGED: gl.constexpr,
                   PIPELINED: gl.constexpr, Q_REGS: gl.constexpr, POLY: gl.constexpr):
    """Launch 1 (WRITE false: each program's rows' partial state over its chunk of columns) or launch 2 (WRITE:
    the probabilities of its rows over its chunk). Grid: (row tiles, chunks). CONSUMERS 1: the kernel's WARPS warps
    on all BM rows; 2 or 4: consumer warpgroups of WARPS = 4 warps, each on its share of them, released from each other
    (each waits only for its own warps) so that one's exponentials can run under the other's MMAs."""
    rows_each: gl.constexpr = BM // CONSUMERS
    q_desc = tma.make_tensor_descriptor(q_ptr, [rows_total, D], [q_stride, 1], [rows_each, D],
                                        gl.NVMMASharedLayout.get_default_for([rows_each, D], gl.float16))
    k_desc = tma.make_tensor_descriptor(k_ptr, [D, cols_total], [k_stride, 1], [D, BN],
                                        gl.NVMMASharedLayout.get_default_for([D, BN], gl.float16))
    q_smem = gl.allocate_shared_memory(gl.float16, [CONSUMERS, rows_each, D], q_desc.layout)
    k_ring = gl.allocate_shared_memory(gl.float16, [STAGES, D, BN], k_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready.index(0), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=CONSUMERS)  # a slot is free once every consumer has released it
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(turn.index(i), count=1)
    fence_async_shared()
    row0 = gl.program_id(0) * BM
    chunk = gl.program_id(1)
    col0 = chunk * tiles_per_chunk * BN
    n_tiles = gl.minimum(tiles_per_chunk, gl.cdiv(cols_total, BN) - chunk * tiles_per_chunk)
    # launch 2's STAGED staging buffers per consumer for the TMA stores (launch 1 stores none: a placeholder)
    staged_rows: gl.constexpr = rows_each if WRITE else 8
    out_smem = gl.allocate_shared_memory(gl.float16, [STAGED * CONSUMERS, staged_rows, BN],
                                         gl.NVMMASharedLayout.get_default_for([staged_rows, BN], gl.float16))
    values = (q_desc, k_desc, q_smem, k_ring, q_ready, ready, empty, row0, col0, n_tiles, m_ptr, l_ptr, rows_total,
              cols_total, chunk, chunks, scale_log2, out_ptr, out_stride, out_smem, turn)
    if CONSUMERS == 1:
        gl.warp_specialize([
            (_consumer, (values, rows_each, BN, STAGES, WARPS, WRITE, PINGPONG, MODE, STAGED, PIPELINED, Q_REGS, POLY, 0)),
            (_producer, (values, BN, STAGES, CONSUMERS))], [1], [_PRODUCER_REGISTERS])
    elif CONSUMERS == 2:
        gl.warp_specialize([
            (_consumer, (values, rows_each, BN, STAGES, WARPS, WRITE, PINGPONG, MODE, STAGED, PIPELINED, Q_REGS, POLY, 0)),
            (_consumer, (values, rows_each, BN, STAGES, WARPS, WRITE, PINGPONG, MODE, STAGED, PIPELINED, Q_REGS, POLY, 1)),
            (_producer, (values, BN, STAGES, CONSUMERS))], [4, 1], [_CONSUMER_REGISTERS, _PRODUCER_REGISTERS])
    else:
        gl.warp_specialize([
            (_consumer, (values, rows_each, BN, STAGES, WARPS, WRITE, PINGPONG, MODE, STAGED, PIPELINED, Q_REGS, POLY, 0)),
            (_consumer, (values, rows_each, BN, STAGES, WARPS, WRITE, PINGPONG, MODE, STAGED, PIPELINED, Q_REGS, POLY, 1)),
            (_consumer, (values, rows_each, BN, STAGES, WARPS, WRITE, PINGPONG, MODE, STAGED, PIPELINED, Q_REGS, POLY, 2)),
            (_consumer, (values, rows_each, BN, STAGES, WARPS, WRITE, PINGPONG, MODE, STAGED, PIPELINED, Q_REGS, POLY, 3)),
            (_producer, (values, BN, STAGES, CONSUMERS))],
            [4, 4, 4, 1], [_QUARTER_REGISTERS, _QUARTER_REGISTERS, _QUARTER_REGISTERS, _PRODUCER_REGISTERS])
    mbarrier.invalidate(q_ready.index(0))
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(empty.index(i))
    for i in gl.static_range(2):
        mbarrier.invalidate(turn.index(i))


def _descriptor_scratch(size, alignment, stream):
    """Global memory for the tensor descriptors the kernel makes on the device."""
    return torch.empty(size, device="cuda", dtype=torch.int8)


class GluonSoftmax:
    """softmax(q @ k * SCALE) for q [M, D], k [D, N] (fp16, D a power of two up to 128, M and N multiples of the
    tiles): ``statistics()`` is launch 1, a call both launches."""

    def __init__(self, q, k, block_m, block_n, chunks, num_warps, stages, consumers=1, pingpong=False, pipelined=True,
                 q_regs=False, poly=False, mode=0):
        rows, depth = q.shape
        cols = k.shape[1]
        if rows % block_m or cols % block_n or depth > 128 or depth & (depth - 1):
            raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}: rows a multiple of {block_m}, columns of "
                             f"{block_n}, a depth that is a power of two up to 128")
        if pingpong and consumers != 2:
            raise ValueError("the ping-pong turns are between two consumers")
        if consumers not in (1, 2, 4) or (consumers > 1 and num_warps != 4):
            raise ValueError(f"{consumers} consumers of {num_warps} warps: one consumer of any warps, or 2 or 4 of 4")
        self.q, self.k, self.chunks = q, k, chunks
        self.tiles_per_chunk = triton.cdiv(cols // block_n, chunks)
        self.grid = (rows // block_m, triton.cdiv(cols // block_n, self.tiles_per_chunk))
        self.m = torch.empty(self.grid[1], rows, device=q.device, dtype=torch.float32)
        self.l = torch.empty_like(self.m)
        self.out = torch.empty(rows, cols, device=q.device, dtype=torch.float16)
        self.meta = dict(BM=block_m, BN=block_n, D=depth, STAGES=stages, WARPS=num_warps, num_warps=num_warps,
                         CONSUMERS=consumers, PINGPONG=pingpong, MODE=mode, PIPELINED=pipelined,
                         Q_REGS=q_regs, POLY=poly)
        # two staging buffers per consumer where they fit beside q and the ring, else one
        operands = (block_m + stages * block_n) * depth * 2
        self.meta["STAGED"] = 2 if operands + 2 * block_m * block_n * 2 <= 227 * 1024 else 1

    def _launch(self, write: bool):
        triton.set_allocator(_descriptor_scratch)
        q, k = self.q, self.k
        softmax_kernel[self.grid](q, k, self.m, self.l, self.out, q.shape[0], k.shape[1], q.stride(0), k.stride(0),
                                  self.out.stride(0), self.tiles_per_chunk, self.grid[1], SCALE * LOG2E,
                                  WRITE=write, **self.meta)

    def statistics(self):
        self._launch(False)
        return self.m

    def __call__(self):
        self._launch(False)
        self._launch(True)
        return self.out


def compile_for_hopper(block_m, block_n, chunks, num_warps, stages, consumers=1, pingpong=False, pipelined=True,
                       q_regs=False, poly=False, *, write: bool, depth: int = 128):
    """One launch's kernel compiled for sm_90 without a GPU (``triton.compile`` of its Gluon source, as the launch
    would specialize it: 16-byte aligned pointers and row strides): its PTX, shared memory and warps. ``chunks`` is
    the launch's argument, not a constant, so it does not change the code."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    operands = (block_m + stages * block_n) * depth * 2
    constants = dict(WRITE=write, BM=block_m, BN=block_n, D=depth, STAGES=stages, WARPS=num_warps,
                     CONSUMERS=consumers, PINGPONG=pingpong, MODE=0, PIPELINED=pipelined, Q_REGS=q_regs, POLY=poly,
                     STAGED=2 if operands + 2 * block_m * block_n * 2 <= 227 * 1024 else 1)
    names = softmax_kernel.arg_names
    types = {"q_ptr": "*fp16", "k_ptr": "*fp16", "out_ptr": "*fp16", "m_ptr": "*fp32", "l_ptr": "*fp32",
             "scale_log2": "fp32"}
    signature = {name: "constexpr" if name in constants else types.get(name, "i32") for name in names}
    aligned = {(index,): [["tt.divisibility", 16]] for index, name in enumerate(names)
               if name.endswith(("_ptr", "_stride"))}
    compiled = triton.compile(GluonASTSource(softmax_kernel, signature, constexprs=constants, attrs=aligned),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    return compiled.asm["ptx"], compiled.metadata.shared, compiled.metadata.num_warps


# A configuration: GluonSoftmax's arguments after q and k.
CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "CHUNKS", "num_warps", "STAGES", "CONSUMERS", "PINGPONG", "PIPELINED", "Q_REGS",
               "POLY")


def emitted_program(shapes, config: dict):
    """amk's own Gluon kernel of G's chain at ``config`` where amk-emit-gluon writes that form (a column sweep: one
    consumer warpgroup of 4 warps per 64 rows, two products in flight, no ping-pong, q from shared memory, every
    exponential on the exponential unit), built through the pipeline (the folded exponentials included); else None."""
    if (config["CONSUMERS"] != config["BLOCK_M"] // 64 or config["num_warps"] != 4 or not config["PIPELINED"]
            or config["PINGPONG"] or config["Q_REGS"] or config["POLY"]):
        return None
    from amk.lowering.configs import KernelConfig
    from amk.oplist import build_module
    from amk.pipeline import compile_module

    kernel_config = KernelConfig(BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"],
                                 BLOCK_K=max(16, triton.next_power_of_2(shapes[0][1])), SPLIT_N=config["CHUNKS"],
                                 num_warps=4, num_stages=config["STAGES"], GLUON=1)
    module = build_module(WORKLOADS["G"].ops, shapes, torch.float16)
    return compile_module(module, lambda kernel, size_hints=None: kernel_config).program


def measure(shapes, configs, budget: int, once: bool = False, emitted: bool = False) -> list[dict]:
    (q, k), reference, rows = baseline_rows(WORKLOADS["G"], shapes, budget)
    floor = q.shape[0] * k.shape[1] * q.element_size() / 4.3e9
    for config in configs:
        config = dict(zip(CONFIG_KEYS, config))
        program = emitted_program(shapes, config) if emitted else None
        if program is not None:

            def run_emitted(program=program) -> dict:
                out = program(q, k)[0].double()
                error = ((out - reference).norm() / reference.norm()).item()
                timed = {"ms": time_ms(lambda: program(q, k))} if error < 1e-2 and not once else {}
                return {"rel_err": error, "max_abs_err": (out - reference).abs().max().item(), "floor_ms": floor,
                        **timed}

            rows.append(probe_row(shapes, "gluon_emitted", config, run_emitted))

        def run(config=config) -> dict:
            kernel = GluonSoftmax(q, k, *config.values())
            out = kernel().double()
            error = ((out - reference).norm() / reference.norm()).item()
            good = error < 1e-2 and not once
            timed = {"ms": time_ms(kernel), "statistics_ms": time_ms(kernel.statistics)} if good else {}
            if good:  # checked again after the timing runs
                again = kernel().double()
                timed["rel_err_after_timing"] = ((again - reference).norm() / reference.norm()).item()
            return {"grid": list(kernel.grid), "rel_err": error, "max_abs_err": (out - reference).abs().max().item(),
                    "floor_ms": floor, **timed}

        rows.append(probe_row(shapes, "gluon_chunk_recompute", config, run))
    return rows


def ablations(shapes, configs) -> list[dict]:
    """The statistics launch of each configuration with a part left out, timed (its results are not the
    statistics, so not checked): MODE 1 the products and the maximum without exponentials, MODE 2 the exponentials
    without products."""
    q, k = make_inputs(WORKLOADS["G"], shapes, "cuda")
    rows = []
    for config in configs:
        for mode in (0, 1, 2):
            kernel = GluonSoftmax(q, k, *config, mode=mode)
            rows.append(probe_row(shapes, "gluon_statistics_ablation", dict(zip(CONFIG_KEYS, config), MODE=mode),
                                  lambda kernel=kernel: {"statistics_ms": time_ms(kernel.statistics)}))
    return rows


def main() -> None:
    parser = probe_parser(__doc__)
    parser.add_argument("--configs", type=json.loads,
                        help=f"a JSON list of {CONFIG_KEYS} lists to run instead of the default set")
    parser.add_argument("--once", action="store_true", help="run each configuration once, untimed (for a profiler)")
    parser.add_argument("--emitted", action="store_true",
                        help="also time amk-emit-gluon's own kernel at each configuration whose form it writes")
    parser.add_argument("--ablations", action="store_true",
                        help="time the statistics launch of each configuration without its exponentials and "
                             "without its products too")
    args = parser.parse_args()
    shape_sets = probe_shapes(parser, args.variants)
    configs = [tuple(config) for config in args.configs or (
        [(128, 128, chunks, 8, 3, 1, 0, 1) for chunks in (1, 2)]
        + [(128, bn, chunks, 4, stages, 2, 0, 1) for bn in (64, 128) for chunks in (2, 4) for stages in (3, 4)]
        + [(256, bn, chunks, 4, stages, 2, pingpong, 0) for bn in (64, 128) for chunks in (1, 2, 4)
           for stages in (2, 3) for pingpong in (0, 1)]
        # four consumers: two accumulators of 64 x 128 spill in their 112 registers, of 64 x 64 do not
        + [(256, bn, chunks, 4, stages, 4, 0, pipelined) for bn, pipelined in ((64, 0), (64, 1), (128, 0))
           for chunks in (2, 4) for stages in (2, 3)])]
    if args.ablations:
        rows = [row for shapes in shape_sets for row in ablations(shapes, configs)]
        if args.out:
            save_rows(args.out, rows)
        return
    run_probe(args, shape_sets, lambda shapes, configs, budget: measure(shapes, configs, budget, args.once,
                                                                         args.emitted), configs)


if __name__ == "__main__":
    main()
