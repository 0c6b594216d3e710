"""The zero corners' deciding probes (docs/model.md section 6): one probe vector per Spec
field whose two choices MMA-Sim and the older models disagree on, so ``infer`` reads the
field from the target instead of guessing it.

* ``zero_result_sign`` (``zero_sign``): the sign of a nonzero sum that rounds to zero.
* ``cancelled_group_scale`` (``cancelled_group``): a block of products cancelling to 0 under
  a large scale, beside a small term: does its scale exponent still set the alignment?
* ``tr_carry`` (``tr_renorm``): TR-FDPA's T' + c' carrying into the next binade.
* ``acc_flush_interval`` (ftz_addmul's ``L``): how many products apart FTZ-AddMul flushes
  its accumulator input (once per instruction, or per group of P).

``zero_exp`` is read by ``exponent_floor`` (its vectors hold zero terms); a floor probe
without zero terms cannot exist for the outputs it matters to (docs/probe.md).
"""
from __future__ import annotations

import math

from .session import Ctx, num
from .report import Interval
from .vectors import fits, max_finite


def zero_result_sign(ctx: Ctx):
    """One negative product a quarter of the output's smallest subnormal, c = 0: it rounds
    to zero (RNE and RZ); -0 keeps the sum's sign (zero_sign="keep"), +0 is "plus"."""
    out = ctx.out
    t = out.emin - out.man_bits - 2
    for ea in range(ctx.fa.emin, math.frexp(max_finite(ctx.fa))[1]):
        eb = t - ea
        if ctx.fb.emin <= eb < math.frexp(max_finite(ctx.fb))[1]:
            v = ctx.runner.raw([-(2.0 ** ea)], [2.0 ** eb], 0.0)
            o = ctx.run([v])[0]
            if o.value != 0:
                return ctx.add("zero_result_sign", None, f"-2**{t} -> {o.value!r}", [(v, o)])
            sign = "-0" if math.copysign(1, o.value) < 0 else "+0"
            return ctx.add("zero_result_sign", sign, f"-2**{ea} * 2**{eb} + 0 -> {sign}",
                           [(v, o)])
    return ctx.add("zero_result_sign", None, f"products of normal {ctx.fa.name} inputs cannot "
                   f"reach 2**{t}, below the {out.name} subnormals")


def cancelled_group_scale(ctx: Ctx):
    """c = 1, block 0 = 2**s - 2**s (its products cancel exactly under the scale 2**s),
    block 1 = a small term 2**m visible next to 1 in the output.  When block 0's scale
    exponent s still joins the alignment maximum (GST-FDPA cancelled_group="keep", and
    ST-FDPA, where every product's exponent does), the grid 2**(s-F) swallows 2**m: d = 1;
    dropped: d = 1 + 2**m."""
    if not ctx.iface.scaled:
        return ctx.add("cancelled_group_scale", None, "applies to block-scaled formats")
    W, F = ctx.fact("block_width"), ctx.fact("fused_precision")
    bs = ctx.iface.block_size
    if W is None or W.lo < 2 * bs or F is None or not F.exact:
        return ctx.add("cancelled_group_scale", None,
                       "needs two scale blocks in one fused sum of known F")
    m = -(ctx.p_out - 4)                       # 1 + 2**m is an output value
    s = min(ctx.scale_exps[1], F.lo + m + 4)   # 2**m below the grid 2**(s - F)
    if F.lo + m < 0 or s - F.lo <= m:
        return ctx.add("cancelled_group_scale", None,
                       f"F = {F.lo} and the scales cannot separate 1 + 2**{m} from 1")
    v = ctx.build([lambda: ctx.vec({0: 2.0 ** s, 1: -(2.0 ** s), bs: 2.0 ** m}, 1.0,
                                   K=2 * bs, scales={0: 2.0 ** s})])[0]
    if v is None:
        return ctx.add("cancelled_group_scale", None, "not realisable in these formats")
    o = ctx.run([v])[0]
    what = f"1 + (2**{s} - 2**{s}) + 2**{m} -> {num(o.value)}"
    if o == 1.0:
        return ctx.add("cancelled_group_scale", True, what + ": the cancelled block's scale "
                       "sets the alignment", [(v, o)])
    if o == 1.0 + 2.0 ** m:
        return ctx.add("cancelled_group_scale", False, what + ": the cancelled block is "
                       "dropped", [(v, o)])
    return ctx.add("cancelled_group_scale", None, what + " (unexpected)", [(v, o)])


def tr_carry(ctx: Ctx):
    """c added after the products (TR-FDPA): c = 2**(k+1) - 2**(k+1-p) (p output bits) and
    products 2**(k+2-p) + 2**(k-F2) carry T' + c' into the next binade, half an output ulp
    above 2**(k+1) plus 2**(k-F2).  Kept at F2 bits below E = k, the tie is broken upwards
    (d = 2**(k+1) + 2**(k+2-p)); renormalised to F2 bits below the new leading bit
    (tr_renorm, MMA-Sim 2.1) the 2**(k-F2) is gone and the tie rounds to even (2**(k+1))."""
    F2 = ctx.fact("c_add_precision")
    if ctx.fact("c_joins") is not False or F2 is None or not F2.exact:
        return ctx.add("tr_carry", None, "applies where c is added after the products with "
                       "known F2 (TR-FDPA)")
    p, f2 = ctx.p_out, F2.lo
    if f2 <= p:
        return ctx.add("tr_carry", None, f"F2 = {f2} holds no bit below the output's")

    def make(k):
        return ctx.vec({0: 2.0 ** (k + 2 - p), 1: 2.0 ** (k - f2)},
                       2.0 ** (k + 1) - 2.0 ** (k + 1 - p))
    for k in sorted(range(-64, 65), key=abs):
        v = ctx.build([lambda k=k: make(k)])[0]
        if v is not None:
            break
    else:
        return ctx.add("tr_carry", None, "not realisable in these formats")
    o = ctx.run([v])[0]
    top = 2.0 ** (k + 1)
    what = f"2**{k + 1} - 2**{k + 1 - p} + 2**{k + 2 - p} + 2**{k - f2} -> {num(o.value)}"
    if o == top:
        return ctx.add("tr_carry", True, what + ": T' + c' renormalised", [(v, o)])
    if o == top + 2.0 ** (k + 2 - p):
        return ctx.add("tr_carry", False, what + ": T' + c' kept at F2 bits below E",
                       [(v, o)])
    return ctx.add("tr_carry", None, what + " (unexpected)", [(v, o)])


def acc_flush_interval(ctx: Ctx):
    """Where FTZ-AddMul flushes its accumulator input (docs/model.md 6.6): c = -2**(e+1)
    (e: the output's emin) and one product 3*2**(e-1) at position k leave -2**(e-1), which
    the FTZ addition writes as -0; the products after k are (-1)*(+0) = -0, which keep an
    accumulator of -0 (-0 + -0) unless its input is flushed at a later boundary (+0 + -0 is
    +0); the +0 products before k leave c as it is.  Over k = 0..n-1 the result is -0
    exactly for the k of the last flush interval: their count is L (P: flushed per group).
    n must be a multiple of L (a zero-padded last instruction adds +0 groups: +0 at every
    k), so n = 64, then 96 and 256 when no k keeps -0."""
    name = "acc_flush_interval"
    if ctx.fact("subnormal_accumulation") is not False:
        return ctx.add(name, None, "applies where the accumulator flushes subnormals "
                       "(FTZ-AddMul)")
    e = ctx.out.emin
    neg0 = next(((x, y) for x, y in ((-1.0, 0.0), (0.0, -1.0))
                 if fits(ctx.fa, x) and fits(ctx.fb, y)), None)

    def make(k, n, c, p):
        v = ctx.vec({k: p}, c, K=n)
        for i in range(k + 1, n):
            v.a[i], v.b[i] = neg0
        return v
    for c, p in ((-(2.0 ** (e + 1)), 3 * 2.0 ** (e - 1)), (-1.5 * 2.0 ** e, 2.0 ** e)):
        if neg0 is not None and None not in ctx.build([lambda: make(0, 2, c, p)]):
            break
    else:
        return ctx.add(name, None, f"products of normal {ctx.fa.name} inputs cannot bring c "
                       f"into the {ctx.out.name} subnormals: no sum of c and products "
                       "underflows to a zero, so the flush interval acts on no input")
    for n in (64, 96, 256):
        vecs = [make(k, n, c, p) for k in range(n)]
        outs = ctx.run(vecs)
        what = f"c = {num(c)}, {num(p)} at k, (-1)*(+0) after k (K = {n})"
        if outs[-1].value != 0:
            return ctx.add(name, None, f"{what}: k = {n - 1} -> {num(outs[-1].value)}, not "
                           "a flushed zero", [(vecs[-1], outs[-1])])
        neg = [o.value == 0 and math.copysign(1, o.value) < 0 for o in outs]
        m = n - next((k + 1 for k in range(n - 1, -1, -1) if not neg[k]), 0)
        if m:
            break
    ev = [(vecs[k], outs[k]) for k in (n - m - 1, n - m) if 0 <= k < n]
    if m == 0 or any(neg[:n - m]) or any(o.value != 0 for o in outs):
        return ctx.add(name, None, f"{what}: signs {''.join('-' if x else '+' for x in neg)}"
                       " (unexpected)", ev or [(vecs[-1], outs[-1])])
    if m == n:
        return ctx.add(name, Interval(n, None), f"{what}: -0 at every k: the accumulator "
                       f"is not flushed within {n} products", ev)
    W = ctx.fact("block_width")
    per = " (per group)" if W is not None and W.exact and W.lo == m else ""
    return ctx.add(name, Interval(m, m), f"{what}: -0 for k >= {n - m}, +0 below: the "
                   f"accumulator input is flushed every {m} products{per}", ev)
