"""Probe rows: what one target input holds, and how to write it into a buffer.

A row is ``(sig, fields, masks, bulk)``: ``fields`` is a tuple of ``(support, shift)``
(units ``unit * 2**shift`` on every leaf of the support - a leaf shared as the passive
context of two fields gets the sum), ``masks`` a tuple of ``(leaf, value)`` written over the
units, ``bulk`` a tuple of ``(leaves, values)`` arrays (the many masks of a cluster test),
and ``sig`` an object shared by consecutive rows with the same ``fields`` (a 1-D target then
only moves the masks).  Plain tuples: a revelation makes hundreds of thousands of rows.
"""
from __future__ import annotations

import numpy as np

from .probes import ProbeValues


class Support:
    """A set of leaves probed together (identity matters: targets reuse written supports)."""

    __slots__ = ("leaves", "size")

    def __init__(self, leaves):
        self.leaves = np.asarray(leaves, dtype=np.int64)
        self.size = len(self.leaves)

    def __repr__(self):
        return f"Support({self.leaves.tolist()})"


def mask_pair(plus: int, minus: int, values: ProbeValues, level: int = 0) -> tuple:
    """``+big * 2**-level`` at ``plus``, the negative at ``minus``."""
    m = values.big * 2.0 ** -level
    return ((plus, m), (minus, -m))


def cluster_masks(cluster: np.ndarray, values: ProbeValues, level: int = 0) -> tuple:
    """Masks of a cluster test: ``(|W|-1) * m`` at the first leaf of W, ``-m`` at the
    others.  Every node holding part of W (and not all of it) is non-zero, so the units
    masked are exactly those under the lowest common ancestor of W."""
    m = values.big * 2.0 ** -level
    vals = np.full(len(cluster), -m)
    vals[0] = (len(cluster) - 1) * m
    return (cluster, vals)


def single_row(support: Support, masks: tuple = (), bulk: tuple = ()) -> tuple:
    """A row of one field (a fresh signature: the support is rewritten)."""
    return (object(), ((support, 0),), masks, bulk)


def dense_rows(rows: list, n: int, values: ProbeValues) -> np.ndarray:
    """float64 array (len(rows), n) holding the rows' values."""
    X = np.zeros((len(rows), n), dtype=np.float64)
    by_support: dict[int, tuple] = {}
    mr, ml, mv = [], [], []
    for r, (_, fields, masks, bulk) in enumerate(rows):
        for sup, shift in fields:
            ent = by_support.get(id(sup))
            if ent is None:
                ent = by_support[id(sup)] = (sup, [], [])
            ent[1].append(r)
            ent[2].append(values.unit * 2.0 ** shift)
        for leaf, val in masks:
            mr.append(r)
            ml.append(leaf)
            mv.append(val)
        for leaves, vals in bulk:
            mr.extend([r] * len(leaves))
            ml.extend(leaves.tolist())
            mv.extend(vals.tolist())
    for sup, rr, ww in by_support.values():
        rr = np.asarray(rr)
        X[rr[:, None], sup.leaves[None, :]] += np.asarray(ww)[:, None]
    if mr:
        X[np.asarray(mr), np.asarray(ml)] = np.asarray(mv)
    return X
