"""The order in which PyTorch 2.13's CUDA ``reduce_kernel`` (``Reduce.cuh``) sums, and a
vectorised evaluation of it in NumPy.

Per thread (input index ``t`` of ``step_input`` threads per output):

* vectorised input (``input_vec_size`` V = 4 for fp32, 8 for 16-bit sums and means): the row's
  unaligned head (``shift = address % 16 bytes``) goes to threads ``shift..V-1`` into
  accumulator 0; aligned vectors ``j`` go to thread ``j % step``, lane ``i`` into
  accumulator ``i``, in order; the tail after the last whole vector to thread ``0..``
  (into accumulator 0); the accumulators are combined left to right;
* otherwise (``vt0`` accumulators, 4): element ``t + m * step`` into accumulator ``m % 4``,
  combined left to right;

then ``block_x_reduce`` (shared memory halving down to 32 lanes, then ``shfl_down``
16, 8, 4, 2, 1: lane ``x`` adds lane ``x + offset``), ``block_y_reduce`` (halving over
warps), and across CTAs the last CTA's threads ``u`` fold partials ``u, u + threads, ...``
in order, then halve over warps and then over lanes.  mean multiplies the sum by the
float ``factor = num_outputs / numel``.

:func:`evaluate` runs this on arrays (the values), :func:`tree` on symbols (the order as a
``SumTree``); both share one code path.
"""
from __future__ import annotations

import numpy as np

from .config import ReduceConfig



class _Sym:
    """A summand or partial sum while building a tree: ``a + b`` appends an addition."""
    __slots__ = ("nodes", "n", "id")

    def __init__(self, nodes, n, id_):
        self.nodes, self.n, self.id = nodes, n, id_

    def __add__(self, other):
        if isinstance(other, (int, float)) and other == 0:
            return self
        self.nodes.append(("add", (self.id, other.id)))
        return _Sym(self.nodes, self.n, self.n + len(self.nodes) - 1)

    def __radd__(self, other):
        if isinstance(other, (int, float)) and other == 0:
            return self
        return other.__add__(self)


def _zeros(shape, like, ops=None):
    """Identity accumulators: zeros of ``like``'s dtype for sums; for another reduction
    (``ops``, or an accumulator array ``like`` with ``new_zeros``, e.g.
    ``moments.WelfordState``) that reduction's identity."""
    if ops is not None:
        return ops.zeros(shape)
    if hasattr(like, "new_zeros"):
        return like.new_zeros(shape)
    return np.zeros(shape, dtype=like.dtype)


def _last_axis(v, axis):
    return v.moveaxis(axis, -1) if hasattr(v, "new_zeros") else np.moveaxis(v, axis, -1)


def halve(v, axis):
    """``v[..., x] += v[..., x + h]`` for h = size/2, ..., 1 along ``axis`` (a power of
    two); returns the array without that axis (lane 0's value)."""
    v = _last_axis(v, axis)
    w = v.shape[-1]
    while w > 1:
        h = w // 2
        v = v[..., :h] + v[..., h:w]
        w = h
    return v[..., 0]


def _thread_plain(X, S, vt0, ops=None):
    """Non-vectorised ``thread_reduce_impl``: [M, N] -> [M, S]."""
    M, N = X.shape
    acc = _zeros((M, vt0, S), X, ops)
    full = N // (vt0 * S)
    if full:
        blk = X[:, :full * vt0 * S].reshape(M, full, vt0, S)
        for k in range(full):
            acc = acc + blk[:, k]
    rest = X[:, full * vt0 * S:]
    for m in range(vt0):
        part = rest[:, m * S:(m + 1) * S]
        if part.shape[1]:
            acc[:, m, :part.shape[1]] = acc[:, m, :part.shape[1]] + part
    out = acc[:, 0]
    for m in range(1, vt0):
        out = out + acc[:, m]
    return out


def _thread_vectorised(X, S, V, shift, ops=None):
    """``input_vectorized_thread_reduce_impl`` for rows sharing one ``shift``."""
    M, N = X.shape
    acc = _zeros((M, S, V), X, ops)
    start = 0
    if shift:
        head = V - shift
        acc[:, shift:V, 0] = acc[:, shift:V, 0] + X[:, :head]
        start = head
    end = N - start
    nv = end // V
    full = nv // S
    body = X[:, start:start + nv * V]
    if full:
        blk = body[:, :full * S * V].reshape(M, full, S, V)
        for k in range(full):
            acc = acc + blk[:, k]
    rem = nv - full * S
    if rem:
        acc[:, :rem] = acc[:, :rem] + body[:, full * S * V:].reshape(M, rem, V)
    tail = X[:, start + nv * V:]
    if tail.shape[1]:
        acc[:, :tail.shape[1], 0] = acc[:, :tail.shape[1], 0] + tail
    out = acc[..., 0]
    for i in range(1, V):
        out = out + acc[..., i]
    return out


def _threads(X, cfg: ReduceConfig, shifts, ops=None):
    S = cfg.step_input
    if not cfg.vectorize_input:
        return _thread_plain(X, S, cfg.vt0, ops)
    out = _zeros((X.shape[0], S), X, ops)
    for s in np.unique(shifts):
        rows = np.nonzero(shifts == s)[0]
        sub = X if len(rows) == X.shape[0] else X[rows]
        out[rows] = _thread_vectorised(sub, S, cfg.input_vec_size, int(s), ops)
    return out


def _combine(T, cfg: ReduceConfig):
    """Thread values [M, step_input] -> one value per output: block_x, block_y, CTAs."""
    M = T.shape[0]
    bw, bh, C = cfg.block_width, cfg.block_height, cfg.ctas_per_output
    lanes = bw if cfg.fastest else 1
    warps = bh if cfg.warp_split else 1
    v = T.reshape(M, C, warps, lanes)
    if cfg.fastest:
        v = halve(v, 3)
    else:
        v = v[..., 0]
    if cfg.warp_split:
        v = halve(v, 2)
    else:
        v = v[..., 0]
    if C == 1:
        return v[:, 0]
    # the last CTA: thread u = x + y * bw folds partials u, u + nt, ... in order
    nt = lanes * bh
    f = _zeros((M, nt), v)
    for u0 in range(0, C, nt):
        part = v[:, u0:u0 + nt]
        f[:, :part.shape[1]] = f[:, :part.shape[1]] + part
    f = f.reshape(M, bh, lanes)
    f = halve(f, 1)                # block_y_reduce
    if cfg.fastest:
        return halve(f, 1)         # block_x_reduce
    return f[:, 0]


def evaluate(X: np.ndarray, cfg: ReduceConfig, shifts=None, ops=None):
    """The sums of the rows of ``X`` ([num_outputs, num_inputs] in reduction order, already
    in the accumulation dtype) as the kernel computes them.  ``shifts``: each row's
    misalignment in elements (vectorised input only).

    ``ops``: another reduction in the same order (``ReduceOp``'s ``ops_t``): an object
    whose ``zeros(shape)`` gives identity accumulators - an array-like with ``shape``,
    indexing, ``reshape``, ``moveaxis`` and ``new_zeros``, where ``acc + data`` is
    ``ops.reduce`` and ``acc + acc`` is ``ops.combine(left, right)`` (e.g. WelfordOps,
    aten_cuda/moments.py); the result is such an accumulator per output."""
    if shifts is None:
        shifts = np.zeros(X.shape[0], np.int64)
    return _combine(_threads(X, cfg, np.asarray(shifts), ops), cfg)


def tree(cfg: ReduceConfig, shift: int = 0):
    """The ``SumTree`` of one output (its ``num_inputs`` leaves) under ``cfg``."""
    from ..order.tree import SumTree
    n = cfg.num_inputs
    nodes: list = []
    X = np.empty((1, n), dtype=object)
    for i in range(n):
        X[0, i] = _Sym(nodes, n, i)
    root = evaluate(X, cfg, np.array([shift]))[0]
    if n == 1:
        return SumTree(1, [], root=0)
    return SumTree(n, nodes, root=root.id)


def mean_factor(num_outputs: int, numel: int) -> np.float32:
    """``static_cast<float>(num_outputs) / numel``: both operands in float, one rounding."""
    return np.float32(np.float32(num_outputs) / np.float32(numel))
