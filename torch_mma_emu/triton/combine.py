"""Two rewrites of Triton's TTIR combine pass (Combine.cpp, ``triton-combine``, run for every
target) that change what a kernel's matrix products compute.  The interpreter runs a kernel
op by op and never sees them, so inside an emulate block they are replayed here (checked
against the TTGIR the installed Triton compiles: tests/test_triton_combine.py):

* ``CombineDotAddPattern``: ``d + tl.dot(a, b)`` or ``tl.dot(a, b) + d`` (so also
  ``acc += tl.dot(a, b)``), where the dot has no accumulator and ``max_num_imprecise_acc``
  is 0 (every dot but fp8 on sm90), becomes ``tl.dot(a, b, d)``: ``d`` is the chain's C,
  not added after the dot.
* ``CombineBroadcastMulReducePattern``: ``tl.sum(x[:, :, None] * y[None, :, :], axis=1)``
  (fp32 ``x``, ``y``; M and N >= 16) becomes ``tl.dot(x, y)`` with input precision "tf32":
  a tensor-core product on NVIDIA sm80+ and CDNA3, which NumPy would otherwise compute
  exactly.

What the interpreter cannot know is left out: the GPU fuses only a dot result with one use
(a dot result also used elsewhere is fused here all the same), and a dot given
``acc=tl.zeros(...)`` explicitly, or the last dot of a loop the compiler removes (a trip
count of 1 known when compiling), is not fused here.
Tags ride on the interpreter's ``TensorHandle.attr``; nothing is tagged outside a block.
"""
from __future__ import annotations

import threading

import numpy as np

_TLS = threading.local()      # .no_acc: the tl.dot being built has acc=None
DOT = "tme_dot"               # on a dot result that may absorb an addition
EXPAND = "tme_expand"         # (2-D fp32 source, axis) on expand_dims results
BCAST = "tme_bcast"           # the same, on broadcasts of such expand_dims results
BMR = "tme_bmr"               # (x, y) on x[:, :, None] * y[None, :, :]


def _emulating(block) -> bool:
    return block is not None and (block.arch is not None or block.spec is not None)


def semantic_dot(orig):
    """``TritonSemantic.dot`` noting whether the dot has an accumulator (the builder only
    sees the zero splat the semantic makes for ``acc=None``)."""
    def dot(self, lhs, rhs, acc, *args, **kwargs):
        prev = getattr(_TLS, "no_acc", False)
        _TLS.no_acc = acc is None
        try:
            return orig(self, lhs, rhs, acc, *args, **kwargs)
        finally:
            _TLS.no_acc = prev
    return dot


def tag_dot(out, a, b, input_precision, max_num_imprecise_acc):
    """Mark a dot result computed from the constant zero as able to absorb an addition."""
    if getattr(_TLS, "no_acc", False) and not int(max_num_imprecise_acc or 0):
        out.attr[DOT] = (a, b, input_precision, 0)
    return out


def fadd(block, lhs, rhs):
    """``lhs + rhs`` as one dot with the other operand as C, where the pattern applies
    (None: an ordinary addition).  Triton's pattern looks at the right operand first."""
    if not _emulating(block):
        return None
    for dot, other in ((rhs, lhs), (lhs, rhs)):
        tag = dot.attr.get(DOT)
        if tag and other.data.shape == dot.data.shape and other.dtype == dot.dtype:
            a, b, prec, imp = tag
            return block.dot(a, b, other, prec, imp, count=False)
    return None


def expand_dims(block, out, arg, axis):
    if _emulating(block) and axis in (0, 2) and arg.data.ndim == 2 \
            and getattr(arg.dtype, "name", "") == "fp32":
        out.attr[EXPAND] = (arg, axis)
    return out


def broadcast(block, out, arg):
    if _emulating(block) and EXPAND in arg.attr:
        out.attr[BCAST] = arg.attr[EXPAND]
    return out


def fmul(block, out, lhs, rhs):
    """Tag ``x[:, :, None] * y[None, :, :]`` (this operand order, as the pattern wants)
    when the product is at least 16 x 16 (the pattern's bound; K may be anything)."""
    if _emulating(block):
        lt, rt = lhs.attr.get(BCAST), rhs.attr.get(BCAST)
        if lt and rt and lt[1] == 2 and rt[1] == 0 and out.data.ndim == 3 \
                and out.data.shape[0] >= 16 and out.data.shape[2] >= 16:
            out.attr[BMR] = (lt[0], rt[0])
    return out


def reduce_sum(block, ops, input):
    """``tl.sum(x[:, :, None] * y[None, :, :], axis=1)`` as the tf32 dot it compiles to
    (None: NumPy's sum).  The pattern does not look at the axis; the other axes are left to
    NumPy (they would not be a matrix product)."""
    tag = input.handle.attr.get(BMR) if _emulating(block) else None
    if tag is None or ops.axis != 1:
        return None
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle
    x, y = tag
    zero = TensorHandle(np.zeros((x.data.shape[0], y.data.shape[1]), np.float32), tl.float32)
    prec = block.reduce_dot_precision()
    h = block.dot(x, y, zero, prec, 0)
    if ops.keep_dims:                   # an expand_dims follows the dot: nothing to fuse
        h = TensorHandle(np.expand_dims(h.data, 1), tl.float32)
    else:
        h.attr[DOT] = (x, y, prec, 0)
    return tl.core.tensor(h, tl.block_type(tl.float32, list(h.data.shape)))
