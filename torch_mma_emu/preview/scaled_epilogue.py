"""cuBLASLt's epilogue of ``torch._scaled_mm`` with tensorwise scales, as GPUs return it.

Facts (recorded on an RTX 4060, sm89, and replayed against an H100 PCIe probe, sm90, with
cuBLASLt 12.8.3.14 and torch 2.7.1, published by mmaemu 0.1.0, Apache-2.0:
``mmaemu/model/epilogue.py`` and its recordings ``tests/data/epilogue``, which
tests/data/cublaslt_epilogue/ holds; the archs they hold for: ``registry.CUBLASLT_SCALED_MM``):

1. ``alpha = fp32(scale_a * scale_b)``;
2. ``y = fma(acc, alpha, +0)`` in fp32 (cuBLASLt's beta = 0): an exactly zero product is +0
   whatever the signs, a product that underflows keeps its sign (one rounding of the exact
   product), ``0 * Inf`` is NaN.  (``acc * alpha`` gives -0; ``acc * alpha + 0.0`` rounds
   twice.)
3. the output: fp32 ``y``; bf16 / fp16 ``y`` rounded to nearest even (from fp32: two
   roundings in all); fp8 (e4m3fn, e5m2): ``y * scale_result`` as a second fp32 multiply
   when ``scale_result`` is given, then clamped to the format's largest finite value (448,
   57344; Inf included, NaN passes), then rounded to nearest even;
4. every NaN is the canonical one (:data:`CANONICAL_NAN`), wherever it was made (a NaN
   operand, 0 x Inf, Inf - Inf in a promotion add, the epilogue);
5. K = 0: torch zero-fills the output and applies no scale (an Inf or negative scale
   changes nothing).
"""
from __future__ import annotations

from typing import Optional

import torch

# the NaN bits of each output dtype as cuBLASLt writes them (fact 4)
CANONICAL_NAN = {torch.float32: 0x7FFFFFFF, torch.bfloat16: 0x7FFF, torch.float16: 0x7FFF,
                 torch.float8_e4m3fn: 0x7F, torch.float8_e5m2: 0x7F}
_INT = {4: torch.int32, 2: torch.int16, 1: torch.uint8}
FP8_OUT = (torch.float8_e4m3fn, torch.float8_e5m2)

__all__ = ["CANONICAL_NAN", "FP8_OUT", "canonical_nan", "fma_alpha", "to_output",
           "cublaslt_epilogue"]


def canonical_nan(t: torch.Tensor) -> torch.Tensor:
    """``t`` with every NaN replaced by :data:`CANONICAL_NAN` of its dtype."""
    nan = torch.isnan(t.float()) if t.dtype in FP8_OUT else torch.isnan(t)
    if t.dtype not in CANONICAL_NAN or not bool(nan.any()):
        return t
    iv = _INT[t.element_size()]
    bits = torch.tensor(CANONICAL_NAN[t.dtype], dtype=torch.int64).to(iv)
    return torch.where(nan, bits.to(t.device), t.view(iv)).view(t.dtype)


def _mul_rn32(x: torch.Tensor, y: torch.Tensor, addend: Optional[float] = None) -> torch.Tensor:
    """fp32(x * y [+ addend]) for fp32 x, y with one rounding: the float64 product of two
    fp32 values is exact, and adding +0 to it is exact too (it only turns -0 into +0)."""
    p = x.to(torch.float64) * y.to(torch.float64)
    if addend is not None:
        p = p + addend
    return p.to(torch.float32)


def fma_alpha(acc: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Step 2: ``fma(acc, alpha, +0)`` in fp32 (acc fp32, alpha fp32, broadcastable)."""
    return _mul_rn32(acc.to(torch.float32), alpha.to(torch.float32), 0.0)


def to_output(y: torch.Tensor, out_dtype: torch.dtype,
              scale_result: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Steps 3 and 4: the fp32 ``y`` in ``out_dtype``, NaNs canonical."""
    if out_dtype in FP8_OUT:
        if scale_result is not None:
            y = _mul_rn32(y, scale_result.to(device=y.device, dtype=torch.float32).reshape(()))
        mx = torch.finfo(out_dtype).max
        y = torch.where(torch.isnan(y), y, y.clamp(-mx, mx))
    return canonical_nan(y.to(out_dtype))


def cublaslt_epilogue(acc: torch.Tensor, alpha: torch.Tensor, out_dtype: torch.dtype,
                      scale_result: Optional[torch.Tensor] = None,
                      bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The whole epilogue of one tensorwise ``torch._scaled_mm`` on its fp32 accumulator.
    ``bias`` (bf16 / fp16 outputs) is added to ``y`` in fp32 before the output rounding
    (not measured: no recording has a bias)."""
    y = fma_alpha(acc, alpha)
    if bias is not None:
        y = y + bias.to(torch.float32)
    return to_output(y, out_dtype, scale_result)
