"""The one tf32 rounding of fp32 words (10 fraction bits kept, fp32's exponent range and
subnormals), what the tensor core reads of an fp32 word, and Triton's tf32x3 split.  Every
other module rounds to tf32 through these (tests/test_tf32.py checks them on ties, just
below and above half, carries into the exponent, NaN and Inf)."""
from __future__ import annotations

import torch

__all__ = ["TF32_MODES", "tf32_round", "tf32_truncate", "tf32x3_split"]

TF32_MODES = ("rne", "rna")   # nearest, ties to even / ties away (cvt.rna.tf32.f32)
_DROP = 0x1FFF                # the 13 fraction bits tf32 does not keep


def _to_f32_odd(x: torch.Tensor) -> torch.Tensor:
    """float64 -> float32 rounded to odd (truncate, then set the last bit when inexact): a
    second rounding to tf32, 13 bits narrower, is then the correct one (no double
    rounding)."""
    t = x.to(torch.float32)
    back = t.to(torch.float64)
    inexact = (back != x) & torch.isfinite(x)
    t = torch.where(inexact & (back.abs() > x.abs()), torch.nextafter(t, torch.zeros_like(t)),
                    t)
    bits = t.view(torch.int32)
    return torch.where(inexact, bits | 1, bits).view(torch.float32)


def tf32_round(x: torch.Tensor, mode: str = "rne") -> torch.Tensor:
    """float32 (or float64) values -> the nearest tf32 values as float32: ``mode="rne"``
    ties to even, ``"rna"`` ties away from zero (PTX ``cvt.rna.tf32.f32``).  A carry out of
    the fraction moves to the next binade (or to infinity past tf32's largest value); NaN and
    infinities are kept.  On the bits: add just under half a tf32 ulp (0x0fff, plus the kept
    lsb for ties to even; 0x1000 for ties away), then clear the 13 dropped bits; the sign
    bit is never reached from a finite magnitude."""
    if mode not in TF32_MODES:
        raise ValueError(f"tf32_round: mode must be one of {TF32_MODES}, got {mode!r}")
    if x.dtype == torch.float64:
        x = _to_f32_odd(x)
    elif x.dtype != torch.float32:
        raise TypeError(f"tf32_round takes float32 or float64 tensors, got {x.dtype}")
    bits = x.contiguous().view(torch.int32)
    half = 0x1000 if mode == "rna" else 0x0FFF + ((bits >> 13) & 1)
    r = (bits + half) & ~_DROP
    special = (bits & 0x7F800000) == 0x7F800000
    return torch.where(special, bits, r).view(torch.float32).view(x.shape)


def tf32_truncate(x: torch.Tensor) -> torch.Tensor:
    """What a tf32 instruction reads of float32 words: the low 13 bits dropped (bits only,
    as csrc/core/decode.h reads them: a NaN whose payload lies only there reads as
    infinity)."""
    if x.dtype != torch.float32:
        raise TypeError(f"tf32_truncate takes float32 tensors, got {x.dtype}")
    return (x.contiguous().view(torch.int32) & ~_DROP).view(torch.float32).view(x.shape)


def tf32x3_split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton's F32DotTC split of fp32 operands: ``hi = cvt.rna.tf32.f32(x)``, ``lo = x -
    hi`` (exact in fp32)."""
    hi = tf32_round(x, "rna")
    return hi, x - hi
