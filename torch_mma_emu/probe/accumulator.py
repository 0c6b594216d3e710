"""The accumulator's shape (seed 004 'Features of the accumulator'): exact products,
normalisation only at the end, carry bits, and the monotonicity it costs."""
from __future__ import annotations

import math
from fractions import Fraction

from .session import Ctx, num, pred


def products_exact(ctx: Ctx):
    """a = b = the largest significand (1.11..1 * 2**0): the exact product needs twice the
    input precision.  If it fits the output it must come out whole; otherwise c = -(its
    leading p bits) must leave exactly the rest (seed 004 'Accuracy of the dot products',
    seed 000 T_prod)."""
    fa, fb = ctx.fa, ctx.fb
    a = 2.0 - 2.0 ** -fa.man_bits if fa.man_bits else 1.0
    b = 2.0 - 2.0 ** -fb.man_bits if fb.man_bits else 1.0
    P = Fraction(a) * Fraction(b)
    p = ctx.p_out
    e = math.floor(math.log2(P))
    q = Fraction(2) ** (e - p + 1)
    hi = (P // q) * q
    v = ctx.runner.raw([a], [b], -float(hi) if hi != P else 0.0)
    o = ctx.run([v])[0]
    want = P - hi if hi != P else P
    ok = o == want
    how = ("product fits the output" if hi == P else
           "c = -(leading bits) leaves the low bits")
    if ok:
        return ctx.add("products_exact", True, f"({a!r})*({b!r}): {how}", [(v, o)])
    return ctx.add("products_exact", False,
                   f"({a!r})*({b!r}): {how}, got {o.value!r} instead of {float(want)!r}",
                   [(v, o)])


def normalize_at_end(ctx: Ctx):
    """c = pred(2**E) (p_eff bits) plus three products of c's ulp: kept unnormalised the
    sum reaches 2**E + 2 ulp(c); normalised after each addition the last two are rounded
    away at 2**E (seed 004 'Normalization in addition')."""
    W = ctx.fact("block_width")
    pe = ctx.fact("output_precision")
    if getattr(ctx, "nonfused", False):
        return ctx.add("normalize_at_end", False, "additions rounded (and normalised) one at "
                       "a time")
    if W is None or W.lo < 4 or pe is None:
        return ctx.add("normalize_at_end", None if W is None or pe is None else False,
                       "fused sums of fewer than 3 products" if W is not None and W.lo < 4
                       else "needs the fused length and output precision")
    p = pe.lo
    out = ctx.out
    lo_p, hi_p = ctx.prod_range(scaled=True)
    for E in range(min(out.emax - 1, hi_p + p), max(out.emin + 1, lo_p + p), -1):
        c = pred(2.0 ** E, p, out.emin)
        u = 2.0 ** E - c
        v = ctx.build([lambda: ctx.vec([u, u, u], c)])[0]
        if v is None:
            continue
        o = ctx.run([v])[0]
        if o == 2.0 ** E + 2 * u:
            return ctx.add("normalize_at_end", True,
                           "pred(2**E) + 3 ulp: the carry past 2**E keeps all three", [(v, o)])
        if o == 2.0 ** E:
            return ctx.add("normalize_at_end", False,
                           "pred(2**E) + 3 ulp = 2**E: renormalised after each addition",
                           [(v, o)])
        return ctx.add("normalize_at_end", None, f"unexpected {o.value!r}", [(v, o)])
    return ctx.add("normalize_at_end", None, "no realisable probe")


def carry_bits(ctx: Ctx):
    """c and all W products with the largest significands at one exponent: the exact sum
    needs floor(log2(sum)) + 1 integer bits, those beyond a product's 2 are carry bits
    the accumulator must have; one with fewer would wrap (seed 004 'Extra bits for carry
    out')."""
    W = ctx.fact("block_width")
    if W is None or W.lo < 2 or getattr(ctx, "nonfused", False):
        return ctx.add("carry_bits", None, "no fused sum")
    m = min(W.lo, 64)
    r = min(ctx.fa.man_bits, ctx.fb.man_bits, 3)
    s = 2.0 - 2.0 ** -r if r else 1.0
    c = 2.0 - 2.0 ** -3
    try:
        v = ctx.runner.raw([s] * m, [s] * m, c)
    except ValueError:
        return ctx.add("carry_bits", None, "no realisable probe")
    o = ctx.run([v])[0]
    exact = Fraction(c) + m * Fraction(s) ** 2
    bits = math.floor(math.log2(exact)) + 1       # integer bits of the exact sum
    if o == exact:
        return ctx.add("carry_bits", bits - 2,
                       f"c + {m} products of {s!r}**2 = {float(exact)!r} exactly", [(v, o)])
    return ctx.add("carry_bits", None, f"sum {float(exact)!r} came out as {o.value!r}",
                   [(v, o)])


def monotonicity(ctx: Ctx):
    """Seed 004 'Monotonicity of dot product', generalised: c1 = pred(2**E) < c2 = 2**E with
    the other W-1 terms U/2**(F+1).  Aligned to c1 they survive, aligned to c2 they are
    truncated: d(c1) > d(c2) although c1 < c2.  Reports the counterexample."""
    W = ctx.fact("block_width")
    F = ctx.fact("fused_precision")
    pe = ctx.fact("output_precision")
    if getattr(ctx, "nonfused", False) and ctx.fact("final_rounding") == "RNE":
        return ctx.add("monotonic", True, "additions rounded to nearest one at a time: "
                       "monotonic in every input")
    if W is not None and W.lo < 2:
        return ctx.add("monotonic", True, "a chain of correctly rounded FMAs: every step is "
                       "monotonic in its inputs")
    if W is None or F is None or pe is None:
        return ctx.add("monotonic", None, "needs the fused length, F and output precision")
    if F.hi is None and F.lo >= 41:
        return ctx.add("monotonic", True, "each addition (or the whole sum) rounds correctly: "
                       "rounding to nearest and exact sums are monotonic")
    if not F.exact:
        return ctx.add("monotonic", None, "F only bounded")
    p, Fv = pe.lo, F.lo
    m = min(W.lo, 64) - 1 if ctx.fact("c_joins") is not False else min(W.lo, 64)
    out = ctx.out
    lo_p, hi_p = ctx.prod_range(scaled=True)
    for E in range(min(out.emax - 1, hi_p + Fv + 1), max(out.emin + 1, lo_p + Fv + 1), -1):
        c1, c2 = pred(2.0 ** E, p, out.emin), 2.0 ** E
        eps = 2.0 ** (E - 1 - Fv)
        v1, v2 = ctx.build([lambda: ctx.vec([eps] * m, c1), lambda: ctx.vec([eps] * m, c2)])
        if v1 is None or v2 is None:
            continue
        o1, o2 = ctx.run([v1, v2])
        if o1.value > o2.value:
            return ctx.add("monotonic", False,
                           f"c = {num(c1)} gives {num(o1.value)} but the larger c = {num(c2)} "
                           f"gives {num(o2.value)} (with {m} products {num(eps)})",
                           [(v1, o1), (v2, o2)])
        return ctx.add("monotonic", True,
                       f"no violation: pred(2**E) and 2**E plus {m} products 2**(E-1-F)",
                       [(v1, o1), (v2, o2)])
    return ctx.add("monotonic", None, "no realisable probe")
