"""The element arithmetic of an accumulation order: one addition, max and min per format,
as the GPU (or the CPU library) computes it, on NumPy arrays.

Two carriers, one arithmetic:

* the *native* carrier a program's model works in: ``float32`` / ``float16`` / ``float64``
  arrays, and bf16 as its ``uint16`` bit patterns;
* ``float64`` arrays holding values of the format (what :func:`.evaluator.evaluate` and
  FPRev carry): :func:`narrow` and :func:`widen` move between the two exactly, and
  :func:`add64` adds on them.

Formats are named ``"f64"``, ``"f32"``, ``"f16"``, ``"bf16"`` (:func:`fmt_of` also takes
torch / NumPy dtypes and their names).  An addition is the exact sum rounded once to
nearest even in the format (fp16 / bf16: added in float32 and rounded, which is
exact-rounding-equivalent since p >= 2q + 2); a NaN result is the canonical NaN
(``CANONICAL_NAN``: 0x7FFFFFFF, 0x7FFF; bf16 0x7FFF).  ``max`` / ``min`` are ``max.f32`` /
``min.f32`` (IEEE maxNum: the non-NaN operand, -0 ordered below +0; bf16 through float32);
``maximum`` / ``minimum`` propagate NaN.
"""
from __future__ import annotations

import numpy as np

FORMATS = ("f64", "f32", "f16", "bf16")
_ALIASES = {"float64": "f64", "double": "f64", "float32": "f32", "float": "f32",
            "float16": "f16", "half": "f16", "bfloat16": "bf16"}
_NATIVE = {"f64": np.float64, "f32": np.float32, "f16": np.float16}
CANONICAL_NAN = {np.dtype(np.float32): np.uint32(0x7FFFFFFF),
                 np.dtype(np.float16): np.uint16(0x7FFF)}
_BITS = {np.dtype(np.float32): np.uint32, np.dtype(np.float16): np.uint16}


def fmt_of(dtype) -> str:
    """``"f32"`` for ``torch.float32``, ``np.float32``, ``"float32"`` or ``"f32"``; the same
    for f64, f16 and bf16 (ValueError for anything else)."""
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        dtype = np.dtype(dtype).name
    name = str(dtype).replace("torch.", "")
    name = _ALIASES.get(name, name)
    if name not in FORMATS:
        raise ValueError(f"an accumulation format is one of {', '.join(FORMATS)} (or the "
                         f"torch / NumPy dtype), got {dtype!r}")
    return name


def canonical_nans(x: np.ndarray) -> np.ndarray:
    """``x`` (float32 / float16) with every NaN the canonical one (``CANONICAL_NAN``)."""
    nan = np.isnan(x)
    if nan.any() and x.dtype in CANONICAL_NAN:
        x = np.array(x)                   # a copy, also of a NumPy scalar
        x.view(_BITS[x.dtype])[nan] = CANONICAL_NAN[x.dtype]
    return x


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round to nearest even (NaN: the canonical bf16 NaN 0x7FFF)."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FFF), r)


def narrow(x: np.ndarray, fmt: str) -> np.ndarray:
    """float64 values of ``fmt`` -> the native carrier (exact for values of the format;
    other values are rounded to nearest even)."""
    if fmt == "bf16":
        return f32_to_bf16(np.asarray(x, np.float64).astype(np.float32))
    with np.errstate(over="ignore"):
        return np.asarray(x).astype(_NATIVE[fmt])


def widen(x: np.ndarray, fmt: str) -> np.ndarray:
    """The native carrier -> float64 (exact)."""
    if fmt == "bf16":
        return bf16_to_f32(x).astype(np.float64)
    return np.asarray(x).astype(np.float64)


def fadd(a, b, kind):
    """``a + b`` on the native carrier of ``kind`` (``"f64"``, ``"f32"``, ``"f16"``,
    ``"bf16"``), rounded once; NaN canonical."""
    with np.errstate(invalid="ignore", over="ignore"):
        if kind == "bf16":
            return f32_to_bf16(bf16_to_f32(a) + bf16_to_f32(b))
        return canonical_nans(a + b)


def fmax(a, b, kind, is_max=True):
    """``max.f32`` / ``min.f32``: the non-NaN operand; -0 < +0; NaN only if both are."""
    if kind == "bf16":
        return f32_to_bf16(fmax(bf16_to_f32(a), bf16_to_f32(b), "f32", is_max))
    pick_a = (a > b) if is_max else (a < b)
    eq = a == b
    neg_a = np.signbit(a)
    pick_a = pick_a | (eq & (neg_a != is_max)) | np.isnan(b)
    return canonical_nans(np.where(pick_a, a, b))


def fmaximum(a, b, kind, is_max=True):
    """``maximumf`` / ``minimumf`` (propagate_nan=ALL): NaN if either is."""
    r = fmax(a, b, kind, is_max)
    if kind == "bf16":
        nan = np.isnan(bf16_to_f32(a)) | np.isnan(bf16_to_f32(b))
        return np.where(nan, np.uint16(0x7FFF), r)
    nan = np.isnan(a) | np.isnan(b)
    return canonical_nans(np.where(nan, np.float32(np.nan).astype(a.dtype), r))


# the binary operations by name: (a, b, fmt) on the native carrier
OPS = {"add": fadd,
       "max": lambda a, b, k: fmax(a, b, k, True),
       "min": lambda a, b, k: fmax(a, b, k, False),
       "maximum": lambda a, b, k: fmaximum(a, b, k, True),
       "minimum": lambda a, b, k: fmaximum(a, b, k, False)}


def op(name: str, fmt: str):
    """The binary operation ``name`` (``OPS``) in ``fmt`` as ``f(a, b)`` on the native
    carrier."""
    if name not in OPS:
        raise ValueError(f"an order's operation is one of {', '.join(OPS)}, got {name!r}")
    f, k = OPS[name], fmt_of(fmt)
    return lambda a, b: f(a, b, k)


def round_f32(x: np.ndarray, fmt: str) -> np.ndarray:
    """float32 values rounded to nearest even into ``fmt``'s native carrier (f32, f16, bf16)."""
    if fmt == "bf16":
        return f32_to_bf16(x)
    with np.errstate(over="ignore"):
        return canonical_nans(np.asarray(x, np.float32).astype(_NATIVE[fmt]))


def add64(a: np.ndarray, b: np.ndarray, fmt: str) -> np.ndarray:
    """``a + b`` rounded to ``fmt``, on float64 carriers (FPRev's replay): the operands are
    taken to float32 (fp16 / bf16 / fp32) and their float32 sum rounded once to ``fmt``."""
    if fmt == "f64":
        return a + b
    with np.errstate(invalid="ignore", over="ignore"):
        s = a.astype(np.float32) + b.astype(np.float32)
    return widen(round_f32(s, fmt), fmt)
