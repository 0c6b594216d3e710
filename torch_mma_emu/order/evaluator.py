"""The one evaluator of accumulation orders: a :class:`.tree.SumTree` run on values.

:func:`fold` runs a tree level by level (every node whose children are ready, as one
vectorised call of the program's ``combine`` on NumPy arrays), so a tree of R-term folds and
butterflies costs about its depth in NumPy calls: Triton's reductions (triton/reduce.py),
NCCL's collectives and FPRev's replay all run through it.  Multi-term nodes go to a
``multi`` callback (FPRev's fused models); ``at`` lets a program change the value of chosen
nodes (Triton's contracted products).

:func:`evaluate` (FPRev's ``replay``) is :func:`fold` on float64 carriers: an addition node
is an IEEE addition in ``dtype`` (round to nearest even, :func:`.arith.add64`), a multi-term
node is handed to a *fused model* - by default the exact sum rounded once
(:func:`exact_sum`), which is what a non-swamped node does; :func:`truncated_sum` models the
aligned-and-truncated fused sums of NVIDIA Tensor Cores (seed 003 Algorithm 7, steps 2-3).
Multi-term nodes are evaluated with exact integer arithmetic, element by element.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Callable, Optional

import numpy as np
import torch

from ..reference.rounding import round_float
from . import arith

# (significand bits incl. the hidden one, minimum normal exponent, maximum exponent)
_FORMATS = {
    "float64": (53, -1022, 1023),
    "float32": (24, -126, 127),
    "float16": (11, -14, 15),
    "bfloat16": (8, -126, 127),
    "e8m13": (14, -126, 127),  # NVIDIA FP8 MMA accumulator (RZ-E8M13)
}


def _fmt_name(dtype) -> str:
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        dtype = np.dtype(dtype).name
    name = str(dtype).replace("torch.", "")
    if name not in _FORMATS:
        raise TypeError(f"replay dtype must be one of {', '.join(_FORMATS)}, got {dtype!r}")
    return name


def round_exact(v: Fraction, fmt: str = "float32", mode: str = "rne") -> float:
    """Round the exact value ``v`` to ``fmt`` (``mode``: "rne" or "rz"), as a Python float.
    IEEE overflow: RNE gives infinity, RZ the largest finite value."""
    if mode not in ("rne", "rz"):
        raise ValueError(f"rounding mode must be 'rne' or 'rz', got {mode!r}")
    p, emin, emax = _FORMATS[_fmt_name(fmt)]
    r = round_float(Fraction(v), p - 1, emin, emax, mode)
    sign = -1.0 if r.sign else 1.0
    if r.kind == "inf":
        return sign * (math.ldexp(2 ** p - 1, emax - p + 1) if mode == "rz" else math.inf)
    return sign * float(r.mag)


def exact_sum(fmt: str = "float32", mode: str = "rne"):
    """Fused model: the exact sum of the terms, rounded once to ``fmt``."""
    def model(terms):
        finite = [t for t in terms if math.isfinite(t)]
        if len(finite) != len(terms):
            return float(sum(terms))  # inf/nan propagate as in IEEE
        return round_exact(sum((Fraction(t) for t in terms), Fraction(0)), fmt, mode)
    model.__name__ = f"exact_sum({fmt}, {mode})"
    return model


def truncated_sum(F: int, fmt: str = "float32", mode: str = "rz"):
    """Fused model of seed 003 Algorithm 7: align the terms at the largest exponent,
    truncate each to F fraction bits, add exactly, round to ``fmt`` with ``mode``
    (RZ-FP32: ``truncated_sum(F)``; RNE-FP16: ``truncated_sum(F, "float16", "rne")``).
    Terms are taken as normalised numbers: exact for products whose significands multiply
    into [1, 2) (e.g. one factor a power of two) and for normal accumulators."""
    def model(terms):
        live = [Fraction(t) for t in terms if t != 0]
        if not live:
            return 0.0
        emax = max(math.frexp(float(t))[1] - 1 for t in live)
        step = Fraction(2) ** (emax - F)
        total = Fraction(0)
        for t in live:
            q = abs(t) / step
            total += (1 if t > 0 else -1) * (q.numerator // q.denominator) * step
        return round_exact(total, fmt, mode)
    model.__name__ = f"truncated_sum(F={F}, {fmt}, {mode})"
    return model


def _index(ids: list):
    """Node ids as a slice when they step evenly (a view, no gather), else an array."""
    if len(ids) == 1:
        return slice(ids[0], ids[0] + 1)
    step = ids[1] - ids[0]
    if step > 0 and all(ids[k + 1] - ids[k] == step for k in range(len(ids) - 1)):
        return slice(ids[0], ids[-1] + 1, step)
    return np.array(ids)


def fold(tree, xs: tuple, combine: Callable, *, multi: Optional[Callable] = None,
         at: Optional[Callable] = None) -> tuple:
    """Run ``tree`` on ``xs``: a tuple of equally shaped arrays ``(..., tree.n)`` (one per
    operand of the combine; leaf i is ``x[..., i]``).  ``combine(a, b)`` takes and returns
    tuples of arrays ``(k, ...)`` (the binary nodes of one level at once, node first; left
    operand the node's first child); it must work elementwise.  ``multi(kind, cols)``: the
    value ``(...)`` of one multi-term node from its children's value tuples (needed when the
    tree has some).  ``at(nodes, left, right, a, b, new)`` may replace the new values of a
    level's binary nodes (ids as arrays).  Returns the root's tuple ``(...)``."""
    xs = tuple(np.asarray(x) for x in xs)
    n, total = tree.n, tree.num_nodes
    if any(x.shape[-1] != n for x in xs):
        raise ValueError(f"the tree has {n} leaves, the values {[x.shape for x in xs]}")
    if tree.root < n:
        return tuple(x[..., tree.root] for x in xs)
    vals = []                 # node first: a level's operands are whole rows
    for x in xs:
        v = np.empty((total,) + x.shape[:-1], x.dtype)
        v[:n] = np.moveaxis(x, -1, 0)
        vals.append(v)
    for nodes, kids in tree.levels():
        pair = [i for i, ch in enumerate(kids) if len(ch) == 2]
        if len(pair) < len(nodes):
            if multi is None:
                raise ValueError("the tree has multi-term nodes and no model for them")
            for i, ch in enumerate(kids):
                if len(ch) > 2:
                    got = multi(tree.kinds[nodes[i] - n], [tuple(v[c] for v in vals)
                                                          for c in ch])
                    for v, g in zip(vals, got):
                        v[nodes[i]] = g
        if not pair:
            continue
        ids, left, right = (_index([seq[i] for i in pair]) for seq in
                            (nodes, [ch[0] for ch in kids], [ch[1] for ch in kids]))
        a = tuple(v[left] for v in vals)
        b = tuple(v[right] for v in vals)
        new = tuple(combine(a, b))
        if at is not None:
            new = tuple(at(*(np.arange(total)[i] for i in (ids, left, right)), a, b, new))
        for v, g in zip(vals, new):
            v[ids] = g
    return tuple(v[tree.root] for v in vals)


def evaluate(tree, x, *, dtype=None, fused=None, exact=None, add=None):
    """Sum ``x[..., :n]`` in the order of ``tree`` (FPRev's ``replay``).

    ``x``: tensor or array whose last dimension is ``tree.n`` (the summands, e.g. the
    products a_k * b_k of a dot product).  ``dtype``: the format of the additions
    (default: x's dtype; float32 for non-float input).  ``fused`` / ``exact``: models of
    the multi-term nodes of kind "fused" / "exact" (callables taking the list of child
    values, returning the rounded node value; default :func:`exact_sum` in ``dtype``).
    ``add``: replaces the IEEE addition at binary nodes (callable on two float64 arrays).
    Returns a float64 array of shape ``x.shape[:-1]``.
    """
    if isinstance(x, torch.Tensor):
        if dtype is None:
            dtype = x.dtype if x.is_floating_point() else torch.float32
        arr = x.detach().to(torch.float64).cpu().numpy()
    else:
        arr = np.asarray(x, dtype=np.float64)
        if dtype is None:
            dtype = np.asarray(x).dtype if np.asarray(x).dtype.kind == "f" else np.float32
    fmt = _fmt_name(dtype)
    if arr.ndim == 0 or arr.shape[-1] != tree.n:
        if arr.ndim == 0:
            raise ValueError(f"x must have the {tree.n} summands in its last dimension, got "
                             "a scalar")
        raise ValueError(f"x has {arr.shape[-1]} summands in its last dimension, the tree "
                         f"{tree.n}")
    batch = arr.shape[:-1]
    flat = arr.reshape(-1, tree.n)
    models = {"fused": fused or exact_sum(fmt), "exact": exact or exact_sum(fmt)}
    if add is None:
        def add(a, b):
            if fmt == "e8m13":
                raise TypeError(f"no IEEE addition for {fmt}")
            return arith.add64(a, b, arith.fmt_of(fmt))

    def multi(kind, cols):
        model = models[kind]
        return (np.array([model([float(c[0][i]) for c in cols])
                          for i in range(flat.shape[0])], dtype=np.float64),)

    out, = fold(tree, (flat,), lambda a, b: (add(a[0], b[0]),), multi=multi)
    return out.reshape(batch)
