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
    """``fma.rn.f32``: a*b + c rounded once."""
    a, b, c = _f64(_in(a, ftz), _in(b, ftz), _in(c, ftz))
    with np.errstate(all="ignore"):
        p = a * b                                   # exact
        s = p + c
        bp = s - c                                  # TwoSum: s + err == p + c exactly
        err = (p - bp) + (c - (s - bp))
        fin = np.isfinite(s) & np.isfinite(err)
        even = (s.view(np.int64) & 1) == 0
        fix = fin & (err != 0) & even               # round to odd: step towards err
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return _out(s, ftz)
