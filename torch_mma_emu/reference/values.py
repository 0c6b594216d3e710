"""Exact values: decoding bit patterns, and the extended reals used by the IEEE-style steps.

Everything here is exact: finite numbers are ``fractions.Fraction``; infinities and NaN are
tagged.  Two representations are used:

* :class:`Decoded` - a decoded input code in the form the papers use, ``(sign, sig, exp)``
  with ``value = (-1)**sign * sig * 2**exp``, ``sig`` in ``[0, 2)`` (implicit bit included
  for normals; zero and subnormals have ``exp = emin``).  ``SignedSig`` / ``Exp`` of seed 003
  Algorithms 7-11 are :attr:`Decoded.signed_sig` and :attr:`Decoded.exp`.
* :class:`XVal` - an extended real (NaN, signed infinity, or a finite value with a sign that
  also distinguishes +0 from -0), the result type of every rounding and the operand type of
  the IEEE-style operations (FMA, FTZ-Add/Mul, the epilogue addition).
"""
from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import NamedTuple

from ..formats import FORMATS, Format, classify, get_format


def pow2(k: int) -> Fraction:
    """Exactly ``2**k`` for any integer ``k``."""
    return Fraction(1 << k) if k >= 0 else Fraction(1, 1 << -k)


def floor_log2(x: Fraction) -> int:
    """The integer ``e`` with ``2**e <= x < 2**(e+1)`` (``x > 0``)."""
    if x <= 0:
        raise ValueError("floor_log2 needs a positive number")
    n, d = x.numerator, x.denominator
    e = n.bit_length() - d.bit_length()
    # now 2**(e-1) < x < 2**(e+1); settle which side of 2**e it is on
    if e >= 0:
        if n < (d << e):
            e -= 1
    else:
        if (n << -e) < d:
            e -= 1
    return e


def _tag_is(*tags: str) -> property:
    """A ``bool`` property: the value's tag (its first field, ``cls`` / ``kind``) is one of
    ``tags``."""
    return property(lambda self: self[0] in tags)


# --------------------------------------------------------------------------------------
# Decoded input codes
# --------------------------------------------------------------------------------------

class Decoded(NamedTuple):
    cls: str       # "zero", "sub", "normal", "inf", "nan"
    sign: int      # 0 or 1
    sig: Fraction  # |significand| in [0, 2)  (finite classes; 0 otherwise)
    exp: int       # exponent (emin for zero and subnormals; 0 for inf/nan)

    is_nan = _tag_is("nan")
    is_inf = _tag_is("inf")
    is_finite = _tag_is("zero", "sub", "normal")
    is_zero = _tag_is("zero")

    @property
    def signed_sig(self) -> Fraction:
        """SignedSig(x) of seed 003: the significand with the sign applied."""
        return -self.sig if self.sign else self.sig

    @property
    def value(self) -> Fraction:
        """Exact finite value (raises for inf / NaN)."""
        if not self.is_finite:
            raise ValueError(f"{self.cls} has no finite value")
        return self.signed_sig * pow2(self.exp)


def _canonical_code(fmt: Format, code: int) -> int:
    code = int(code)
    if fmt.container_bits == 32:
        # tf32 / xf32 words: only the top 19 bits matter (the low 13 are truncated away)
        return (code & 0xFFFFFFFF) >> 13 << 13
    return code & ((1 << max(fmt.bits, 8)) - 1)  # codes of <= 8-bit formats arrive as bytes


@lru_cache(maxsize=1 << 18)
def _decode(fmt_name: str, code: int) -> Decoded:
    fmt = FORMATS[fmt_name]
    cls, sign, sig_int, exp = classify(fmt, code)
    if cls in ("inf", "nan"):
        return Decoded(cls, sign, Fraction(0), 0)
    return Decoded(cls, sign, Fraction(sig_int, 1 << fmt.man_bits), exp)


def decode(fmt: str | Format, code: int) -> Decoded:
    """Decode one code of ``fmt`` (cached).  tf32/xf32 take fp32 words (low 13 bits dropped)."""
    fmt = get_format(fmt)
    return _decode(fmt.name, _canonical_code(fmt, code))


# --------------------------------------------------------------------------------------
# Extended reals
# --------------------------------------------------------------------------------------

class XVal(NamedTuple):
    kind: str       # "nan", "inf", "fin"
    sign: int       # 0 or 1 (for "fin" also the sign of a zero)
    mag: Fraction   # magnitude of a finite value

    is_nan = _tag_is("nan")
    is_inf = _tag_is("inf")
    is_fin = _tag_is("fin")

    @property
    def is_zero(self) -> bool:
        return self.kind == "fin" and self.mag == 0

    @property
    def value(self) -> Fraction:
        if self.kind != "fin":
            raise ValueError(f"{self.kind} has no finite value")
        return -self.mag if self.sign else self.mag


NAN = XVal("nan", 0, Fraction(0))
POS_ZERO = XVal("fin", 0, Fraction(0))
NEG_ZERO = XVal("fin", 1, Fraction(0))


def x_inf(sign: int) -> XVal:
    return XVal("inf", sign, Fraction(0))


def x_fin(value: Fraction, zero_sign: int = 0) -> XVal:
    """A finite extended real; ``zero_sign`` gives the sign when ``value == 0``."""
    value = Fraction(value)
    if value == 0:
        return XVal("fin", zero_sign, Fraction(0))
    return XVal("fin", 1 if value < 0 else 0, abs(value))


def x_of(d: Decoded) -> XVal:
    """The extended real a decoded code stands for."""
    if d.is_nan:
        return NAN
    if d.is_inf:
        return x_inf(d.sign)
    return XVal("fin", d.sign, d.sig * pow2(d.exp))
