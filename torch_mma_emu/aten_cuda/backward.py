"""PyTorch's CUDA elementwise backward kernels, bit for bit: ``sigmoid_backward``,
``tanh_backward`` (BinaryMiscBackwardOpsKernels.cu), ``silu_backward``
(ActivationSiluKernel.cu) and ``gelu_backward`` in both forms (ActivationGeluKernel.cu) of
torch 2.13's CUDA 13.0 build, in float32, float16 and bfloat16, vectorised in NumPy.

What the kernels compute, read from the PTX nvcc 13.0 makes of each lambda with PyTorch's
device flags (tests/data/aten_math/aten_math_backward.cu; ``scripts/regen_aten_math_ptx.py
--backward`` runs the PTX against these models):

* ``sigmoid_backward(g, y) = g * (1 - y) * y`` and ``tanh_backward(g, y) = g * (1 - y * y)``
  are written in ``scalar_t``: for float16 / bfloat16 every operation is c10's ``Half`` /
  ``BFloat16`` operator (float math, **rounded to the 16-bit type after each operation**);
  in float32 no FMA is formed (``1 - y * y`` stays a multiply and a subtraction);
* ``silu_backward``, ``gelu_backward`` compute in float (opmath) and round once:
  SiLU: ``s = rcp.rn(fma(ex2, 2^j, 1))`` (the forward's sigmoid), ``(g s) fma(x, 1 - s, 1)``;
  GELU (erf): ``g * fma(1 + erf(x / sqrt 2), 0.5, x * (expf(x * -0.5 * x) * kBeta))``;
  GELU (tanh): ``t = tanhf(kBeta fma(x^3, kKappa, x))``,
  ``g * fma(1 + t, 0.5, fma(x^2, 3 kKappa, 1) kBeta * ((0.5 x) (1 - t t)))``.
"""
from __future__ import annotations

import numpy as np

from ..gpu_math import ieee
from . import elementwise as ew

_F = np.float32
ONE, HALF = _F(1), _F(0.5)


def _c(bits: int) -> np.float32:
    return np.array([bits], np.uint32).view(np.float32)[0]


def _through(y: np.ndarray, dtype: str) -> np.ndarray:
    """float32 ``y`` rounded to ``dtype`` and widened back (a c10 Half / BFloat16 result)."""
    if dtype == "float32":
        return y
    if dtype == "float16":
        with np.errstate(over="ignore"):
            return y.astype(np.float16).astype(np.float32)
    from ..gpu_math import ptx_run
    return ew.widen(ptx_run.half_bits(y, "bf16").astype(np.uint16), "bfloat16")


def sigmoid_backward(g, y, dtype="float32"):
    """``a * (scalar_t(1.) - b) * b`` in ``scalar_t``."""
    t = _through(ieee.sub(ONE, y), dtype)
    t = _through(ieee.mul(g, t), dtype)
    return ieee.mul(t, y)


def tanh_backward(g, y, dtype="float32"):
    """``a * (scalar_t{1.} - b * b)`` in ``scalar_t``."""
    t = _through(ieee.mul(y, y), dtype)
    t = _through(ieee.sub(ONE, t), dtype)
    return ieee.mul(g, t)


def silu_backward(g, x, dtype="float32"):
    """``dy * s * (1 + x * (1 - s))``, ``s = 1 / (1 + exp(-x))`` in float."""
    s = ew.sigmoid(x)
    return ieee.mul(ieee.mul(g, s), ieee.fma(x, ieee.sub(ONE, s), ONE))


def gelu_backward(g, x, dtype="float32"):
    """``dy * (cdf + x * pdf)``: ``cdf = 0.5 (1 + erf(x M_SQRT1_2))``,
    ``pdf = exp(-0.5 x x) kBeta`` (kBeta = M_2_SQRTPI M_SQRT1_2 / 2)."""
    right = ieee.add(ew.erf(ieee.mul(x, _c(0x3F3504F3))), ONE)
    pdf = ieee.mul(ew.exp(ieee.mul(x, ieee.mul(x, _F(-0.5)))), _c(0x3ECC422A))
    return ieee.mul(g, ieee.fma(right, HALF, ieee.mul(x, pdf)))


def gelu_tanh_backward(g, x, dtype="float32"):
    """ActivationGeluKernel.cu's tanh-form backward, contractions as nvcc makes them."""
    sq = ieee.mul(x, x)
    inner = ieee.mul(ieee.fma(ieee.mul(x, sq), _c(0x3D372713), x), _c(0x3F4C422A))
    t = ew.tanh(inner)
    left = ieee.mul(x, HALF)
    tanh_d = ieee.sub(ONE, ieee.mul(t, t))
    inner_d = ieee.mul(ieee.fma(sq, _c(0x3E095D4E), ONE), _c(0x3F4C422A))
    right_d = ieee.mul(inner_d, ieee.mul(left, tanh_d))
    return ieee.mul(g, ieee.fma(ieee.add(t, ONE), HALF, right_d))


# op -> (model, ATen source, expression); the second operand is the forward's output (y)
# for sigmoid / tanh, its input (x) for SiLU / GELU
OPS = {
    "sigmoid_backward": (sigmoid_backward, "BinaryMiscBackwardOpsKernels.cu",
                         "a * (1 - b) * b in scalar_t"),
    "tanh_backward": (tanh_backward, "BinaryMiscBackwardOpsKernels.cu",
                      "a * (1 - b * b) in scalar_t"),
    "silu_backward": (silu_backward, "ActivationSiluKernel.cu",
                      "dy * s * (1 + x * (1 - s)), s = 1 / (1 + exp(-x))"),
    "gelu_backward": (gelu_backward, "ActivationGeluKernel.cu",
                      "dy * (cdf + x * pdf) (erf form)"),
    "gelu_tanh_backward": (gelu_tanh_backward, "ActivationGeluKernel.cu",
                           "dy * (0.5 (1 + t) + 0.5 x (1 - t^2) kBeta (1 + 3 kKappa x^2))"),
}


def evaluate(name: str, a: np.ndarray, b: np.ndarray, dtype: str = "float32") -> np.ndarray:
    """Backward op ``name`` (a key of :data:`OPS`) of ``a`` (the gradient) and ``b`` of
    ``dtype`` (``float32`` / ``float16`` arrays, ``bfloat16`` as uint16 bit patterns),
    rounded to ``dtype`` at the store."""
    if name not in OPS:
        raise ValueError(f"torch_mma_emu.aten_cuda.backward: unknown op {name!r}; "
                         f"modelled: {', '.join(OPS)}")
    if dtype not in ew.DTYPES:
        raise ValueError(f"torch_mma_emu.aten_cuda.backward: dtype {dtype!r} is not "
                         f"modelled; modelled: {', '.join(ew.DTYPES)}")
    fn = OPS[name][0]
    fa, fb = ew.widen(a, dtype).reshape(-1), ew.widen(b, dtype).reshape(-1)
    out = np.empty(fa.size, np.float32)
    step = 1 << 20
    with np.errstate(all="ignore"):
        for i in range(0, fa.size, step):
            out[i:i + step] = fn(fa[i:i + step], fb[i:i + step], dtype)
    if dtype == "float32":
        return out.reshape(np.shape(a))
    if dtype == "float16":
        with np.errstate(over="ignore"):
            return out.astype(np.float16).reshape(np.shape(a))
    from ..gpu_math import ptx_run
    return ptx_run.half_bits(out, "bf16").astype(np.uint16).reshape(np.shape(a))


_DTYPES = {"torch.float32": "float32", "torch.float16": "float16",
           "torch.bfloat16": "bfloat16"}


def apply(name: str, grad, other):
    """Backward op ``name`` on CPU tensors ``grad`` and ``other`` of one dtype (float32,
    float16, bfloat16; broadcast together): a new contiguous tensor."""
    import torch
    dtype = _DTYPES.get(str(grad.dtype))
    if dtype is None or other.dtype != grad.dtype:
        raise TypeError(f"torch_mma_emu.aten_cuda.backward: {name} takes two tensors of one "
                        f"of float32, float16, bfloat16; got {grad.dtype}, {other.dtype}")
    g, o = (t.detach().contiguous() for t in torch.broadcast_tensors(grad, other))

    def arr(t):
        return t.view(torch.int16).numpy().view(np.uint16) if dtype == "bfloat16" else \
            t.numpy()
    out = np.ascontiguousarray(evaluate(name, arr(g), arr(o), dtype))
    if dtype == "bfloat16":
        return torch.from_numpy(out.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(out)


__all__ = ["OPS", "evaluate", "apply", "sigmoid_backward", "tanh_backward", "silu_backward",
           "gelu_backward", "gelu_tanh_backward"]
