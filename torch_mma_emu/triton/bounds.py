"""Loads and stores outside a tensor, under :func:`~torch_mma_emu.triton.emulate`.

Triton's interpreter turns a pointer into a raw host address and reads or writes it: an
unmasked ``tl.load`` past the end of a tensor reads the heap, a store writes into the
neighbouring tensor or crashes the process.  A GPU faults or reads its own memory; the
emulation knows every argument's memory, so each load, store and atomic of a launch is
checked first: every lane the mask keeps must address an element inside the extent of one of
the launch's tensor arguments (a view's own span, from its lowest to its highest element:
not the rest of its storage; an expanded tensor spans its one stored row).  Otherwise
:class:`OutOfBoundsError` names the kernel, the argument, the offending element offsets and
the argument's extent, and nothing is read or written.

The extents are taken from the host copies of the arguments (``GridExecutor._init_args_hst``:
the addresses the interpreter dereferences), once per launch.  A kernel that reads pointers
from memory (grouped GEMM's array of ``data_ptr()``s, made pointers by ``.to(tl.pointer_type)``
or loaded as pointers) may use the storage of the live tensor each one starts; a pointer to
anything else is refused as above.
"""
from __future__ import annotations

import numpy as np
import torch

from .record import as_tensor

SHOWN = 8           # offending offsets named in the message


class OutOfBoundsError(IndexError):
    """A load, store or atomic of an emulated Triton launch outside its tensor arguments."""


class Extents:
    """The byte ranges [lo, hi) of one launch's tensor arguments, by name."""

    def __init__(self, kernel: str, named):
        self.kernel = kernel
        self.args = []          # (name, lo, hi, data_ptr, element size, numel)
        for name, t in named:
            self.args.append((name, *_extent(t), t.data_ptr(), t.element_size(), t.numel()))
        self._storages = None   # data_ptr -> storage [lo, hi) of live tensors (learn)
        self._merge()

    def learn(self, addresses) -> None:
        """Pointers a kernel loaded from memory (grouped GEMM's arrays of data_ptr()s): each
        that starts a live tensor's storage adds that storage; any other stays unknown."""
        new = set(int(a) for a in np.unique(np.asarray(addresses).astype(np.uint64)))
        known = {a[3] for a in self.args}
        new -= known
        if not new:
            return
        if self._storages is None:
            self._storages = _live_storages()
        for a in sorted(new):
            for lo, hi in self._storages.get(a, ()):
                self.args.append((f"a tensor at {a:#x} (a pointer loaded from memory)",
                                  lo, hi, lo, 1, hi - lo))
        self._merge()

    def _merge(self) -> None:
        spans = sorted((lo, hi) for _, lo, hi, *_ in self.args if hi > lo)
        merged: list[list[int]] = []
        for lo, hi in spans:                     # overlapping views: one union of ranges
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self.lo = np.array([m[0] for m in merged], dtype=np.uint64)
        self.hi = np.array([m[1] for m in merged], dtype=np.uint64)

    def outside(self, addr: np.ndarray, width: int) -> np.ndarray:
        """Whether each address's ``width`` bytes lie outside every argument (a bool array)."""
        if not len(self.lo):
            return np.ones(addr.shape, dtype=bool)
        i = np.searchsorted(self.lo, addr, side="right").astype(np.int64) - 1
        ok = i >= 0
        j = np.where(ok, i, 0)
        return ~(ok & (addr + np.uint64(width) <= self.hi[j]))

    def check(self, what: str, ptrs, mask) -> None:
        """Raise :class:`OutOfBoundsError` when a lane of ``ptrs`` that ``mask`` keeps is
        outside every argument."""
        addr = np.asarray(ptrs.data).astype(np.uint64, copy=False)
        width = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        bad = self.outside(addr, width)
        if mask is not None:
            bad &= np.broadcast_to(np.asarray(mask.data, dtype=bool), bad.shape)
        if bad.any():
            raise OutOfBoundsError(self.message(what, addr[bad].ravel(), width, bad.size))

    def message(self, what: str, addr: np.ndarray, width: int, lanes: int) -> str:
        first = int(addr.min())
        owner = None          # the argument whose start is nearest below the first address
        for a in self.args:
            if a[3] <= first and (owner is None or a[3] > owner[3]):
                owner = a
        if owner is None:
            return (f"torch_mma_emu.triton: kernel {self.kernel}: {what} of {addr.size} of "
                    f"{lanes} lanes at addresses below every tensor argument (lowest "
                    f"{first:#x}); nothing was {_done(what)}")
        name, _, _, base, es, numel = owner
        offs = sorted({(int(a) - base) // es for a in addr})
        shown = ", ".join(map(str, offs[:SHOWN])) + (", ..." if len(offs) > SHOWN else "")
        return (f"torch_mma_emu.triton: kernel {self.kernel}: {what} outside argument "
                f"{name!r} ({numel} elements of {es} bytes): {addr.size} of {lanes} lanes at "
                f"element offsets {shown} (from {offs[0]} to {offs[-1]}); the mask lets them "
                f"through, so a GPU would fault or touch other memory; nothing was "
                f"{_done(what)}")


def _live_storages() -> dict:
    """{data_ptr: [(lo, hi)]} of every live CPU tensor's storage, keyed by the data_ptr of
    each tensor (a view's too) that starts inside it (one scan of the garbage collector's
    objects; only kernels that load pointers pay it)."""
    import gc

    import torch
    out: dict = {}
    for o in gc.get_objects():
        if isinstance(o, torch.Tensor) and o.device.type == "cpu" and not o.is_sparse:
            try:
                st = o.untyped_storage()
                lo = st.data_ptr()
                out.setdefault(o.data_ptr(), set()).add((lo, lo + st.nbytes()))
            except (RuntimeError, NotImplementedError):
                continue
    return out


def _done(what: str) -> str:
    return "read" if what == "tl.load" else "written"


def _extent(t) -> tuple[int, int]:
    """[lo, hi) bytes spanned by tensor ``t``'s elements (empty when it has none)."""
    if t.numel() == 0:
        return 0, 0
    es, p = t.element_size(), t.data_ptr()
    lo = sum(min(0, (n - 1) * s) for n, s in zip(t.shape, t.stride()))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(t.shape, t.stride()))
    return p + lo * es, p + (hi + 1) * es


def _tensors(name: str, x):
    """(name, tensor) of an argument: tensors, the base of a TensorDescriptor, tuples."""
    if isinstance(x, tuple):
        for i, y in enumerate(x):
            yield from _tensors(f"{name}[{i}]", y)
    elif hasattr(x, "base") and hasattr(x, "block_shape") and hasattr(x.base, "data_ptr"):
        yield from _tensors(f"{name}.base", x.base)
    elif hasattr(x, "data_ptr") and hasattr(x, "untyped_storage"):
        t = x if isinstance(x, torch.Tensor) else as_tensor(x)
        t = _rest_of_storage(x) if t is None else t
        if t is not None:
            yield name, t


def _rest_of_storage(x):
    """A buffer without a tensor's shape (only ``data_ptr``, ``untyped_storage``, ``dtype``)
    as the 1-D tensor from its first element to its storage's end, or None."""
    try:
        st, es = x.untyped_storage(), x.dtype.itemsize
        off, rem = divmod(x.data_ptr() - st.data_ptr(), es)
    except Exception:                    # noqa: BLE001 - not such a buffer
        return None
    if rem or off < 0:
        return None
    return torch.empty(0, dtype=x.dtype).set_(st, off, (st.nbytes() // es - off,), (1,))


def install(set_attr, ti, current) -> None:
    """Register the checks with Triton's interpreter (extras.install calls this)."""
    GE, IB = ti.GridExecutor, ti.InterpreterBuilder
    prev = {n: getattr(IB, n) for n in ("create_masked_load", "create_masked_store",
                                         "create_atomic_rmw", "create_atomic_cas",
                                         "create_int_to_ptr")}
    prev_init = GE._init_args_hst

    def init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = prev_init(self, args_dev, kwargs)
        rec = _running(current())
        if rec is not None:
            named = list(zip(self.arg_names, args_hst)) + list(kwargs_hst.items())
            rec.extents = Extents(getattr(self.fn, "__name__", "kernel"),
                                     [nt for n, x in named for nt in _tensors(n, x)])
        return args_hst, kwargs_hst

    def check(what, ptrs, mask):
        ext = _extents(current())
        if ext is not None:
            ext.check(what, ptrs, mask)

    def load(self, ptrs, mask, other, *rest, **kw):
        check("tl.load", ptrs, mask)
        out = prev["create_masked_load"](self, ptrs, mask, other, *rest, **kw)
        ty = ptrs.get_element_ty()
        ext = _extents(current())
        if ext is not None and getattr(ty, "is_ptr", lambda: False)():
            keep = np.broadcast_to(np.asarray(mask.data, dtype=bool), np.shape(out.data))
            ext.learn(np.asarray(out.data)[keep])
        return out

    def int_to_ptr(self, src, dst_type):      # an integer made a pointer: learn its target
        out = prev["create_int_to_ptr"](self, src, dst_type)
        ext = _extents(current())
        if ext is not None:
            ext.learn(np.asarray(out.data).astype(np.uint64))
        return out

    def store(self, ptrs, value, mask, *rest, **kw):
        check("tl.store", ptrs, mask)
        return prev["create_masked_store"](self, ptrs, value, mask, *rest, **kw)

    def rmw(self, op, ptr, val, mask, *rest):
        check("atomic", ptr, mask)
        return prev["create_atomic_rmw"](self, op, ptr, val, mask, *rest)

    def cas(self, ptr, cmp, val, *rest):
        check("atomic", ptr, None)
        return prev["create_atomic_cas"](self, ptr, cmp, val, *rest)
    set_attr(GE, "_init_args_hst", init_args_hst)
    set_attr(IB, "create_masked_load", load)
    set_attr(IB, "create_masked_store", store)
    set_attr(IB, "create_atomic_rmw", rmw)
    set_attr(IB, "create_atomic_cas", cas)
    set_attr(IB, "create_int_to_ptr", int_to_ptr)


def _running(block):
    """The block's running launch record (record.Launch), or None."""
    return getattr(block, "launch", None) if block is not None else None


def _extents(block):
    rec = _running(block)
    return rec.extents if rec is not None else None


def end_launch(block) -> None:
    rec = _running(block)
    if rec is not None:
        rec.extents = None      # the spans and learnt pointers are not kept in em.launches


# -- the block's own arguments, checked when it is made / a kernel is launched --------------

def check_instruction(arch, instruction) -> None:
    """``emulate(arch, instruction)``: a path (``PATHS``) or an instruction ``arch``'s
    registry has, checked when the block is made (it failed only at the first tl.dot)."""
    from ..isa import answers_to
    from ..registry import rows_for
    from .target_rules import PATHS
    if instruction is None or instruction in PATHS:
        return
    if instruction == "" or arch is None or not any(
            answers_to(r.instruction, instruction) for r in rows_for(arch)):
        names = sorted({r.name for r in rows_for(arch)}) if arch else []
        raise ValueError(f"torch_mma_emu.triton.emulate: instruction {instruction!r} is not a "
                         f"path ({', '.join(PATHS)})" + (f" nor an instruction of {arch} "
                                                         f"({', '.join(names)})" if arch else
                                                         " (interpret() takes none)"))


def check_grid(kernel: str, grid) -> None:
    """A launch's grid: 1 to 3 dimensions of non-negative ints, at most
    MMA_EMU_MAX_TRITON_PROGRAMS programs in all (the interpreter runs them one by one)."""
    from ..limits import check
    g = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    if not 1 <= len(g) <= 3 or not all(isinstance(n, int) and not isinstance(n, bool)
                                       and n >= 0 for n in g):
        raise ValueError(f"torch_mma_emu.triton: kernel {kernel}: a grid is 1 to 3 "
                         f"non-negative ints, got {grid!r}")
    n = 1
    for d in g:
        n *= d
    check("triton_programs", n, f"programs of kernel {kernel}'s grid {g}")
