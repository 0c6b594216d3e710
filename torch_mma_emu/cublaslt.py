"""cuBLASLt's split-K choice for ``torch._scaled_mm``, from recorded heuristic tables.

cuBLASLt picks the split count S of an fp8 GEMM per call, from (M, N, K, the operand
formats, the output dtype, fast accumulation, the workspace size, the GPU and its SM
count): "sm90" alone does not say it (an H100 SXM or an H200 has more SMs than the H100
PCIe the table was recorded on).  The tables here are mmaemu 0.1.0's recordings of
``cublasLtMatmulAlgoGetHeuristic`` as torch 2.7.1 calls it (Apache-2.0; derived by
scripts/data/cublaslt_splitk_table.py, torch_mma_emu/data/NOTICE.md): cuBLASLt 12.8.3.14
on an H100 PCIe (114 SMs) and an RTX 4060 (24 SMs), the rows of torch's 1 MiB workspace
and Transformer Engine's 32 MiB one.  A shape the table does not hold raises
:class:`OutsideTable` instead of guessing.

How the S splits run (registry.CUBLASLT_SCALED_MM, from the same source): on sm90
contiguous runs of 128-wide k-tiles, merged serially; on sm89 64-wide k-tiles dealt
round-robin (tile t to split t mod S), merged serially or, for customOption 1, by
``reduce="halves"``.  Without fast accumulation each split restarts its fp32 promotion
every 128 of its own K elements (one sm90 tile, two sm89 tiles), as unsplit calls do."""
from __future__ import annotations

import os
from functools import lru_cache
from typing import Optional

import torch

from .formats import format_of_dtype
from .registry import CUBLASLT_SCALED_MM, gpu
from .schedule_fields import Schedule

__all__ = ["TABLES", "OutsideTable", "SplitKChoice", "as_choice", "choice_for_gpu",
           "PROMOTE_EVERY"]

VERSION = "cublaslt-12.8.3.14"
# name -> (data file stem, the GPU it was recorded on: registry.GPUS)
TABLES = {f"{VERSION}/H100-PCIe": ("h100pcie", "H100 PCIe"),
          f"{VERSION}/RTX-4060": ("rtx4060", "RTX 4060")}
WORKSPACES = {1 << 20: 0, 32 << 20: 1}    # bytes -> table column (torch's, TE's)
PROMOTE_EVERY = 128          # fp32 promotion without fast accumulation (K elements per split)
_FMT = {"fp8_e4m3": 0, "fp8_e5m2": 1}
_OUT = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2, torch.float8_e4m3fn: 3,
        torch.float8_e5m2: 4}
_DATA = os.path.join(os.path.dirname(__file__), "data")


class OutsideTable(ValueError):
    """The recorded table has no row for this call: cuBLASLt's choice is unknown."""


@lru_cache(maxsize=None)
def _table(stem: str):
    import numpy as np
    z = np.load(os.path.join(_DATA, f"cublaslt_splitk_{stem}.npz"))
    shapes = z["shapes"]
    index = {(int(m), int(n), int(k)): i for i, (m, n, k) in enumerate(shapes.tolist())}
    return index, z["table"]


class SplitKChoice:
    """``schedule={"scaled_mm": SplitKChoice(name, workspace=...)}``: per call, the
    Schedule of the split count cuBLASLt picks (the name of :data:`TABLES`; workspace in
    bytes: 1 MiB, torch's default, 32 MiB, Transformer Engine's, or 0, which never
    splits).  Called as ``choice(M, N, K, fmt_a, fmt_b, out_dtype, fast_accum)`` (the
    formats as names or dtypes); ``choice.split(...)`` gives (S, customOption)."""

    def __init__(self, name: str, workspace: int = 1 << 20):
        if name not in TABLES:
            raise ValueError(f"unknown split-K table {name!r}; tables: {', '.join(TABLES)}")
        if workspace != 0 and workspace not in WORKSPACES:
            raise ValueError(f"workspace={workspace!r}: the tables hold 1 MiB (1048576, "
                             "torch's) and 32 MiB (33554432, Transformer Engine's); 0 never "
                             "splits")
        self.name, self.workspace = name, workspace
        self.stem, self.gpu = TABLES[name]
        self.arch = gpu(self.gpu).arch
        self.layout, self.tile, _ = CUBLASLT_SCALED_MM[self.arch]

    def __repr__(self) -> str:
        return f"SplitKChoice({self.name!r}, workspace={self.workspace})"

    def split(self, M, N, K, fmt_a, fmt_b, out_dtype, fast_accum) -> tuple[int, int]:
        """(S, customOption) that the table records for this call."""
        fa, fb = (_FMT.get(_fmt_name(f)) for f in (fmt_a, fmt_b))
        if fa is None or fb is None or out_dtype not in _OUT:
            raise OutsideTable(f"{self.name}: the table holds fp8 (e4m3 / e5m2) operands and "
                               f"fp32, bf16, fp16, fp8 outputs; got {fmt_a} x {fmt_b} -> "
                               f"{out_dtype}")
        if self.workspace == 0 or min(int(M), int(N), int(K)) == 0:
            return 1, 0          # no workspace, or nothing to accumulate: never split
        index, table = _table(self.stem)
        row = index.get((int(M), int(N), int(K)))
        col = (((fa * 2 + fb) * 5 + _OUT[out_dtype]) * 2 + int(bool(fast_accum))) * 2 + \
            WORKSPACES[self.workspace]
        cell = 0 if row is None else int(table[row, col])
        if cell == 0:
            raise OutsideTable(
                f"{self.name}: no recorded cuBLASLt choice for M={M}, N={N}, K={K}, "
                f"{_fmt_name(fmt_a)} x {_fmt_name(fmt_b)} -> {out_dtype}, use_fast_accum="
                f"{bool(fast_accum)}, workspace {self.workspace} (the table holds "
                f"{len(index)} shapes); give the split explicitly: schedule={{'scaled_mm': "
                f"Schedule(split_k=S, ...)}}")
        return cell & 31, cell >> 5

    def schedule_for(self, S: int, custom: int, fast_accum: bool) -> Schedule:
        """The Schedule of S splits of this GPU's kernels."""
        pe = None if fast_accum else PROMOTE_EVERY
        if S == 1:
            return Schedule(promote_every=pe)
        if self.layout == "interleaved":
            return Schedule(split_k=S, split_grain=self.tile, split_layout="interleaved",
                            reduce="halves" if custom == 1 else "sequential",
                            promote_every=pe)
        return Schedule(split_k=S, split_grain=self.tile, promote_every=pe)

    def __call__(self, M, N, K, fmt_a, fmt_b, out_dtype, fast_accum) -> Schedule:
        S, custom = self.split(M, N, K, fmt_a, fmt_b, out_dtype, fast_accum)
        return self.schedule_for(S, custom, bool(fast_accum))


def choice_for_gpu(name: str, workspace: int = 1 << 20) -> SplitKChoice:
    """The recorded choice of a named GPU (registry.GPUS); a GPU without a recorded table
    (another SM count: an H100 SXM or H200 has 132) raises instead of borrowing one."""
    row = gpu(name)                              # raises for an unknown name
    arch, sms = row.arch, row.sms
    for table, (_, g) in TABLES.items():
        if gpu(g).name == row.name:
            return SplitKChoice(table, workspace)
    have = ", ".join(f"{g} ({gpu(g).sms} SMs)" for _, g in TABLES.values())
    raise ValueError(f"no recorded cuBLASLt split-K table for {name} ({arch}, {sms} SMs): "
                     f"cuBLASLt's choice depends on the SM count; tables: {have}")


def _fmt_name(f) -> Optional[str]:
    if isinstance(f, torch.dtype):
        fm = format_of_dtype(f)
        return fm.name if fm is not None else str(f)
    return f


def as_choice(val):
    """A per-call chooser from a table name or a callable (else None)."""
    if isinstance(val, str) and val in TABLES:
        return SplitKChoice(val)
    if callable(val) and not isinstance(val, (str, Schedule)):
        return val
    return None
