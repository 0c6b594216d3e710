"""Subnormal numbers (seed 000 T_si_no, T_ni_so, T_sa; seed 004 'Support for subnormal
numbers'), each written for any input/output format pair."""
from __future__ import annotations

import math

from .session import Ctx, num
from .vectors import fits, max_finite


def _pow2_normal(fmt):
    return [e for e in range(fmt.emin, math.frexp(max_finite(fmt))[1])]


def subnormal_inputs(ctx: Ctx):
    """a = a subnormal of A's format times a power of two b chosen so that the exact product
    is a normal output value; likewise with the roles swapped.  Flushed: d = 0."""
    out = ctx.out
    vecs = []
    for side, f_sub, f_other in (("a", ctx.fa, ctx.fb), ("b", ctx.fb, ctx.fa)):
        if f_sub.man_bits == 0:
            continue
        x = 2.0 ** (f_sub.emin - f_sub.man_bits) * 3 if f_sub.man_bits >= 2 else \
            2.0 ** (f_sub.emin - f_sub.man_bits)
        # b: the power of two bringing x*b closest to 1 while normal in the output
        best = None
        for e in _pow2_normal(f_other):
            prod = x * 2.0 ** e
            if prod != 0 and fits(out, prod, normal=True):
                if best is None or abs(math.log2(prod)) < abs(math.log2(best[1])):
                    best = (2.0 ** e, prod)
        if best is None:
            continue
        for sign in (1.0, -1.0):
            a, b = (sign * x, best[0]) if side == "a" else (best[0], sign * x)
            v = ctx.runner.raw([a], [b], 0.0, note=f"{side} subnormal")
            v.want = a * b
            vecs.append(v)
    if not vecs:
        return ctx.add("subnormal_inputs", None, "the input formats have no subnormals")
    outs = ctx.run(vecs)
    kept = [o == v.want for v, o in zip(vecs, outs)]
    flushed = [o.value == 0 for o in outs]
    ev = list(zip(vecs, outs))
    if all(kept):
        ctx.normal = False
        return ctx.add("subnormal_inputs", True,
                       f"{num(vecs[0].a[0])} * {num(vecs[0].b[0])} -> {num(outs[0].value)}", ev)
    if all(k or f for k, f in zip(kept, flushed)) and any(flushed):
        sides = sorted({v.note for v, f in zip(vecs, flushed) if f})
        return ctx.add("subnormal_inputs", False, "flushed to zero: " + ", ".join(sides), ev)
    return ctx.add("subnormal_inputs", None,
                   "unexpected: " + ", ".join(repr(o.value) for o in outs), ev)


def subnormal_outputs(ctx: Ctx):
    """Normal a, b whose product is an output subnormal (2**(emin_out - 1))."""
    out = ctx.out
    target = out.emin - 1
    for ea in _pow2_normal(ctx.fa):
        eb = target - ea
        if ctx.fb.emin <= eb < math.frexp(max_finite(ctx.fb))[1]:
            v = ctx.runner.raw([2.0 ** ea], [2.0 ** eb], 0.0)
            o = ctx.run([v])[0]
            want = 2.0 ** target
            if o == want:
                return ctx.add("subnormal_outputs", True,
                               f"2**{ea} * 2**{eb} -> 2**{target}", [(v, o)])
            if o.value == 0:
                return ctx.add("subnormal_outputs", False,
                               f"2**{ea} * 2**{eb} -> 0 (flushed)", [(v, o)])
            return ctx.add("subnormal_outputs", None, f"got {o.value!r}", [(v, o)])
    return ctx.add("subnormal_outputs", None,
                   f"products of normal {ctx.fa.name} inputs cannot reach the {out.name} "
                   "subnormal range")


def subnormal_accumulation(ctx: Ctx):
    """c = an output subnormal, all products zero: is it passed through (seed 000 T_sa)?"""
    out = ctx.out
    c = 1.5 * 2.0 ** (out.emin - 1)      # two bits: survives even 13-bit (E8M13) outputs
    v = ctx.runner.raw([0.0], [0.0], c)
    o = ctx.run([v])[0]
    if o == c:
        return ctx.add("subnormal_accumulation", True, f"c = {num(c)} passes through", [(v, o)])
    if o.value == 0:
        return ctx.add("subnormal_accumulation", False, f"c = {num(c)} flushed to 0", [(v, o)])
    return ctx.add("subnormal_accumulation", None, f"c = {num(c)} -> {num(o.value)}", [(v, o)])
