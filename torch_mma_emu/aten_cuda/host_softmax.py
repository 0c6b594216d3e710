"""softmax / log_softmax forward as torch 2.13's ``host_softmax`` dispatches it
(``aten/src/ATen/native/cuda/SoftMax.cu``), bit for bit, in vectorised NumPy.  The text
read is a copy of PyTorch's main branch (the ``cyyever/pytorch`` fork at d684b9b) with the
persistent threshold at 2048 / 8192 bytes and ``cunn_SoftMaxForwardReg``, as 2.13 has them;
the v2.13.0 tag itself was not available to read (CUDA ``host_softmax`` takes the
``use_fast_softmax`` = Gmem / Fast kernels on ROCm only).  The input is made contiguous and seen as ``outer x dim x inner``:

* ``inner == 1`` and rows of at most 2048 elements and 8192 bytes: the persistent warp
  kernel (:mod:`.softmax`);
* ``inner == 1``, longer rows: one CTA per row, ``B = SoftMaxForward_getBlockSize(n)``
  (``min(n, 1024)`` rounded up to a multiple of 32, so 1024 here), ILP = 16 bytes / element:

  - ``cunn_SoftMaxForwardReg<reg_cnt>`` where ``reg_cnt = ceil(n / B) < 10`` (not with
    ``half_to_float``): thread ``t`` holds elements ``t + r B``, r ascending;
  - else ``cunn_SoftMaxForwardSmem`` where ``n < (48 KiB - B/32 * 4) / elem``, the input
    and the output are 16-byte aligned and ``n % ILP == 0``: thread ``t`` takes the ILP
    vectors ``t, t + B, ...`` whole, in element order;
  - else ``cunn_SoftMaxForward``: ``ilpReduce`` with the row's alignment shift ``s``
    (elements from the last 16-byte boundary): if ``s > 0`` thread ``t >= s`` first takes
    element ``t - s``; then ILP vectors ``t, t + B, ...`` of the aligned rest up to a
    multiple of ``ILP B``; then the tail, element ``t`` and every ``B``-th after it;

  each thread folds ``sum += exp(x - max)`` in its own order (float), then
  ``BlockReduce``: ``shfl_down`` 16..1 in each warp, the warp results (zero-padded to 32)
  again 16..1;
* ``inner > 1``: ``cunn_SpatialSoftMaxForward``; block ``(bx, by)`` from
  ``SpatialSoftMax_getBlockSize``: ``by = min(inner, 1024)``, and where ``by <= 64`` and
  ``dim >= 64``, ``bx`` the largest power of two with ``bx * by <= 1024`` and
  ``bx <= dim``, else 1.  Thread ``x`` folds ``d = x, x + bx, ...``, then a shared-memory
  halving tree ``bx/2 .. 1``.  The grid only spreads the columns and does not change the
  values.

The maximum is exact in any order (``fmaxf`` skips NaN; the start is ``-FLT_MAX``).  The
epilogue: softmax ``exp(x - max) / sum``, log_softmax ``(x - max) - log(sum)``, rounded
once to the output dtype (float with ``half_to_float``).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from . import softmax as _persistent
from .config import FLOATS, WARP
from .reduce import halve

MAX_THREADS = 1024
ALIGN_BYTES = 16
REG_LIMIT = 10                      # cunn_SoftMaxForwardReg where reg_cnt < 10
SMEM_PER_BLOCK = 48 * 1024          # cudaDeviceProp::sharedMemPerBlock (all CUDA GPUs)
_LOWEST = np.float32(-np.finfo(np.float32).max)


@dataclasses.dataclass(frozen=True)
class Launch:
    """Which kernel ``host_softmax`` runs and its shape."""
    kernel: str                     # "persistent", "Reg", "Smem", "Forward", "Spatial"
    outer: int
    dim: int
    inner: int
    block: tuple = (1, 1)           # (x, y)
    ilp: int = 1
    reg_cnt: int = 0

    @property
    def name(self) -> str:
        return {"persistent": "softmax_warp_forward (persistent)",
                "Reg": f"cunn_SoftMaxForwardReg<{self.reg_cnt}>",
                "Smem": "cunn_SoftMaxForwardSmem", "Forward": "cunn_SoftMaxForward",
                "Spatial": "cunn_SpatialSoftMaxForward"}[self.kernel]

    def describe(self) -> str:
        if self.kernel == "persistent":
            return f"{self.name}, rows of {self.dim}"
        if self.kernel == "Spatial":
            return (f"{self.name}, outer {self.outer} x dim {self.dim} x inner "
                    f"{self.inner}, block {self.block[0]}x{self.block[1]}")
        return f"{self.name}, rows of {self.dim}, block {self.block[0]}, ILP {self.ilp}"


def forward_block_size(n: int) -> int:
    """``SoftMaxForward_getBlockSize``: min(n, 1024) rounded up to a multiple of 32."""
    m = min(n, MAX_THREADS)
    return m if m % WARP == 0 else (m // WARP + 1) * WARP


def spatial_block_size(dim: int, inner: int) -> tuple:
    """``SpatialSoftMax_getBlockSize``: ``(dim_threads, inner_threads)``."""
    by = min(inner, MAX_THREADS)
    bx = 1
    if by <= 64 and dim >= 64:
        while by * bx <= MAX_THREADS and bx <= dim:
            bx *= 2
        bx //= 2
    return bx, by


def _sizes(shape, dim):
    shape = tuple(shape) or (1,)
    d = dim % len(shape)
    outer = int(np.prod(shape[:d], dtype=np.int64))
    inner = int(np.prod(shape[d + 1:], dtype=np.int64))
    return outer, shape[d], inner


def launch(shape, dim: int, dtype: torch.dtype, *, offset: int = 0,
           half_to_float: bool = False) -> Launch:
    """The kernel torch 2.13's ``host_softmax`` picks for a contiguous input of ``shape``
    whose data starts ``offset`` elements after a 16-byte boundary."""
    if dtype not in FLOATS:
        raise TypeError(f"the softmax models take fp32, fp16 or bf16, got {dtype}")
    outer, n, inner = _sizes(shape, dim)
    if inner != 1:
        return Launch("Spatial", outer, n, inner, spatial_block_size(n, inner))
    if _persistent.persistent(n, dtype):
        return Launch("persistent", outer, n, 1)
    item = torch.empty((), dtype=dtype).element_size()
    ilp = ALIGN_BYTES // item
    B = forward_block_size(n)
    reg = -(-n // B)
    if reg < REG_LIMIT and not half_to_float:
        return Launch("Reg", outer, n, 1, (B, 1), ilp, reg)
    max_elems = (SMEM_PER_BLOCK - B // WARP * 4) // item
    if n < max_elems and offset % ilp == 0 and n % ilp == 0:
        return Launch("Smem", outer, n, 1, (B, 1), ilp)
    return Launch("Forward", outer, n, 1, (B, 1), ilp)


# ---- the per-thread orders ---------------------------------------------------------------
def thread_order(L: Launch, shift: int = 0) -> np.ndarray:
    """``[B, K]``: the row elements thread ``t`` folds, in order (-1: nothing)."""
    B, ilp, n = L.block[0], L.ilp, L.dim
    t = np.arange(B)[:, None]
    if L.kernel == "Reg":
        idx = t + B * np.arange(L.reg_cnt)[None, :]
        return np.where(idx < n, idx, -1)
    cols = []
    size, base = n, 0
    if L.kernel == "Forward" and shift > 0:
        size = n + shift
        first = t - shift
        cols.append(np.where((t >= shift) & (t < size), first, -1))
        size -= min(B, size)
        base = B - shift
    last = size % (ilp * B) if L.kernel == "Forward" else 0
    nvec = (size - last) // ilp if L.kernel == "Forward" else -(-n // ilp)
    rounds = -(-nvec // B)
    v = t + B * np.arange(rounds)[None, :]                     # [B, rounds]
    e = base + v[:, :, None] * ilp + np.arange(ilp)[None, None, :]
    cols.append(np.where((v < nvec)[:, :, None], e, -1).reshape(B, rounds * ilp))
    if last:
        r = -(-last // B)
        o = size - last + t + B * np.arange(r)[None, :]
        cols.append(np.where(o < size, base + o, -1))
    return np.concatenate(cols, axis=1) if cols else np.full((B, 0), -1)


def block_reduce(s: np.ndarray) -> np.ndarray:
    """``cuda_utils::BlockReduce`` of per-thread sums ``s`` ([R, B], B % 32 == 0)."""
    R, B = s.shape
    warps = halve(s.reshape(R, B // WARP, WARP), -1)     # shfl_down 16..1 per warp
    pad = np.zeros((R, WARP), np.float32)
    pad[:, :B // WARP] = warps
    return halve(pad, -1)


def _fold(G: np.ndarray) -> np.ndarray:
    """Each thread's ``sum = 0; sum += g`` over the last axis, left to right in float32
    (``np.add.accumulate`` is sequential; the terms are >= 0 and a missing one is +0, so
    starting from the first term instead of 0 changes nothing)."""
    if G.shape[-1] == 0:
        return np.zeros(G.shape[:-1], np.float32)
    return np.add.accumulate(G.astype(np.float32, copy=False), axis=-1)[..., -1]


def _column(E: np.ndarray, col: np.ndarray):
    """``E[:, col]`` ([R, B]) with ``-1`` reading +0: a strided view where the valid entries
    are a prefix in arithmetic progression (every kernel's order but the alignment head),
    else a gather; None where every entry is missing (adding +0 changes no sum)."""
    R = E.shape[0]
    valid = col >= 0
    m = int(valid.sum())
    if m == 0:
        return None
    if valid[:m].all():
        c = col[:m]
        d = int(c[1] - c[0]) if m > 1 else 1
        if d > 0 and (m == 1 or bool(np.all(np.diff(c) == d))):
            v = E[:, int(c[0]):int(c[-1]) + 1:d]
            if m == col.size:
                return v
            out = np.zeros((R, col.size), np.float32)
            out[:, :m] = v
            return out
    out = np.zeros((R, col.size), np.float32)
    out[:, valid] = E[:, col[valid]]
    return out


def _fold_columns(E: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Thread ``t``'s ``sum = 0; sum += E[:, order[t, k]]`` for k = 0, 1, ... (``order``
    from :func:`thread_order`, -1 reading +0): :func:`_fold` of ``E[:, order]``, one column
    of threads at a time on strided views instead of a gathered [R, B, K] copy."""
    acc = None
    for k in range(order.shape[1]):
        v = _column(E, order[:, k])
        if v is None:
            continue
        if acc is None:
            acc = np.array(v, np.float32)
        else:
            np.add(acc, v, out=acc)
    return np.zeros((E.shape[0], order.shape[0]), np.float32) if acc is None else acc


def _row_max(X: np.ndarray, axis: int) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.fmax(_LOWEST, np.fmax.reduce(X, axis=axis)).astype(np.float32)


def _epilogue(X, mx, E, s, log, log_softmax):
    """``E``: ``exp(x - max)``, the same expf the epilogue computes again (overwritten)."""
    if log_softmax:
        with np.errstate(invalid="ignore"):             # inf - inf: NaN, as on the GPU
            d = np.subtract(X, mx, dtype=np.float32)
            return np.subtract(d, np.asarray(log(s), np.float32), out=d)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.divide(E, s, out=E)


def evaluate_rows(X: np.ndarray, L: Launch, exp, log, *, shifts=None,
                  log_softmax: bool = False) -> np.ndarray:
    """Rows ``X`` ([R, n] float32, the input already widened) through a block kernel
    (``Reg`` / ``Smem`` / ``Forward``); ``shifts``: each row's alignment shift."""
    X = np.asarray(X, np.float32)
    R, n = X.shape
    mx = _row_max(X, 1)[:, None]
    with np.errstate(invalid="ignore"):
        E = np.array(exp(np.subtract(X, mx, dtype=np.float32)), np.float32, copy=None)
    if not E.flags.writeable:
        E = E.copy()                                                # the epilogue writes E
    shifts = np.zeros(R, np.int64) if shifts is None else np.asarray(shifts, np.int64)
    total = np.empty(R, np.float32)
    for sh in np.unique(shifts):
        rows = np.nonzero(shifts == sh)[0]
        order = thread_order(L, int(sh))                            # [B, K]
        sub = E if rows.size == R else E[rows]
        total[rows] = block_reduce(_fold_columns(sub, order))
    return _epilogue(X, mx, E, total[:, None], log, log_softmax)


def evaluate_spatial(X: np.ndarray, L: Launch, exp, log, *,
                     log_softmax: bool = False) -> np.ndarray:
    """``X`` ([outer, dim, inner] float32) through ``cunn_SpatialSoftMaxForward``."""
    X = np.asarray(X, np.float32)
    O, n, I = X.shape
    bx = L.block[0]
    mx = _row_max(X, 1)[:, None, :]
    with np.errstate(invalid="ignore"):
        E = np.asarray(exp((X - mx).astype(np.float32)), np.float32)
    rounds = -(-n // bx)
    Ep = np.zeros((O, rounds * bx, I), np.float32)
    Ep[:, :n] = E
    Ep = Ep.reshape(O, rounds, bx, I)                 # d = x + bx * r at [r, x]
    acc = _fold(np.moveaxis(Ep, 1, -1))              # [O, bx, I]
    acc = halve(acc, 1)[:, None]                      # shared[x] = shared[x] + shared[x+h]
    return _epilogue(X, mx, E, acc, log, log_softmax)


def softmax(x: torch.Tensor, dim: int = -1, *, log_softmax: bool = False,
            half_to_float: bool = False, exp=None, log=None):
    """``(out, launch)``: softmax / log_softmax of ``x`` over ``dim`` with the bits of the
    kernel torch 2.13's ``host_softmax`` picks (fp32 / fp16 / bf16; ``half_to_float``
    gives a float result).  ``exp`` / ``log``: the device's math (default the CUDA models,
    ``softmax.device_math``)."""
    if x.dtype not in FLOATS:
        raise TypeError(f"the softmax models take fp32, fp16 or bf16, got {x.dtype}")
    if half_to_float and x.dtype != torch.float16:
        raise ValueError("half_to_float takes a float16 input (host_softmax's rule)")
    nd = max(x.dim(), 1)
    if not -nd <= dim < nd:
        raise IndexError(f"dim {dim} out of range for a {x.dim()}-d tensor")
    if exp is None or log is None:
        dm = _persistent.device_math()
        if dm is None:
            raise RuntimeError("no CUDA expf / logf model in this checkout "
                               "(torch_mma_emu.aten_cuda.elementwise)")
        exp, log = exp or dm[0], log or dm[1]
    xc = x.detach()
    # host_softmax's input.contiguous(): a contiguous view keeps its offset
    off = xc.storage_offset() if xc.is_contiguous() else 0
    L = launch(x.shape, dim, x.dtype, offset=off, half_to_float=half_to_float)
    out_dtype = torch.float32 if half_to_float else x.dtype
    Xf = xc.contiguous().float().numpy()
    if L.kernel == "Spatial":
        out = evaluate_spatial(Xf.reshape(L.outer, L.dim, L.inner), L, exp, log,
                               log_softmax=log_softmax)
    elif L.kernel == "persistent":
        out = _persistent.evaluate(Xf.reshape(L.outer, L.dim), exp, log,
                                   log_softmax=log_softmax)
    else:
        shifts = (off + np.arange(L.outer, dtype=np.int64) * L.dim) % L.ilp
        out = evaluate_rows(Xf.reshape(L.outer, L.dim), L, exp, log, shifts=shifts,
                            log_softmax=log_softmax)
    return torch.from_numpy(np.ascontiguousarray(out)).reshape(x.shape).to(out_dtype), L
