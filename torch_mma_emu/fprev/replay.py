"""Summing in a revealed order, in software.

:func:`replay` evaluates a tree on any batch of summands: an addition node is an IEEE
addition in ``dtype`` (round to nearest even), a multi-term node is handed to a *fused
model* - by default the exact sum rounded once (:func:`exact_sum`), which is what a
non-swamped node does; :func:`truncated_sum` models the aligned-and-truncated fused sums of
NVIDIA Tensor Cores (seed 003 Algorithm 7, steps 2-3).

Multi-term nodes are evaluated with exact integer arithmetic, element by element; additions
are vectorised over the batch.  Adding in float32 (for fp16/bf16) or float64 (for fp32) and
rounding once is exact-rounding-equivalent: p >= 2q + 2 makes double rounding innocuous
for a single addition.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import torch

from ..reference.rounding import round_float

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


def _add(a: np.ndarray, b: np.ndarray, fmt: str) -> np.ndarray:
    if fmt == "float64":
        return a + b
    if fmt == "float32":
        return (a.astype(np.float32) + b.astype(np.float32)).astype(np.float64)
    if fmt == "float16":
        return (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16).astype(np.float64)
    if fmt == "bfloat16":
        s = torch.from_numpy(a.astype(np.float32)) + torch.from_numpy(b.astype(np.float32))
        return s.to(torch.bfloat16).to(torch.float64).numpy()
    raise TypeError(f"no IEEE addition for {fmt}")


def replay(tree, x, *, dtype=None, fused=None, exact=None, add=None):
    """Sum ``x[..., :n]`` in the order of ``tree``.

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
    vals: dict[int, np.ndarray] = {}

    def get(v):
        return flat[:, v] if v < tree.n else vals.pop(v)

    for v in tree.postorder():
        ch = tree.children[v - tree.n]
        kind = tree.kinds[v - tree.n]
        if kind == "add":
            a, b = get(ch[0]), get(ch[1])
            vals[v] = add(a, b) if add is not None else _add(a, b, fmt)
        else:
            cols = [get(c) for c in ch]
            model = models[kind]
            vals[v] = np.array([model([float(c[i]) for c in cols])
                                for i in range(flat.shape[0])], dtype=np.float64)
    out = flat[:, tree.root] if tree.root < tree.n else vals[tree.root]
    return out.reshape(batch)
