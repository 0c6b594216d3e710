"""Split-K as libraries cut and merge it: where the slices start, the leading residue tile
of a CUTLASS mainloop, and the three ways cuBLAS merges the partial sums (schedule_run.py runs
them; docs/schedules.md gives the sources).

Facts from Meta's bitequiv reconstruction of cuBLAS (facebookexperimental/triton,
``bitequiv/cublas_equiv_gemm.py``, measured on GB200 / sm_100 by its authors):

* cuBLAS's split-K cuts K at a grain G, 64 elements for fp16 / bf16 inputs and 128 for fp8:
  ``chunk = ceil(ceil(K / G) / splits) * G``, ``ceil(K / chunk)`` slices, the remainder in
  the last one (no empty slice is run);
* the partials are merged in forward order starting *from partial 0* (not from a zero
  accumulator, which would turn a -0 into +0), by one of three schemes: an fp32 workspace
  (``splitKreduce<..., float>``), partials rounded to fp16 then summed in fp32
  (``splitKreduce<..., __half>``), or a serial chain whose running sum is kept in fp16
  between slices (CUTLASS ``GemmSplitKSerial``);
* non-aligned shapes run CUTLASS kernels whose accumulator takes 8 or 16 real k-elements
  per MMA, with the short group at the end of the leading residue tile of ``K % ktile``
  elements (``ktile`` 32, 64 or 128), per slice.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from . import cpp
from .spec import Spec

__all__ = ["MERGES", "GRAIN_CUBLAS", "ScheduleRowError", "grain_elements", "k_slices",
           "residue_groups", "residue_program", "merge_partials", "interleaved_index",
           "gather_k"]


class ScheduleRowError(ValueError):
    """A schedule that this product's instruction cannot run (its output format, its K, its
    scale blocks); ``compare`` marks such rows instead of failing."""

# name -> (what it does, the cuBLASLt REDUCTION_SCHEME / kernel bitequiv read it from)
MERGES = {
    "workspace": "the slices summed by `reduce` in the `workspace` format "
                 "(cuBLASLt COMPUTE_TYPE: splitKreduce<..., float>)",
    "fp16_partials": "each fp32 partial rounded to fp16, then summed forward in fp32 "
                     "(cuBLASLt OUTPUT_TYPE: splitKreduce<..., __half>)",
    "fp16_serial": "running sum rounded to fp16 after every slice: s = fp16(p0), "
                   "s = fp16(s + p_i) with an fp32 addition (cuBLASLt NONE: GemmSplitKSerial)",
}
GRAIN_CUBLAS = "cublas"     # split_grain value: 128 for 8-bit inputs, 64 for wider ones


def grain_elements(split_grain: Optional[str], spec: Spec, unit: int) -> int:
    """The K elements slices start on.  ``unit``: what every slice must start on (the
    instruction's K, with the scale block for block-scaled products); ``None`` is that unit
    (the older, instruction-aligned cut).  ``"cublas"``: 128 for 8-bit (and narrower) inputs,
    64 otherwise (measured for fp8 and fp16 / bf16; other formats by that rule, unmeasured)."""
    if split_grain is None:
        return unit
    if split_grain == GRAIN_CUBLAS:
        g = 128 if max(spec.fmt_a.bits, spec.fmt_b.bits) <= 8 else 64
    else:
        g = int(split_grain)
    if spec.scaled and g % spec.block_size:
        raise ScheduleRowError(f"split_grain={g} does not start the slices on scale blocks "
                         f"({spec.block_size} elements)")
    return g


@dataclass(frozen=True, eq=False)
class Slices:
    """(k0, k1) of n slices of ``size`` elements from 0, the last ending at K: a lazy
    sequence (split_k = 10^6 makes no million tuples)."""
    K: int
    size: int
    n: int

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, s: int) -> tuple[int, int]:
        s = s + self.n if s < 0 else s
        if not 0 <= s < self.n:
            raise IndexError(s)
        return min(self.K, s * self.size), min(self.K, (s + 1) * self.size)

    def __iter__(self):
        return (self[s] for s in range(self.n))

    def __eq__(self, other) -> bool:     # equal to the list of its slices
        return list(self) == list(other) if isinstance(other, (list, tuple, Slices)) else \
            NotImplemented


def k_slices(K: int, grain: int, parts: int, trim: bool) -> tuple[Slices, int]:
    """The slices ``[k0, k1)`` of ``ceil(ceil(K / grain) / parts) * grain`` elements, the last
    shorter, and how many empty slices past K follow them: ``parts - len(slices)`` when
    ``trim`` is False (the instruction-aligned cut, each empty slice a +0), else none (as
    cuBLAS runs ``ceil(K / chunk)`` slices).  K == 0 gives one empty slice."""
    chunks = -(-K // grain)
    per = -(-chunks // parts)
    n = -(-chunks // per) if per else 1
    return Slices(K, per * grain, n), 0 if trim else parts - n


def interleaved_index(K: int, tile: int, parts: int) -> torch.Tensor:
    """The K indices of ``split_layout="interleaved"`` in slice order: K cut into
    ``T = ceil(K / tile)`` tiles, tile t dealt to slice ``t mod parts``, every slice padded
    to ``ceil(T / parts)`` tiles (-1: a zero product; the short last tile too), so slice s
    is ``[s * q * tile, (s + 1) * q * tile)`` of the result.  This is how mmaemu 0.1.0
    (Apache-2.0, ``mmaemu/model/plan.py``, recorded on an RTX 4060, cuBLASLt 12.8.3.14,
    torch 2.7.1) describes the split kernels of sm89 fp8 GEMMs: 64-wide k-tiles, tile t to
    split t mod S, the ragged tail zero padded."""
    T = -(-K // tile)
    q = -(-T // parts)
    k = torch.arange(q * parts * tile).reshape(q, parts, tile).permute(1, 0, 2).reshape(-1)
    return torch.where(k < K, k, torch.full_like(k, -1))


def gather_k(x: torch.Tensor, idx: torch.Tensor, dim: int) -> torch.Tensor:
    """``x`` with its K dimension ``dim`` replaced by ``x[..., idx, ...]``, -1 giving a zero
    (the +0 code of every format, and 0.0 for operands given as values)."""
    idx = idx.to(x.device)
    g = x.index_select(dim, idx.clamp_min(0))
    shape = [1] * x.dim()
    shape[dim] = idx.numel()
    return torch.where((idx < 0).reshape(shape), torch.zeros((), dtype=x.dtype,
                                                            device=x.device), g)


def residue_groups(k0: int, k1: int, L: int, tile: int) -> list[list[int]]:
    """The instruction groups of one chain over ``[k0, k1)`` run by a CUTLASS mainloop with
    k-tile ``tile``: the leading residue tile of ``r = (k1 - k0) % tile`` elements (a whole
    tile when that is 0, at most the range) first, cut into groups of L from its start so
    its short group comes last, then groups of L from ``k0 + r``."""
    n = k1 - k0
    r = min(n, (n % tile) or tile)
    bounds = list(range(k0, k0 + r, L)) + list(range(k0 + r, k1, L)) + [k1]
    bounds = sorted(set(bounds))
    return [list(range(a, b)) for a, b in zip(bounds, bounds[1:])]


def merge_partials(parts: list[torch.Tensor], how: str) -> torch.Tensor:
    """The fp16 merges of fp32 partials (float32 tensors), forward from partial 0."""
    if how == "fp16_partials":
        acc = parts[0].to(torch.float16).to(torch.float32)
        for p in parts[1:]:
            acc = acc + p.to(torch.float16).to(torch.float32)
        return acc
    if how == "fp16_serial":
        acc = parts[0].to(torch.float16)
        for p in parts[1:]:
            acc = (acc.to(torch.float32) + p).to(torch.float16)
        return acc.to(torch.float32)
    raise ValueError(f"merge_partials: {how!r} is not an fp16 merge")


# program opcodes (csrc/core/schedule.h)
_C, _ZERO, _NODE, _CHAIN = (cpp.SCHED[k] for k in ("C", "ZERO", "NODE", "CHAIN"))


def residue_program(k0: int, k1: int, L: int, cap: int, tile: int, from_c: bool,
                   chains: bool = False) -> list[int]:
    """One chain over [k0, k1) as NODE ops, its groups as a CUTLASS mainloop with k-tile
    ``tile`` runs them (schedule_split.residue_groups): each group's products in the
    instruction's first lanes, the rest zero.  ``chains`` (the CPU kernel): the same
    arithmetic as two CHAIN ops, a few words for any K: the residue tile [k0, k0 + r) as a
    chain from C or +0 (its groups of L from k0, the short one last, zero-padded), then the
    chain over [k0 + r, k1) going on from that accumulator (CHAIN flag 2), its groups of L
    from k0 + r: both may start off the instruction grid (csrc/core/schedule.h)."""
    if chains:
        n = k1 - k0
        if n == 0:
            return [_C] if from_c else [_ZERO]
        r = min(n, (n % tile) or tile)
        return [_CHAIN, k0, k0 + r, int(from_c)] + ([_CHAIN, k0 + r, k1, 2] if r < n else [])
    groups = residue_groups(k0, k1, L, tile)
    if not groups:
        return [_C] if from_c else [_ZERO]
    code = [_C] if from_c else []
    for i, g in enumerate(groups):
        code += [_NODE, len(g), int(from_c or i > 0), cap]
        for slot, k in enumerate(g):
            code += [k, slot]
    return code
