"""Two rewrites of Triton's TTIR combine pass (Combine.cpp, ``triton-combine``, run for every
target) that change what a kernel's matrix products compute.  The interpreter runs a kernel
op by op and never sees them, so inside an emulate block they are replayed here (checked
against the TTGIR the installed Triton compiles: tests/triton_emu/test_triton_combine.py):

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
Tags ride on the interpreter's ``TensorHandle.attr``; nothing is tagged outside a block.  A
dot that may absorb an addition is computed lazily (``LazyDot``): once, from zero when its
result is read, or with the addend as C when folded.
"""
from __future__ import annotations

import threading

import numpy as np

from .record import emulating

_TLS = threading.local()      # .no_acc: the tl.dot being built has acc=None
DOT = "tme_dot"               # on a (lazy) dot result that may absorb an addition
EXPAND = "tme_expand"         # (2-D fp32 source, axis) on expand_dims results
BCAST = "tme_bcast"           # the same, on broadcasts of such expand_dims results
BMR = "tme_bmr"               # (x, y) on x[:, :, None] * y[None, :, :]




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


_Lazy = None


def _lazy_class():
    """``TensorHandle`` whose ``data`` is computed when first read (made on first use:
    importing this module does not import Triton)."""
    global _Lazy
    if _Lazy is None:
        from triton.runtime.interpreter import TensorHandle

        class LazyDot(TensorHandle):
            """A dot result with no accumulator: computed from its zero C when read, or,
            when an addition folds into it (:func:`fadd`), computed with the addend as C
            instead, so the dot runs once either way.  ``used``: read or folded already,
            i.e. the result has another use, which the compiler's pattern refuses."""

            def __init__(self, compute, zero):
                self._compute, self._zero, self._data = compute, zero, None
                self.dtype, self.attr = zero.dtype, {DOT: True}
                self.shape = zero.data.shape
                self.used = False

            @property
            def data(self):
                self.used = True
                if self._data is None:
                    self._data = self._compute(self._zero).data
                    self._zero = None
                return self._data

            @data.setter
            def data(self, value):
                self._data = value

            def fold(self, c):
                self.used = True
                return self._compute(c)
        _Lazy = LazyDot
    return _Lazy


def dot_result(compute, d, max_num_imprecise_acc):
    """The result of a ``tl.dot`` whose arithmetic ``compute(C)`` runs: lazy (foldable)
    when it has no accumulator and ``max_num_imprecise_acc`` is 0, else computed now."""
    if getattr(_TLS, "no_acc", False) and not int(max_num_imprecise_acc or 0):
        return _lazy_class()(compute, d)
    return compute(d)


def _shape(h):
    return h.shape if h.attr.get(DOT) else h.data.shape     # a lazy dot: without computing


def fadd(block, lhs, rhs):
    """``lhs + rhs`` as one dot with the other operand as C, where the pattern applies
    (None: an ordinary addition).  Triton's pattern looks at the right operand first, and
    wants the dot's result to have no other use: not ``x + x``, not a result read (stored,
    computed with) or folded before; a use that comes only after the addition is not seen
    (docs/triton.md)."""
    if not emulating(block) or lhs is rhs:
        return None
    for dot, other in ((rhs, lhs), (lhs, rhs)):
        if dot.attr.get(DOT) and not dot.used and _shape(other) == dot.shape \
                and other.dtype == dot.dtype:
            return dot.fold(other)
    return None


def expand_dims(block, out, arg, axis):
    if emulating(block) and axis in (0, 2) and arg.data.ndim == 2 \
            and getattr(arg.dtype, "name", "") in ("fp32", "fp16", "bf16"):
        out.attr[EXPAND] = (arg, axis)
    return out


def broadcast(block, out, arg):
    if emulating(block) and EXPAND in arg.attr:
        out.attr[BCAST] = arg.attr[EXPAND]
    return out


def fmul(block, out, lhs, rhs):
    """Tag ``x[:, :, None] * y[None, :, :]`` (this operand order, as the pattern wants)
    when the product is at least 16 x 16 (the pattern's bound; K may be anything)."""
    if emulating(block):
        lt, rt = lhs.attr.get(BCAST), rhs.attr.get(BCAST)
        if lt and rt and lt[1] == 2 and rt[1] == 0 and out.data.ndim == 3 \
                and out.data.shape[0] >= 16 and out.data.shape[2] >= 16:
            out.attr[BMR] = (lt[0], rt[0])
    return out


def reduce_sum(block, ops, input):
    """``tl.sum(x[:, :, None] * y[None, :, :], axis=1)`` as the tf32 dot it compiles to
    (None: NumPy's sum).  Where Triton 3.6's compiler matches the pattern but cannot compile
    it (fp16 / bf16 operands), or compiles it into a dot that is not this sum (the pattern
    does not look at the axis), the GPU does not run the source's sum: raise, saying so."""
    tag = input.handle.attr.get(BMR) if emulating(block) else None
    if tag is None or ops.axis is None:
        return None
    x, y = tag
    axis = ops.axis % 3
    kinds = sorted({x.dtype.name, y.dtype.name})
    what = "tl.sum(x[:, :, None] * y[None, :, :], axis=%s)" % ops.axis
    if kinds != ["fp32"]:
        raise RuntimeError(
            f"torch_mma_emu.triton: {what} on {' / '.join(kinds)} operands: Triton's compiler "
            "rewrites this sum into tl.dot(x, y) and fails on non-fp32 operands (its combine "
            "pass asserts: 'PassManager::run failed'), so this kernel does not compile for a "
            "GPU (checked with Triton 3.6); compute the product in fp32 or with tl.dot")
    if axis != 1:
        raise RuntimeError(
            f"torch_mma_emu.triton: {what}: Triton's compiler rewrites this sum into "
            "tl.dot(x, y) whatever the axis, so on a GPU the kernel fails to compile (result "
            "shape mismatch) or, where the shapes agree, computes x @ y instead (checked with "
            "Triton 3.6); only axis=1 is a matrix product")
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle
    shape = [x.data.shape[0], y.data.shape[1]]
    zero = TensorHandle(np.zeros(shape, np.float32), tl.float32)
    compute = block.prepare(x, y, zero, block.reduce_dot_precision(), 0)
    if ops.keep_dims:                   # an expand_dims follows the dot: nothing to fuse
        h = TensorHandle(np.expand_dims(compute(zero).data, 1), tl.float32)
        shape = [shape[0], 1, shape[1]]
    else:
        h = _lazy_class()(compute, zero)
    return tl.core.tensor(h, tl.block_type(tl.float32, shape))
