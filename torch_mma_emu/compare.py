"""``mma-emu compare``'s tables: one input through every arch and format.

* :func:`eq10_table`: MMA-Sim's eq. 10 example (a = (-2^13, -0.5, -0.25, -0.125),
  b = (2^10, 1, 1, 1), c = 2^23) on every arch and unscaled input format (its Table 8);
* :func:`random_table`: a random GEMM's error in ulps against the exact product.

With a tree schedule, a row whose instruction cannot run the tree is marked, not fatal.
The command line is :mod:`torch_mma_emu.compare_cli`.
"""
from __future__ import annotations

import sys

import torch

from . import registry
from .formats import FLOAT_DTYPES, FORMATS, OUT_DTYPES, default_out
from .schedule import ScheduleRowError
from .text_table import format_table
from .tf32 import tf32_truncate


def _unscaled_formats(arch: str) -> list[str]:
    fmts = []
    for r in registry.rows_for(arch):
        if r.scale_format is None:
            fmts += [f for f in r.formats if f in FLOAT_DTYPES and f not in fmts]
    return fmts


def _call(A, B, C, arch, fmt, **kw):
    from .ops import emulated_mm
    inf = fmt if fmt in ("tf32", "xf32") else None
    return emulated_mm(A.to(FLOAT_DTYPES[fmt]), B.to(FLOAT_DTYPES[fmt]), C, arch=arch, in_format=inf, **kw)


class TreeRuns:
    """compare with a tree schedule, or one whose fp16 merge, residue tile or grain not every
    instruction can run: such a row is marked (``mark``) and skipped, not fatal; when no row
    can run it, the first reason is the error."""
    MARK = "cannot run the tree"
    MARK_SCHEDULE = "cannot run the schedule"

    def __init__(self, schedule):
        self.tree = schedule is not None and (
            schedule.tree is not None or schedule.merge != "workspace" or
            schedule.residue_tile is not None or schedule.split_grain is not None)
        self.mark = self.MARK if schedule is not None and schedule.tree is not None \
            else self.MARK_SCHEDULE
        self.reasons: list[str] = []
        self.ran = 0

    def call(self, *args, **kw):
        if not self.tree:
            return _call(*args, **kw)
        try:
            out = _call(*args, **kw)
        except ScheduleRowError as e:
            self.reasons.append(f"{args[3]} {args[4]}: {e}")
            return None
        self.ran += 1
        return out

    def finish(self) -> None:
        """Raises the first reason when no row could run the tree."""
        if self.tree and self.reasons and not self.ran:
            raise ValueError(self.reasons[0])


EQ10 = ([-2.0 ** 13, -0.5, -0.25, -0.125], [2.0 ** 10, 1.0, 1.0, 1.0], 2.0 ** 23)


def eq10_table(archs: list[str], schedule=None) -> tuple[list[str], list[list]]:
    """Seed 003 eq. 10 through every arch and (unscaled) format: Table 8."""
    a, b, c = (torch.tensor(EQ10[0], dtype=torch.float64).reshape(1, 4),
               torch.tensor(EQ10[1], dtype=torch.float64).reshape(4, 1), EQ10[2])
    cols = ["tf32/xf32", "bf16", "fp16", "fp8 (e5m2)", "fp32", "fp64"]
    rows = []
    runs = TreeRuns(schedule)
    for arch in archs:
        fmts = _unscaled_formats(arch)
        row = [arch, registry.ARCHS[arch].family]
        for col in cols:
            want = {"tf32/xf32": ("tf32", "xf32"), "fp8 (e5m2)": ("fp8_e5m2", "fp8_e5m2fnuz")}.get(col, (col,))
            f = next((x for x in fmts if x in want), None)
            if f is None:
                row.append("N/A")
                continue
            outs = []
            for instr in registry.instructions(arch, f):
                C = torch.tensor([[c]], dtype=OUT_DTYPES[default_out(f)])
                d = runs.call(a, b, C, arch, f, instruction=instr, schedule=schedule)
                outs.append(runs.mark if d is None else f"{d.item():g}")
            row.append(" or ".join(dict.fromkeys(outs)))
        rows.append(row)
    runs.finish()
    return ["arch", "family"] + cols, rows


def _ulp(x: torch.Tensor, out: str) -> torch.Tensor:
    """Unit in the last place of the output format at |x| (subnormal spacing below)."""
    f = FORMATS[out]
    e = torch.floor(torch.log2(x.abs().clamp_min(2.0 ** f.emin)))
    return torch.exp2(e - f.man_bits)


def _rounded_inputs(A, B, f):
    """A and B rounded to input format ``f``, as float64."""
    if f in ("tf32", "xf32"):   # the instructions drop the low 13 bits
        return tuple(tf32_truncate(x.float()).double() for x in (A, B))
    return A.to(FLOAT_DTYPES[f]).double(), B.to(FLOAT_DTYPES[f]).double()


def random_jobs(archs, formats=None) -> list[tuple[str, str, str]]:
    """(arch, input format, output format) rows of ``compare --random``."""
    jobs = []
    for arch in archs:
        for f in _unscaled_formats(arch):
            if formats and f not in formats:
                continue
            for out in ("fp64",) if f == "fp64" else ("fp32", "fp16"):
                try:
                    registry.spec(arch, f, out)
                except ValueError:
                    continue
                jobs.append((arch, f, out))
    return jobs


def random_table(archs, size, seed, formats=None, progress=False, schedule=None):
    """Random size^3 GEMM through every (arch, format, output): error in ulps against the
    exact result (:mod:`torch_mma_emu.exact_gemm`: exact slice matmuls, O(size^2) memory),
    computed once per distinct pair of rounded inputs, for every output's C."""
    from tqdm import tqdm

    from .exact_gemm import exact_gemm
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(size, size, generator=g, dtype=torch.float64)
    B = torch.randn(size, size, generator=g, dtype=torch.float64)
    C = torch.randn(size, size, generator=g, dtype=torch.float64)
    jobs = random_jobs(archs, formats)
    outs_of: dict[str, list] = {}
    for _, f, out in jobs:
        outs_of.setdefault(f, [])
        if out not in outs_of[f]:
            outs_of[f].append(out)
    bar = tqdm(total=len(outs_of) + len(jobs), disable=not progress, unit="step",
               desc="compare --random", leave=False, file=sys.stderr)
    exact, done = {}, []        # done: (rounded A, rounded B, {out: exact}) already computed
    for f, outs in outs_of.items():
        Ai, Bi = _rounded_inputs(A, B, f)
        same = next((d for d in done if torch.equal(d[0], Ai) and torch.equal(d[1], Bi)
                     and set(outs) <= set(d[2])), None)
        if same is None:            # the exact results of the rounded inputs, one per output
            bar.set_postfix_str(f"exact result for {f}")
            res = exact_gemm(Ai, Bi, [C.to(OUT_DTYPES[o]).double() for o in outs])
            same = (Ai, Bi, dict(zip(outs, res)))
            done.append(same)
        bar.update(1)
        for o in outs:
            exact[(f, o)] = same[2][o]
    rows = []
    runs = TreeRuns(schedule)
    for arch, f, out in jobs:
        bar.set_postfix_str(f"{arch} {f} -> {out}")
        odt = OUT_DTYPES[out]
        D = runs.call(A, B, C.to(odt), arch, f, out_dtype=odt, schedule=schedule)
        bar.update(1)
        if D is None:
            rows.append([arch, f, out, registry.spec(arch, f, out).describe(), runs.mark, "", ""])
            continue
        D = D.double()
        ref = exact[(f, out)]
        err = ((D - ref) / _ulp(ref, out)).abs()
        rows.append([arch, f, out, registry.spec(arch, f, out).describe(),
                     f"{err.max().item():.3g}", f"{err.mean().item():.3g}",
                     f"{err.median().item():.3g}"])
    bar.close()
    runs.finish()
    return ["arch", "input", "out", "model", "max err (ulp)", "mean err (ulp)",
            "median (ulp)"], rows


def eq10_text(archs, schedule=None) -> str:
    """What ``mma-emu compare`` prints (also the README's copy, scripts/update_readme.py)."""
    hdr, rows = eq10_table(archs, schedule)
    return format_table(hdr, rows, title=(
        "Seed 003 eq. 10: a = (-2^13, -0.5, -0.25, -0.125), b = (2^10, 1, 1, 1), c = 2^23; "
        "exact answer -0.875 (Table 8)"))
