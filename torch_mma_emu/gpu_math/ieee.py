"""IEEE float32 operations, correctly rounded, on NumPy arrays, computed in float64 so that
the host's float32 unit and its flush-to-zero flags (``torch.set_flush_denormal``) play no
part.  A float32 product is exact in float64; a float32 sum, quotient or square root
rounded to float64 and then to float32 is still correctly rounded, because 53 >= 2*24 + 2
(Figueroa, "When is double rounding innocuous?", SIGNUM 1995).  ``fma`` is not: it rounds
the float64 sum to odd first (Boldo & Melquiond, "Emulation of FMA and correctly rounded
sums: proved algorithms using rounding to odd", IEEE TC 2008).  NaN results are NVIDIA's
canonical NaN."""
from __future__ import annotations

import numpy as np

from .mufu import canon_nan, flush


def _f64(*xs):
    return [np.asarray(x, dtype=np.float32).astype(np.float64) for x in xs]


def _out(v: np.ndarray, ftz: bool) -> np.ndarray:
    with np.errstate(all="ignore"):
        r = canon_nan(v.astype(np.float32))
    return flush(r) if ftz else r


def _in(x, ftz: bool):
    return flush(x) if ftz else np.asarray(x, dtype=np.float32)


def mul(a, b, ftz: bool = False) -> np.ndarray:
    a, b = _f64(_in(a, ftz), _in(b, ftz))
    with np.errstate(all="ignore"):
        return _out(a * b, ftz)


def add(a, b, ftz: bool = False) -> np.ndarray:
    a, b = _f64(_in(a, ftz), _in(b, ftz))
    with np.errstate(all="ignore"):
        return _out(a + b, ftz)


def sub(a, b, ftz: bool = False) -> np.ndarray:
    a, b = _f64(_in(a, ftz), _in(b, ftz))
    with np.errstate(all="ignore"):
        return _out(a - b, ftz)


def div(a, b, ftz: bool = False) -> np.ndarray:
    a, b = _f64(_in(a, ftz), _in(b, ftz))
    with np.errstate(all="ignore"):
        return _out(a / b, ftz)


def sqrt(a, ftz: bool = False) -> np.ndarray:
    (a,) = _f64(_in(a, ftz))
    with np.errstate(all="ignore"):
        return _out(np.sqrt(a), ftz)


def mul_rz(a, b) -> np.ndarray:
    """``FMUL.RZ``: the product rounded toward zero."""
    a, b = _f64(a, b)
    with np.errstate(all="ignore"):
        p = a * b
        r = p.astype(np.float32)
        over = np.isfinite(p) & (np.abs(r.astype(np.float64)) > np.abs(p))
        r[over] = np.nextafter(r[over], np.float32(0))
    return canon_nan(r)


def fma(a, b, c, ftz: bool = False) -> np.ndarray:
    """``fma.rn.f32``: a*b + c rounded once.  Fast path: the float64 sum ``s = RN53(a*b + c)``
    (the product is exact) rounded to float32.  Rounding twice is wrong only where ``s`` lies
    exactly on a float32 midpoint (the float32 midpoints are float64 numbers and RN53 is
    monotone, so any other ``s`` is on the same side of every midpoint as the exact value);
    those elements (float32 bits 24.. of the float64 fraction 1000...0), and the rare nonzero
    ones rounding to at most 2^-126 (float32's grid there is 2^-149: no fixed pattern), go
    through round-to-odd as :func:`fma_odd` does."""
    a, b, c = np.broadcast_arrays(_in(a, ftz), _in(b, ftz), _in(c, ftz))
    if a.ndim == 0:
        r = _fma_rn(a.reshape(1), b.reshape(1), c.reshape(1)).reshape(())
    elif a.size <= _CHUNK:
        r = _fma_rn(a, b, c)
    else:                                           # blocks that stay in cache
        r = np.empty(a.shape, np.float32)
        step = max(1, _CHUNK * a.shape[0] // a.size)
        for i in range(0, a.shape[0], step):
            r[i:i + step] = _fma_rn(a[i:i + step], b[i:i + step], c[i:i + step])
    return flush(r) if ftz else r


def _fma_rn(a, b, c):
    a, b, c = _f64(a, b, c)
    with np.errstate(all="ignore"):
        s = a * b
        s += c
        r = s.astype(np.float32)
        odd = (s.view(np.int64) & _LOW29) == _MID29
        ab = r.view(np.int32) & np.int32(0x7FFFFFFF)
        tiny = ab <= _TINY_BITS
        if tiny.any():
            odd[tiny] |= s[tiny] != 0
        if odd.any():
            r[odd] = _odd_sum(a[odd], b[odd], c[odd]).astype(np.float32)
            ab = r.view(np.int32) & np.int32(0x7FFFFFFF)
        if ab.size and ab.max() > _INF_BITS:
            r = canon_nan(r)
    return r


_CHUNK = 1 << 16
_LOW29 = np.int64((1 << 29) - 1)      # the float64 fraction bits below float32's 23
_MID29 = np.int64(1 << 28)            # ... of a float32 midpoint (normal range)
_TINY_BITS = np.int32(0x00800000)   # |r| <= 2^-126: float32's grid is 2^-149, no fixed pattern
_INF_BITS = np.int32(0x7F800000)


def _odd_sum(a, b, c):
    """a*b + c (float64 operands from float32) rounded to float64 with round-to-odd."""
    p = a * b                                       # exact
    s = p + c
    bp = s - c                                      # TwoSum: s + err == p + c exactly
    err = (p - bp) + (c - (s - bp))
    fin = np.isfinite(s) & np.isfinite(err)
    even = (s.view(np.int64) & 1) == 0
    fix = fin & (err != 0) & even                   # round to odd: step towards err
    return np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)


def fma_odd(a, b, c, ftz: bool = False) -> np.ndarray:
    """``fma.rn.f32`` on every element through round-to-odd (the slow form :func:`fma`
    falls back to; kept as its reference)."""
    a, b, c = _f64(_in(a, ftz), _in(b, ftz), _in(c, ftz))
    with np.errstate(all="ignore"):
        s = _odd_sum(a, b, c)
    return _out(s, ftz)


def fma_directed(a, b, c, mode: str, ftz: bool = False) -> np.ndarray:
    """``fma.{rm,rp,rz}.f32``: a*b + c rounded once toward -inf, +inf or zero.  The float64
    sum and its exact error (TwoSum) give the sign of (exact - nearest float32), which says
    whether the nearest float32 must step."""
    a, b, c = _f64(_in(a, ftz), _in(b, ftz), _in(c, ftz))
    with np.errstate(all="ignore"):
        p = a * b
        s = p + c
        bp = s - c
        err = (p - bp) + (c - (s - bp))
        r = s.astype(np.float32)
        d = np.where(np.isfinite(s), (s - r.astype(np.float64)) + err, 0.0)
        if mode == "rm":
            step = np.where(d < 0, -np.inf, 0.0)
        elif mode == "rp":
            step = np.where(d > 0, np.inf, 0.0)
        else:                                       # rz: towards zero
            step = np.where((r > 0) & (d < 0) | (r < 0) & (d > 0) |
                            np.isinf(r) & np.isfinite(s), -np.sign(r) * np.inf, 0.0)
        big = np.isinf(r) & np.isfinite(s)          # past the largest float32
        if mode == "rm":
            step = np.where(big & (r > 0), -np.inf, step)
        elif mode == "rp":
            step = np.where(big & (r < 0), np.inf, step)
        move = step != 0
        r[move] = np.nextafter(r[move], step[move].astype(np.float32))
    return _out(r.astype(np.float64), ftz)


def minmax(a, b, op: str, nan: bool = False) -> np.ndarray:
    """``max.f32`` / ``min.f32`` (a NaN operand gives the other; both NaN: NaN) and
    ``max.NaN.f32`` / ``min.NaN.f32`` (any NaN gives NaN).  Zeros of opposite signs are
    ordered -0 < +0 (IEEE 754-2019 maximumNumber / maximum): an assumption."""
    a, b = np.broadcast_arrays(np.asarray(a, np.float32), np.asarray(b, np.float32))
    pick_b = (b > a) if op == "max" else (b < a)
    zeros = (a == 0) & (b == 0)
    sb = np.signbit(b)
    pick_b |= zeros & ((~sb) if op == "max" else sb)
    na, nb = np.isnan(a), np.isnan(b)
    if nan:
        r = np.where(na | nb, np.float32(np.nan), np.where(pick_b, b, a))
    else:
        r = np.where(na, b, np.where(nb, a, np.where(pick_b, b, a)))
    return canon_nan(r)
