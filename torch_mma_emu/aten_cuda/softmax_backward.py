"""softmax / log_softmax backward (``_softmax_backward_data``, ``_log_softmax_backward_data``)
as torch 2.13's CUDA ``host_softmax_backward`` (aten/src/ATen/native/cuda/SoftMax.cu, the
same copy of PyTorch's main host_softmax.py read) dispatches it, bit for bit, vectorised.

softmax first forms ``tmp = grad * output`` (ATen's mul kernel: one rounding to the dtype,
as on the CPU) and passes it as the gradient; log_softmax passes ``grad``.  With the
gradient ``g`` and the forward's output ``y`` seen as ``outer x dim x inner``
(contiguous), the row sum ``S = sum g`` (float accumulator, from ``+0``) is taken by:

* ``inner == 1``, ``dim <= 1024`` and ``dim * sizeof(grad_input) <= 4096`` (not the
  forward's 2048 / 8192): ``softmax_warp_backward`` (PersistentSoftmax.cuh, in the wheel):
  lane ``l`` of ``W = min(P, 32)`` sums elements ``l + W it`` in order, then XOR butterflies
  ``W/2 .. 1`` (every lane ends with the same value);
* ``inner == 1``, longer rows: one CTA per row of ``B = SoftMax_getBlockSize(ILP, dim)``
  threads (the smallest power of two >= ``min(dim / ILP, 1024) / 2``, at least 32; ILP =
  16 bytes / element of ``g``):

  - ``cunn_SoftMaxBackwardSmem`` where the row fits 48 KiB of shared memory, the three
    pointers are 16-byte aligned and ``dim % ILP == 0``: thread ``t`` sums the ILP vectors
    ``t, t + B, ...`` whole, then ``cuda_utils::BlockReduce`` (``shfl_down`` 16..1 per warp,
    then over the zero-padded warp sums);
  - else ``cunn_SoftMaxBackward``: ``ilpReduce`` with the gradient row's alignment shift
    (as the forward), then the older shared-memory ``blockReduce``: lane ``w`` of warp 0
    sums threads ``32 w .. 32 w + 31`` left to right from 0, thread 0 sums those warp
    sums left to right from 0;
* ``inner > 1``: ``cunn_SpatialSoftMaxBackward``, the forward's block ``bx x by``: thread
  ``x`` sums ``d = x, x + bx, ...``, then a shared-memory halving tree (``bx == 1``: one
  thread sums ``d = 0, 1, ...``).

The epilogue, as nvcc 13.0 compiles it (tests/data/aten_softmax/softmax_backward_sm90.ptx,
no FMA is formed): softmax ``g - y * S``, log_softmax ``g - expf(y) * S`` (CUDA's expf
model), in float, rounded once to the gradient input's dtype.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from . import host_softmax as hs
from . import softmax as persistent_mod
from .reduce import halve
from .config import FLOATS

PERSISTENT_ELEMENTS = 1024
PERSISTENT_BYTES = 4096


@dataclasses.dataclass(frozen=True)
class BackwardLaunch(hs.Launch):
    """Which kernel ``host_softmax_backward`` runs and its shape (the forward's fields and
    description; ``kernel`` is "persistent", "Smem", "Backward" or "Spatial")."""

    @property
    def name(self) -> str:
        return {"persistent": "softmax_warp_backward (persistent)",
                "Smem": "cunn_SoftMaxBackwardSmem", "Backward": "cunn_SoftMaxBackward",
                "Spatial": "cunn_SpatialSoftMaxBackward"}[self.kernel]


def block_size(ilp: int, n: int) -> int:
    """``SoftMax_getBlockSize(ILP, dim_size)``."""
    mx = min(n // ilp, hs.MAX_THREADS)
    if ilp > 1:
        mx //= 2
    b = 1
    while b < mx:
        b *= 2
    return max(b, hs.WARP)


def launch(shape, dim: int, gi_dtype: torch.dtype, g_dtype: torch.dtype, *,
           aligned: bool = True) -> BackwardLaunch:
    """The kernel ``host_softmax_backward`` picks; ``gi_dtype``: the gradient input's dtype,
    ``g_dtype``: the gradient's and the output's (float with ``half_to_float``);
    ``aligned``: the three row-0 pointers are 16-byte aligned."""
    outer, n, inner = _sizes(shape, dim)
    if inner != 1:
        return BackwardLaunch("Spatial", outer, n, inner, hs.spatial_block_size(n, inner))
    item = torch.empty((), dtype=gi_dtype).element_size()
    if n <= PERSISTENT_ELEMENTS and n * item <= PERSISTENT_BYTES:
        return BackwardLaunch("persistent", outer, n, 1)
    gitem = torch.empty((), dtype=g_dtype).element_size()
    ilp = hs.ALIGN_BYTES // gitem
    B = block_size(ilp, n)
    max_elems = (hs.SMEM_PER_BLOCK - B // hs.WARP * 4) // gitem
    if n < max_elems and aligned and n % ilp == 0:
        return BackwardLaunch("Smem", outer, n, 1, (B, 1), ilp)
    return BackwardLaunch("Backward", outer, n, 1, (B, 1), ilp)


def _sizes(shape, dim):
    shape = tuple(shape) or (1,)
    d = dim % len(shape)
    return (int(np.prod(shape[:d], dtype=np.int64)), shape[d],
            int(np.prod(shape[d + 1:], dtype=np.int64)))


def _fold0(G: np.ndarray) -> np.ndarray:
    """``sum = 0; sum += g`` over the last axis, left to right in float32 (from +0)."""
    z = np.zeros(G.shape[:-1] + (1,), np.float32)
    return np.add.accumulate(np.concatenate([z, G.astype(np.float32)], axis=-1),
                             axis=-1)[..., -1]


def persistent_sum(G: np.ndarray) -> np.ndarray:
    """``softmax_warp_backward``'s row sums of ``G`` ([R, n] float32)."""
    e = persistent_mod.lanes(G, np.float32(0))          # [R, it, lane]
    s = _fold0(np.moveaxis(e, 1, -1))                  # per lane, it ascending
    return halve(s, 1)


def smem_block_reduce(s: np.ndarray) -> np.ndarray:
    """The shared-memory ``blockReduce`` of SoftMax.cu (cunn_SoftMaxBackward): warp 0's lane
    ``w`` sums threads ``32 w ..`` from 0, thread 0 the warp sums from 0."""
    R, B = s.shape
    return _fold0(_fold0(s.reshape(R, B // hs.WARP, hs.WARP)))


def block_sum(G: np.ndarray, L: BackwardLaunch, shifts=None) -> np.ndarray:
    """Row sums of ``G`` ([R, n] float32) in a block kernel (``Smem`` / ``Backward``)."""
    R, n = G.shape
    Gp = np.concatenate([G.astype(np.float32), np.zeros((R, 1), np.float32)], axis=1)
    shifts = np.zeros(R, np.int64) if shifts is None else np.asarray(shifts, np.int64)
    fwd = hs.Launch("Forward" if L.kernel == "Backward" else "Smem", R, n, 1, L.block, L.ilp)
    total = np.empty(R, np.float32)
    for sh in np.unique(shifts):
        rows = np.nonzero(shifts == sh)[0]
        order = hs.thread_order(fwd, int(sh) if L.kernel == "Backward" else 0)   # [B, K]
        per_thread = _fold0(Gp[rows][:, order])                                  # [r, B]
        total[rows] = hs.block_reduce(per_thread) if L.kernel == "Smem" else \
            smem_block_reduce(per_thread)
    return total


def spatial_sum(G: np.ndarray, L: BackwardLaunch) -> np.ndarray:
    """``G`` [outer, dim, inner] -> [outer, inner] sums as cunn_SpatialSoftMaxBackward."""
    O, n, I = G.shape
    bx = L.block[0]
    rounds = -(-n // bx)
    Gp = np.zeros((O, rounds * bx, I), np.float32)
    Gp[:, :n] = G
    acc = _fold0(np.moveaxis(Gp.reshape(O, rounds, bx, I), 1, -1))     # [O, bx, I]
    return halve(acc, 1)


def epilogue(G, Y, S, *, log_softmax: bool, exp=None):
    """``g - y * S`` (softmax, ``g`` being grad * output) or ``g - expf(y) * S``: a multiply
    and a subtraction, no FMA (nvcc's PTX)."""
    with np.errstate(all="ignore"):
        if log_softmax:
            if exp is None:
                from .elementwise import exp        # noqa: PLC0415 (CUDA expf model)
            Y = np.asarray(exp(np.asarray(Y, np.float32)), np.float32)
        return (G - (Y * S).astype(np.float32)).astype(np.float32)


def softmax_backward(grad: torch.Tensor, output: torch.Tensor, dim: int,
                     input_dtype: torch.dtype, *, log_softmax: bool = False):
    """``aten._softmax_backward_data`` / ``_log_softmax_backward_data`` with the CUDA
    kernels' bits: (grad_input, launch).  Tensors are assumed to start on a 16-byte
    boundary plus their storage offset."""
    if grad.dtype not in FLOATS or output.dtype != grad.dtype or input_dtype not in FLOATS:
        raise TypeError(f"the softmax backward model takes fp32 / fp16 / bf16; got "
                        f"{grad.dtype}, {output.dtype}, input {input_dtype}")
    if grad.shape != output.shape:
        raise ValueError(f"grad {tuple(grad.shape)} and output {tuple(output.shape)} differ")
    half_to_float = grad.dtype != input_dtype
    if half_to_float and not (grad.dtype == torch.float32 and input_dtype == torch.float16):
        raise ValueError("expected input and grad types to match, or input to be "
                         "float16 and grad float32")
    shape = tuple(grad.shape) or (1,)
    d = dim % len(shape)
    g = grad.detach()
    if not log_softmax:
        g = g * output.detach()                    # ATen's mul: one rounding, as on the CPU
    offset = grad.storage_offset() if log_softmax and grad.is_contiguous() else 0
    y = output.detach().contiguous()
    L = launch(shape, d, input_dtype, g.dtype,
               aligned=(offset * g.element_size()) % hs.ALIGN_BYTES == 0 and
               (0 if not output.is_contiguous() else output.storage_offset() *
                output.element_size()) % hs.ALIGN_BYTES == 0)
    G = g.contiguous().float().numpy().reshape(L.outer, L.dim, L.inner)
    Y = y.float().numpy().reshape(L.outer, L.dim, L.inner)
    if L.kernel == "Spatial":
        S = spatial_sum(G, L)[:, None, :]
    else:
        G2 = G.reshape(L.outer, L.dim)
        if L.kernel == "persistent":
            S = persistent_sum(G2)
        else:
            shifts = (offset + np.arange(L.outer, dtype=np.int64) * L.dim) % L.ilp
            S = block_sum(G2, L, shifts)
        S = S[:, None, None]
    out = epilogue(G, Y, S, log_softmax=log_softmax)
    return torch.from_numpy(out).reshape(grad.shape).to(input_dtype), L


__all__ = ["softmax_backward", "launch", "BackwardLaunch", "block_size", "persistent_sum",
           "block_sum", "spatial_sum", "smem_block_reduce", "epilogue", "FLOATS"]
