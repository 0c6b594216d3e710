"""How precisely the fused sum adds: its fraction bits F and the rounding of aligned terms
(seed 003 section 3.1.3, seed 000 T_1_bit / T_rnd_dir), where c enters (fused, or added
afterwards with its own rounding F2 as on AMD CDNA3), the output precision and the final
rounding (seed 004), and the lower cap of the alignment exponent (seed 002).

All tests are written in terms of the formats' ranges and the output precision p; the
probe values are chosen per format, so the same code serves fp4 and fp64.
"""
from __future__ import annotations

import math
from fractions import Fraction
from functools import partial

from ..reference.rounding import INT_MODES, round_int
from .session import Ctx, Interval
from .vectors import Unrealizable

EXACT_BITS = 41          # beyond the Spec's largest F (40): call the sum exact

# rounding of x (in units of the last kept place) by each candidate mode
MODES = {m: partial(round_int, mode=m) for m in INT_MODES}


FRACTIONS = [Fraction(n, 4) for n in (2, 6, 1, 3, 5, 7)]   # 0.5, 1.5, 0.25, 0.75, 1.25, 1.75


def classify(observed: dict) -> list[str]:
    """Modes consistent with {x (Fraction, in units): observed result (in units)}."""
    return [m for m, f in MODES.items() if all(f(x) == y for x, y in observed.items())]


def _mode_text(modes: list[str]) -> str:
    return "/".join(m.upper() for m in modes) if modes else "none of RZ RD RU RA RNE RNA"


# ------------------------------------------------------------------------------------
# F: fraction bits of the fused sum
# ------------------------------------------------------------------------------------

def _pair(ctx: Ctx, W: int) -> int:
    """Position q for -U (U at 0) in the first fused block: for block-scaled formats a
    different scale group (the next block), else the next position."""
    bs = ctx.iface.block_size
    if ctx.iface.scaled:
        for q in (bs, bs // 2):
            if q < W:
                return q
    return 1


def _triples(ctx: Ctx, W: int):
    """Positions (U, -U, small) inside the first fused block; for block-scaled formats U and
    -U in different scale groups and the small term in a later block."""
    cands = []
    bs = ctx.iface.block_size
    if ctx.iface.scaled:
        cands += [(0, q, 2 * q) for q in (bs, bs // 2)]
    cands.append((0, 1, 2))
    return [t for t in cands if max(t) < W]


def _first_realizable(make, exponents):
    """``(e, make(e))`` for the first exponent whose vector is realisable, else
    ``(None, None)``."""
    for e in exponents:
        try:
            return e, make(e)
        except (Unrealizable, OverflowError):
            continue
    return None, None


def _sweep_cancel(ctx: Ctx, make, jmax=EXACT_BITS + 2, c_is_U=False, c_small=False):
    """make(U, eps) -> Vec with eps = U / 2**j, j = 1..jmax; for each j the largest U that
    keeps every value realisable and eps a normal output value.  Returns
    (lo, hi, evidence): eps survives for j <= lo and is lost from hi + 1 on (hi None: never
    lost within reach; lo None: nothing observed)."""
    out = ctx.out
    lo_p, hi_p = ctx.prod_range(scaled=True)
    vecs, js, units = [], [], []
    for j in range(1, jmax + 1):
        # U stays inside the output range (some units overflow single products beyond it)
        # and, block-scaled, within the scales' reach so its factors can be 1 x 1
        top = min(hi_p, out.emax) if not c_is_U else min(hi_p, out.emax - 1)
        if ctx.iface.scaled:
            top = min(top, ctx.scale_exps[1])
        bottom = max(lo_p + j, out.emin + j) if not c_small else \
            max(lo_p, out.emin - out.man_bits + j)
        eU, v = _first_realizable(lambda e: make(2.0 ** e, 2.0 ** (e - j)),
                                  range(top, bottom - 1, -1))
        if v is None:
            break
        vecs.append(v)
        js.append(j)
        units.append(2.0 ** (eU - j))
    if len(vecs) < 2:
        return None, None, []
    outs = ctx.run(vecs)
    kept = [o == e for o, e in zip(outs, units)]
    ev = list(zip(vecs, outs))[:2]
    last = next((j for j, k in zip(js, kept) if not k), None)
    if last is None:
        return js[-1], None, ev
    if any(kept[js.index(last):]):
        return None, "irregular", ev
    return last - 1, last - 1, ev


def fused_precision(ctx: Ctx):
    """F from seed 003's FusedSum(U, -U, eps) in several placements: products only, c = U,
    c = eps (reaches output subnormals: the widest span for narrow inputs), and c = U plus
    many small products (visible through the output's ulp).  A true fused sum gives one F
    whatever the placement; additions rounded one at a time (AMD CDNA2 FTZ-AddMul) lose eps
    in some placements and keep it in others."""
    W = ctx.fact("block_width")
    if W is None:
        return ctx.add("fused_precision", None, "needs the fused length")
    if W.lo < 2:
        return ctx.add("fused_precision", None,
                       "no fused sum: each product is rounded on its own (IEEE FMA chain)")
    runs = []
    trip = _triples(ctx, W.lo)
    if trip:
        t = trip[0]
        runs.append(("products U, -U, eps", _sweep_cancel(
            ctx, lambda U, e: ctx.vec({t[0]: U, t[1]: -U, t[2]: e}))))
        if not ctx.iface.scaled and W.lo >= 3:
            runs.append(("products U, eps, -U", _sweep_cancel(
                ctx, lambda U, e: ctx.vec({0: U, 1: e, 2: -U}))))
    q = _pair(ctx, W.lo)
    runs.append(("c = U, products -U, eps", _sweep_cancel(
        ctx, lambda U, e: ctx.vec({0: -U, q: e}, U), c_is_U=True)))
    sub = ctx.fact("subnormal_accumulation") is True

    def small_c(U, e):
        if not ctx.fits_out(e, normal=not sub):
            raise Unrealizable("c out of range")
        return ctx.vec({0: U, q: -U}, e)
    runs.append(("products U, -U, c = eps", _sweep_cancel(ctx, small_c, c_small=True)))
    runs = [(how, r) for how, r in runs if r[0] is not None or r[1] == "irregular"]
    if any(r[1] == "irregular" for _, r in runs):
        how, r = next((h, r) for h, r in runs if r[1] == "irregular")
        return ctx.add("fused_precision", None, f"{how}: the loss is not monotone in eps", r[2])
    finite = {(r[0], r[1]) for _, r in runs if r[1] is not None}
    exact = [(h, r) for h, r in runs if r[1] is None and r[0] >= EXACT_BITS]
    if len(finite) > 1 or (finite and exact):
        ctx.nonfused = True
        desc = "; ".join(f"{h}: " + (f"F = {r[0]}" if r[1] is not None else "exact")
                         for h, r in runs)
        return ctx.add("fused_precision", None, "not one fused sum: the loss depends on where "
                       f"the terms sit ({desc}) - additions rounded one at a time",
                       runs[0][1][2])
    if not finite:
        acc = _accumulated(ctx, W.lo)
        if acc is not None and acc[0] is not None and acc[1] not in (None, "irregular"):
            runs.append((f"c = U plus {acc[3]} products eps", acc))
            finite = {(acc[0], acc[1])}
    if finite:
        how, (lo, hi, ev, *_) = next((h, r) for h, r in runs if r[1] is not None)
        return ctx.add("fused_precision", Interval(lo, hi),
                       f"{how}: eps = U/2**{lo} kept, U/2**{lo + 1} lost", ev)
    if not runs:
        return ctx.add("fused_precision", None, "no realisable probe")
    how, (lo, hi, ev, *_) = max(runs, key=lambda hr: hr[1][0])
    if lo >= EXACT_BITS:
        return ctx.add("fused_precision", Interval(EXACT_BITS, None),
                       f"{how}: nothing lost down to eps = U/2**{lo} (an exact sum)", ev)
    span = _span(ctx)
    tail = f"; every F >= {span} gives the same results for these formats" if lo >= span else ""
    return ctx.add("fused_precision", Interval(lo, None),
                   f"{how}: eps kept down to U/2**{lo}, the formats reach no further{tail}", ev)


def _span(ctx: Ctx) -> int:
    """Largest alignment distance any input can create: the top of one term (c or a
    product) over the lowest bit of another.  F beyond it can never truncate anything."""
    out = ctx.out
    lo_s, hi_s = ctx.scale_exps
    sub = ctx.fact("subnormal_inputs") is not False
    p_low = ctx.pmin(normal=not sub) + lo_s - 1
    p_top = ctx.pmax() + hi_s + 2
    c_low = out.emin - out.man_bits
    c_top = out.emax + 1
    return max(c_top - p_low, p_top - c_low, p_top - p_low)


def _accumulated(ctx: Ctx, W: int):
    """c = U and m products of eps = U/2**j in the first block: kept terms add up to at
    least one ulp of U, lost ones leave U.  Visible while m * eps >= ulp(U)."""
    m = min(W, 64)
    out, p = ctx.out, ctx.p_out
    lo_p, hi_p = ctx.prod_range(scaled=True)
    e_eps = max(lo_p, out.emin)
    while e_eps <= hi_p:
        try:
            ctx.vec([2.0 ** e_eps] * m)
            break
        except Unrealizable:
            e_eps += 1
    else:
        return None
    eps = 2.0 ** e_eps
    jvis = p - 1 + int(math.log2(m))      # m * eps >= ulp(U) for j <= jvis
    vecs, js = [], []
    for j in range(1, min(jvis, EXACT_BITS + 1) + 1):
        if e_eps + j > out.emax - 1:
            break
        vecs.append(ctx.build([lambda j=j: ctx.vec([eps] * m, 2.0 ** (e_eps + j))])[0])
        js.append(j)
    if not vecs or vecs[0] is None:
        return None
    outs = ctx.run(vecs)
    kept = [o is not None and o != 2.0 ** (e_eps + j) for j, o in zip(js, outs)]
    ev = list(zip(vecs[:2], outs[:2]))
    last = next((j for j, k in zip(js, kept) if not k), None)
    if last is None:
        return js[-1], None, ev, m
    if any(kept[js.index(last):]):
        return None, "irregular", ev, m
    return last - 1, last - 1, ev, m


# ------------------------------------------------------------------------------------
# rounding of aligned terms, interleaved product groups
# ------------------------------------------------------------------------------------

def _top(ctx: Ctx) -> int:
    """Largest exponent for a big probe term: a product, inside the output range (and, for
    block-scaled formats, the scales' reach)."""
    lo_p, hi_p = ctx.prod_range(scaled=True)
    top = min(hi_p, ctx.out.emax - 1)
    if ctx.iface.scaled:
        top = min(top, ctx.scale_exps[1])
    return top


def _best_build(ctx: Ctx, choices, make_all):
    """The first choice whose vectors are all realisable, else the one realising most."""
    best = None
    for ch in choices:
        vecs = make_all(ch)
        n = sum(v is not None for v in vecs)
        if n == len(vecs):
            return ch, vecs
        if n and (best is None or n > best[0]):
            best = (n, ch, vecs)
    return (best[1], best[2]) if best else (None, None)


def _rounding_at(ctx: Ctx, make, unit_e_choices):
    """Observed {x: result/unit} for small terms x * unit, x in FRACTIONS and negatives."""
    xs = FRACTIONS + [-x for x in FRACTIONS]
    eU, vecs = _best_build(ctx, unit_e_choices,
                           lambda eU: ctx.build([(lambda x=x: make(eU, float(x))) for x in xs]))
    if vecs is None:
        return None, []
    outs = ctx.run(vecs)
    obs, ev = {}, []
    for x, v, o in zip(xs, vecs, outs):
        if o is None:
            continue
        y = Fraction(o.value) / Fraction(v.note_unit) if math.isfinite(o.value) else None
        obs[x] = int(y) if y is not None and y.denominator == 1 else None
        if len(ev) < 2:
            ev.append((v, o))
    return obs, ev


def align_rounding(ctx: Ctx):
    """Seed 003's rounding-mode test on the fused sum: U, -U and x * t with t the last kept
    place (2**-F relative to U), x = +-0.25 .. +-1.75.  Run with the small term next to U
    (positions 0, 1, 2) and interleaved (0, 2, 1): different answers reveal separately
    aligned groups of even and odd products (AMD CDNA3 FP8)."""
    F = ctx.fact("fused_precision")
    W = ctx.fact("block_width")
    if F is None or not F.exact or W is None or W.lo < 3:
        exact_sum = F is not None and F.hi is None and F.lo >= EXACT_BITS
        ctx.add("product_groups", None,
                "exact fused sum: nothing is aligned away, so groups cannot show" if exact_sum
                else "needs a fused sum of 3 or more products with a known F")
        return ctx.add("align_rounding", None,
                       "exact fused sum: nothing is rounded" if F is not None and F.hi is None
                       else "needs a known F and a fused sum of 3 or more products")
    Fv = F.lo
    lo_p, hi_p = ctx.prod_range(scaled=True)
    res = {}
    trip = _triples(ctx, W.lo)
    placements = [("adjacent", trip[0])] if trip else []
    if not ctx.iface.scaled:
        placements.append(("interleaved", (0, 2, 1)))
    for name, t in placements:
        if max(t) >= W.lo:
            continue

        def make(eU, x, t=t):
            unit = 2.0 ** (eU - Fv)
            v = ctx.vec({t[0]: 2.0 ** eU, t[1]: -2.0 ** eU, t[2]: x * unit})
            v.note_unit = unit
            return v
        obs, ev = _rounding_at(ctx, make, range(_top(ctx), lo_p + Fv, -1))
        if obs:
            res[name] = (classify({x: y for x, y in obs.items() if y is not None}), obs, ev)
    if not res:
        return ctx.add("align_rounding", None, "no realisable probe")
    adj = res.get("adjacent") or next(iter(res.values()))
    inter = res.get("interleaved")
    groups = "none"
    detail = ""
    if inter and inter[0] != adj[0]:
        groups = "even/odd"
        detail = (f"; products 0 and 2 align with rounding {_mode_text(adj[0])}, an odd product "
                  f"next to even ones with {_mode_text(inter[0])} (two groups, combined later)")
    ctx.add("product_groups", groups, "x*t at position 2 vs 1 next to U, -U" + detail,
            inter[2] if inter else [])
    return ctx.add("align_rounding", _mode_text(adj[0]),
                   "U + x*t, t = 2**-F relative to U: " +
                   ", ".join(f"{float(x):+g}->{y}" for x, y in sorted(adj[1].items())),
                   adj[2])


# ------------------------------------------------------------------------------------
# where c enters
# ------------------------------------------------------------------------------------

def c_joins(ctx: Ctx):
    """Is c one of the aligned terms of the fused sum (NVIDIA) or added to the rounded sum
    of the products afterwards (AMD CDNA3)?  c = U with products -U/2, -U/2 and
    eps = U/2**(F+1): aligned with c, eps is lost; the products alone align at U/2 and keep
    it.  Formats without that range: c = U plus m products U/2**(F+1) adding up to an ulp."""
    F = ctx.fact("fused_precision")
    W = ctx.fact("block_width")
    if W is None or W.lo < 2 or F is None:
        return ctx.add("c_joins", None, "needs a fused sum and its precision")
    if F.hi is None:
        return ctx.add("c_joins", True if F.lo >= EXACT_BITS else None,
                       "exact fused sum: c's place cannot change the result"
                       if F.lo >= EXACT_BITS else "F only bounded")
    Fv = F.lo
    out = ctx.out
    lo_p, hi_p = ctx.prod_range(scaled=True)
    g = getattr(ctx, "group_size", 1)        # block-scaled units: one term per group
    if 2 * g < W.lo:
        for eU in range(min(hi_p + 1, out.emax - 1), lo_p, -1):
            U = 2.0 ** eU
            eps = 2.0 ** (eU - 1 - Fv)
            v = ctx.build([lambda: ctx.vec({0: -U / 2, g: -U / 2, 2 * g: eps}, U)])[0]
            if v is None or not ctx.fits_out(eps):
                continue
            o = ctx.run([v])[0]
            if o == eps:
                return ctx.add("c_joins", False, "c = U, products -U/2, -U/2, U/2**(F+1): "
                               "the small product survives, so the products were summed "
                               "before c was aligned", [(v, o)])
            if o == 0:
                return ctx.add("c_joins", True, "c = U, products -U/2, -U/2, U/2**(F+1): the "
                               "small product is lost next to c", [(v, o)])
            return ctx.add("c_joins", None, f"unexpected {o.value!r}", [(v, o)])
    m = min(W.lo, 64)
    need = Fv + 2 - ctx.p_out              # m * eps >= ulp(U)
    if need > math.log2(m):
        return ctx.add("c_joins", None, "too few products per fused sum to see it")
    for e_eps in range(max(lo_p, out.emin), hi_p + 1):
        eU = e_eps + Fv + 1
        if eU > out.emax - 1:
            break
        U, eps = 2.0 ** eU, 2.0 ** e_eps
        v = ctx.build([lambda: ctx.vec([eps] * m, U)])[0]
        if v is None:
            continue
        o = ctx.run([v])[0]
        joined = o == U
        return ctx.add("c_joins", joined,
                       f"c = U plus {m} products U/2**(F+1): "
                       + ("lost next to c" if joined else "they add up before meeting c"),
                       [(v, o)])
    return ctx.add("c_joins", None, "no realisable probe")


def c_alignment(ctx: Ctx):
    """Rounding of c when it is aligned to larger products: products U, -U and
    c = x * t, t = 2**-F relative to U (RZ on NVIDIA, RD on AMD CDNA3)."""
    F = ctx.fact("fused_precision")
    W = ctx.fact("block_width")
    if F is None or not F.exact or W is None or W.lo < 2:
        return ctx.add("c_alignment", None, "needs a fused sum with known F")
    Fv = F.lo
    lo_p, hi_p = ctx.prod_range(scaled=True)

    q = _pair(ctx, W.lo)

    def make(eU, x):
        unit = 2.0 ** (eU - Fv)
        if not ctx.fits_out(x * unit):
            raise Unrealizable("c not normal")
        v = ctx.vec({0: 2.0 ** eU, q: -2.0 ** eU}, x * unit)
        v.note_unit = unit
        return v
    obs, ev = _rounding_at(ctx, make, range(_top(ctx), lo_p, -1))
    if not obs:
        return ctx.add("c_alignment", None, "c cannot be small enough next to the products")
    modes = classify({x: y for x, y in obs.items() if y is not None})
    note = ""
    if not modes:   # AMD CDNA3 FP8: c below half the last place is dropped, else RD
        modes = classify({x: y for x, y in obs.items() if y is not None and abs(x) >= 0.5})
        if modes and all(obs.get(x) == 0 for x in obs if abs(x) < 0.5):
            note = " (c below t/2 dropped)"
    return ctx.add("c_alignment", _mode_text(modes) + note,
                   "c = x*t next to products U, -U: " +
                   ", ".join(f"{float(x):+g}->{y}" for x, y in sorted(obs.items())), ev)


def c_add_precision(ctx: Ctx):
    """F2 of AMD CDNA3: the products' sum T is re-aligned to c's exponent and rounded to F2
    fraction bits before c is added.  c = U, products h = ulp(U)/2 and delta = h/2**j: while
    delta survives, U + h + delta rounds up (RNE); once cut, the tie rounds to even (U)."""
    if ctx.fact("c_joins") is not False:
        return ctx.add("c_add_precision", None, "c joins the fused sum (no second rounding)")
    F = ctx.fact("fused_precision")
    p = ctx.p_out
    lo_p, hi_p = ctx.prod_range(scaled=True)
    for eU in range(min(hi_p + p, ctx.out.emax - 1), lo_p + p, -1):
        U, h = 2.0 ** eU, 2.0 ** (eU - p)
        js = list(range(1, 41 - p + 2))
        vecs = ctx.build([(lambda j=j: ctx.vec({0: h, 1: h / 2.0 ** j}, U)) for j in js])
        if vecs[0] is None:
            continue
        outs = ctx.run(vecs)
        up = [o is not None and o == U + 2 * h for o in outs]
        if not up[0]:
            return ctx.add("c_add_precision", None, "final rounding is not to nearest: "
                           "the tie test cannot see F2", list(zip(vecs[:1], outs[:1])))
        last = next((j for j, u, v in zip(js, up, vecs) if v is not None and not u), None)
        ev = list(zip(vecs[:2], outs[:2]))
        if last is None:
            return ctx.add("c_add_precision", Interval(p + js[-1], None),
                           "delta kept down to the formats' limit", ev)
        F2 = p + last - 1
        if F is not None and F.exact and last - 1 >= F.lo:
            return ctx.add("c_add_precision", Interval(F2, None),
                           "limited by F, not by the re-alignment", ev)
        return ctx.add("c_add_precision", Interval(F2, F2),
                       f"U + h + h/2**j rounds up for j <= {last - 1}: F2 = p + {last - 1}", ev)
    return ctx.add("c_add_precision", None, "no realisable probe")


# ------------------------------------------------------------------------------------
# output precision and final rounding
# ------------------------------------------------------------------------------------

def output_precision(ctx: Ctx):
    """Bits the result keeps: a big term 2.25 * 2**E (two leading bits) and 2**(E-j); the
    small one shows while j <= p_eff - 2 (and the fused sum keeps it).  RZ-E8M13 keeps 14
    bits of an fp32 word.  The big term is a product, or c where products are too narrow."""
    F = ctx.fact("fused_precision")
    lo_p, hi_p = ctx.prod_range(scaled=True)
    out = ctx.out
    js = list(range(1, ctx.p_out + 3))
    variants = [
        # (name, builder(E, j), fused-sum limit on j): products 2.25*2**E, 2**(E-j)
        ("products", lambda E, j: ctx.vec({0: 2.25 * 2.0 ** E, 1: 2.0 ** (E - j)}),
         range(min(hi_p - 2, out.emax - 3), lo_p - 1, -1), 0),
        # c = 2.25*2**E has exponent E+1: the fused sum keeps j <= F - 1
        ("c", lambda E, j: ctx.vec({0: 2.0 ** (E - j)}, 2.25 * 2.0 ** E),
         None, 1),
    ]
    for name, make, Es, shift in variants:
        vecs = []
        for j in js:
            cands = Es if Es is not None else range(min(out.emax - 3, hi_p + j),
                                                    max(lo_p + j, out.emin) - 1, -1)
            E, v = _first_realizable(lambda e: make(e, j), cands)
            if v is None:
                break
            v.note_unit = (2.25 * 2.0 ** E, 2.0 ** (E - j))
            vecs.append(v)
        if len(vecs) < 3:
            continue
        outs = ctx.run(vecs)
        kept = [o == Fraction(v.note_unit[0]) + Fraction(v.note_unit[1])
                for v, o in zip(vecs, outs)]
        last = next((j for j, k in zip(js, kept) if not k), None)
        if last is None or last == 1:
            continue
        jmax = last - 1
        ev = list(zip(vecs[jmax - 1:jmax + 1], outs[jmax - 1:jmax + 1]))
        limit = None if F is None or not F.exact else F.lo - shift
        if limit is not None and jmax >= limit:
            return ctx.add("output_precision", Interval(min(jmax + 2, ctx.p_out), ctx.p_out),
                           f"2.25*2**E + 2**(E-j) ({name}) exact up to j = {jmax}, where the "
                           "fused sum stops", ev)
        p_eff = jmax + 2
        return ctx.add("output_precision", Interval(p_eff, p_eff),
                       f"2.25*2**E + 2**(E-j) ({name}) exact up to j = {jmax}: {p_eff} bits",
                       ev)
    return ctx.add("output_precision", None, "no realisable probe")


def final_rounding(ctx: Ctx):
    """The conversion of the exact/fused result to the output (seed 004 section 'Rounding
    modes'): products U and x * t (t the output ulp at U), x = +-0.25 .. +-1.75.  Only the x
    whose bits the fused sum keeps are used, so truncation inside the sum is not mistaken
    for the final rounding."""
    pe = ctx.fact("output_precision")
    F = ctx.fact("fused_precision")
    W = ctx.fact("block_width")
    if pe is None:
        return ctx.add("final_rounding", None, "needs the output precision")
    p = pe.lo if pe.exact else ctx.p_out
    lo_p, hi_p = ctx.prod_range(scaled=True)
    out = ctx.out
    two = W is not None and W.lo >= 2
    def xs_for(E):
        t = 2.0 ** (E - p + 1)
        keep = 2.0 ** (E - F.lo) if F is not None and F.exact and two else None
        return t, [x for sg in (1, -1) for x in (sg * y for y in FRACTIONS)
                   if keep is None or (abs(x) * Fraction(t)) % Fraction(keep) == 0]

    t0, xs0 = xs_for(0)
    if not any(x.denominator > 1 for x in xs0):
        return ctx.add("final_rounding", "RZ (truncation)",
                       "the fused sum keeps no bit below the output's last place", [])

    def make(E, x):
        t = 2.0 ** (E - p + 1)
        if two:
            try:
                return ctx.vec({0: math.copysign(2.0 ** E, x), 1: float(x) * t})
            except Unrealizable:
                pass
        # c carries U, one product the fraction (FMA chains, narrow input formats)
        return ctx.vec({0: float(x) * t}, math.copysign(2.0 ** E, x))

    E, vecs = _best_build(ctx, range(out.emax - 2, out.emin + p, -1),
                          lambda E: ctx.build([(lambda x=x: make(E, x)) for x in xs_for(E)[1]]))
    if vecs is not None:
        t, xs = xs_for(E)
        outs = ctx.run(vecs)
        obs = {}
        for x, o in zip(xs, outs):
            if o is None or not math.isfinite(o.value):
                continue
            y = (Fraction(o.value) - Fraction(math.copysign(2.0 ** E, x))) / Fraction(t)
            if y.denominator == 1:
                obs[x] = int(y)
        if obs:
            modes = classify(obs)
            return ctx.add("final_rounding", _mode_text(modes),
                           "U + x*ulp: " + ", ".join(f"{float(x):+g}->{y}"
                                                     for x, y in sorted(obs.items())),
                           [(v, o) for v, o in zip(vecs, outs) if v is not None][:2])
    return ctx.add("final_rounding", None, "no realisable probe")


# ------------------------------------------------------------------------------------
# lower cap of the alignment exponent
# ------------------------------------------------------------------------------------

def exponent_floor(ctx: Ctx):
    """Seed 002: on Hopper/Blackwell bf16/tf32 the alignment exponent is capped below at
    -133.  Terms around 2**e in the output's subnormal range plus a tiny 2**(e-F): the tiny
    one decides the result (RZ: 2**e - tiny -> pred(2**e); RNE: it breaks a tie upwards)
    while e >= the cap, and is truncated away below it."""
    F = ctx.fact("fused_precision")
    W = ctx.fact("block_width")
    fr = ctx.fact("final_rounding") or ""
    if F is None or not F.exact or W is None or W.lo < 2:
        return ctx.add("exponent_floor", None, "needs a fused sum with known F")
    Fv = F.lo
    out = ctx.out
    sub_q = out.emin - out.man_bits               # exponent of the smallest subnormal
    es = list(range(out.emin, sub_q + 1, -1))
    q = _pair(ctx, W.lo)
    if fr.startswith(("RZ", "RD")):
        def make(e):
            return ctx.vec({0: 2.0 ** e, q: -(2.0 ** (e - Fv))})

        def verdict(e, o):
            return "kept" if o == 2.0 ** e - 2.0 ** sub_q else "cut" if o == 2.0 ** e else None
    elif fr.startswith("RNE") and W.lo >= 3:
        def make(e):
            return ctx.vec({0: 2.0 ** e, 1: 2.0 ** (sub_q - 1), 2: 2.0 ** (e - Fv)}, K=3)

        def verdict(e, o):
            return "kept" if o == 2.0 ** e + 2.0 ** sub_q else "cut" if o == 2.0 ** e else None
    else:
        return ctx.add("exponent_floor", None, f"not probed for final rounding {fr or '?'}")
    vecs = ctx.build([(lambda e=e: make(e)) for e in es])
    if all(v is None for v in vecs):
        lo_p = ctx.prod_range(scaled=True)[0]
        if lo_p + Fv > out.emin:
            return ctx.add("exponent_floor", Interval(None, out.emin - 1),
                           f"products stay above 2**{lo_p}: terms never align below the "
                           "output's normal range, a cap there is invisible")
        return ctx.add("exponent_floor", None, "these formats cannot hold 2**e and 2**(e-F) in "
                       "one fused sum near the output's subnormal range: a cap is invisible")
    outs = ctx.run(vecs)
    seen = None
    for e, v, o in zip(es, vecs, outs):
        if o is None:
            continue
        r = verdict(e, o)
        if r == "cut":
            return ctx.add("exponent_floor", Interval(e + 1, e + 1),
                           f"2**(e-F) decides the result down to e = {e + 1}, is lost at "
                           f"e = {e}", [(v, o)])
        if r is None:
            return ctx.add("exponent_floor", None, f"unexpected {o.value!r} at e = {e}",
                           [(v, o)])
        seen = e
    if seen is None:
        return ctx.add("exponent_floor", None, "no realisable probe")
    return ctx.add("exponent_floor", Interval(None, seen),
                   f"no cap down to e = {seen} (the output's subnormal range)", [])
