"""Shared state of one probing session: the runner, the formats' ranges, and what earlier
tests established (the later tests of seed 000's Figure 3 pipeline build on the earlier)."""
from __future__ import annotations

import math

from .report import Feature, FeatureReport, Interval
from .targets import Target
from .vectors import Runner, Unrealizable, Vec, fits, max_finite


def _pow2_max(fmt) -> int:
    return math.frexp(max_finite(fmt))[1] - 1


class Ctx:
    def __init__(self, target: Target):
        self.target = target
        self.runner = Runner(target)
        self.iface = target.iface
        self.fa, self.fb, self.out = self.iface.fmt_a, self.iface.fmt_b, self.iface.out
        self.p_out = self.out.man_bits + 1
        self.report = FeatureReport(target.label, self.iface.describe())
        # operands may be subnormal once the target is known to keep subnormal inputs
        self.normal = True

    # -- what the formats allow ------------------------------------------------------
    @property
    def scale_exps(self) -> tuple[int, int]:
        """Range of the exponent a block's scale pair can add (0, 0 when unscaled)."""
        if not self.iface.scaled:
            return 0, 0
        return (-254, 254) if self.iface.scale_format == "ue8m0" else (-18, 16)

    def pmin(self, normal: bool = True) -> int:
        """Smallest exponent e with 2**e a product of two (normal) inputs, scale 1."""
        sub = 0 if normal else 1
        return (self.fa.emin - sub * self.fa.man_bits) + (self.fb.emin - sub * self.fb.man_bits)

    def pmax(self) -> int:
        return _pow2_max(self.fa) + _pow2_max(self.fb)

    def prod_range(self, scaled: bool = False) -> tuple[int, int]:
        lo, hi = self.pmin(), self.pmax()
        if scaled:
            s0, s1 = self.scale_exps
            lo, hi = lo + s0, hi + s1
        return lo, hi

    def fits_out(self, x: float, normal: bool = True) -> bool:
        return fits(self.out, x, normal=normal)

    # -- running ------------------------------------------------------------------
    def vec(self, products, c=0.0, **kw) -> Vec:
        kw.setdefault("normal", self.normal)
        return self.runner.vec(products, c, **kw)

    def build(self, makers) -> list:
        """Vectors from builder callables; None where a vector is unrealizable."""
        out = []
        for mk in makers:
            try:
                out.append(mk())
            except (Unrealizable, OverflowError):
                out.append(None)
        return out

    def run(self, vecs: list) -> list:
        return self.runner.run_some(vecs)

    def add(self, name, value, detail="", evidence=()) -> Feature:
        return self.report.add(Feature(name, value, detail, list(evidence)))

    def fact(self, name, default=None):
        return self.report.value(name, default)


def ulp(x: float, p: int, emin: int) -> float:
    """Spacing of a p-bit format with minimum normal exponent emin at |x|."""
    e = math.frexp(abs(x))[1] - 1 if x else emin
    return 2.0 ** (max(e, emin) - p + 1)


def pred(x: float, p: int, emin: int) -> float:
    """The largest p-bit number below the positive power of two x."""
    e = math.frexp(x)[1] - 1
    return x - 2.0 ** (max(e - 1, emin) - p + 1)


def num(x: float) -> str:
    """A probe value for humans: 2**k, m*2**k for short odd m, else repr."""
    if x == 0 or not math.isfinite(x):
        return repr(x)
    n, d = abs(x).as_integer_ratio()
    tz = (n & -n).bit_length() - 1
    m, k = n >> tz, tz - (d.bit_length() - 1)
    sign = "-" if x < 0 else ""
    if m == 1:
        return f"{sign}2**{k}"
    if -8 <= k <= 8 and m < 4096:
        return repr(x)
    if m < 1 << 12:
        return f"{sign}{m}*2**{k}"
    # near a power of two: 2**e - m'*2**k
    e = k + m.bit_length()
    rest = (1 << (e - k)) - m
    if 0 < rest < 1 << 12:
        return f"{sign}(2**{e} - {num(float(rest) * 2.0 ** k)})"
    return repr(x)


__all__ = ["Ctx", "Interval", "ulp", "pred", "num"]
