"""The partial results a schedule takes from the plain-chain op ``_gemm`` (CUDA, tf32x3,
block-scaled products and slices that do not start on whole instructions): slices and
promotion blocks as chains over K ranges, in one batched call where their lengths agree."""
from __future__ import annotations

from typing import Callable

import torch

from .limits import limit as bound, setting
from .tf32 import tf32x3_split

__all__ = ["run_chains", "scaled_chains", "f32dottc_tf32x3", "check_partials",
           "check_node_products", "PARTIALS_ENV", "NODES_ENV"]

PARTIALS_ENV = "MMA_EMU_SCHED_PARTIAL_BYTES"


def check_partials(n: int, Bt: int, M: int, N: int, es: int) -> None:
    """The _gemm route holds one (batch, M, N) result per chain: refuse before the work when
    they pass MMA_EMU_SCHED_PARTIAL_BYTES (default 2 GiB).  The CPU's CHAIN route holds
    none (its stack is a few entries deep, whatever split_k is)."""
    limit = bound("partial_bytes")
    need = n * Bt * M * N * es
    if need > limit:
        raise ValueError(f"schedule: {n} chains (slices x promotion blocks) each keep a "
                         f"({Bt}, {M}, {N}) partial result on this route (CUDA, tf32x3, fp16 "
                         f"merges): {need / 2 ** 20:.0f} MiB, over the {limit / 2 ** 20:.0f} MiB "
                         f"limit; use fewer slices or blocks, or raise {PARTIALS_ENV} (bytes)")


NODES_ENV = "MMA_EMU_SCHED_MAX_NODE_PRODUCTS"


def check_node_products(K: int) -> None:
    """A residue-tile schedule runs as per-element NODE ops, a program of about 2.3 words
    per product (a K = 10^7 GEMV: 1.4 GB): refuse K past MMA_EMU_SCHED_MAX_NODE_PRODUCTS
    (default 2^20) before the work."""
    limit = bound("node_products")
    if K > limit:
        raise ValueError(f"schedule: residue_tile runs every product as a NODE op of the "
                         f"per-element interpreter (a program of about 2.3 words per product); "
                         f"K = {K} is over the limit of {limit}: raise {NODES_ENV}")


def _block_bytes() -> int:
    """The CPU kernel's K block budget (MMA_EMU_CPU_BLOCK_BYTES, default 32 MiB)."""
    return setting("cpu_block_bytes")


def f32dottc_tf32x3(ah, bh, al, bl, acc, dot: Callable, zero):
    """One ``tl.dot(a, b, acc, input_precision="tf32x3")`` as Triton 3.6's F32DotTC pass
    lowers it: ``dot(x, y, c)`` is one tf32 dot from accumulator c; the small products from
    ``zero``, the NaNs of their sum replaced by +0, the big product, then ``r + acc`` with
    one fp32 addition.  The one implementation of this order (schedule_run.py's tf32x3 and
    torch_mma_emu.triton's interpreter dots both call it)."""
    r = dot(al, bh, zero)
    r = dot(ah, bl, r)
    r = torch.where(torch.isnan(r), torch.zeros_like(r), r)
    r = dot(ah, bh, r)
    return r + acc


def _tf32x3_chain(a3, b3, k0, k1, start, gemm, dot_k, L):
    """tf32x3: one F32DotTC decomposition per tl.dot tile of dot_k, each added to acc.
    a3, b3: the float32 inputs' bits.  Each dot runs K block by K block, the hi / lo parts
    made per block (the plain chain goes on exactly from its accumulator at a multiple of
    the instruction, L): the working set stays about MMA_EMU_CPU_BLOCK_BYTES whatever K."""
    acc, step = start, dot_k or max(k1 - k0, 1)
    zero = start.new_zeros(start.shape)
    Bt, M, _ = a3.shape
    # 8 part tensors of 4 bytes per element and row alive at once: a quarter of the budget
    blk = max(L, _block_bytes() // max(1, 128 * (M + b3.shape[2])) // L * L)

    def part(x, lo):                      # hi or lo tf32 codes of float32 bits
        return tf32x3_split(x.view(torch.float32))[lo].view(torch.int32)

    def dot(x, y, c):                     # x, y: (tile of a3, lo?), (tile of b3, lo?)
        for u0 in range(0, x[0].shape[2], blk):
            u1 = u0 + blk
            c = gemm(part(x[0][:, :, u0:u1], x[1]), part(y[0][:, u0:u1, :], y[1]), c)
        return c
    for t0 in range(k0, k1, step):
        t1 = min(k1, t0 + step)
        a, b = a3[:, :, t0:t1], b3[:, t0:t1, :]
        acc = f32dottc_tf32x3((a, 0), (b, 0), (a, 1), (b, 1), acc, dot, zero)
    return acc


def scaled_chains(jobs, a3, b3, c3, zero, gemm, scales, block) -> torch.Tensor:
    """The partials of a block-scaled product: each chain with its scale blocks (every range
    starts on a block; an empty one is C or +0)."""
    sa, sb = scales
    outs = []
    for k0, k1, fc in jobs:
        start = c3 if fc else zero
        if k1 == k0:
            outs.append(start.expand(c3.shape).contiguous())
            continue
        b0, b1 = k0 // block, -(-k1 // block)
        outs.append(gemm(a3[:, :, k0:k1], b3[:, k0:k1, :], start, sa[:, :, b0:b1],
                         sb[:, b0:b1, :]))
    return torch.cat(outs) if outs else c3.new_empty((0,) + tuple(c3.shape[1:]))


def run_chains(jobs, a3, b3, c3, zero, gemm, lo, dot_k, L=1) -> torch.Tensor:
    """The partial results (len(jobs) * batch, M, N) of chains over K ranges.  Chains of
    one length from +0 run as one batched _gemm call (their K ranges gathered into the
    batch dimension): one kernel launch, and the result is already the partials tensor."""
    Bt, M, _ = a3.shape
    N = b3.shape[2]
    if not jobs:
        return c3.new_empty((0, M, N))
    if lo is not None:
        outs = [_tf32x3_chain(a3, b3, k0, k1, c3 if fc else zero, gemm, dot_k, L)
                for k0, k1, fc in jobs]
        return torch.stack(outs).reshape(len(outs) * Bt, M, N)
    groups: dict = {}
    for j, (k0, k1, fc) in enumerate(jobs):
        groups.setdefault((k1 - k0, fc), []).append(j)
    if len(groups) == 1 and len(jobs) > 1 and not jobs[0][2]:
        length = jobs[0][1] - jobs[0][0]
        idx = torch.tensor([k0 for k0, _, _ in jobs], device=a3.device)[:, None] + \
            torch.arange(length, device=a3.device)
        ag = a3[:, :, idx].permute(2, 0, 1, 3).reshape(len(jobs) * Bt, M, length)
        bg = b3[:, idx, :].permute(1, 0, 2, 3).reshape(len(jobs) * Bt, length, N)
        return gemm(ag, bg, zero[:1].expand(len(jobs) * Bt, M, N))
    outs = [None] * len(jobs)
    for (length, fc), js in groups.items():
        if len(js) == 1 or fc:
            for j in js:
                k0, k1, _ = jobs[j]
                outs[j] = gemm(a3[:, :, k0:k1], b3[:, k0:k1, :], c3 if fc else zero)
            continue
        sub = run_chains([jobs[j] for j in js], a3, b3, c3, zero, gemm, None, None)
        for t, j in enumerate(js):
            outs[j] = sub[t * Bt:(t + 1) * Bt]
    return outs[0] if len(outs) == 1 else torch.cat(outs)
