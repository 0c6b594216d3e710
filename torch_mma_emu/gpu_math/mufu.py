"""The GPU's multi-function unit (SASS ``MUFU.*``) on float32 NumPy arrays.

``MUFU.EX2``, ``MUFU.RCP`` and ``MUFU.RSQ`` are bit models: a table row picked by the top
mantissa bits, a quadratic ``c0 + c1*xl + c2*xl^2`` in fixed point with a truncating squarer,
a bias, and truncation to 23 fraction bits (the structure and coefficients that B. Carleton's
ptx-math found and dfyz/reproducible-inference checked on an H100: tables.py).  The
evaluation below is this project's own, vectorised.  Every MUFU op flushes subnormal inputs
and results to sign-preserving zero and returns NVIDIA's canonical NaN 0x7fffffff (the SASS
MUFU reference).  ``MUFU.SQRT`` and ``MUFU.LG2`` are ptx-math's models too, which its
author validated on sm_5x-sm_75 only: candidates for sm_90, called approximate until the GPU
sweep confirms them.  SIN, COS and TANH have no public bit model: the float64 function
rounded to float32 with the same special values, called approximate wherever used.
"""
from __future__ import annotations

import numpy as np

from . import tables

U32, U64 = np.uint32, np.uint64
MASK23 = (1 << 23) - 1
CANONICAL_NAN = np.uint32(0x7FFFFFFF)


def bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).view(U32)


def from_bits(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b, dtype=U32).view(np.float32)


def canon_nan(x: np.ndarray) -> np.ndarray:
    """NaN results carry NVIDIA's canonical payload."""
    x = np.array(x, dtype=np.float32)
    x[np.isnan(x)] = from_bits(np.array([CANONICAL_NAN]))[0]
    return x


def flush(x: np.ndarray) -> np.ndarray:
    """Subnormals to sign-preserving zero (``.ftz``)."""
    x = np.array(x, dtype=np.float32)
    sub = (x != 0) & (np.abs(x) < np.float32(2.0 ** -126))
    x[sub] = np.copysign(np.float32(0), x[sub])
    return x


def _table(rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = np.array(rows, dtype=np.int64)
    return a[:, 0].astype(U64), a[:, 1].astype(U64), a[:, 2].astype(U64)


_EX2, _RCP, _RSQ = _table(tables.EX2), _table(tables.RCP), _table(tables.RSQ)
_SQRT, _LG2 = _table(tables.SQRT), _table(tables.LG2)


def _dropped(x: np.ndarray) -> np.ndarray:
    """The partial-product bits the squarer drops: the diagonal bits ``x_k 2^(2k)`` and the
    doubled cross terms ``x_i x_j 2^(i+j+1)`` (i < j) in the 19 lowest columns."""
    x = x.astype(U64)
    low = U64((1 << 19) - 1)
    diag = np.zeros_like(x)
    for k in range(10):                     # bit k of x lands in column 2k
        diag |= ((x >> U64(k)) & U64(1)) << U64(2 * k)
    err = diag & low
    for i in range(9):                      # row i: x_i * (bits of x above i), shifted
        row = (x << U64(i + 1)) & ~U64((1 << (2 * i + 2)) - 1) & U64(0xFFFFFFFF)
        err += np.where((x >> U64(i)) & U64(1), row & low, U64(0))
    return err


_DROPPED: list = []           # the dropped bits depend on x's low 18 bits only: one table


def approx_square(x: np.ndarray) -> np.ndarray:
    """The hardware's squarer of a (<= 17-bit) integer: the exact square less the
    partial-product bits in the 19 lowest columns (:func:`_dropped`, tabulated)."""
    if not _DROPPED:
        _DROPPED.append(_dropped(np.arange(1 << 18, dtype=U64)))
    x = x.astype(U64)
    return x * x - _DROPPED[0][(x & U64((1 << 18) - 1)).astype(np.int64)]


def _parts(x: np.ndarray):
    b = bits(x)
    return b >> U32(31), ((b >> U32(23)) & U32(0xFF)).astype(np.int64), b & U32(MASK23)


def ex2(x: np.ndarray) -> np.ndarray:
    """``MUFU.EX2`` = ``ex2.approx.ftz.f32``: 2^x.  The integer part scales; the fraction,
    as 23 fixed-point bits truncated (negative x: 2^-(i+1) * 2^(1-f), its bits inverted),
    indexes the 64-row table by its top 6 bits."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(invalid="ignore"):                 # signalling NaN patterns
        a = np.abs(x.astype(np.float64))
    finite = np.isfinite(a) & (a < 128)
    af = np.where(finite, a, 0.0)
    ip = np.floor(af)
    r = np.floor((af - ip) * 2.0 ** 23).astype(np.int64)      # truncated fraction bits
    neg = np.signbit(x)
    n = np.where(neg, -ip, ip).astype(np.int64)
    inv = neg & (r != 0)
    r = np.where(inv, MASK23 - r, r)
    n = np.where(inv, n - 1, n)
    xh, xl = (r >> 17), (r & ((1 << 17) - 1)).astype(U64)
    c0, c1, c2 = _EX2[0][xh], _EX2[1][xh], _EX2[2][xh]
    s = (c0 << U64(32)) + ((c1 * xl) << U64(19)) + c2 * approx_square(xl) \
        + U64(tables.EX2_BIAS >> 30)
    frac = ((s >> U64(34)) & U64(MASK23)).astype(U32)
    e = n + 127                                     # biased exponent of the result
    out = np.where(e >= 1, (np.clip(e, 0, 254).astype(U32) << U32(23)) | frac, U32(0))
    res = from_bits(out).copy()
    res[~finite & (x > 0)] = np.inf                  # x >= 128 or +Inf
    res[~finite & (x < 0)] = 0.0                     # x <= -128 or -Inf
    return canon_nan(np.where(np.isnan(x), np.float32(np.nan), res))


def rcp(x: np.ndarray) -> np.ndarray:
    """``MUFU.RCP`` = ``rcp.approx.ftz.f32``: 1/x from the 128-row table by the mantissa's
    top 7 bits; a result in [1/2, 1) is renormalised with one more bit."""
    x = np.asarray(x, dtype=np.float32)
    sign, e, m = _parts(x)
    xh, xl = (m >> U32(16)).astype(np.int64), (m & U32(0xFFFF)).astype(U64)
    c0, c1, c2 = _RCP[0][xh], _RCP[1][xh], _RCP[2][xh]
    s = (c0 << U64(30)) - ((c1 * xl) << U64(17)) + c2 * (approx_square(xl << U64(1)) >> U64(2)) \
        + U64(tables.RCP_BIAS >> 31)
    small = (s >> U64(56)) == 0
    rexp = np.where(small, 126, 127)
    s = np.where(small, s << U64(1), s)
    frac = ((s >> U64(33)) & U64(MASK23)).astype(U32)
    eo = rexp - (e - 127)                               # biased exponent of 1/x
    mag = np.where(eo >= 1, (np.clip(eo, 0, 254).astype(U32) << U32(23)) | frac, U32(0))
    res = from_bits(mag | (sign << U32(31))).copy()
    zero_in = e == 0                                    # zero or subnormal (flushed)
    res[zero_in] = np.copysign(np.float32(np.inf), x[zero_in])
    inf_in = np.isinf(x)
    res[inf_in] = np.copysign(np.float32(0), x[inf_in])
    return canon_nan(np.where(np.isnan(x), np.float32(np.nan), res))


def _square_root_split(x):
    """The square-root tables' view of x (RSQ, SQRT): sign, exponent field e, mantissa m, the
    unbiased exponent made even (ub), whether it was odd (the table's second half: mantissa
    in [2, 4)), the row (top 6 mantissa bits + 64 if odd) and the low 17 bits xl."""
    sign, e, m = _parts(x)
    ub = e - 127
    odd = (ub & 1) == 1
    ub = np.where(odd, ub - 1, ub)
    idx = (m >> U32(17)).astype(np.int64) + np.where(odd, 64, 0)
    xl = (m & U32((1 << 17) - 1)).astype(U64)
    return sign, e, m, ub, odd, idx, xl


def rsqrt(x: np.ndarray) -> np.ndarray:
    """``MUFU.RSQ`` = ``rsqrt.approx.ftz.f32``: 1/sqrt(x); odd exponents take the table's
    second half (mantissa in [2, 4)), even powers of two are exact."""
    x = np.asarray(x, dtype=np.float32)
    sign, e, m, ub, odd, idx, xl = _square_root_split(x)
    c0, c1, c2 = _RSQ[0][idx], _RSQ[1][idx], _RSQ[2][idx]
    s = (c0 << U64(31)) - ((c1 * xl) << U64(17)) + c2 * approx_square(xl) \
        + U64(tables.RSQ_BIAS >> 30)
    frac = (((s << U64(1)) >> U64(34)) & U64(MASK23)).astype(U32)
    eo = 126 - ub // 2
    out = (eo.astype(U32) << U32(23)) | frac
    exact = ~odd & (m == 0)                             # 1/sqrt(4^k) = 2^-k
    out = np.where(exact, ((127 - ub // 2).astype(U32) << U32(23)), out)
    res = from_bits(out).copy()
    zero_in = e == 0
    res[zero_in] = np.copysign(np.float32(np.inf), x[zero_in])
    res[(sign == 1) & ~zero_in] = np.nan                # negative (and -Inf)
    res[np.isposinf(x)] = 0.0
    return canon_nan(np.where(np.isnan(x), np.float32(np.nan), res))


# -- candidates: ptx-math's models of sm_5x-sm_75, not yet checked on sm_90 -----------------
def sqrt(x: np.ndarray) -> np.ndarray:
    """``MUFU.SQRT`` = ``sqrt.approx.ftz.f32`` (candidate): the 128-row table as for RSQ
    (odd exponents take the second half), ``c0 + c1*xl - c2*xl^2``."""
    x = np.asarray(x, dtype=np.float32)
    sign, e, m, ub, odd, idx, xl = _square_root_split(x)
    c0, c1, c2 = _SQRT[0][idx], _SQRT[1][idx], _SQRT[2][idx]
    s = (c0 << U64(33)) + ((c1 * xl) << U64(18)) - c2 * approx_square(xl) \
        + U64(tables.SQRT_BIAS >> 29)
    frac = ((s >> U64(35)) & U64(MASK23)).astype(U32)
    out = ((127 + ub // 2).astype(U32) << U32(23)) | frac
    res = from_bits(np.where(e == 0, U32(0), out)).copy()
    res[e == 0] = np.copysign(np.float32(0), x[e == 0])   # zero or subnormal (flushed)
    res[(sign == 1) & (e != 0)] = np.nan
    res[np.isposinf(x)] = np.inf
    return canon_nan(np.where(np.isnan(x), np.float32(np.nan), res))


def lg2(x: np.ndarray) -> np.ndarray:
    """``MUFU.LG2`` = ``lg2.approx.ftz.f32`` (candidate): log2 of the mantissa from the
    64-row table, the exponent added in fixed point, the magnitude truncated to 36 bits
    above the binary point's 20 lowest and renormalised."""
    x = np.asarray(x, dtype=np.float32)
    sign, e, m = _parts(x)
    xh, xl = (m >> U32(17)).astype(np.int64), (m & U32((1 << 17) - 1)).astype(U64)
    c0, c1, c2 = _LG2[0][xh], _LG2[1][xh], _LG2[2][xh]
    s = (c0 << U64(30)) + ((c1 * xl) << U64(18)) - c2 * approx_square(xl) \
        + U64(tables.LG2_BIAS >> 31)
    v = np.abs(s.astype(np.int64) + ((e - 127).astype(np.int64) << 56))
    v = (v & ~np.int64((1 << 20) - 1)).astype(U64)
    bl = np.zeros(v.shape, np.int64)                    # bit length of v
    for k in range(64):
        bl += ((v >> U64(k)) != 0)
    shift = 56 - (bl - 1)
    v = np.where(shift >= 0, v << np.clip(shift, 0, 63).astype(U64),
                 v >> np.clip(-shift, 0, 63).astype(U64))
    frac = ((v >> U64(33)) & U64(MASK23)).astype(U32)
    rexp = (127 - shift).clip(1, 254).astype(U32)
    neg = (e < 127).astype(U32)                         # x < 1
    out = from_bits((neg << U32(31)) | (rexp << U32(23)) | frac).copy()
    out[bl == 0] = 0.0
    out[x == 1] = 0.0
    zero_in = e == 0
    out[zero_in] = -np.inf
    out[(sign == 1) & ~zero_in] = np.nan
    out[np.isposinf(x)] = np.inf
    return canon_nan(np.where(np.isnan(x), np.float32(np.nan), out))


# -- MUFU ops without a public bit model for sm_90 (approximate) ---------------------------
def _rounded(f, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return canon_nan(f(flush(x).astype(np.float64)).astype(np.float32))


def sin(t: np.ndarray) -> np.ndarray:
    """``MUFU.SIN`` (approximate) of a value in turns: sin(2 pi t)."""
    return flush(_rounded(lambda v: np.sin(2 * np.pi * v), t))


def cos(t: np.ndarray) -> np.ndarray:
    """``MUFU.COS`` (approximate) of a value in turns: cos(2 pi t)."""
    return _rounded(lambda v: np.cos(2 * np.pi * v), t)


def tanh(x: np.ndarray) -> np.ndarray:
    """``MUFU.TANH`` (approximate)."""
    return _rounded(np.tanh, x)
