"""Batch invariance: does a row's result depend on how many rows ran with it?

    report = tme.batch_invariance(fn, (x, W), batch_sizes=[1, 4, 32], arch="H100")
    print(report)            # the rows whose bits change, and what changed with the batch
    report.rows              # [0, 1, 2, 3]: row indices whose bits differ between sizes

``fn(*args)`` runs once per batch size ``b`` on the first ``b`` rows of every argument whose
first dimension is the largest batch size (the others, e.g. weights, are passed whole), under
``tme.emulate(arch)`` (torch's matrix products) and ``tmt.emulate(arch)`` (Triton kernels) at
once.  Row ``r`` of the output is compared bit for bit across every batch size that holds it.

What changed is read from the emulation, per batch size: each Triton launch (kernel, grid and
the constexpr / option keywords it ran with: a tile size or split chosen from the batch shows
here), each ``tl.dot``'s instruction plan (``em.counts``), the reduction / math / contraction
lines of ``em.summary()``, and each torch product's record (op, format, shapes).
``report.differences`` keeps the items that are not the same at every batch size; a launch's
grid is listed but not counted as a difference (it follows the batch by construction).

``trees=(x, w)``, for a function whose output row r, column 0 sums ``args[x][r, k] *
args[w][k, 0]`` over k (a linear layer, a GEMM kernel): the summation tree of the first
``tree_rows`` changed rows at one batch size of each group, revealed with FPRev
(torch_mma_emu.fprev: probes in row r of ``args[x]``, ones in column 0 of ``args[w]``, every
other element zero) and kept as its description in ``report.trees[row][batch size]``, e.g.
"2 blocks of 64 (each chain of (16+1)-term fused sums ...)" against "chain of (16+1)-term
fused sums ...".  Each tree costs about K emulated runs.
"""
from __future__ import annotations

import dataclasses
import numbers
import re
import warnings
from collections import Counter
from typing import Callable, Sequence

import torch

from .records import SCHEDULE_ASSUMPTION

_INT = {2: torch.int16, 4: torch.int32, 8: torch.int64, 1: torch.int8}


@dataclasses.dataclass
class RowChange:
    row: int
    groups: list          # [[batch sizes with the same bits], ...] (two or more groups)
    max_abs: float        # the largest difference between the groups' values in this row

    def __str__(self):
        g = " | ".join(",".join(map(str, s)) for s in self.groups)
        return f"row {self.row}: bits differ between batch sizes {g} (max |diff| " \
               f"{self.max_abs:.3g})"


@dataclasses.dataclass
class InvarianceReport:
    arch: str
    batch_sizes: list
    changes: list                      # RowChange per changed row
    configs: dict                      # batch size -> {item: value}
    differences: dict                  # item -> {batch size: value}, items that vary
    trees: dict = dataclasses.field(default_factory=dict)   # row -> {batch size: FPRev tree}
    torch_products: bool = False       # torch products ran: the report rests on SCHEDULE_ASSUMPTION

    @property
    def rows(self) -> list:
        return [c.row for c in self.changes]

    @property
    def invariant(self) -> bool:
        return not self.changes

    def __str__(self):
        head = (f"batch invariance on {self.arch}, batch sizes {self.batch_sizes}: " +
                ("every row has the same bits" if self.invariant
                 else f"{len(self.changes)} row(s) change: {self.rows}"))
        lines = [head] + [f"  {c}" for c in self.changes]
        if self.differences:
            lines.append("what changes with the batch size:")
            for item, per in self.differences.items():
                vals = "; ".join(f"b={b}: {v}" for b, v in per.items())
                lines.append(f"  {item}: {vals}")
        elif self.changes:
            lines.append("no launch, dot plan or product record changes with the batch size")
        for row, per in self.trees.items():
            lines.append(f"summation tree of row {row} (FPRev):")
            lines += [f"  b={b}: {d}" for b, d in per.items()]
        if self.torch_products:
            lines.append(SCHEDULE_ASSUMPTION + ": a GPU may change bits with the batch "
                         "size where this says they do not")
        return "\n".join(lines)


def _config(log, em, pm) -> dict:
    out = {}
    seen = Counter()
    for name, grid, keys in log:
        seen[name] += 1
        tag = f"launch {name}#{seen[name]}"
        out[f"{tag} grid"] = grid
        for k, v in keys:
            out[f"{tag} {k}"] = v
    for plan in em.counts:                 # which plans ran (their counts follow the grid)
        out[f"tl.dot {plan}"] = "ran"
    for line in em.summary().splitlines()[len(em.counts) or 1:]:
        out[f"summary: {re.sub(r'[0-9]+', '#', line.strip())}"] = "yes"
    for r in getattr(pm, "records", ()):
        out[f"torch {r.op} {r.phase} {r.format} {r.shapes[1:]}"] = "ran"
    for (op, phase, fmt) in pm.counts:
        out[f"torch {op} {phase} {fmt}"] = "ran"
    return out


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu().contiguous()
    if t.is_floating_point():
        return t.view(_INT[t.element_size()])
    return t


def _tree(fn, args, b, big, row, x, w, run, pick):
    from .. import fprev
    sub = [a[:b] if isinstance(a, torch.Tensor) and a.dim() and a.shape[0] == big else a
           for a in args]
    X, W = sub[x], sub[w]
    ones = torch.zeros_like(W)
    ones[:, 0] = 1

    def summed(v):
        probe = torch.zeros_like(X)
        probe[row] = v.to(X.dtype)
        call = list(sub)
        call[x], call[w] = probe, ones
        return pick(run(fn, call))[row, 0]
    return fprev.reveal(summed, X.shape[1], dtype=X.dtype).describe()


def batch_invariance(fn: Callable, args: Sequence, batch_sizes: Sequence[int], arch, *,
                     output: Callable = None, trees: tuple = None,
                     tree_rows: int = 1) -> InvarianceReport:
    """Run ``fn`` at each batch size on ``arch`` and report the rows whose bits change
    (module doc).  ``output``: picks the tensor to compare from ``fn``'s result (default:
    the result itself, or its first element when it is a tuple / list)."""
    from ..triton.context import emulate
    from .mode import emulate as torch_emulate
    if isinstance(batch_sizes, (str, bytes)) or not all(
            isinstance(b, numbers.Integral) and not isinstance(b, bool) for b in batch_sizes):
        raise TypeError("batch_invariance: batch_sizes must be ints (no bools, floats or "
                        f"strings), got {list(batch_sizes)!r}")
    if isinstance(tree_rows, bool) or not isinstance(tree_rows, int) or tree_rows < 1:
        raise ValueError(f"batch_invariance: tree_rows must be an int >= 1, got {tree_rows!r}")
    sizes = sorted({int(b) for b in batch_sizes})
    if len(sizes) < 2 or sizes[0] < 1:
        raise ValueError("batch_invariance: give at least two distinct batch sizes >= 1, "
                         f"got {list(batch_sizes)}")
    if not callable(fn):
        raise TypeError(f"batch_invariance: fn must be callable, got {type(fn).__name__}")
    big = sizes[-1]
    if not any(isinstance(a, torch.Tensor) and a.dim() and a.shape[0] == big for a in args):
        raise ValueError(f"batch_invariance: no argument has the largest batch size ({big}) "
                         "as its first dimension")
    if trees is not None and not (len(trees) == 2 and all(
            isinstance(i, int) and 0 <= i < len(args) and isinstance(args[i], torch.Tensor)
            and args[i].dim() == 2 for i in trees)):
        raise ValueError("batch_invariance: trees=(x, w) names two 2-D tensor arguments by "
                         f"position (x: (batch, K), w: (K, N)), got {trees!r}")

    def pick(res):
        if output:
            return output(res)
        if isinstance(res, (tuple, list)):
            if not res:
                raise ValueError("batch_invariance: fn returned an empty "
                                 f"{type(res).__name__}; return the tensor to compare (or "
                                 "pass output=)")
            return res[0]
        return res

    def quiet(f, call):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch_emulate(arch), emulate(arch):
                return f(*call)
    outs, configs, torch_products = {}, {}, False
    for b in sizes:
        sub = [a[:b] if isinstance(a, torch.Tensor) and a.dim() and a.shape[0] == big else a
               for a in args]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch_emulate(arch, record=True) as pm, emulate(arch) as em:
                res = fn(*sub)
        res = pick(res)
        if not isinstance(res, torch.Tensor) or res.dim() == 0 or res.shape[0] != b:
            raise ValueError(f"batch_invariance: fn's output at batch size {b} must be a "
                             f"tensor with {b} rows, got "
                             f"{getattr(res, 'shape', type(res).__name__)}")
        outs[b] = res.detach().cpu()
        configs[b] = _config(em.launches, em, pm)
        torch_products = torch_products or any(fmt != "native" for (_, _, fmt) in pm.counts)
    changes = []
    for r in range(big):
        holders = [b for b in sizes if b > r]
        if len(holders) < 2:
            continue
        groups: list = []
        for b in holders:
            for g in groups:
                if torch.equal(_bits(outs[g[0]][r]), _bits(outs[b][r])):
                    g.append(b)
                    break
            else:
                groups.append([b])
        if len(groups) > 1:
            vals = [outs[g[0]][r].double() for g in groups]
            diff = max(float((v - vals[0]).abs().nan_to_num(0).max()) for v in vals)
            changes.append(RowChange(r, groups, diff))
    items = {k for c in configs.values() for k in c}
    differences = {}
    for k in sorted(items):
        if k.endswith(" grid"):
            continue
        per = {b: configs[b].get(k) for b in sizes}
        if len({repr(v) for v in per.values()}) > 1:
            differences[k] = per
    found = {}
    if trees is not None:
        for c in changes[:tree_rows]:
            found[c.row] = {g[0]: _tree(fn, args, g[0], big, c.row, trees[0], trees[1],
                                        quiet, pick) for g in c.groups}
    name = arch if isinstance(arch, str) else getattr(arch, "describe", lambda: str(arch))()
    return InvarianceReport(name, sizes, changes, configs, differences, found, torch_products)
