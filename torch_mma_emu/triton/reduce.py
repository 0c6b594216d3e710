"""Reductions in the order the compiled code runs them (Triton 3.6, NVIDIA).

For a ``tt.reduce`` whose operand has a distributed layout (layout.py), the lowering
(Triton's ReduceOpToLLVM; the order checked against the PTX by ptx_check.py, and described
in Meta's bitequiv design notes, facebookexperimental/triton ``bitequiv/design-doc.md``) is:

1. each thread left-folds the elements it holds along the axis, in register order
   (``acc = combine(acc, x[r])``; registers of a ``#blocked`` layout follow
   ``sizePerThread`` first, then the repetitions of the CTA tile);
2. a butterfly over the lanes that hold different positions along the axis
   (``shfl.sync.bfly`` offsets from the highest lane bit down, ``combine(own, partner)``);
3. when several warps hold the axis: each warp's partial goes through shared memory and a
   second butterfly runs over the warps (highest warp bit first).

Broadcast bits (a layout wider than the tensor) take no part.  The result of every output
element is the value of lane 0 / warp 0; for the commutative combines (add, max, min) every
lane holds the same bits.

The tree is an ``order.SumTree`` (:func:`sum_tree`) run by the order home's evaluator
(``order.fold``, level by level: a reduction of ``(..., n)`` costs about ``R`` + log2(lanes)
+ log2(warps) vectorised steps).  Element arithmetic is the GPU's (``order.arith``): fp32 /
fp16 / bf16 sums round each addition to the element type (Triton 3.6 does not widen fp16
/ bf16 for ``tl.sum``: ``add.f16`` / ``add.bf16``; ``tl.max`` / ``tl.min`` widen to fp32 in
the frontend); a NaN result is the canonical NaN; ``max.f32`` / ``min.f32`` (``tl.maximum`` / ``tl.minimum``'s default
``maxnumf`` / ``minnumf``) return the non-NaN operand and order -0 below +0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ..order import SumTree, arith, fold
from .layout import Bases


@dataclass(frozen=True)
class Tree:
    """The reduction tree of one axis: ``idx[w, l, r]`` is the axis position held by
    register ``r`` of lane ``l`` of warp ``w`` (compacted to the bits that move along the
    axis); lane and warp offsets are the butterfly's ``shfl`` / warp strides."""
    idx: np.ndarray
    lane_offsets: tuple
    warp_offsets: tuple
    lane_order: tuple = ()       # lane bits in the order combined (empty: highest first)

    def describe(self) -> str:
        W, L, R = self.idx.shape
        held = ",".join(str(int(x)) for x in self.idx[0, 0, :4]) + (",..." if R > 4 else "")
        dpp = " (DPP: lane bits 8,4,2,1 within rows, then rows 16, 32)" if self.lane_order \
            else ""
        return f"{W} warps x {L} lanes x {R} registers (thread 0 folds {held}){dpp}"


# AMD gfx90a / gfx942 (wave64) reduce a whole wave with DPP (Triton 3.6's AMD TargetInfo::
# warpReduce, checked against the LLVM IR it emits): row_shr 8, 4, 2, 1 combine each row of
# 16 lanes into its lane 15, row_bcast:15 (rows 1, 3) and row_bcast:31 pair the rows, and
# lane 63 is read.  As pairs that is the butterfly over lane bits 3, 2, 1, 0, then 4, 5.
DPP_WAVE64 = (3, 2, 1, 0, 4, 5)


def tree_of(bases: Bases, axis: int, wave64_dpp: bool = False) -> Tree:
    """The tree that reduces ``axis`` of a tensor with layout ``bases``; ``wave64_dpp``: an
    AMD target whose lowering uses DPP when all 64 lanes hold the axis (DPP_WAVE64)."""
    n = bases.shape[axis]
    picked = []
    for kind in (bases.reg, bases.lane, bases.warp):
        bits = []
        for b, v in enumerate(kind):
            if v[axis] == 0:
                continue
            if any(c for k, c in enumerate(v) if k != axis):
                raise NotImplementedError("a layout bit that moves along the reduced axis "
                                          "and another dimension is not modelled")
            bits.append((b, v[axis]))
        picked.append(bits)
    reg, lane, warp = picked
    R, L, W = 1 << len(reg), 1 << len(lane), 1 << len(warp)

    def positions(bits, size):
        out = np.zeros(size, np.int64)
        for i, (_, v) in enumerate(bits):
            sel = (np.arange(size) >> i) & 1 == 1
            out[sel] ^= v
        return out
    idx = (positions(warp, W)[:, None, None] ^ positions(lane, L)[None, :, None]
           ^ positions(reg, R)[None, None, :])
    if sorted(idx.ravel().tolist()) != list(range(n)):
        raise NotImplementedError(f"layout does not cover axis {axis} of {bases.shape} once")
    order = DPP_WAVE64 if wave64_dpp and len(lane) == 6 else ()
    return Tree(idx, tuple(1 << b for b, _ in lane), tuple(1 << b for b, _ in warp), order)


# the combine regions run as one NumPy function (ops of the TTGIR region -> the order home's
# element arithmetic, torch_mma_emu.order.arith)
KNOWN = {("arith.addf",): "add", ("arith.maxnumf",): "max", ("arith.minnumf",): "min",
         ("arith.maximumf",): "maximum", ("arith.minimumf",): "minimum"}


def _walk(tree: Tree, xs: list, combine: Callable, fold_step: Optional[Callable] = None):
    """The lowering's structure on ``xs`` (arrays ``(..., W, L, R)``): the in-thread folds
    (``fold_step(r, new)`` sees each), the lane butterfly (or DPP) and the warp butterfly.
    Run on leaf ids it builds :func:`sum_tree`."""
    W, L, R = tree.idx.shape
    acc = tuple(x[..., 0] for x in xs)                       # (..., W, L)
    for r in range(1, R):
        new = tuple(combine(acc, tuple(x[..., r] for x in xs)))
        if fold_step is not None:
            fold_step(r, new)
        acc = new
    if not tree.lane_order:
        while L > 1:                                        # own + partner, high bit first
            L //= 2
            acc = tuple(combine(tuple(a[..., :L] for a in acc),
                                tuple(a[..., L:] for a in acc)))
    else:                  # DPP: the higher lane (own) + the lower one, bits in lane_order
        bits = list(range(L.bit_length() - 1))
        for b in tree.lane_order:
            k = bits.index(b)
            split = [a.reshape(a.shape[:-1] + (-1, 2, 1 << k)) for a in acc]
            acc = tuple(o.reshape(o.shape[:-2] + (-1,)) for o in combine(
                tuple(a[..., 1, :] for a in split), tuple(a[..., 0, :] for a in split)))
            bits.remove(b)
    acc = tuple(a[..., 0] for a in acc)                     # (..., W): the warp partials
    while W > 1:
        W //= 2
        acc = tuple(combine(tuple(a[..., :W] for a in acc), tuple(a[..., W:] for a in acc)))
    return acc[0][..., 0]


_SUM_TREES: dict = {}


def sum_tree(tree: Tree) -> tuple:
    """The order's :class:`~torch_mma_emu.order.SumTree` over the axis positions (every
    output element's), with the node ids of the in-thread folds: ``(tree, first, later)``,
    ``first`` the folds of registers 0 and 1, ``later`` those adding register r > 1."""
    key = (tree.idx.shape, tree.idx.tobytes(), tree.lane_offsets, tree.warp_offsets,
           tree.lane_order)
    if key in _SUM_TREES:
        return _SUM_TREES[key]
    n = tree.idx.size
    nodes: list = []
    steps: dict = {}

    def combine(a, b):
        x, y = np.broadcast_arrays(a[0], b[0])
        ids = n + len(nodes) + np.arange(x.size).reshape(x.shape)
        nodes.extend(("add", (int(u), int(v))) for u, v in zip(x.ravel(), y.ravel()))
        return (ids,)
    root = _walk(tree, [tree.idx], combine, lambda r, new: steps.setdefault(r, new[0]))
    first = frozenset(steps[1].ravel().tolist()) if 1 in steps else frozenset()
    later = frozenset(v for r, ids in steps.items() if r > 1 for v in ids.ravel().tolist())
    got = (SumTree(n, nodes, root=int(root)), first, later)
    if len(_SUM_TREES) > 256:
        _SUM_TREES.clear()
    _SUM_TREES[key] = got
    return got


def run(tree: Tree, arrays: list, axis: int, combine: Callable,
        products: Optional[dict] = None) -> list:
    """Reduce ``arrays`` (same shape) along ``axis`` in ``tree``'s order (its :func:`sum_tree`
    run by the order home's evaluator, ``order.fold``); ``combine(acc, other)``
    takes and returns tuples of equally shaped arrays.  ``products``: {operand j: (x, y)}
    for an fp32 sum whose operand ``j`` is ``x * y`` contracted into the in-thread fold
    (contract.fold_products): ``acc = fma(x_0, y_0, x_1 * y_1)`` (LLVM fuses the left product
    of the first addition, the right one stays rounded), then ``fma(x_r, y_r, acc)``."""
    st, first, later = sum_tree(tree)
    xs = tuple(np.moveaxis(np.asarray(a), axis, -1) for a in arrays)
    at = None
    if products:
        from ..gpu_math import ieee
        ps = {j: [np.moveaxis(np.asarray(p), axis, 0) for p in xy]     # node first
              for j, xy in products.items()}

        def at(ids, left, right, a, b, new):                # fma.rn.f32 in the fold
            one = np.fromiter((v in first for v in ids.tolist()), bool, len(ids))
            more = np.fromiter((v in later for v in ids.tolist()), bool, len(ids))
            if not (one.any() or more.any()):
                return new
            new = list(new)
            for j, (px, py) in ps.items():
                k = np.where(one, left, np.where(more, right, 0))   # the product's leaf
                addend = np.where(one.reshape((-1,) + (1,) * (a[j].ndim - 1)), b[j], a[j])
                got = np.asarray(ieee.fma(px[k], py[k], addend), np.float32)
                pick = (one | more).reshape((-1,) + (1,) * (got.ndim - 1))
                new[j] = np.where(pick, got, new[j])
            return tuple(new)
    return list(fold(st, xs, combine, at=at))


def known_combine(ops: tuple, elem: str) -> Optional[Callable]:
    """A NumPy combine for a TTGIR region with one float operation (None: not known)."""
    name = KNOWN.get(tuple(ops))
    if name is None or elem not in ("f32", "f16", "bf16"):
        return None
    f = arith.op(name, elem)
    return lambda a, b: (f(a[0], b[0]),)


# -- scans (tl.cumsum, tl.associative_scan) ----------------------------------------------------
@dataclass(frozen=True)
class ScanTree:
    """``idx[c, w, l, r]``: the axis position of register r of lane l of warp w in chunk c
    (a repetition of the CTA tile along the axis); positions increase along r, l, w, c."""
    idx: np.ndarray

    def describe(self) -> str:
        C, W, L, R = self.idx.shape
        return f"scan: {C} chunks x {W} warps x {L} lanes x {R} registers"


def scan_tree_of(bases: Bases, axis: int) -> ScanTree:
    tree = tree_of(bases, axis)                # validates: each position held once
    n = bases.shape[axis]
    regs = [v[axis] for v in bases.reg if v[axis]]
    lanes = [v[axis] for v in bases.lane if v[axis]]
    warps = [v[axis] for v in bases.warp if v[axis]]
    R_in = 1 << sum(1 for v in regs if v < (min(lanes + warps) if lanes + warps else n))
    inner = [v for v in regs if v < R_in]
    outer = [v for v in regs if v >= R_in]
    want = inner + lanes + warps + outer
    if want != [1 << i for i in range(len(want))]:
        raise NotImplementedError("a scan over a layout whose registers, lanes and warps do "
                                  "not tile the axis in order is not modelled")
    C, W, L = 1 << len(outer), 1 << len(warps), 1 << len(lanes)
    del tree
    return ScanTree(np.arange(n).reshape(C, W, L, R_in))


def scan_run(tree: ScanTree, arrays: list, axis: int, combine: Callable) -> list:
    """Inclusive scan of ``arrays`` along ``axis`` in the order Triton 3.6's lowering runs it
    (read from its PTX): each thread scans its registers; the thread totals are scanned over
    the lanes (Hillis-Steele, ``shfl.sync.up`` by 1, 2, 4, ...); warp totals go through shared
    memory and each warp's prefix is the running left fold of the totals before it (across
    chunks too); the last register of a thread is (its lane-scanned total) + prefix, the
    others are (the previous thread's final total, or the warp prefix in lane 0) + their
    in-thread scan.  ``combine(earlier, later)``."""
    C, W, L, R = tree.idx.shape
    xs = [np.moveaxis(np.asarray(a), axis, -1)[..., tree.idx] for a in arrays]  # (...,C,W,L,R)
    s = [[x[..., 0] for x in xs]]
    for r in range(1, R):
        s.append(list(combine(tuple(s[-1]), tuple(x[..., r] for x in xs))))
    v = tuple(s[-1])                                        # thread totals (..., C, W, L)
    off = 1
    while off < L:
        up = tuple(np.concatenate([a[..., :off], a[..., :-off]], axis=-1) for a in v)
        new = combine(up, v)
        lane_ok = np.arange(L) >= off
        v = tuple(np.where(lane_ok, n, a) for n, a in zip(new, v))
        off *= 2
    totals = tuple(a[..., -1] for a in v)                   # (..., C, W)
    prefix = [[None] * W for _ in range(C)]
    run_ = None
    for c in range(C):
        for w in range(W):
            prefix[c][w] = run_
            t = tuple(a[..., c, w] for a in totals)
            run_ = t if run_ is None else tuple(combine(run_, t))
    out = [np.empty_like(x) for x in xs]
    for c in range(C):
        for w in range(W):
            P = prefix[c][w]
            lv = tuple(a[..., c, w, :] for a in v)          # (..., L)
            fin = lv if P is None else tuple(combine(tuple(p[..., None] for p in P), lv))
            prev = tuple(np.concatenate([f[..., :1], f[..., :-1]], axis=-1) for f in fin)
            for j, o in enumerate(out):
                o[..., c, w, :, R - 1] = fin[j]
            for r in range(R - 1):
                sr = tuple(a[..., c, w, :] for a in s[r])
                if P is None:        # lane 0 of the first warp: no prefix at all
                    E = prev
                    got = combine(E, sr)
                    got = tuple(np.where(np.arange(L) == 0, b, g) for b, g in zip(sr, got))
                else:
                    E = tuple(np.where(np.arange(L) == 0, p[..., None], q)
                              for p, q in zip(P, prev))
                    got = combine(E, sr)
                for j, o in enumerate(out):
                    o[..., c, w, :, r] = got[j]
    res = []
    for x, o in zip(arrays, out):
        flat = np.empty(np.moveaxis(np.asarray(x), axis, -1).shape, o.dtype)
        flat[..., tree.idx] = o
        res.append(np.moveaxis(flat, -1, axis))
    return res
