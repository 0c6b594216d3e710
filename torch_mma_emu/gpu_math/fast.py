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
    return all(hasattr(torch.ops.mma_emu, op) for op in ("_gpu_math", "_fma_f32", "_welford_f32"))


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
    if not a.flags.writeable:               # torch.from_numpy warns on read-only arrays
        a = a.copy()
    out = torch.ops.mma_emu._gpu_math(torch.from_numpy(a.reshape(-1)), name, _tables())
    return out.numpy().reshape(a.shape)


def fma(a, b, c) -> np.ndarray:
    """``fma.rn.f32`` of float32 arrays (broadcast): the C++ kernel for large arrays (the
    broadcast operands read in place, not copied), else :func:`ieee.fma` (the same bits)."""
    a, b, c = (np.asarray(v, np.float32) for v in (a, b, c))
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    size = int(np.prod(shape, dtype=np.int64))
    if size < MIN_SIZE or not available():
        return ieee.fma(a, b, c)
    cols = shape[-1]
    ts = []
    for v in (a, b, c):
        v = np.ascontiguousarray(v) if v.ndim else v.reshape(1)
        if not v.flags.writeable:
            v = v.copy()
        ts.append(torch.from_numpy(v).expand(shape).reshape(size // cols, cols))
    return torch.ops.mma_emu._fma_f32(*ts).numpy().reshape(shape)


def welford(X, threads: int, vec: int, rms: bool = False):
    """The per-thread loop of ATen's ``vectorized_layer_norm_kernel`` on float32 rows ``X``
    ([R, N], N % vec == 0) with the C++ kernel: thread ``t`` folds the ``vec``-vectors
    ``t, t + threads, ...`` element by element into a Welford state (``aten_cuda.norms``
    has the NumPy reference); returns ``(mean, m2, count)``, each [R, threads] float32."""
    a = np.ascontiguousarray(X, dtype=np.float32)
    x = torch.from_numpy(a if a.flags.writeable else a.copy())
    st = torch.ops.mma_emu._welford_f32(x, int(threads), int(vec), bool(rms)).numpy()
    return st[0], st[1], st[2]


__all__ = ["FUNCTIONS", "MIN_SIZE", "available", "reference", "run", "fma", "welford"]
