"""The fast path of the float32 GPU math: the C++ kernels ``mma_emu::_gpu_math`` and
``mma_emu::_fma_f32`` (csrc/core/gpu_math.h, one element at a time, on torch's thread pool)
in place of the NumPy models, with the same bits.

The NumPy models (:mod:`.mufu`, :mod:`.ieee`, ``aten_cuda.elementwise``) stay the
reference: tests/test_gpu_math_fast.py compares the two bit for bit (random bit patterns,
NaN payloads, infinities, subnormals, signed zeros), and :func:`reference` switches the fast
path off for a block of code (differential tests of the kernels that use it).  Where the
extension is older than these ops, everything runs on the NumPy models.

``FUNCTIONS``: the names ``_gpu_math`` takes: ATen's float32 expressions of torch 2.13 / CUDA
13.0 (``aten_cuda.elementwise``) and the raw MUFU ops ``ex2_ftz`` (``ex2.approx.ftz.f32``),
``rcp_ftz`` and ``rsqrt_ftz``.  The MUFU coefficients are passed to the kernel from
:mod:`.tables` (no second copy in C++).
"""
from __future__ import annotations

import contextlib
import threading
from functools import lru_cache

import numpy as np
import torch

from . import ieee, tables

FUNCTIONS = ("exp", "log", "tanh", "erf", "rsqrt", "sigmoid", "silu", "gelu", "gelu_tanh",
             "ex2_ftz", "rcp_ftz", "rsqrt_ftz")
MIN_SIZE = 1024          # below this an array's NumPy model is about as fast as the call

_STATE = threading.local()


@lru_cache(maxsize=1)
def _has_kernels() -> bool:
    try:
        from .. import _C  # noqa: F401  (loading it registers the ops)
    except ImportError:
        return False
    return hasattr(torch.ops.mma_emu, "_gpu_math") and hasattr(torch.ops.mma_emu, "_fma_f32")


def available() -> bool:
    """Whether the C++ kernels run here (built, and not switched off by :func:`reference`)."""
    return not getattr(_STATE, "reference", False) and _has_kernels()


@contextlib.contextmanager
def reference():
    """Inside the block (this thread), every fast-path caller runs the NumPy models."""
    prev = getattr(_STATE, "reference", False)
    _STATE.reference = True
    try:
        yield
    finally:
        _STATE.reference = prev


@lru_cache(maxsize=1)
def _tables() -> torch.Tensor:
    rows = [w for t in (tables.EX2, tables.RCP, tables.RSQ) for r in t for w in r]
    biases = [tables.EX2_BIAS, tables.RCP_BIAS, tables.RSQ_BIAS]
    # the biases are 64-bit patterns: int64 two's complement carries them unchanged
    words = rows + [b - (1 << 64) if b >= 1 << 63 else b for b in biases]
    return torch.tensor(words, dtype=torch.int64)


def run(name: str, x) -> np.ndarray:
    """Function ``name`` (one of :data:`FUNCTIONS`) on float32 ``x`` with the C++ kernel
    (callers check :func:`available` first)."""
    if name not in FUNCTIONS:
        raise ValueError(f"torch_mma_emu.gpu_math.fast: unknown function {name!r}; known: "
                         f"{', '.join(FUNCTIONS)}")
    a = np.ascontiguousarray(x, dtype=np.float32)
    out = torch.ops.mma_emu._gpu_math(torch.from_numpy(a.reshape(-1)), name, _tables())
    return out.numpy().reshape(a.shape)


def fma(a, b, c) -> np.ndarray:
    """``fma.rn.f32`` of float32 arrays (broadcast): the C++ kernel for large arrays, else
    :func:`ieee.fma` (the same bits)."""
    a, b, c = np.broadcast_arrays(np.asarray(a, np.float32), np.asarray(b, np.float32),
                                  np.asarray(c, np.float32))
    if a.size < MIN_SIZE or not available():
        return ieee.fma(a, b, c)
    t = [torch.from_numpy(np.ascontiguousarray(v).reshape(-1)) for v in (a, b, c)]
    return torch.ops.mma_emu._fma_f32(*t).numpy().reshape(a.shape)


__all__ = ["FUNCTIONS", "MIN_SIZE", "available", "reference", "run", "fma"]
