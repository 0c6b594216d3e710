"""Probe inputs (seed 001 Step 1, Algorithm 5's scaled unit) and their decoding.

A probe row gives every leaf a value: ``+big`` at one leaf, ``-big`` at another, the *unit*
``e`` (times a power of two, its *weight*) at the other leaves of its *support*, and 0
elsewhere (zeros are transparent: ``x + 0 = x`` and zero terms take no part in a fused sum's
alignment).  The output, divided by ``e``, counts the units not swamped by ``+-big`` (seed 001
section 4.2).  Several independent probes can share one row as *fields*: each field has its
own support, weight ``2**shift`` and mask magnitude ``big * 2**-level``; the count of each
field is then a bit field of the output.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .errors import ProbeRangeError

# (big, unit): big swamps n units in the accumulator, both exactly representable.  For the
# narrow formats the unit is the smallest subnormal (seed 001 section 8.1.1) so that big/e
# is as large as the format allows.
_DEFAULTS = {
    torch.float64: (2.0 ** 600, 1.0),
    torch.float32: (2.0 ** 100, 1.0),
    torch.bfloat16: (2.0 ** 100, 1.0),
    torch.float16: (2.0 ** 15, 2.0 ** -24),
}
_FP8 = {
    "float8_e4m3fn": (2.0 ** 8, 2.0 ** -9),
    "float8_e5m2": (2.0 ** 15, 2.0 ** -16),
    "float8_e4m3fnuz": (2.0 ** 7, 2.0 ** -10),
    "float8_e5m2fnuz": (2.0 ** 15, 2.0 ** -17),
}
for _name, _v in _FP8.items():
    if hasattr(torch, _name):
        _DEFAULTS[getattr(torch, _name)] = _v

# Largest C such that every count 0..C of units is exact in an accumulator/output dtype.
_CAPACITY = {torch.float64: 2 ** 53, torch.float32: 2 ** 24, torch.float16: 2 ** 11,
             torch.bfloat16: 2 ** 8}

SUPPORTED_DTYPES = tuple(_DEFAULTS)


def check_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None) if not dtype.startswith("torch.") else \
            getattr(torch, dtype[6:], None)
    if dtype not in _DEFAULTS:
        names = ", ".join(str(d).replace("torch.", "") for d in _DEFAULTS)
        raise TypeError(f"dtype must be one of {names}; got {dtype!r}")
    return dtype


def capacity_of(dtype: torch.dtype) -> int:
    return _CAPACITY.get(dtype, 2 ** 3)


@dataclass(frozen=True)
class ProbeValues:
    """The numbers a probe is made of.

    ``big``: mask magnitude; ``unit``: the scaled one; ``capacity``: counts below it are
    exact in the output; ``mask_levels``: how many distinct mask magnitudes (``big``,
    ``big/2``, ...) one row may use - 1 disables packing several probes into one row.
    """

    big: float
    unit: float
    capacity: int
    mask_levels: int = 1

    def __post_init__(self):
        for name in ("big", "unit"):
            v = getattr(self, name)
            if not (v > 0 and math.isfinite(v)) or math.frexp(v)[0] != 0.5:
                raise ValueError(f"{name} must be a positive power of two, got {v!r}")
        if self.big <= self.unit:
            raise ValueError("big must exceed unit")
        if self.capacity < 2 or self.capacity & (self.capacity - 1):
            raise ValueError(f"capacity must be a power of two >= 2, got {self.capacity}")
        if self.mask_levels < 1:
            raise ValueError("mask_levels must be >= 1")

    @property
    def bits(self) -> int:
        """Bits of count available in one output (log2 capacity)."""
        return self.capacity.bit_length() - 1

    @classmethod
    def for_dtype(cls, dtype, out_dtype=None, *, big=None, unit=None, pack=False):
        dtype = check_dtype(dtype)
        b, u = _DEFAULTS[dtype]
        cap = capacity_of(out_dtype if out_dtype is not None else dtype)
        # IEEE fp32/fp64 additions combine big/2**k exactly and swamp units at every level,
        # so several fields fit one row; narrow formats have no room for that.
        levels = 20 if pack and dtype in (torch.float32, torch.float64) and \
            (out_dtype in (None, torch.float32, torch.float64)) else 1
        return cls(big=float(big) if big is not None else b,
                   unit=float(unit) if unit is not None else u, capacity=cap,
                   mask_levels=levels)

    def with_capacity(self, capacity: int) -> "ProbeValues":
        return ProbeValues(self.big, self.unit, capacity, self.mask_levels)


def field_bits(maxcount: int) -> int:
    """Bits a field needs to hold counts 0..maxcount."""
    return max(1, maxcount.bit_length())


def decode(outputs: np.ndarray, values: ProbeValues, limit: np.ndarray) -> np.ndarray:
    """Outputs -> integer unit counts (int64).  ``limit[i]`` is the largest count row i can
    legitimately have; anything else (non-integer, negative, too large, inf/nan) means the
    big value did not swamp, or the target is not a plain sum."""
    q = np.asarray(outputs, dtype=np.float64) / values.unit
    bad = ~np.isfinite(q) | (q != np.round(q)) | (q < 0) | (q > limit)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ProbeRangeError(
            f"probe answer {outputs[i]!r} is not a count of units (unit={values.unit}, at "
            f"most {int(limit[i])} expected): the big value {values.big} did not swamp the "
            "units or the masks did not cancel. The input format's dynamic range may be too "
            "small for this accumulator (pass big=/unit=), or the target is not a plain sum.")
    return q.astype(np.int64)
