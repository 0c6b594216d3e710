"""Rounding of exact rationals, and encoding of results into bit patterns.

* :func:`round_int`: an exact rational to an integer in any of six modes (the one copy:
  the probes classify observed roundings with it, FPRev's replay rounds with it).
* :func:`rz_f`, :func:`rd_f`: the fixed-point roundings of seed 003 (``RZ_F`` truncates toward
  zero to a multiple of ``2**-F``, sign-magnitude; ``RD_F`` rounds toward minus infinity).
* :func:`round_float`: the single "round an exact rational to a binary floating-point format"
  function (precision ``man_bits``, exponent range ``[emin, emax]``, gradual underflow, overflow
  to infinity) in mode ``"rz"`` or ``"rne"``.
* :data:`RHO`: the output conversions of seed 003 Table 2 (+ RNE-FP64) built on it, including
  the truncated E8M13 variant.
* :func:`encode`: exact encoding of an :class:`~.values.XVal` into a format's code.
"""
from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

from ..elementary import RHOS
from ..formats import FORMATS, Format, get_format
from .values import NAN, XVal, decode, floor_log2, pow2, x_inf


# --------------------------------------------------------------------------------------
# Fixed-point roundings
# --------------------------------------------------------------------------------------

def rz_f(x: Fraction, F: int) -> Fraction:
    """RZ_F(x): toward zero to a multiple of 2**-F."""
    return Fraction(math.trunc(x * pow2(F))) * pow2(-F)


def rd_f(x: Fraction, F: int) -> Fraction:
    """RD_F(x): toward minus infinity to a multiple of 2**-F."""
    return Fraction(math.floor(x * pow2(F))) * pow2(-F)


INT_MODES = ("rz", "rd", "ru", "ra", "rne", "rna")


def round_int(x: Fraction, mode: str = "rne") -> int:
    """``x`` rounded to an integer: ``rz`` toward zero, ``rd`` down, ``ru`` up, ``ra`` away
    from zero, ``rne`` nearest with ties to even, ``rna`` nearest with ties away."""
    if mode == "rz":
        return math.trunc(x)
    if mode == "rd":
        return math.floor(x)
    if mode == "ru":
        return math.ceil(x)
    if mode == "ra":
        return math.ceil(x) if x > 0 else math.floor(x)
    if mode not in ("rne", "rna"):
        raise ValueError(f"rounding mode must be one of {INT_MODES}, got {mode!r}")
    fl = math.floor(x)
    rest = x - fl
    if rest != Fraction(1, 2):
        return fl + 1 if rest > Fraction(1, 2) else fl
    if mode == "rne":
        return fl if fl % 2 == 0 else fl + 1
    return fl + 1 if x > 0 else fl


def rne_int(x: Fraction) -> int:
    """Nearest integer to ``x``, ties to even."""
    return round_int(x, "rne")


# --------------------------------------------------------------------------------------
# Rounding to a floating-point format
# --------------------------------------------------------------------------------------

def round_float(x: Fraction, man_bits: int, emin: int, emax: int, mode: str,
                zero_sign: int = 0) -> XVal:
    """Round the exact value ``x`` to the binary format with ``man_bits`` fraction bits and
    normal exponents ``emin..emax`` (subnormals below ``2**emin`` are multiples of
    ``2**(emin - man_bits)``).

    ``mode``: ``"rz"`` (toward zero) or ``"rne"`` (nearest, ties to even).  A rounded magnitude
    ``>= 2**(emax+1)`` becomes a signed infinity (for RZ that is ``|x| >= 2**(emax+1)``, as
    MMA-Sim and docs/model.md specify).  ``x == 0`` gives a zero of sign ``zero_sign``; a
    nonzero ``x`` that rounds to zero keeps its own sign.
    """
    x = Fraction(x)
    if x == 0:
        return XVal("fin", zero_sign, Fraction(0))
    sign = 1 if x < 0 else 0
    m = abs(x)
    e = max(floor_log2(m), emin)
    q = e - man_bits                      # exponent of one unit in the last place
    n = m * pow2(-q)                      # magnitude in ulps (exact rational)
    if mode == "rz":
        r = math.trunc(n)
    elif mode == "rne":
        r = rne_int(n)
    else:
        raise ValueError(f"unknown rounding mode {mode!r}")
    res = r * pow2(q)
    if res >= pow2(emax + 1):
        return x_inf(sign)
    return XVal("fin", sign, Fraction(res))


def round_to(fmt: str | Format, x: Fraction, mode: str = "rne", zero_sign: int = 0) -> XVal:
    """:func:`round_float` with the parameters of an IEEE-style format (fp64/fp32/fp16...)."""
    f = get_format(fmt)
    return round_float(x, f.man_bits, f.emin, f.emax, mode, zero_sign)


def round_xval(fmt: str | Format, v: XVal, mode: str = "rne") -> XVal:
    """Round an extended real (NaN and infinities pass through)."""
    if v.kind != "fin":
        return v
    return round_to(fmt, v.value, mode, zero_sign=v.sign)


# (man_bits, emin, emax, mode, output format) of each conversion function rho: its bits
# and mode (elementary.py) in its output format's exponent range (rz_e8m13: fp32's, so its
# subnormals are multiples of 2**-139)
RHO = {r.name: (r.man_bits, FORMATS[r.out].emin, FORMATS[r.out].emax, r.mode, r.out)
       for r in RHOS.values()}


def apply_rho(rho: str, x: Fraction, zero_sign: int = 0) -> XVal:
    """The conversion function rho (seed 003 Table 2) applied to an exact value."""
    man, emin, emax, mode, _ = RHO[rho]
    return round_float(x, man, emin, emax, mode, zero_sign)


# --------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _small_table(fmt_name: str) -> dict:
    """(kind, sign, magnitude) -> code for every non-NaN code of a format with <= 8 bits."""
    fmt = FORMATS[fmt_name]
    table = {}
    for code in range(1 << fmt.bits):
        d = decode(fmt, code)
        if d.is_nan:
            continue
        key = ("inf", d.sign, Fraction(0)) if d.is_inf else ("fin", d.sign, d.sig * pow2(d.exp))
        table.setdefault(key, code)
    return table


def encode(fmt: str | Format, v: XVal, nan_code: int | None = None) -> int:
    """The code of ``fmt`` holding exactly ``v`` (which must be representable).

    NaN encodes as ``nan_code`` (default: the IEEE default quiet NaN for IEEE formats, the
    format's NaN otherwise).
    """
    f = get_format(fmt)
    if v.kind == "nan":
        if nan_code is not None:
            return nan_code
        if f.nan_style == "ieee":
            return (((1 << (f.exp_bits + 1)) - 1) << (f.man_bits - 1))
        if f.nan_style == "fn":
            return (1 << (f.bits - 1)) - 1 if f.signed else 0x7F
        if f.nan_style == "fnuz":
            return 0x80
        raise ValueError(f"{f.name} has no NaN")
    if f.bits <= 8 or f.nan_style != "ieee":
        table = _small_table(f.name)
        key = (v.kind, v.sign, v.mag)
        if key not in table and v.kind == "fin" and v.mag == 0:
            key = ("fin", 0, v.mag)  # formats without -0 (fnuz) hold -0 as +0
        if key not in table:
            raise ValueError(f"{v} is not representable in {f.name}")
        return table[key]
    sign_bit = v.sign << (f.exp_bits + f.man_bits)
    if v.kind == "inf":
        return sign_bit | (((1 << f.exp_bits) - 1) << f.man_bits)
    m = v.mag
    if m == 0:
        return sign_bit
    if m < pow2(f.emin):
        frac = m / pow2(f.emin - f.man_bits)
        if frac.denominator != 1:
            raise ValueError(f"{v} is not representable in {f.name}")
        return sign_bit | int(frac)
    e = floor_log2(m)
    if e > f.emax:
        raise ValueError(f"{v} overflows {f.name}")
    sig = m / pow2(e - f.man_bits)
    if sig.denominator != 1:
        raise ValueError(f"{v} is not representable in {f.name}")
    return sign_bit | ((e + f.bias) << f.man_bits) | (int(sig) - (1 << f.man_bits))
