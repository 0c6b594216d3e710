"""Multi-pass instructions (docs/model.md section 2.1): which k are summed in one fused pass,
and where c joins, read off probes.

*Which k share a pass.*  c = 0, s at k = 0, +B at i and -B at j (i, j >= 1), with
B = 1.5 * 2**e and s = 2**(e - p) half an output ulp of B (p the output precision; B's
last significand bit is even, so B + s and B - s both round back to B).  When i and j
lie in one fused pass, B - B cancels exactly inside it and s survives (a fused sum with
F >= p fraction bits keeps it); when they lie in different passes (or instructions), the
first of them rounds s away next to B and the result is 0 (or an ulp under RZ).  k = 0's
pass runs first, so "d == s" is exactly "i and j share a pass".  The classes of positions
1..N-1 are found a class at a time; the pass structures of the model space
(``space.structures``) whose classes agree are the answer.

*Where c joins.*  With passes: c = s, B at 0 and -B in another pass: c in the first pass
rounds away next to B (d = 0); c added last survives (d = s).  One pass: c = B, -B at 0,
s at 1: inside the fused sum s survives; added last it is rounded away first.

The tests are blind when F < p (s is lost inside a pass too) or when every product is
rounded on its own; the feature then says so instead of guessing.
"""
from __future__ import annotations

from .session import Ctx
from .space import Structure, structures
from .vectors import Unrealizable

N_POS = 64          # positions probed: instructions of up to 32 k show twice, 64 once
MAX_ROUNDS = 8      # classes found one batch at a time; more than this: no pass structure


def _operands(ctx: Ctx):
    out, p = ctx.out, ctx.p_out
    lo_p, hi_p = ctx.prod_range()
    for e in range(min(hi_p - 1, out.emax - 2), max(lo_p, out.emin) + p - 1, -1):
        B, s = 1.5 * 2.0 ** e, 2.0 ** (e - p)
        try:
            ctx.vec({0: s, 1: B, 2: -B})
            ctx.vec({0: B, 1: -B}, s)
            ctx.vec({0: -B, 1: s}, B)
        except (Unrealizable, OverflowError):
            continue
        return B, s
    return None


def _classes(ctx: Ctx, B: float, s: float, n: int):
    """Equivalence classes of 1..n-1 under "shares a pass" (None where unobserved) and
    the evidence; stops after MAX_ROUNDS classes."""
    todo = list(range(1, n))
    classes, evidence = [], []
    while todo and len(classes) < MAX_ROUNDS:
        r, rest = todo[0], todo[1:]
        vecs = ctx.build([lambda j=j: ctx.vec({0: s, r: B, j: -B}) for j in rest])
        outs = ctx.run(vecs)
        cls = [r] + [j for j, o in zip(rest, outs) if o is not None and o == s]
        evidence += [(v, o) for v, o in zip(vecs[:2], outs[:2]) if v is not None]
        classes.append(cls)
        todo = [j for j in rest if j not in cls]
    return classes, todo, evidence


def _predicted(st: Structure, k: int) -> tuple[int, int]:
    """(instruction, pass) of position k under a structure."""
    n = st.passes * st.L
    return k // n, ((k % n) // st.width) % st.passes


def _same(st: Structure, i: int, j: int) -> bool:
    """Does the probe with B at i and -B at j give s under this structure?  In the first
    instruction: i and j share a pass.  In a later one (s is then in the accumulator):
    they share a pass, or c (the accumulator) is added after the passes anyway."""
    (ii, pi), (ij, pj) = _predicted(st, i), _predicted(st, j)
    return ii == ij and (pi == pj or (ii > 0 and st.c_join == "final"))


def _consistent(classes, n: int) -> list[Structure]:
    """Structures (one-pass chains included) whose "d == s" relation on the classified
    positions is the observed one."""
    label = {k: i for i, cls in enumerate(classes) for k in cls}
    ks = sorted(label)
    cands = [Structure(1, L, L, "first") for L in (1, 2, 4, 8, 16, 32, 64)] + \
        [Structure(1, L, L, "final") for L in (2, 4, 8, 16, 32, 64)] + \
        structures(n, ("first", "final"), passes=(2, 4, 8, 16))
    out = []
    for st in cands:
        if all((label[i] == label[j]) == _same(st, i, j)
               for a, i in enumerate(ks) for j in ks[a + 1:]):
            out.append(st)
    return out


def _c_join(ctx: Ctx, st: Structure, B: float, s: float):
    if st.passes > 1:
        j = next(k for k in range(1, st.passes * st.L) if _predicted(st, k)[1] != 0)
        v = ctx.vec({0: B, j: -B}, s)
        o = ctx.run([v])[0]
        how = f"c = s, B at 0, -B at {j} (another pass)"
        if o == s:
            return "final", f"{how}: s survives, so c is added after the passes", (v, o)
        if o == 0:
            return "first", f"{how}: s is rounded away next to B in the first pass", (v, o)
        return None, f"{how}: unexpected {o.value!r}", (v, o)
    v = ctx.vec({0: -B, 1: s}, B)
    o = ctx.run([v])[0]
    how = "c = B, -B at 0, s at 1"
    if o == s:
        return "first", f"{how}: s survives, so c is in the fused sum", (v, o)
    return "final", f"{how}: s is lost, so c is added to the rounded sum", (v, o)


def pass_structure(ctx: Ctx, n: int = N_POS):
    """Feature ``pass_structure``: a :class:`Structure` description when the unit runs an
    instruction as several fused passes or adds c last; "none" for one fused operation per
    chunk with c inside; None when the probes cannot see it.  ``ctx.pass_structures``
    keeps every structure consistent with the probes (for infer's model space)."""
    ctx.pass_structures = []
    if ctx.iface.scaled:
        return ctx.add("pass_structure", None, "block-scaled units are searched as one pass")
    ops = _operands(ctx)
    if ops is None:
        return ctx.add("pass_structure", None, "no products B and B/2**p in these formats")
    B, s = ops
    classes, unclassified, ev = _classes(ctx, B, s, n)
    if all(len(c) == 1 for c in classes):
        return ctx.add("pass_structure", None,
                       "no two products cancel inside one fused sum next to s = B/2**p "
                       "(each product rounded on its own, or F < p): not observable", ev)
    cands = _consistent(classes, n)
    if not cands:
        return ctx.add("pass_structure", None,
                       f"classes {classes} match no pass layout of the model space "
                       "(not a multi-pass instruction of docs/model.md 2.1)", ev)
    st = cands[0]
    join, why, e2 = _c_join(ctx, st, B, s)
    ev.append(e2)
    if join is None:
        return ctx.add("pass_structure", None, why, ev)
    found = list(dict.fromkeys(Structure(c.passes, c.L, c.width, join) for c in cands
                               if (c.passes > 1) == (st.passes > 1) and
                               (c.c_join == join or c.passes * c.L >= n)))
    if not found:
        return ctx.add("pass_structure", None, f"the layout and where c joins disagree "
                       f"({why})", ev)
    ctx.pass_structures = [f for f in found if f.passes > 1 or f.c_join == "final"]
    st = found[0]
    pass0 = [0] + [k for k in range(1, st.passes * st.L) if _predicted(st, k) == (0, 0)]
    tail = (f"; {len(found)} layouts fit these probes" if len(found) > 1 else "")
    if not ctx.pass_structures:
        return ctx.add("pass_structure", "none",
                       f"one fused operation per {st.L} products with c inside ({why}){tail}",
                       ev)
    return ctx.add("pass_structure", st.describe(),
                   f"first pass sums k = {pass0[:12]}{' ...' if len(pass0) > 12 else ''}; "
                   f"{why}{tail}", ev)


__all__ = ["pass_structure", "N_POS"]
