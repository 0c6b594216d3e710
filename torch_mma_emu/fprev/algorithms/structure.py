"""Guess-and-verify shortcut of the default algorithm (1-D fp32/fp64 targets).

Real summation trees are regular: contiguous blocks or strided ways (SIMD lanes, unrolled
accumulators, per-thread chunks) are subtrees.  Such a split is *verified* far more cheaply
than revealed, with the **cluster test**: put ``(|W|-1)*big`` on one leaf of a set W and
``-big`` on the others.  Every node holding part of W (but not all of it) is then non-zero,
so exactly the units under the lowest common ancestor of W are masked: inside a known
subtree P, W is itself a subtree iff all |P \\ W| units of P outside W survive.

:func:`find_partition` tries "k contiguous blocks" and "k ways i = r mod k" (fewest parts
first); a split holds iff every part passes.  The tree is then the tree over one
representative per part (units only on them: zeros are transparent) with each part's own
tree grafted in.

This holds for additions and swamped fused sums; a non-swamped (exact) sum keeps units
next to cancelling masks, so the shortcut is switched off when one is seen.
"""
from __future__ import annotations

import numpy as np

from ..rows import Support
from .rounds import Probes, Req

MIN_PART = 2


def partitions(m: int) -> list:
    """Candidate splits of m sorted positions, fewest parts first: ``("block", k)`` (k
    contiguous blocks) and ``("ways", k)`` (positions i = r mod k)."""
    out, k = [], 2
    while k <= m // MIN_PART:
        out += [("block", k), ("ways", k)]
        k *= 2
    return out


def split(spec, m: int) -> list:
    kind, k = spec
    if kind == "ways":
        return [np.arange(r, m, k) for r in range(k)]
    b = -(-m // k)
    return [np.arange(s, min(m, s + b)) for s in range(0, m, b)]


def find_partition(S: np.ndarray, sup: Support, hint=None):
    """Sub-problem: parts of the subtree over S (sorted, known to be a subtree) that are
    all subtrees, as ``(list of leaf arrays, spec)``; None if no candidate holds.  ``hint``:
    the spec that held for the last subtree of this size, tried first (``False``: none
    held, skip the search).  Tests part by part, dropping a candidate at its first
    failure."""
    if hint is False:
        return None
    specs = partitions(len(S))
    if hint in specs:
        specs.remove(hint)
        specs.insert(0, hint)
    for spec in specs:
        cand = split(spec, len(S))
        if any(len(p) < MIN_PART for p in cand):
            continue
        ok, done = True, 0
        while ok and done < len(cand):
            batch = cand[done:done + max(1, done)]  # 1, 1, 2, 4, ... parts per round
            counts = yield Probes([Req(sup, cluster=S[p], confined=True) for p in batch])
            ok = all(c == len(S) - len(p) for c, p in zip(counts, batch))
            done += len(batch)
        if ok:
            return [S[p] for p in cand], spec
    return None
