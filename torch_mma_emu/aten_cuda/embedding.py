"""``aten.embedding_dense_backward`` as torch 2.13.0's CUDA build computes it
(``embedding_dense_backward_cuda``, aten/src/ATen/native/cuda/Embedding.cu, and
``embedding_backward_cuda_kernel``, EmbeddingBackwardKernel.cu): which gradient rows are
added to which weight row, in which order, in which precision.

Two paths, chosen by the host code:

* **feature kernel** (``num_indices <= 3072`` and not ``scale_grad_by_freq``;
  ``embedding_backward_feature_kernel``, block 32 x 32): the indices are taken in chunks of
  32 consecutive positions.  In each chunk the positions that hit the same row (padding_idx
  excluded) are summed in float32 (``acc_type``) in increasing position order (the lowest
  warp leads and adds the others' shared-memory rows, ``__ffs`` order); the chunk sum is
  rounded to the weight's dtype and added to the row in the weight's dtype
  (``grad_weight[row] += static_cast<scalar_t>(sum)``: float32 add, one rounding), chunks in
  order, the row starting at +0.
* **sort + segments** (otherwise): a stable radix sort of the indices (position order kept
  within equal indices); each run of equal indices (a segment) is cut into partial segments
  of ``NROWS_PER_THREAD = 10``; each partial sums its rows in float32 from +0
  (``weight += grad * scale``: FADD without scaling, FFMA with ``scale = 1.0f / count``
  correctly rounded when ``scale_grad_by_freq``; count = the segment's length); the
  partials of a segment are added in order from +0 and the result stored (rounded once to
  the weight's dtype) to the row, except padding_idx's, which stays +0.

The SASS of the 2.13.0 cu130 wheel (sm_90) confirms the arithmetic: ``compute_grad_weight``
has ``FADD`` (no count) and ``MUFU.RCP`` + Newton + ``FFMA`` (count), the Half feature
kernel ``FADD`` in shared memory then ``F2FP.F16.F32`` / ``HADD2.F32`` / ``FADD`` /
``F2FP.F16.F32`` at the store.  The 3072 threshold and the chunk height (32 on CUDA) are
host-code constants read from the ATen source; the wheel's kernel names match that source
(docs/preview.md).  float64 is not modelled.
"""
from __future__ import annotations

import numpy as np

from ..gpu_math import ieee, ptx_run
from ..gpu_math.mufu import canon_nan
from .facts import CUDA_VERSION, TORCH_VERSION, version_mismatch

__all__ = ["dense_backward", "embedding_dense_backward", "path", "widen", "store", "DTYPES",
           "FEATURE_MAX_INDICES", "CHUNK", "NROWS_PER_THREAD", "TORCH_VERSION", "CUDA_VERSION",
           "version_mismatch"]

DTYPES = ("float32", "float16", "bfloat16")
FEATURE_MAX_INDICES = 3072      # Embedding.cu: num_indices <= 3072 && !scale_grad_by_freq
CHUNK = 32                      # Embedding.cu: BLOCKDIMY on CUDA (16 on ROCm)
NROWS_PER_THREAD = 10           # EmbeddingBackwardKernel.cu
_F = np.float32


def path(num_indices: int, scale_grad_by_freq: bool) -> str:
    """``"feature"`` or ``"segments"``: the kernel the host code launches."""
    if num_indices <= FEATURE_MAX_INDICES and not scale_grad_by_freq:
        return "feature"
    return "segments"


def _check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"torch_mma_emu.aten_cuda.embedding: dtype {dtype!r} is not "
                         f"modelled; modelled: {', '.join(DTYPES)}")


def widen(g: np.ndarray, dtype: str) -> np.ndarray:
    """``dtype``'s storage (float32, or 16-bit patterns as uint16) -> float32 values."""
    _check_dtype(dtype)
    if dtype == "float32":
        return np.asarray(g, _F)
    return ptx_run.half_value(g, "f16" if dtype == "float16" else "bf16")


def store(y: np.ndarray, dtype: str) -> np.ndarray:
    """float32 -> ``dtype``'s storage, rounded to nearest even (NaN canonical)."""
    _check_dtype(dtype)
    if dtype == "float32":
        return np.asarray(y, _F)
    return ptx_run.half_bits(y, "f16" if dtype == "float16" else "bf16").astype(np.uint16)


def _round(y: np.ndarray, dtype: str) -> np.ndarray:
    return y if dtype == "float32" else widen(store(y, dtype), dtype)


def _ranks(keys: np.ndarray) -> np.ndarray:
    """Per element of the (already sorted) ``keys``: its rank within its run of equal keys."""
    n = keys.size
    if n == 0:
        return np.zeros(0, np.int64)
    start = np.r_[True, keys[1:] != keys[:-1]]
    first = np.maximum.accumulate(np.where(start, np.arange(n), 0))
    return np.arange(n) - first


def _plus_zero(v: np.ndarray) -> np.ndarray:
    """``+0 + v`` in float32 without arithmetic (the host's flush flags play no part): -0
    becomes +0, NaN NVIDIA's canonical NaN, every other value stays."""
    b = np.ascontiguousarray(v, _F).view(np.uint32)
    return canon_nan(np.where(b == np.uint32(0x80000000), np.uint32(0), b).view(_F))


def _fold(groups: np.ndarray, ranks: np.ndarray, ngroups: int, rows, step,
          first=None) -> np.ndarray:
    """``acc[g] = step(acc[g], rows(i), i)`` over the elements ``i`` of each group ``g`` in
    rank order, from +0 (float32 vectors of width D); ``first(rows(i))``, where given, is
    the first step's value (``step(+0, ...)`` without the arithmetic)."""
    acc = None
    for r in range(int(ranks.max()) + 1 if ranks.size else 0):
        sel = np.nonzero(ranks == r)[0]
        vals = rows(sel)
        g = groups[sel]
        if acc is None:
            acc = np.zeros((ngroups, vals.shape[1]), _F)
            if first is not None:
                acc[g] = first(vals)
                continue
        acc[g] = step(acc[g], vals, sel)
    return acc


def _feature(G: np.ndarray, idx: np.ndarray, num_weights: int, padding_idx: int,
             dtype: str) -> np.ndarray:
    keep = np.nonzero(idx != padding_idx)[0]
    if keep.size == 0:
        return keep, None
    chunk = keep // CHUNK
    key = chunk * num_weights + idx[keep]
    order = np.argsort(key, kind="stable")          # (chunk, row), positions ascending
    pos, key = keep[order], key[order]
    ukey, grp = np.unique(key, return_inverse=True)
    sums = _fold(grp, _ranks(key), ukey.size, lambda s: G[pos[s]],
                 lambda acc, v, s: ieee.add(acc, v), _plus_zero)
    sums = _round(sums, dtype)                      # static_cast<scalar_t>(my_s)
    rows = ukey % num_weights                       # ukey sorted by (chunk, row)
    order2 = np.argsort(rows, kind="stable")        # per row, chunks ascending
    rows_s = rows[order2]

    def add(acc, v, s):
        return _round(ieee.add(acc, v), dtype)
    urows = np.unique(rows_s)
    per_row = _fold(np.searchsorted(urows, rows_s), _ranks(rows_s), urows.size,
                    lambda s: sums[order2[s]], add, _plus_zero)
    return urows, per_row


def _segments(G: np.ndarray, idx: np.ndarray, num_weights: int, padding_idx: int,
              scale_grad_by_freq: bool, dtype: str) -> np.ndarray:
    n = G.shape[0]
    order = np.argsort(idx, kind="stable")          # cub radix sort: stable
    sidx = idx[order]
    rank = _ranks(sidx)
    useg, seg = np.unique(sidx, return_inverse=True)
    counts = np.bincount(seg)
    part_key = seg * (n // NROWS_PER_THREAD + 1) + rank // NROWS_PER_THREAD
    upart, part = np.unique(part_key, return_inverse=True)
    if scale_grad_by_freq:
        scale = ieee.div(np.ones(n, _F), counts[seg].astype(_F))   # 1.0f / count: rcp.rn

        def step(acc, v, s):                        # FFMA: grad * scale + weight
            return ieee.fma(v, np.broadcast_to(scale[s][:, None], v.shape), acc)
    else:
        def step(acc, v, s):
            return ieee.add(acc, v)
    partials = _fold(part, rank % NROWS_PER_THREAD, upart.size, lambda s: G[order[s]],
                     step, None if scale_grad_by_freq else _plus_zero)
    part_seg = upart // (n // NROWS_PER_THREAD + 1)
    part_rank = _ranks(part_seg)
    total = _fold(part_seg, part_rank, useg.size, lambda s: partials[s],
                  lambda acc, v, s: ieee.add(acc, v), _plus_zero)
    keep = useg != padding_idx
    return useg[keep], total[keep]


def dense_backward(grad: np.ndarray, indices: np.ndarray, num_weights: int,
                   padding_idx: int = -1, scale_grad_by_freq: bool = False,
                   dtype: str = "float32") -> np.ndarray:
    """The weight gradient (num_weights, D) in ``dtype``'s storage (float32, or uint16 bit
    patterns for float16 / bfloat16) of ``grad`` (num_indices, D, same storage) scattered
    to the rows ``indices`` (num_indices integers in [0, num_weights))."""
    _check_dtype(dtype)
    grad = np.asarray(grad)
    idx = np.asarray(indices).reshape(-1)
    if not np.issubdtype(idx.dtype, np.integer):
        raise ValueError("torch_mma_emu.aten_cuda.embedding: indices must be integers, "
                         f"got {idx.dtype}")
    if grad.ndim != 2 or grad.shape[0] != idx.size:
        raise ValueError("torch_mma_emu.aten_cuda.embedding: grad must be (num_indices, D) "
                         f"with num_indices = {idx.size}, got shape {grad.shape}")
    if num_weights < 0:
        raise ValueError(f"torch_mma_emu.aten_cuda.embedding: num_weights must be >= 0, "
                         f"got {num_weights}")
    idx = idx.astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= num_weights):
        raise ValueError("torch_mma_emu.aten_cuda.embedding: indices must lie in "
                         f"[0, {num_weights}), got [{idx.min()}, {idx.max()}]")
    out = np.zeros((num_weights, grad.shape[1]), _F if dtype == "float32" else np.uint16)
    if idx.size == 0:
        return out                                  # at::zeros: +0 everywhere
    G = widen(grad, dtype)
    if path(idx.size, scale_grad_by_freq) == "feature":
        rows, vals = _feature(G, idx, num_weights, padding_idx, dtype)
    else:
        rows, vals = _segments(G, idx, num_weights, padding_idx, scale_grad_by_freq, dtype)
    if rows.size:
        out[rows] = store(vals, dtype)              # rows not hit stay +0
    return out


def embedding_dense_backward(grad, indices, num_weights: int, padding_idx: int = -1,
                             scale_grad_by_freq: bool = False):
    """:func:`dense_backward` on CPU torch tensors: ``grad`` (float32 / float16 / bfloat16,
    shape ``indices.shape + (D,)``) and integer ``indices``; returns the (num_weights, D)
    weight gradient tensor in ``grad``'s dtype."""
    import torch
    dtype = str(grad.dtype).replace("torch.", "")
    if dtype not in DTYPES:
        raise ValueError(f"torch_mma_emu.aten_cuda.embedding: dtype {grad.dtype} is not "
                         f"modelled; modelled: {', '.join(DTYPES)}")
    D = grad.shape[-1]
    g = grad.detach().contiguous().reshape(-1, D)
    g = g.numpy() if dtype == "float32" else g.view(torch.int16).numpy().view(np.uint16)
    out = dense_backward(g, indices.detach().reshape(-1).numpy(), int(num_weights),
                         int(padding_idx), bool(scale_grad_by_freq), dtype)
    if dtype == "float32":
        return torch.from_numpy(out)
    return torch.from_numpy(out.view(np.int16)).view(grad.dtype)
