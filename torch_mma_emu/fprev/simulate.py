"""What a probe should read if the target sums in the order of a given tree.

Symbolic, exact, vectorised over probes: every node carries its mask count (an integer
vector, one component per mask magnitude, packed base 2**8) and its count of surviving
units.  Additions and swamped fused sums lose the units of a node as soon as a child
holds masks; exact (non-swamped) fused sums lose them only if the masks do not cancel at
the node (seed 001 section 4, seed 003 eq. 8-9).  Used by ``verify=True`` to check a
revealed tree on probes it was not built from.
"""
from __future__ import annotations

import numpy as np

from ..order import SumTree

MASK_BASE = 1 << 8            # a mask code: sum of sign * MASK_BASE**level (predict)


def predict(tree: SumTree, weights: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """``weights``: (P, n) integer units per leaf; ``masks``: (P, n) integer mask
    codes (sum of sign * MASK_BASE**level, e.g. +1 / -1 for one pair).  Returns (P,) unit counts
    at the root, -1 where the masks do not cancel."""
    n = tree.n
    m = {v: masks[:, v].astype(np.int64) for v in range(n)}
    s = {v: np.where(masks[:, v] == 0, weights[:, v], 0).astype(np.int64) for v in range(n)}
    for v in tree.postorder():
        ch = tree.children[v - n]
        kind = tree.kinds[v - n]
        ms = [m.pop(c) for c in ch]
        ss = [s.pop(c) for c in ch]
        mv = sum(ms)
        if kind == "exact":
            sv = np.where(mv == 0, sum(ss), 0)
        else:
            quiet = np.logical_and.reduce([x == 0 for x in ms])
            sv = np.where(quiet, sum(ss), 0)
        m[v], s[v] = mv, sv
    return np.where(m[tree.root] == 0, s[tree.root], -1)
