"""IEEE 754 operations on extended reals (exact operation, then one rounding).

Used by ``fma`` (seed 003 Algorithms 3/4), ``ftz_addmul`` (Algorithms 1/2) and the epilogue
addition of ``c_mode="epilogue"``.  NaN payloads are irrelevant: every NaN result is encoded
later with the spec's NaN bits.
"""
from __future__ import annotations

from .rounding import round_xval
from .values import NAN, XVal, pow2, x_fin, x_inf


def exact_mul(x: XVal, y: XVal) -> XVal:
    """x * y without rounding (IEEE special cases: NaN, inf * 0 -> NaN)."""
    if x.is_nan or y.is_nan:
        return NAN
    sign = x.sign ^ y.sign
    if x.is_inf or y.is_inf:
        if x.is_zero or y.is_zero:
            return NAN
        return x_inf(sign)
    return XVal("fin", sign, x.mag * y.mag)


def exact_add(x: XVal, y: XVal) -> XVal:
    """x + y without rounding, with IEEE signed-zero rules for round-to-nearest.

    An exact zero sum is -0 only when both operands are -0 (seed: IEEE 754 section 6.3).
    """
    if x.is_nan or y.is_nan:
        return NAN
    if x.is_inf and y.is_inf:
        return x_inf(x.sign) if x.sign == y.sign else NAN
    if x.is_inf:
        return x
    if y.is_inf:
        return y
    s = x.value + y.value
    if s == 0:
        return x_fin(0, zero_sign=1 if (x.is_zero and y.is_zero and x.sign and y.sign) else 0)
    return x_fin(s)


def add(fmt: str, x: XVal, y: XVal) -> XVal:
    """IEEE addition in ``fmt`` with RNE."""
    return round_xval(fmt, exact_add(x, y), "rne")


def mul(fmt: str, x: XVal, y: XVal) -> XVal:
    """IEEE multiplication in ``fmt`` with RNE."""
    return round_xval(fmt, exact_mul(x, y), "rne")


def fma(fmt: str, a: XVal, b: XVal, c: XVal) -> XVal:
    """IEEE fused multiply-add ``RNE(a*b + c)`` in ``fmt`` (one rounding)."""
    return round_xval(fmt, exact_add(exact_mul(a, b), c), "rne")


MIN_NORMAL_FP32 = pow2(-126)


def ftz(z: XVal) -> XVal:
    """FTZ of seed 003 Algorithm 1: ``|z| < 2**-126`` becomes a zero of the same sign."""
    if z.is_fin and z.mag < MIN_NORMAL_FP32:
        return XVal("fin", z.sign, z.mag * 0)
    return z
