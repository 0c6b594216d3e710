"""How the products are grouped: the fused length (seed 000 T_blk_fma_width), scale groups of
block-scaled units, and the accumulation order through FPRev (seed 003 Step 2).

Fused length, two generalised tests (written in terms of the output precision p):

* *cancellation*: c = U, a_0 b_0 = -U, a_i b_i = eps (eps far below U's alignment).  While i
  lies in the fused sum that also holds -U, eps is aligned to U and lost; once it lies in a
  later operation, U - U has already cancelled exactly and eps survives.
* *half ulp* (seed 000 Algorithm 1): c = U, a_0 b_0 = a_i b_i = ulp(U)/2.  In one fused sum
  the two halves make one ulp; in separate operations each half is rounded away.

The first needs a wide product range, the second one extra bit in the fused sum; together
they cover every format.  The fused length W is the first position i whose outcome flips.
"""
from __future__ import annotations

from .session import Ctx, Interval
from .vectors import Unrealizable

MAX_POSITIONS = 257   # the Spec allows L up to 256


def _change_point(outcomes: list, joined: str):
    """(status, lo, hi) from per-position outcomes (index = position i, None unobserved).

    status "change": W in [lo, hi]; "joined": every observed i fused with 0 (W > last);
    "separate": every observed i apart (or the test is blind); None: nothing observed."""
    seen = [(i, o) for i, o in enumerate(outcomes) if o is not None and i > 0]
    if not seen:
        return None, None, None
    first = seen[0][1]
    last_same = seen[0][0]
    for i, o in seen:
        if o != first:
            if first != joined:
                return "irregular", None, None
            return "change", last_same + 1, i
        last_same = i
    return ("joined", last_same + 1, None) if first == joined else ("separate", None, None)


def block_width(ctx: Ctx, n: int = MAX_POSITIONS):
    out = ctx.out
    evidence = []
    results = {}
    # cancellation: U as c and as a product, eps the smallest product normal in the output
    lo_p, hi_p = ctx.prod_range(scaled=True)
    eU = min(hi_p, out.emax - 1)
    e_eps = max(lo_p, out.emin)
    if eU - e_eps >= 2:
        U, eps = 2.0 ** eU, 2.0 ** e_eps
        vecs = [None] + ctx.build([(lambda i=i: ctx.vec({0: -U, i: eps}, U)) for i in range(1, n)])
        outs = ctx.run(vecs)
        oc = [None if o is None else ("kept" if o == eps else "lost") for o in outs]
        results["cancel"] = _change_point(oc, "lost")
        evidence += [(v, o) for v, o in zip(vecs[1:4], outs[1:4]) if v is not None]
    # half ulp: h = ulp(U)/2 must be a product; U = 2**(e_h + p) a normal output value
    p = ctx.p_out
    for e_h in range(max(ctx.prod_range()[0], out.emin), out.emax - p + 1):
        U, h = 2.0 ** (e_h + p), 2.0 ** e_h
        try:
            ctx.vec({0: h, 1: h}, U)
        except Unrealizable:
            continue
        vecs = [None] + ctx.build([(lambda i=i: ctx.vec({0: h, i: h}, U)) for i in range(1, n)])
        outs = ctx.run(vecs)
        hc = []
        for o in outs:
            if o is None:
                hc.append(None)
            elif o == U + 2 * h:
                hc.append("joined")
            elif o == U:
                hc.append("separate")
            else:
                hc.append(f"other {o.value!r}")
        results["half_ulp"] = _change_point(hc, "joined")
        evidence += [(v, o) for v, o in zip(vecs[1:3], outs[1:3]) if v is not None]
        break
    changes = [(k, r) for k, r in results.items() if r[0] == "change"]
    if changes:
        lo = max(r[1] for _, r in changes)
        hi = min(r[2] for _, r in changes)
        if lo > hi:
            return ctx.add("block_width", None, f"the tests disagree: {results}", evidence)
        how = " and ".join(k.replace("_", " ") for k, _ in changes)
        return ctx.add("block_width", Interval(lo, hi), f"outcome flips at i = {hi} ({how})",
                       evidence)
    if any(r[0] == "joined" for r in results.values()):
        lo = max(r[1] for r in results.values() if r[0] == "joined")
        return ctx.add("block_width", Interval(lo, None),
                       f"all {lo} positions fuse with the first; larger widths look the same",
                       evidence)
    if len(results) == 2 and all(r[0] == "separate" for r in results.values()):
        return ctx.add("block_width", Interval(1, 1),
                       "every product is rounded into the accumulator on its own", evidence)
    return ctx.add("block_width", None, f"not observable with these formats ({results})",
                   evidence)


def scale_groups(ctx: Ctx):
    """Block-scaled units: products of one block summed exactly in groups of G before the
    truncated fused sum (seed 003 GST-FDPA) or each product aligned on its own (ST-FDPA).

    c = U cancels a first block scaled to U; a later block (scale 2**s) holds v = 1.5 t at j and
    -0.75 t at k, t the alignment unit: summed exactly first (same group) gives RZ(0.75 t) = 0,
    aligned separately RZ(1.5 t) + RZ(-0.75 t) = t."""
    if not ctx.iface.scaled:
        return None
    W = ctx.fact("block_width")
    F = ctx.fact("fused_precision")
    bs = ctx.iface.block_size
    if W is None or F is None or not F.exact:
        return ctx.add("product_groups", None, "needs the fused length and a known F")
    Fv = F.lo
    if W.lo < 2 * bs:
        return _groups_in_one_block(ctx, Fv, bs)
    out = ctx.out
    for eU in range(out.emax - 1, out.emin + Fv, -1):
        t = 2.0 ** (eU - Fv)
        U = 2.0 ** eU
        vecs = ctx.build([(lambda k=k: ctx.vec({0: -U, bs: 1.5 * t, bs + k: -0.75 * t}, U))
                          for k in range(1, bs)])
        if vecs[0] is None:
            continue
        outs = ctx.run(vecs)
        sep = [None if o is None else bool(o == t) for o in outs]
        obs = [(k + 1, s) for k, s in enumerate(sep) if s is not None]
        if not obs:
            continue
        G = next((k for k, s in obs if s), None)
        ev = list(zip(vecs[:2], outs[:2]))
        ctx.group_size = G or bs
        if G == 1:
            return ctx.add("product_groups", "none",
                           "each product aligned on its own (ST-FDPA)", ev)
        if G is None:   # a group never spans two scale blocks (G divides the block)
            return ctx.add("product_groups", f"G = {bs}",
                           f"products summed exactly over the whole scale block of {bs}", ev)
        return ctx.add("product_groups", f"G = {G}",
                       f"products summed exactly in groups of {G} before alignment (GST-FDPA)",
                       ev)
    return ctx.add("product_groups", None, "no realisable probe")


def _groups_in_one_block(ctx: Ctx, Fv: int, bs: int):
    """Only one scale block per fused sum: U, -U, eps = U/2**(F+1) at positions 0, 1, 2 of
    the block.  Summed exactly in a group (G >= 2) U and -U cancel first and eps survives;
    aligned one by one (ST-FDPA) eps falls below the fused sum's last bit."""
    lo_p, hi_p = ctx.prod_range(scaled=True)
    for eU in range(min(hi_p, ctx.out.emax), lo_p + Fv, -1):   # the largest realisable U
        eps = 2.0 ** (eU - Fv - 1)
        if not ctx.fits_out(eps):
            continue
        (v,) = ctx.build([lambda: ctx.vec({0: 2.0 ** eU, 1: -2.0 ** eU, 2: eps})])
        if v is not None:
            break
    else:
        return ctx.add("product_groups", None, "one scale block per fused sum and the "
                       f"formats cannot hold products 2**{Fv + 1} apart in it")
    (o,) = ctx.run([v])
    if o is None:
        return ctx.add("product_groups", None, "no result")
    ev = [(v, o)]
    if o == 0:
        ctx.group_size = 1
        return ctx.add("product_groups", "none", "U, -U, U/2**(F+1) in one block: the small "
                       "product is lost, so each product is aligned on its own (ST-FDPA)", ev)
    if o == eps:
        return ctx.add("product_groups", "G >= 2", "U, -U, U/2**(F+1) in one block: U and -U "
                       "cancel exactly before alignment (GST-FDPA)", ev)
    return ctx.add("product_groups", None, f"unexpected result {o}", ev)


def order(ctx: Ctx, k: int | None = None):
    """The summation tree over the K products and c (leaf K), revealed by FPRev."""
    try:
        from .order_adapter import reveal_order
    except ImportError as e:   # fprev not available: keep the rest of the report
        return ctx.add("order", None, f"torch_mma_emu.fprev unavailable: {e}")
    W = ctx.fact("block_width")
    if k is None:
        w = W.lo if W is not None else 8
        k = min(max(2 * w, 8), 64)
    try:
        tree = reveal_order(ctx, k)
    except Exception as e:  # ProbeRangeError and friends: the formats cannot swamp
        return ctx.add("order", None, f"{type(e).__name__}: {e}".split("\n")[0][:160])
    ctx.order_tree = tree
    return ctx.add("order", tree.describe(), f"FPRev over {k} products + c (leaf {k})")


__all__ = ["block_width", "scale_groups", "order"]
