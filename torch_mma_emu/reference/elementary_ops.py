"""The eight elementary operations of seed 003 (Table 1, Algorithms 1-11), on decoded inputs.

Each function takes the decoded chunk (``a``, ``b``: lists of :class:`~.values.Decoded` of
length ``spec.L``; ``c``: the decoded accumulator in the output format; for the scaled
operations the decoded scale codes covering the chunk, one per K-block) and returns the exact
result as an :class:`~.values.XVal` (already rounded to the output format).  The integer
encoding happens in :mod:`.gemm`.

The arithmetic follows docs/model.md section 4/5 literally; the comments name the algorithm
lines.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Sequence

from ..elementary import NAMES
from ..spec import Spec
from . import ieee
from .rounding import apply_rho, rd_f, rz_f
from .specials import TR_PRODUCT_OVERFLOW, special_result
from .values import POS_ZERO, Decoded, XVal, pow2, x_of

Term = tuple  # (signed significand: Fraction, exponent: int); value = s * 2**e


# --------------------------------------------------------------------------------------
# Shared pieces of the FDPA family
# --------------------------------------------------------------------------------------

def truncated_fused_sum(terms: Sequence[Term], F: int, emax_floor: int | None = None,
                        zero_exp: int | None = None, extra_exps: Sequence[int] = ()):
    """Step 2 of Algorithm 7: align at the maximum exponent and truncate to F fraction bits.

    Zero terms take no part in the maximum exponent (docs/model.md section 4) unless
    ``zero_exp`` gives them one (section 6); ``extra_exps`` take part without a value (GST
    groups that cancel, ``cancelled_group="keep"``).  Returns ``(S, e_max)`` with
    ``S = sum_k RZ_F(s_k * 2**(e_k - e_max))`` exactly, or ``(0, None)`` when every term is
    zero.  ``emax_floor`` (seed 002's -133) caps ``e_max`` from below.
    """
    live = [(s, e) for s, e in terms if s != 0]
    if not live:
        return Fraction(0), None
    exps = [e for _, e in live] + list(extra_exps)
    if zero_exp is not None and len(live) < len(terms):
        exps.append(zero_exp)
    e_max = max(exps)
    if emax_floor is not None:
        e_max = max(e_max, emax_floor)
    S = sum((rz_f(s * pow2(e - e_max), F) for s, e in live), Fraction(0))
    return S, e_max


def product_term(a: Decoded, b: Decoded, *scales: Decoded) -> Term:
    """Exact, unnormalised product (Algorithm 7 lines 3-4; Algorithm 8 adds scale exponents).

    ``s = SignedSig(a) * SignedSig(b)`` (in [0, 4) in magnitude), ``e = Exp(a) + Exp(b)``.
    E8M0 scales have significand 1, so they only add their exponents.
    """
    s = a.signed_sig * b.signed_sig
    e = a.exp + b.exp
    for sc in scales:
        s *= sc.sig
        e += sc.exp
    return (s, e)


def c_term(c: Decoded) -> Term:
    return (c.signed_sig, c.exp)


def finish(spec: Spec, S: Fraction, e: int | None) -> XVal:
    """Step 3 of Algorithm 7: ``rho(S * 2**e)``; an exact zero sum gives +0, and so does a
    sum that rounds to zero with ``zero_sign="plus"`` (docs/model.md section 6)."""
    if S == 0:
        return POS_ZERO
    r = apply_rho(spec.rho, S * pow2(e))
    if spec.zero_sign == "plus" and r.kind == "fin" and r.mag == 0:
        return POS_ZERO
    return r


def _round_align(spec: Spec):
    """RD of the CDNA3 alignment steps (or RZ for ``align_round="rz"``)."""
    return rd_f if spec.align_round == "rd" else rz_f


def _scale_index(spec: Spec, k: int) -> int:
    """Index, among the scales covering the chunk, of the K-block holding chunk element k."""
    return k // spec.block_size


# --------------------------------------------------------------------------------------
# Algorithms 3/4: FMA
# --------------------------------------------------------------------------------------

def op_fma(spec: Spec, a, b, c, scale_a=None, scale_b=None) -> XVal:
    """``d = RNE(a*b + c)`` in the output format (L = 1)."""
    acc = x_of(c)
    for ak, bk in zip(a, b):
        acc = ieee.fma(spec.out_format, x_of(ak), x_of(bk), acc)
    return acc


# --------------------------------------------------------------------------------------
# Algorithms 1/2: FTZ-AddMul (AMD CDNA2)
# --------------------------------------------------------------------------------------

def flush_input(d: Decoded) -> XVal:
    """FlushSubnormal: subnormals (and zeros of either sign) become +0 (docs/model.md 5)."""
    if d.cls in ("zero", "sub"):
        return POS_ZERO
    return x_of(d)


def op_ftz_addmul(spec: Spec, a, b, c, scale_a=None, scale_b=None) -> XVal:
    out = spec.out_format  # fp32
    acc = flush_input(c) if spec.flush_inputs else x_of(c)
    fin = flush_input if spec.flush_inputs else x_of
    P = spec.P
    for g in range(0, spec.L, P):
        p = [ieee.ftz(ieee.mul(out, fin(a[k]), fin(b[k]))) for k in range(g, g + P)]  # FTZ-Mul
        s = ieee.ftz(ieee.add(out, p[0], p[1]))                                        # FTZ-Add
        if P == 4:
            s2 = ieee.ftz(ieee.add(out, p[2], p[3]))
            s = ieee.ftz(ieee.add(out, s, s2))
        acc = ieee.ftz(ieee.add(out, acc, s))
    return acc


# --------------------------------------------------------------------------------------
# Algorithm 6: E-FDPA (AMD CDNA1)
# --------------------------------------------------------------------------------------

def op_e_fdpa(spec: Spec, a, b, c, scale_a=None, scale_b=None) -> XVal:
    sp = special_result(list(zip(a, b)), c)
    if sp is not None:
        return sp
    total = c.value + sum((ak.value * bk.value for ak, bk in zip(a, b)), Fraction(0))
    if total == 0:
        return POS_ZERO
    return apply_rho(spec.rho, total)


# --------------------------------------------------------------------------------------
# Algorithms 7/8: T-FDPA and ST-FDPA (NVIDIA)
# --------------------------------------------------------------------------------------

def op_t_fdpa(spec: Spec, a, b, c, scale_a=None, scale_b=None) -> XVal:
    sp = special_result(list(zip(a, b)), c)
    if sp is not None:
        return sp
    terms = [product_term(ak, bk) for ak, bk in zip(a, b)] + [c_term(c)]
    S, e_max = truncated_fused_sum(terms, spec.F, spec.emax_floor, spec.zero_exp)
    return finish(spec, S, e_max)


def op_st_fdpa(spec: Spec, a, b, c, scale_a, scale_b) -> XVal:
    sa = [scale_a[_scale_index(spec, k)] for k in range(spec.L)]
    sb = [scale_b[_scale_index(spec, k)] for k in range(spec.L)]
    factors = [(a[k], b[k], sa[k], sb[k]) for k in range(spec.L)]
    sp = special_result(factors, c, scales=list(scale_a) + list(scale_b))
    if sp is not None:
        return sp
    terms = [product_term(*f) for f in factors] + [c_term(c)]
    S, e_max = truncated_fused_sum(terms, spec.F, spec.emax_floor, spec.zero_exp)
    return finish(spec, S, e_max)


# --------------------------------------------------------------------------------------
# Algorithm 9: GST-FDPA (NVIDIA MXFP4 / NVFP4)
# --------------------------------------------------------------------------------------

def op_gst_fdpa(spec: Spec, a, b, c, scale_a, scale_b) -> XVal:
    L, G = spec.L, spec.G
    factors = [(a[k], b[k], scale_a[_scale_index(spec, k)], scale_b[_scale_index(spec, k)])
               for k in range(L)]
    sp = special_result(factors, c, scales=list(scale_a) + list(scale_b))
    if sp is not None:
        return sp
    terms, kept, zero_group = [], [], False
    for g in range(L // G):
        ks = range(g * G, (g + 1) * G)
        p_g = sum((a[k].value * b[k].value for k in ks), Fraction(0))   # exact group dot
        alpha = scale_a[_scale_index(spec, g * G)]
        beta = scale_b[_scale_index(spec, g * G)]
        s_g = p_g * alpha.signed_sig * beta.signed_sig                   # line 4
        e_g = alpha.exp + beta.exp                                       # line 5
        terms.append((s_g, e_g))
        # a group of products that cancel to exactly 0 under nonzero scales is no zero term
        # (docs/model.md section 6); it keeps its exponent with cancelled_group="keep"
        live = alpha.sig and beta.sig and any(a[k].value and b[k].value for k in ks)
        if live and p_g == 0 and spec.cancelled_group == "keep":
            kept.append(e_g)
        zero_group = zero_group or not live
    terms.append(c_term(c))
    if spec.zero_exp is not None and (zero_group or c.is_zero):
        kept.append(spec.zero_exp)
    S, e_max = truncated_fused_sum(terms, spec.F, spec.emax_floor, None, kept)
    return finish(spec, S, e_max)


# --------------------------------------------------------------------------------------
# Algorithm 10: TR-FDPA (AMD CDNA3)
# --------------------------------------------------------------------------------------

def _add_c_rounded(spec: Spec, T: Fraction, e_max: int | None, c: Decoded,
                   special_trunc: bool) -> XVal:
    """Steps 3-4 of Algorithm 10 (steps 4-5 of Algorithm 11).

    ``T`` is aligned at ``e_max`` (``None``: no nonzero product).  c = 0 does not take part in
    E.  ``special_trunc``: Algorithm 11 line 24 (``c' = 0`` when ``e_c < E - F - 1``).
    """
    rd = _round_align(spec)
    c_live = not c.is_zero
    if spec.tr_renorm:
        return _add_c_renorm(spec, T, e_max, c, special_trunc)
    exps = ([e_max] if e_max is not None else []) + ([c.exp] if c_live else [])
    if not exps:
        return POS_ZERO
    E = max(exps)
    T2 = rd(T * pow2(e_max - E), spec.F2) if e_max is not None else Fraction(0)
    c2 = Fraction(0)
    if c_live:
        c2 = rd(c.signed_sig * pow2(c.exp - E), spec.F)
        if special_trunc and c.exp < E - spec.F - 1:
            c2 = Fraction(0)
    S = T2 + c2
    if S == 0:
        return POS_ZERO
    return apply_rho(spec.rho, S * pow2(E))


def _add_c_renorm(spec: Spec, T: Fraction, e_max: int | None, c: Decoded,
                  special_trunc: bool) -> XVal:
    """``tr_renorm`` (docs/model.md section 6.5): c = 0 takes part in E at fp32's emin (-126);
    ``T' = RD_(F2+1)``; ``c'`` as above; ``S = T' + c'`` renormalised (its leading bit, not
    below emin) and rounded down to F2 fraction bits; then rho."""
    rd = _round_align(spec)
    emin = 1 - 127
    E = max(([e_max] if e_max is not None else []) + [emin if c.is_zero else c.exp])
    T2 = rd(T * pow2(e_max - E), spec.F2 + 1) if e_max is not None else Fraction(0)
    c2 = Fraction(0)
    if not c.is_zero:
        c2 = rd(c.signed_sig * pow2(c.exp - E), spec.F)
        if special_trunc and c.exp < E - spec.F - 1:
            c2 = Fraction(0)
    S = (T2 + c2) * pow2(E)
    if S == 0:
        return POS_ZERO
    top = max(math.floor(math.log2(abs(S))), emin)
    while pow2(top) > abs(S):          # log2 of a Fraction may be off by one: fix it exactly
        top -= 1
    while pow2(top + 1) <= abs(S):
        top += 1
    top = max(top, emin)
    return apply_rho(spec.rho, rd(S * pow2(-top), spec.F2) * pow2(top))


def op_tr_fdpa(spec: Spec, a, b, c, scale_a=None, scale_b=None) -> XVal:
    sp = special_result(list(zip(a, b)), c, overflow_at=TR_PRODUCT_OVERFLOW)
    if sp is not None:
        return sp
    terms = [product_term(ak, bk) for ak, bk in zip(a, b)]
    T, e_max = truncated_fused_sum(terms, spec.F, spec.emax_floor)     # lines 6-9
    return _add_c_rounded(spec, T, e_max, c, special_trunc=False)


# --------------------------------------------------------------------------------------
# Algorithm 11: GTR-FDPA (AMD CDNA3 FP8)
# --------------------------------------------------------------------------------------

def op_gtr_fdpa(spec: Spec, a, b, c, scale_a=None, scale_b=None) -> XVal:
    sp = special_result(list(zip(a, b)), c)
    if sp is not None:
        return sp
    rd = _round_align(spec)
    terms = [product_term(ak, bk) for ak, bk in zip(a, b)]
    T_even, e_even = truncated_fused_sum(terms[0::2], spec.F, spec.emax_floor)  # lines 6-11
    T_odd, e_odd = truncated_fused_sum(terms[1::2], spec.F, spec.emax_floor)
    groups = [(T_g, e_g) for T_g, e_g in ((T_even, e_even), (T_odd, e_odd)) if e_g is not None]
    if groups:
        e_max = max(e_g for _, e_g in groups)                                      # line 14
        T = sum((rd(T_g * pow2(e_g - e_max), spec.F) for T_g, e_g in groups), Fraction(0))
    else:
        e_max, T = None, Fraction(0)
    return _add_c_rounded(spec, T, e_max, c, special_trunc=True)


# the algorithm of each elementary operation, by its name (op_<name> above)
OPS = {name: globals()[f"op_{name}"] for name in NAMES}
