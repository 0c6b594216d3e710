"""PyTorch's CUDA pointwise arithmetic, bit for bit: ``add`` / ``sub`` / ``rsub`` (with
``alpha``), ``mul``, true ``div``, ``neg``, ``reciprocal``, ``sqrt`` and a floating
``arange``, as torch 2.13's CUDA kernels compute them in float32, float16 and bfloat16.

What the kernels compute (ATen's sources of the 2.13 line, compiled by nvcc with contraction
on, no fast-math, no flush-to-zero):

- every op runs in ``opmath_t`` (float32 for float16 / bfloat16 / float32) and rounds once
  to the tensor's dtype when stored (``cvt.rn``; a NaN stores as the canonical 0x7FFF);
- ``add`` is the ufunc ``self + alpha * other`` (aten/src/ATen/native/ufunc/add.h), which
  nvcc contracts to ``fma.rn.f32(alpha, other, self)``; ``sub`` is ``add`` with ``-alpha``
  (BinaryOps.cpp), ``rsub(self, other, alpha)`` is ``sub(other, self, alpha)``.  With
  ``alpha`` = +-1 the FMA is the plain sum.  The CPU's vectorised loop fuses it too, but its
  scalar tail does not, so CPU bits can differ inside one tensor;
- a CPU scalar operand (a Python number) enters as ``opmath_t``: float32, not the tensor's
  dtype (``CUDAFunctorOnSelf_add``, ``opmath_symmetric_gpu_kernel_with_scalars``);
- true division by a CPU scalar multiplies by its reciprocal,
  ``x * RN32(1 / RN32(s))`` (BinaryDivTrueKernel.cu: "this may lose one bit of precision");
  the CPU divides.  Between tensors it is the correctly rounded quotient;
- ``mul``, ``reciprocal`` (``1 / a``), ``sqrt`` (``sqrt.rn.f32``) are correctly rounded in
  float32, then stored;
- ``arange`` (RangeFactories.cu) computes ``start + step * float(i)`` in
  ``acc_type<T, /*is_cuda=*/true>`` = float32, contracted to one FMA; the CPU computes it in
  float64 and rounds once.

The instructions are :mod:`torch_mma_emu.gpu_math.ieee`'s correctly rounded float32
operations (NaN results are NVIDIA's canonical NaN).  Functions take float32 NumPy arrays
(values already widened from the tensor's dtype) and return the float32 value before the
store; :func:`store` rounds to the tensor's dtype.
"""
from __future__ import annotations

import numpy as np

from ..gpu_math import ieee, ptx_run
from ..gpu_math.mufu import canon_nan

from .facts import CUDA_VERSION, TORCH_VERSION

MODELS = f"torch {TORCH_VERSION} CUDA {CUDA_VERSION}"
DTYPES = ("float32", "float16", "bfloat16")
_F = np.float32

__all__ = ["add", "mul", "div", "div_by_scalar", "neg", "reciprocal", "sqrt", "arange",
           "store", "opmath_scalar", "DTYPES", "MODELS", "EXPRESSIONS"]

# op -> the expression the kernel evaluates (for em.summary()'s note)
EXPRESSIONS = {
    "add": "fma.rn.f32(alpha, other, self)",
    "sub": "fma.rn.f32(-alpha, other, self)",
    "rsub": "fma.rn.f32(-alpha, self, other)",
    "mul": "self * other",
    "div": "self / other",
    "div_scalar": "self * RN32(1 / s)",
    "neg": "-self",
    "reciprocal": "1 / self",
    "sqrt": "sqrt.rn.f32(self)",
    "arange": "fma.rn.f32(step, float(i), start)",
}


def opmath_scalar(value) -> np.float32:
    """A Python number as the kernels take a CPU scalar: converted to float32 (nearest)."""
    with np.errstate(over="ignore"):
        return _F(float(value))


def add(a, b, alpha=1.0) -> np.ndarray:
    """``a + alpha * b`` as one ``fma.rn.f32`` (``alpha`` a Python number)."""
    al = opmath_scalar(alpha)
    if al == 1:
        return ieee.add(a, b)
    if al == -1:
        return ieee.sub(a, b)
    return ieee.fma(np.broadcast_to(al, np.broadcast(a, b).shape), b, a)


def mul(a, b) -> np.ndarray:
    return ieee.mul(a, b)


def div(a, b) -> np.ndarray:
    """Tensor by tensor: the correctly rounded float32 quotient."""
    return ieee.div(a, b)


def div_by_scalar(a, s) -> np.ndarray:
    """Tensor by a CPU scalar ``s``: ``a * RN32(1 / RN32(s))``, the reciprocal taken on the
    host in float32."""
    inv = ieee.div(np.array([1], _F), np.array([opmath_scalar(s)]))
    return ieee.mul(a, inv[0])


def neg(a) -> np.ndarray:
    """The sign flipped; a NaN comes out as the canonical NaN (unverified: ``neg.f32``
    may keep the payload, which no stored fp16 / bf16 result can show)."""
    return canon_nan(-np.asarray(a, _F))


def reciprocal(a) -> np.ndarray:
    return ieee.div(_F(1), a)


def sqrt(a) -> np.ndarray:
    return ieee.sqrt(a)


def arange(start, step, n: int) -> np.ndarray:
    """The ``n`` values of a floating ``arange`` before the store: ``fma(step, float(i),
    start)`` in float32, ``i`` converted to float32 to nearest (``cvt.rn.f32.s64``)."""
    i = np.arange(n, dtype=np.int64).astype(_F)
    st, sp = opmath_scalar(start), opmath_scalar(step)
    return ieee.fma(np.full(n, sp, _F), i, np.full(n, st, _F))


def store(y: np.ndarray, dtype: str) -> np.ndarray:
    """The float32 value ``y`` stored to ``dtype``: float32 as is; float16 / bfloat16 rounded
    to nearest even (``cvt.rn``), returned as their 16-bit patterns (uint16)."""
    if dtype == "float32":
        return np.asarray(y, _F)
    if dtype not in DTYPES:
        raise ValueError(f"torch_mma_emu.aten_cuda.pointwise: dtype {dtype!r} is not "
                         f"modelled; modelled: {', '.join(DTYPES)}")
    fmt = "f16" if dtype == "float16" else "bf16"
    return ptx_run.half_bits(y, fmt).astype(np.uint16)
