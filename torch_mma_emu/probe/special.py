"""Special values (seed 003 section 4.2): the NaN encoding, infinity rules, overflow of the
result and of single products, and the sign of an exact zero sum (the sign of a sum that
rounds to zero is probe/corners.py's)."""
from __future__ import annotations

import math

from .session import Ctx, num, ulp
from .vectors import fits, max_finite

INF, NAN = math.inf, math.nan


def nan_encoding(ctx: Ctx):
    """The bits of the NaN produced from NaN operands (c, and a where the format has NaN)."""
    vecs = [ctx.runner.raw([1.0], [1.0], NAN, note="c = NaN")]
    if fits(ctx.fa, NAN):
        vecs.append(ctx.runner.raw([NAN], [1.0], 0.0, note="a = NaN"))
    if fits(ctx.fa, INF):
        vecs.append(ctx.runner.raw([INF], [0.0], 0.0, note="a = inf, b = 0"))
    outs = ctx.run(vecs)
    codes = {o.code for o in outs if o.is_nan}
    if len(codes) == 1 and all(o.is_nan for o in outs):
        code = codes.pop()
        return ctx.add("nan_encoding", code,
                       ", ".join(v.note for v in vecs) + f" -> 0x{code:X}",
                       list(zip(vecs, outs)))
    return ctx.add("nan_encoding", None,
                   "NaN inputs gave " + ", ".join(f"0x{o.code:X}" for o in outs),
                   list(zip(vecs, outs)))


def special_values(ctx: Ctx):
    """inf * 0, inf - inf and inf + finite against IEEE 754."""
    checks = []
    r = ctx.runner
    if fits(ctx.fa, INF):
        checks += [("inf*0 -> NaN", r.raw([INF], [0.0], 0.0), "nan"),
                   ("inf*1 + 1 -> inf", r.raw([INF], [1.0], 1.0), INF),
                   ("inf*1 + (-inf) -> NaN", r.raw([INF], [1.0], -INF), "nan")]
    checks += [("c = -inf, finite products -> -inf", r.raw([1.0], [1.0], -INF), -INF)]
    outs = ctx.run([v for _, v, _ in checks])
    bad = []
    for (name, v, want), o in zip(checks, outs):
        ok = o.is_nan if want == "nan" else o.value == want
        if not ok:
            bad.append(f"{name.split(' ->')[0]} gave {o.value!r}")
    ev = [(v, o) for (_, v, _), o in zip(checks, outs)]
    if bad:
        return ctx.add("special_values", "non-IEEE", "; ".join(bad), ev)
    return ctx.add("special_values", "IEEE", "; ".join(n for n, _, _ in checks), ev)


def overflow(ctx: Ctx):
    """c = the largest finite output plus products worth one ulp of it: infinity, or the
    largest finite value (saturation)?"""
    out = ctx.out
    M = max_finite(out)
    u = ulp(M, ctx.p_out, out.emin)
    W = ctx.fact("block_width")
    m = 1 if W is None else max(1, min(W.lo, 64))
    for n in (1, m):
        v = ctx.build([lambda n=n: ctx.vec([u / n] * n, M)])[0]
        if v is None:
            continue
        o = ctx.run([v])[0]
        if o.value == INF:
            return ctx.add("overflow", "inf", f"max + ulp(max) -> inf", [(v, o)])
        if o.value == M:
            return ctx.add("overflow", "saturates", "max + ulp(max) -> max", [(v, o)])
        return ctx.add("overflow", None, f"max + ulp(max) -> {o.value!r}", [(v, o)])
    return ctx.add("overflow", None, f"products cannot reach ulp(max) = {num(u)}")


def product_overflow(ctx: Ctx):
    """Products of magnitude 2**130 and -2**130 plus 1 (seed 003 section 4.2: TR-FDPA
    products overflow at 2**128): exact wide products give 0 (or 1), overflowing products
    inf - inf = NaN, an accumulator in the output format overflows to inf."""
    big = 2.0 ** 130
    v = ctx.build([lambda: ctx.vec({0: big, 1: -big, 2: 1.0})])[0]
    if v is None:
        return ctx.add("product_overflow", None, "products of these formats stay below 2**128")
    o = ctx.run([v])[0]
    if o.is_nan:
        return ctx.add("product_overflow", True, "2**130 - 2**130 + 1 -> NaN (inf - inf)",
                       [(v, o)])
    if o.value in (0.0, 1.0):
        return ctx.add("product_overflow", False,
                       f"2**130 - 2**130 + 1 -> {o.value!r}: products kept exactly", [(v, o)])
    return ctx.add("product_overflow", f"accumulator overflows ({o.value!r})",
                   "2**130 - 2**130 + 1", [(v, o)])


def zero_sign(ctx: Ctx):
    vecs = [ctx.runner.raw([1.0], [1.0], -1.0), ctx.runner.raw([-1.0], [1.0], 1.0)]
    outs = ctx.run(vecs)
    signs = {("-0" if math.copysign(1, o.value) < 0 else "+0") for o in outs if o.value == 0}
    if len(signs) == 1 and all(o.value == 0 for o in outs):
        return ctx.add("zero_sign", signs.pop(), "1*1 + (-1) and (-1)*1 + 1",
                       list(zip(vecs, outs)))
    return ctx.add("zero_sign", None, f"{[o.value for o in outs]}", list(zip(vecs, outs)))

