"""Bit-exact floating-point rounding for the interpreter: a value given as a float64 ``s``
plus its exact error ``err`` (s + err is the exact result; TwoSum gives it for sums) is
rounded to fp32, fp16 or bf16 in any PTX rounding mode (``rn`` nearest-even, ``rz``, ``rm``,
``rp``), subnormals and overflow included.  Float64 results in a directed mode are stepped
from the float64 nearest by the error's sign."""
from __future__ import annotations

import numpy as np

# format -> (significand bits, minimum normal exponent, maximum exponent)
FORMATS = {"f32": (24, -126, 127), "f16": (11, -14, 15), "bf16": (8, -126, 127)}
CANON_NAN = {"f32": 0x7FFFFFFF, "f16": 0x7FFF, "bf16": 0x7FFF, "f64": 0x7FFFFFFFFFFFFFFF}


def two_sum(a: np.ndarray, b: np.ndarray):
    """s = fl(a + b) and the exact error (Knuth's TwoSum, float64)."""
    with np.errstate(all="ignore"):
        s = a + b
        bp = s - a
        err = (a - (s - bp)) + (b - bp)
    return s, np.where(np.isfinite(s), err, 0.0)


def round_to(s: np.ndarray, err, fmt: str, mode: str) -> np.ndarray:
    """The float64 values of ``s + err`` rounded to ``fmt`` in ``mode`` (as float64)."""
    p, emin, emax = FORMATS[fmt]
    s = np.asarray(s, np.float64)
    err = np.broadcast_to(np.asarray(err, np.float64), s.shape)
    neg = np.signbit(s) | ((s == 0) & (err < 0))
    mag, e_mag = np.abs(s), np.where(np.signbit(s), -err, err)
    with np.errstate(all="ignore"):
        f, ex = np.frexp(mag)                       # mag = f * 2**ex, f in [0.5, 1)
        ex = np.where((f == 0.5) & (e_mag < 0), ex - 1, ex)   # just below a power of 2
        q = np.ldexp(1.0, np.maximum(ex - 1, emin) - (p - 1))
        n = mag / q
        fl = np.floor(n)
        frac = n - fl
        e_q = e_mag / q
        below = (frac == 0) & (e_q < 0)
        fl = np.where(below, fl - 1, fl)
        frac = np.where(below, 1.0, frac)
        rest = frac + e_q                           # sign / size only matter
        inexact = (frac != 0) | (e_q != 0)
        if mode == "rn":
            d = (frac - 0.5) + e_q
            up = (d > 0) | ((d == 0) & (np.fmod(fl, 2) == 1))
        elif mode == "rz":
            up = np.zeros_like(inexact)
        elif mode == "rp":
            up = inexact & ~neg & (rest > 0)
        elif mode == "rm":
            up = inexact & neg & (rest > 0)
        else:
            raise ValueError(f"rounding mode {mode!r}")
        r = (fl + up) * q
        top = np.ldexp(1.0, emax + 1)
        big = ~(r < top)
        away = {"rn": np.ones_like(neg), "rz": np.zeros_like(neg), "rp": ~neg, "rm": neg}[mode]
        maxf = top - np.ldexp(1.0, emax - p + 1)
        r = np.where(big, np.where(away, np.inf, maxf), r)
        r = np.where(np.isfinite(s), r, mag)
    r = np.where(neg, -r, r)
    return np.where(np.isnan(s), np.nan, r)


def f64_directed(s: np.ndarray, err: np.ndarray, mode: str) -> np.ndarray:
    """A float64 nearest ``s`` with the exact error ``err`` stepped to ``mode``."""
    if mode == "rn":
        return s
    with np.errstate(all="ignore"):
        if mode == "rp":
            return np.where(err > 0, np.nextafter(s, np.inf), s)
        if mode == "rm":
            return np.where(err < 0, np.nextafter(s, -np.inf), s)
        toward0 = ((s > 0) & (err < 0)) | ((s < 0) & (err > 0))
        return np.where(toward0, np.nextafter(s, 0.0), s)


def to_bits(x: np.ndarray, fmt: str) -> np.ndarray:
    """float64 values already representable in ``fmt`` -> their bits (uint64), NaN canonical."""
    x = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        if fmt == "f64":
            b = x.view(np.uint64).copy()
        elif fmt == "f32":
            b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        elif fmt == "f16":
            b = x.astype(np.float16).view(np.uint16).astype(np.uint64)
        elif fmt == "bf16":
            b = (x.astype(np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint64)
        else:
            raise ValueError(fmt)
    return np.where(np.isnan(x), np.uint64(CANON_NAN[fmt]), b)


def from_bits(b: np.ndarray, fmt: str) -> np.ndarray:
    """Register bits (uint64) -> float64 values of ``fmt``."""
    b = np.asarray(b, np.uint64)
    if fmt == "f64":
        return b.view(np.float64)
    if fmt == "f32":
        return (b & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.float32).astype(np.float64)
    if fmt == "f16":
        return (b & np.uint64(0xFFFF)).astype(np.uint16).view(np.float16).astype(np.float64)
    if fmt == "bf16":
        return ((b & np.uint64(0xFFFF)).astype(np.uint32) << np.uint32(16)).view(
            np.float32).astype(np.float64)
    raise ValueError(fmt)


def flush(x: np.ndarray, fmt: str) -> np.ndarray:
    """``.ftz``: subnormals of ``fmt`` to zero of the same sign."""
    if fmt not in FORMATS:
        return x
    tiny = np.ldexp(1.0, FORMATS[fmt][1])
    return np.where((x != 0) & (np.abs(x) < tiny), np.copysign(0.0, x), x)
