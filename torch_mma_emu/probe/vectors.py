"""Probe vectors: exact values -> operands in the target's formats, and batched evaluation.

A probe is written as the *terms* of ``d = c + sum_k a_k b_k``: the value of each product
and of c.  :class:`Runner` splits every product into two factors representable in the input
formats (powers of two spread over both operands, normal numbers unless asked otherwise),
picks per-block scales for block-scaled formats, pads all vectors of a batch to one K and
evaluates them in one target call.  A probe whose terms cannot be realised in these formats
raises :class:`Unrealizable`; feature tests catch it and report "not observable".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache

import torch

from ..formats import Format
from .targets import MASK64, Target, encode, encode_scales, output_codes


class Unrealizable(ValueError):
    """The probe's values cannot be expressed in the target's formats."""


@dataclass
class Vec:
    """One dot-product-accumulate input with exact operand values."""

    a: list
    b: list
    c: float
    sa: list | None = None     # one scale per block (block-scaled formats)
    sb: list | None = None
    note: str = ""

    @property
    def K(self) -> int:
        return len(self.a)

    def exact(self) -> Fraction | None:
        """c + sum a_k b_k (times the block scales) exactly; None when not finite."""
        vals = [self.c] + [x for pair in zip(self.a, self.b) for x in pair]
        vals += list(self.sa or []) + list(self.sb or [])
        if any(math.isinf(v) or math.isnan(v) for v in vals):
            return None
        s = Fraction(self.c)
        for k, (x, y) in enumerate(zip(self.a, self.b)):
            t = Fraction(x) * Fraction(y)
            if self.sa is not None:
                blk = k // self._bs
                t *= Fraction(self.sa[blk]) * Fraction(self.sb[blk])
            s += t
        return s

    _bs: int = field(default=1, repr=False)


@dataclass(frozen=True)
class Out:
    code: int
    value: float

    @property
    def is_nan(self) -> bool:
        return math.isnan(self.value)

    def __eq__(self, other):  # compare with numbers by value, Outs by bits
        if isinstance(other, Out):
            return self.code == other.code
        if isinstance(other, (int, float, Fraction)):
            if isinstance(other, float) and math.isnan(other):
                return self.is_nan
            return not self.is_nan and Fraction(self.value) == Fraction(other) \
                if math.isfinite(self.value) else self.value == other
        return NotImplemented

    def __hash__(self):
        return hash(self.code)


# ------------------------------------------------------------------------------------
# exact representability
# ------------------------------------------------------------------------------------

def _low_exp(x: float) -> int:
    """Exponent of the lowest set bit of a nonzero finite float."""
    n, d = abs(x).as_integer_ratio()
    tz = (n & -n).bit_length() - 1
    return tz - (d.bit_length() - 1)


def max_finite(fmt: Format) -> float:
    """Largest finite value (the format table's decoder reads tf32/xf32 codes as fp32
    words, so container formats are computed here)."""
    if fmt.container_bits:
        return (2.0 - 2.0 ** -fmt.man_bits) * 2.0 ** fmt.emax
    return fmt.max_finite


def fits(fmt: Format, x: float, *, normal: bool = False) -> bool:
    """Is ``x`` exactly a value of ``fmt`` (``normal``: a normal number or zero)?"""
    if x == 0:
        return not (fmt.nan_style == "fnuz" and math.copysign(1.0, x) < 0)
    if math.isnan(x):
        return fmt.nan_style in ("ieee", "fn", "fnuz")
    if math.isinf(x):
        return fmt.nan_style == "ieee"
    if not fmt.signed and x < 0:
        return False
    ax = abs(x)
    if ax > max_finite(fmt):
        return False
    top = math.frexp(ax)[1] - 1                     # ax in [2**top, 2**(top+1))
    if normal and top < fmt.emin:
        return False
    return _low_exp(ax) >= max(top, fmt.emin) - fmt.man_bits


def _odd_split(n: int):
    """Ways to write the odd integer n as n_a * n_b (both odd), small ones first."""
    out = [(n, 1), (1, n)]
    d = 3
    while d * d <= n:
        if n % d == 0:
            out += [(d, n // d), (n // d, d)]
        d += 2
    return out


@lru_cache(maxsize=200_000)
def split_product(p: float, fa: Format, fb: Format, normal: bool = True):
    """(a, b) with a in fa, b in fb and a * b == p exactly, factors as balanced as possible;
    None if impossible.  ``normal``: both factors normal numbers (or zero)."""
    if p == 0:
        return (0.0, math.copysign(0.0, p)) if fits(fb, math.copysign(0.0, p)) else (0.0, 0.0)
    if not math.isfinite(p):
        return None
    sign = -1.0 if p < 0 else 1.0
    num, den = abs(p).as_integer_ratio()
    tz = (num & -num).bit_length() - 1
    n = num >> tz
    k = tz - (den.bit_length() - 1)               # |p| = n * 2**k, n odd
    best = None
    span = (max(fa.emax, -fa.emin) + max(fb.emax, -fb.emin) + fa.man_bits + fb.man_bits + 8)
    for na, nb in _odd_split(n):
        # a = na * 2**i, b = nb * 2**(k - i); start where their exponents balance
        la, lb = na.bit_length() - 1, nb.bit_length() - 1
        center = (k + lb - la) // 2
        for off in range(0, span + 1):
            hit = None
            for i in ((center + off, center - off) if off else (center,)):
                a = math.ldexp(float(na), i)
                b = sign * math.ldexp(float(nb), k - i)
                if fits(fa, a, normal=normal) and fits(fb, b, normal=normal):
                    hit = (a, b)
                    break
            if hit:
                cost = abs((math.frexp(hit[0])[1]) - (math.frexp(hit[1])[1]))
                if best is None or cost < best[0]:
                    best = (cost, hit)
                break
        if best is not None and best[0] <= 1:
            break
    return None if best is None else best[1]


@lru_cache(maxsize=4096)
def _exp_window(n: int, fa: Format, fb: Format, normal: bool):
    """(lo, hi): the exponents k for which n * 2**k is a product of two inputs."""
    lo_k = fa.emin + fb.emin - fa.man_bits - fb.man_bits - 2 * n.bit_length() - 2
    hi_k = fa.emax + fb.emax + 2
    ks = [k for k in range(lo_k, hi_k + 1)
          if split_product(math.ldexp(float(n), k), fa, fb, normal) is not None]
    return (min(ks), max(ks)) if ks else (None, None)


# ------------------------------------------------------------------------------------
# building and running probes
# ------------------------------------------------------------------------------------

class Runner:
    """Builds probe vectors for a target and evaluates batches of them."""

    def __init__(self, target: Target):
        self.target = target
        self.iface = target.iface
        self.fa, self.fb, self.out = self.iface.fmt_a, self.iface.fmt_b, self.iface.out
        self.log: list[tuple[Vec, Out]] = []   # every probe evaluated (evidence, samples)

    # -- construction -----------------------------------------------------------------
    def vec(self, products, c=0.0, *, K: int | None = None, normal: bool = True,
            scales=None, note: str = "") -> Vec:
        """A vector from product values (a list, or {position: value}); c in the output
        format.  ``scales``: {block: scale} to force block scales (scaled formats)."""
        if isinstance(products, dict):
            n = max(products) + 1 if products else 0
            K = max(K or 0, n)
            prods = [0.0] * K
            for pos, v in products.items():
                prods[pos] = float(v)
        else:
            prods = [float(v) for v in products]
            if K is not None:
                prods += [0.0] * (K - len(prods))
        c = float(c)
        if not fits(self.out, c):
            raise Unrealizable(f"c = {c!r} is not a {self.out.name} value")
        if self.iface.scaled:
            return self._scaled_vec(prods, c, normal, scales or {}, note)
        a, b = [], []
        for pos, p in enumerate(prods):
            if p == 0 and math.copysign(1.0, p) > 0:
                a.append(0.0)
                b.append(0.0)
                continue
            ab = split_product(p, self.fa, self.fb, normal)
            if ab is None:
                raise Unrealizable(f"product {p!r} at position {pos} is not a product of "
                                   f"two {'normal ' if normal else ''}{self.fa.name}"
                                   f"{'' if self.fa == self.fb else ' x ' + self.fb.name} "
                                   "values")
            a.append(ab[0])
            b.append(ab[1])
        return Vec(a, b, c, note=note)

    def raw(self, a, b, c, sa=None, sb=None, note="") -> Vec:
        """A vector from explicit operand values (special values, subnormal operands)."""
        v = Vec([float(x) for x in a], [float(x) for x in b], float(c), sa, sb, note=note)
        if self.iface.scaled:
            nblk = -(-len(a) // self.iface.block_size)
            v.sa = list(sa) if sa is not None else [1.0] * nblk
            v.sb = list(sb) if sb is not None else [1.0] * nblk
            v._bs = self.iface.block_size
        return v

    def _scale_exps(self):
        return range(-127, 128) if self.iface.scale_format == "ue8m0" else range(-9, 9)

    def _scaled_vec(self, prods, c, normal, forced, note) -> Vec:
        bs = self.iface.block_size
        nblk = max(1, -(-len(prods) // bs))
        a, b, sa, sb = [], [], [], []
        for blk in range(nblk):
            block = prods[blk * bs:(blk + 1) * bs]
            cands = [forced[blk]] if blk in forced else self._scale_candidates(block, normal)
            hit = None
            for s in cands:
                # the block's scale splits over scale_a and scale_b (each a power of two)
                sa_v, sb_v = self._split_scale(s)
                if sa_v is None:
                    continue
                parts = [split_product(p / s, self.fa, self.fb, normal) for p in block]
                if all(x is not None for x in parts) and \
                        all(x[0] * x[1] * s == p for x, p in zip(parts, block)):
                    hit = (sa_v, sb_v, parts)
                    break
            if hit is None:
                raise Unrealizable(f"the products {block} of block {blk} cannot share one "
                                   f"{self.iface.scale_format} block scale")
            sa.append(hit[0])
            sb.append(hit[1])
            for x, y in hit[2]:
                a.append(x)
                b.append(y)
        v = Vec(a, b, c, sa, sb, note=note)
        v._bs = bs
        return v

    def _scale_candidates(self, block, normal):
        """Powers of two that may serve as the block's scale, nearest to 1 first: the
        intersection of every nonzero product's feasible window."""
        lo, hi = min(self._scale_exps()), max(self._scale_exps())
        lo, hi = 2 * lo, 2 * hi             # scale_a * scale_b
        for p in block:
            if p == 0:
                continue
            num, den = abs(p).as_integer_ratio()
            tz = (num & -num).bit_length() - 1
            n, k = num >> tz, tz - (den.bit_length() - 1)
            wlo, whi = _exp_window(n, self.fa, self.fb, normal)
            if wlo is None:
                return []
            lo, hi = max(lo, k - whi), min(hi, k - wlo)
        if lo > hi:
            return []
        # put the magnitude into the scale (products near 1): GST-FDPA aligns group sums at
        # the scale exponents, so the terms' values should sit there too
        big = max((abs(p) for p in block), default=0.0)
        want = math.frexp(big)[1] - 1 if big else 0
        want = min(max(want, lo), hi)
        return [2.0 ** s for s in sorted(range(lo, hi + 1), key=lambda s: abs(s - want))][:8]

    def _split_scale(self, s: float):
        e = math.frexp(s)[1] - 1
        if math.frexp(s)[0] != 0.5:       # ue4m3 scales with a significand: all in scale_a
            return (s, 1.0) if fits_scale(self.iface.scale_format, s) else (None, None)
        lo, hi = min(self._scale_exps()), max(self._scale_exps())
        ea = max(lo, min(hi, e))
        eb = e - ea
        if not lo <= eb <= hi:
            return None, None
        return 2.0 ** ea, 2.0 ** eb

    # -- evaluation -----------------------------------------------------------------------
    def run(self, vecs: list[Vec]) -> list[Out]:
        if not vecs:
            return []
        S = len(vecs)
        K = max(1, max(v.K for v in vecs))
        av = torch.zeros(S, K, dtype=torch.float64)
        bv = torch.zeros(S, K, dtype=torch.float64)
        for s, v in enumerate(vecs):
            if v.K:
                av[s, :v.K] = torch.tensor(v.a, dtype=torch.float64)
                bv[s, :v.K] = torch.tensor(v.b, dtype=torch.float64)
        cv = torch.tensor([v.c for v in vecs], dtype=torch.float64)
        A = encode(av, self.fa).reshape(S, 1, K)
        B = encode(bv, self.fb).reshape(S, K, 1)
        C = cv.to(self.iface.out_dtype).reshape(S, 1, 1)
        sa = sb = None
        if self.iface.scaled:
            nblk = -(-K // self.iface.block_size)
            sav = torch.ones(S, nblk, dtype=torch.float64)
            sbv = torch.ones(S, nblk, dtype=torch.float64)
            for s, v in enumerate(vecs):
                if v.sa:
                    sav[s, :len(v.sa)] = torch.tensor(v.sa, dtype=torch.float64)
                    sbv[s, :len(v.sb)] = torch.tensor(v.sb, dtype=torch.float64)
            sa = encode_scales(sav, self.iface.scale_format).reshape(S, 1, nblk)
            sb = encode_scales(sbv, self.iface.scale_format).reshape(S, nblk, 1)
        D = self.target(A, B, C, sa, sb).reshape(-1)
        codes = output_codes(D).tolist()
        vals = D.to(torch.float64).tolist()
        outs = [Out(int(cd) & MASK64, float(x)) for cd, x in zip(codes, vals)]
        self.log += list(zip(vecs, outs))
        return outs

    def run_some(self, vecs: list) -> list:
        """Like :meth:`run` but passes ``None`` entries through."""
        real = [v for v in vecs if v is not None]
        res = iter(self.run(real))
        return [next(res) if v is not None else None for v in vecs]


def fits_scale(scale_format: str, s: float) -> bool:
    if s <= 0 or not math.isfinite(s):
        return False
    m, e = math.frexp(s)
    if scale_format == "ue8m0":
        return m == 0.5 and -127 <= e - 1 <= 127
    from ..formats import FORMATS
    return fits(FORMATS["fp8_e4m3"], s)
