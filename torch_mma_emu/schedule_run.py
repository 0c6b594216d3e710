"""Running a :class:`~torch_mma_emu.schedule.Schedule`: its slices, blocks and merges as a
postfix program for the C++ interpreter (csrc/core/schedule.h), the chains the program
reads computed by the CPU kernel inline or by ``_gemm`` as partials."""
from __future__ import annotations

import math
from functools import partial

import torch

from . import cpp
from .schedule_fields import Schedule
from .schedule_partials import check_node_products, check_partials, run_chains, scaled_chains
from .schedule_split import (ScheduleRowError, gather_k, grain_elements, interleaved_index,
                             k_slices, merge_partials, residue_program)
from .schedule_tree import TreeScheduleError, compile_tree, epilogue_program, node_capacity
from .spec import Spec

# program opcodes, by name (csrc/core/layout.h MMA_SCHED_OPS, checked by cpp.py)
_PARTIAL, _C, _ZERO = cpp.SCHED["PARTIAL"], cpp.SCHED["C"], cpp.SCHED["ZERO"]
_ADD, _CHAIN, _CHAINS = cpp.SCHED["ADD"], cpp.SCHED["CHAIN"], cpp.SCHED["CHAINS"]
_CPU_CHAINS = True   # tests switch it off to run the _gemm + PARTIAL route on the CPU too
_RESIDUE_CHAINS = True  # off (or _CPU_CHAINS off): residue tiles as NODE ops on the CPU too


def _reduce_program(items: list[list[int]], how: str, empties: int = 0) -> list[int]:
    """Postfix code summing the sub-programs ``items`` (each pushes one value) followed by
    ``empties`` slices past K, each +0.  The empty slices cost nothing however many there
    are: +0 + +0 is +0, and x + +0 + +0 is x + +0 for every x (-0 + +0 is +0), so they reduce
    to at most one +0 per addition the order really makes with a non-empty value."""
    if how == "halves":
        # cuBLASLt's pairwise reduction (customOption 1 of the sm89 fp8 split kernels, as
        # mmaemu 0.1.0 records it): h = ceil(S / 2), slot_i = p_i + p_(i+h) if i + h < S - 1
        # else p_i, then (((p_(S-1) + slot_0) + slot_1) + ...) + slot_(h-1)
        p = list(items) + [[_ZERO]] * empties
        S = len(p)
        if S == 1:
            return list(p[0])
        h = -(-S // 2)
        out = list(p[S - 1])
        for i in range(h):
            out += (p[i] + p[i + h] + [_ADD] if i + h < S - 1 else p[i]) + [_ADD]
        return out
    if how == "sequential" or len(items) + empties <= 2:
        out = list(items[0])
        for it in items[1:]:
            out += it + [_ADD]
        return out + ([_ZERO, _ADD] if empties else [])
    level, e = items, empties   # e: trailing +0 items of this level
    while len(level) + e > 1:
        nxt = [level[i] + level[i + 1] + [_ADD] for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:      # the last value pairs with the first +0, or is carried up
            nxt.append(level[-1] + [_ZERO, _ADD] if e else level[-1])
            e = -(-(e - 1) // 2) if e else 0
        else:
            e = -(-e // 2)      # +0 pairs: +0 each, an odd one carried up
        level = nxt
    return level[0]


def run_scheduled(sched: Schedule, spec: Spec, a3, b3, c3, has_c: bool,
                  lo=None, scales=None) -> torch.Tensor:
    """D (batch, M, N) in the spec's output dtype.  ``a3``/``b3``: the operands as _gemm
    takes them (codes, or float values for fma/ftz_addmul), ``c3`` (batch, M, N) in the
    output dtype; ``lo``: True for tf32x3 (a3, b3 are then the float32 inputs' bits, split
    into hi and lo parts K block by K block as the chains run);
    ``scales``: (scale_a, scale_b) codes (batch, M, nblk) / (batch, nblk, N) of a
    block-scaled product, whose slices and blocks then start on scale blocks."""
    Bt, M, K = a3.shape
    N = b3.shape[2]
    # the workspace is at least as wide as the output (fp64 products reduce in fp64)
    ws64 = sched.workspace == "fp64" or spec.out_format == "fp64"
    consts = [1.0 if ws64 else 0.0, sched.alpha, sched.beta]
    empty = a3.new_empty((Bt, M, 0)), b3.new_empty((Bt, 0, N))
    if sched.tree is not None:
        if scales is not None:
            raise TreeScheduleError("a tree schedule cannot run a block-scaled (MX/NVFP4) "
                                    "product: its per-node operations take no scales; use "
                                    "split_k / promote_every")
        prog = compile_tree(sched.tree, K, spec, has_c, sched.alpha, sched.beta,
                            sched.epilogue)
        return cpp.sched(spec, a3, b3, c3, c3.new_empty((0, M, N)), prog, consts)
    if sched.split_layout == "interleaved" and sched.split_k > 1 and K > 0:
        if scales is not None or lo is not None:
            raise ScheduleRowError("split_layout='interleaved' cannot run block-scaled or "
                                   "tf32x3 products")
        # the slices' tiles gathered side by side (zero-padded to equal slices): then the
        # contiguous cut of the fast chain path runs them, each slice its own chain
        tile = int(sched.split_grain)
        idx = interleaved_index(K, tile, sched.split_k)
        flat = sched.replace(split_layout=None,
                             split_grain=str(idx.numel() // sched.split_k))
        return run_scheduled(flat, spec, gather_k(a3, idx, 2), gather_k(b3, idx, 1), c3,
                             has_c)
    L = spec.L
    for name in ("promote_every", "dot_k"):     # blocks and tl.dot tiles hold whole instructions
        v = getattr(sched, name)
        if v is not None and v % L:
            raise ValueError(f"{name}={v} is not a multiple of the instruction's K "
                             f"({spec.instruction or spec.op}: L = {L})")
    if scales is not None:  # slices and blocks start on scale blocks as well
        L = math.lcm(L, spec.block_size)
        if sched.promote_every is not None and sched.promote_every % L:
            raise ValueError(f"promote_every={sched.promote_every} is not a multiple of "
                             f"{L}, the instruction's K and the scale block "
                             f"({spec.block_size}) together")
    grain = grain_elements(sched.split_grain, spec, L)
    if sched.residue_tile is not None:
        if scales is not None or lo is not None:
            raise ScheduleRowError("residue_tile cannot run block-scaled or tf32x3 products")
        # CPU: each slice as two CHAINs (any K); elsewhere and multi-pass: NODE ops
        residue_chains = _CPU_CHAINS and _RESIDUE_CHAINS and c3.device.type == "cpu" and \
            spec.passes == 1
        if not residue_chains:
            check_node_products(K)
        if sched.residue_tile % spec.L:
            raise ScheduleRowError(f"residue_tile={sched.residue_tile} is not a multiple of the "
                             f"instruction's K ({spec.instruction or spec.op}: L = {spec.L})")
    if sched.merge != "workspace" and spec.out_format != "fp32":
        raise ScheduleRowError(f"merge={sched.merge!r} rounds fp32 partials to fp16: it needs an "
                         f"instruction with fp32 output, not {spec.out_format}")
    c_in_chain = sched.c_mode == "chain"
    zero = torch.zeros((), dtype=c3.dtype, device=c3.device).expand(Bt, M, N)
    jobs: list[tuple[int, int, bool]] = []   # chains (k0, k1, starts from C)
    # The CPU kernel runs the slices' and blocks' chains itself (CHAIN ops, straight into
    # its reduction: no partial tensors); elsewhere _gemm computes them as PARTIALs.
    # (CHAIN ops start on whole instructions; the fp16 merges take the slices as partials)
    inline = _CPU_CHAINS and c3.device.type == "cpu" and lo is None and \
        grain % spec.L == 0 and sched.merge == "workspace"

    def push(k0, k1, from_c=False):
        if inline:
            return [_CHAIN, k0, k1, int(from_c)]
        jobs.append((k0, k1, from_c))
        return [_PARTIAL, len(jobs) - 1]

    slice_code = []
    sched.check_bounds()            # MMA_EMU_MAX_SPLIT_K: where the slices are made
    ranges, empties = k_slices(K, grain, sched.split_k, sched.split_grain is not None)
    pe, seq = sched.promote_every, None
    if inline and pe is None and sched.residue_tile is None and len(ranges) > 2 and \
            sched.reduce == "sequential":
        # slice 0, then "+ each further slice's chain" as one CHAINS op: a few words
        # however many slices (split_k = 10^6 would otherwise be millions of them)
        seq = push(*ranges[0], c_in_chain) + [_CHAINS, ranges[1][0], K, ranges.size] + \
            ([_ZERO, _ADD] if empties else [])
    for (k0, k1) in (ranges if seq is None else ()):
        if sched.residue_tile is not None:
            slice_code.append(residue_program(k0, k1, spec.L, node_capacity(spec),
                                              sched.residue_tile, c_in_chain and has_c,
                                              residue_chains))
            continue
        if pe is None:
            slice_code.append(push(k0, k1, c_in_chain))
            continue
        code = [_C] if (c_in_chain and has_c) else [_ZERO]
        if inline and k1 > k0:          # the promotion loop as one CHAINS op
            code += [_CHAINS, k0, k1, pe]
        else:
            for b0 in range(k0, k1, pe):
                code += push(b0, min(k1, b0 + pe)) + [_ADD]
        slice_code.append(code)
    epi = epilogue_program(has_c and not c_in_chain, sched.alpha, sched.beta, sched.epilogue)
    direct = inline or sched.residue_tile is not None   # no partials from _gemm
    if direct:
        parts, sc = c3.new_empty((0, M, N)), scales or (None, None)
    else:
        check_partials(len(jobs), Bt, M, N, c3.element_size())
        gemm = partial(cpp.gemm, spec)  # the plain chain: gemm(a, b, c, sa=None, sb=None)
        if scales is not None:
            parts = scaled_chains(jobs, a3, b3, c3, zero, gemm, scales, spec.block_size)
        else:
            parts = run_chains(jobs, a3, b3, c3, zero, gemm, lo, sched.dot_k,
                                spec.L * spec.passes)
        a3, b3, sc = *empty, (None, None)
    if sched.merge != "workspace":     # each slice's value, merged in fp16 here
        vals = [parts[code[1] * Bt:(code[1] + 1) * Bt] if len(code) == 2 and code[0] == _PARTIAL
                else cpp.sched(spec, a3, b3, c3, parts, code, consts, *sc) for code in slice_code]
        merged = merge_partials(vals, sched.merge)
        return cpp.sched(spec, *empty, c3, merged, [_PARTIAL, 0] + epi, consts)
    prog = (seq if seq is not None else _reduce_program(slice_code, sched.reduce, empties)) + epi
    return cpp.sched(spec, a3, b3, c3, parts, prog, consts, *sc)
