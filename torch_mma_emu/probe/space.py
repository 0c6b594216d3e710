"""The model space: every Spec the registry's type can express for one interface, as a
generator over optional restrictions (the hints that features or data provide)."""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from .. import elementary as elem
from ..spec import DEFAULTS, NVIDIA_NAN, Spec, pass_layout
from .targets import Interface

POW2_L = (1, 2, 4, 8, 16, 32, 64, 128, 256)
F_RANGE = tuple(range(8, 41))
KNOWN_FLOORS = (None, -133)
# the zero corners' fields (docs/model.md section 6): values searched when a caller names
# them in ``zero`` (field -> choices); the default searches only each field's default
ZERO_DEFAULTS = {f: DEFAULTS[f] for f in elem.ZERO_FIELDS}
ZERO_FIELD_OPS = {f: elem.with_field(f) for f in ZERO_DEFAULTS}   # the ops each applies to


def known_values(iface: Interface, field: str, ops=None) -> tuple | None:
    """The values of a zero-corner field (or of ``field`` on ``ops``) among the registry's
    entries for these formats (None when it has no entry for them): the cheap choice where
    a probe cannot decide."""
    from ..registry import all_specs
    fa, fb, out = iface.fmt_a.name, iface.fmt_b.name, iface.out.name
    ops = ops or ZERO_FIELD_OPS[field]
    same = [r for r in all_specs() if r.out_format == out and r.in_format == fa
            and (r.in_format_b or r.in_format) == fb and r.op in ops
            and (not iface.scaled or r.scale_format == iface.scale_format)]
    vals = {getattr(r, field) for r in same}
    return tuple(sorted(vals, key=repr)) if vals else None


def known_zero_exps(iface: Interface) -> tuple:
    """None and the zero-term exponents of the registry's entries for these formats (of any
    entry with this output format when none has these inputs)."""
    from ..registry import all_specs
    fa, fb, out = iface.fmt_a.name, iface.fmt_b.name, iface.out.name
    same_out = [r for r in all_specs() if r.out_format == out and r.zero_exp is not None]
    same = [r for r in same_out if r.in_format == fa and (r.in_format_b or r.in_format) == fb]
    vals = {r.zero_exp for r in (same or same_out)}
    return (None, *sorted(vals, reverse=True))


rhos_for = elem.rhos_for

# the operations searched as passes: every one that may be a pass (elementary.py) but
# TR-/GTR-FDPA, whose F2 and alignment rounding would multiply each structure's candidates
# 24-fold (no recorded instruction runs them in passes)
SEARCHED_AS_PASSES = elem.names(passes=True, has_F2=False)


@dataclass(frozen=True)
class Structure:
    """How one instruction splits into passes (Spec.passes / L / pass_width / c_join)."""

    passes: int
    L: int
    width: int
    c_join: str

    def describe(self) -> str:
        lay = pass_layout(self.passes, self.L, self.width)
        return (f"{self.passes} pass{'es' if self.passes > 1 else ''} of {self.L} ({lay}), "
                f"c {'added last' if self.c_join == 'final' else 'in the first pass'}")


def structures(kmax: int, c_joins=("first", "final"), passes=None) -> list[Structure]:
    """Every multi-pass structure of an instruction covering a power of two (or kmax) k
    up to kmax: passes a power of two >= 2 (or one pass with c added last), pass widths the
    powers of two dividing the pass length (width = L: contiguous blocks)."""
    sizes = sorted({n for n in POW2_L if n <= kmax} | {kmax})
    out = []
    for n in sizes:
        for P in (1, 2, 4, 8, 16):
            if n % P or (passes is not None and P not in passes):
                continue
            L = n // P
            if P > 1 and L > 64:
                continue
            widths = [w for w in POW2_L if w <= L and L % w == 0] if P > 1 else [L]
            for w in widths:
                for cj in c_joins:
                    if P == 1 and cj == "first":
                        continue          # the single fused chain: the base space
                    out.append(Structure(P, L, w, cj))
    return out


def multipass_space(iface: Interface, structs, *, ops=None, Fs=None, rhos=None,
                    floors=None, nan_bits=None, zero=None):
    """Yield the multi-pass Specs: each structure with every op/F/rho/floor/NaN choice."""
    fa, fb, out = iface.fmt_a.name, iface.fmt_b.name, iface.out.name
    if iface.scaled or max(iface.fmt_a.bits, iface.fmt_b.bits) > 32:
        return
    common = dict(in_format=fa, in_format_b=None if fb == fa else fb, out_format=out)
    nans = tuple(nan_bits) if nan_bits is not None else nan_choices(out)
    floors = tuple(floors) if floors is not None else KNOWN_FLOORS
    for op in [o for o in (ops or SEARCHED_AS_PASSES) if o in SEARCHED_AS_PASSES]:
        op_rhos = [r for r in rhos_for(out, op) if rhos is None or r in rhos]
        for st in structs:
            shape = dict(L=st.L, passes=st.passes, pass_width=st.width if st.passes > 1 else 0,
                         c_join=st.c_join)
            if not elem.OPS[op].has_F:
                for nb, r in product(nans, op_rhos):
                    yield from _make(op=op, rho=r, nan_bits=nb, **shape, **common)
                continue
            for F, nb, r, fl in product(tuple(Fs or F_RANGE), nans, op_rhos, floors):
                yield from _make(op=op, F=F, rho=r, emax_floor=fl, nan_bits=nb, **shape,
                                 _zero=zero, **common)


def nan_choices(out: str):
    return (None, NVIDIA_NAN[out])


def flush_lengths(P: int, flush_Ls=None) -> list[int]:
    """ftz_addmul's L for a group of P: the products between two flushes of the accumulator
    input, a multiple of P (None: P up to 64 by doubling; docs/model.md 6.6)."""
    if flush_Ls is None:
        return [P << i for i in range(8) if P << i <= 64]
    return sorted({L for L in flush_Ls if L >= P and L % P == 0})


def space(iface: Interface, *, ops=None, Ls=None, Fs=None, F2s=None, rhos=None, floors=None,
          aligns=None, nan_bits=None, Gs=None, zero=None, flush_Ls=None):
    """Yield the valid Specs; each keyword restricts one dimension (None: all values);
    ``zero`` maps zero-corner fields to the values to try (unnamed: the default only).
    ftz_addmul takes its group P from ``Ls`` (the fused width the probes see) and its L
    from ``flush_Ls``."""
    fa, fb, out = iface.fmt_a.name, iface.fmt_b.name, iface.out.name
    fb_arg = None if fb == fa else fb
    all_ops = elem.names(scaled=iface.scaled)     # simplest first (elementary.py's ranks)
    ops = [o for o in (ops or all_ops) if o in all_ops]
    nans = tuple(nan_bits) if nan_bits is not None else nan_choices(out)
    Ls = tuple(Ls or POW2_L)
    Fs = tuple(Fs or F_RANGE)
    floors = tuple(floors) if floors is not None else KNOWN_FLOORS
    aligns = tuple(aligns or ("rd", "rz"))
    common = dict(in_format=fa, in_format_b=fb_arg, out_format=out,
                  scale_format=iface.scale_format, block_size=iface.block_size)
    wide_in = max(iface.fmt_a.bits, iface.fmt_b.bits) > 32
    for op in ops:
        o = elem.OPS[op]
        # over 32 bits: only FMA (inputs in the output format); the others decode codes of
        # <= 32 bits or take fp32 values
        if wide_in and not o.same_in_out:
            continue
        op_rhos = [r for r in rhos_for(out, op) if rhos is None or r in rhos]
        if o.same_in_out:
            if fa == fb == out and out in ("fp32", "fp64"):
                for nb in nans:
                    yield from _make(op=op, L=o.fixed_L, rho=op_rhos[0] if op_rhos else None,
                                     nan_bits=nb, **common)
            continue
        if not o.has_F and not o.has_P:
            for L, nb, r in product(Ls, nans, op_rhos):
                yield from _make(op=op, L=L, rho=r, nan_bits=nb, **common)
            continue
        if o.has_P:
            if out != "fp32":           # AMD CDNA2: FTZ-Add/Mul accumulate in fp32 only
                continue
            for P, nb, r in product(Ls, nans, op_rhos):
                for L in (flush_lengths(P, flush_Ls) if P in o.P_choices else ()):
                    yield from _make(op=op, L=L, P=P, rho=r, flush_inputs=True, nan_bits=nb,
                                     **common)
            continue
        if o.has_F2:
            for L, F, nb, r, al in product(Ls, Fs, nans, op_rhos, aligns):
                for F2 in (F2s or range(F + 1, min(40, F + 12) + 1)):
                    yield from _make(op=op, L=L, F=F, F2=F2, rho=r, align_round=al,
                                     nan_bits=nb, _zero=zero, **common)
            continue
        groups = Gs or ((0,) if not o.has_G else (16, 8, 32, 4, 2))
        for L, F, nb, r, fl, G in product(Ls, Fs, nans, op_rhos, floors, groups):
            yield from _make(op=op, L=L, F=F, rho=r, emax_floor=fl, nan_bits=nb,
                             G=G if o.has_G else 0, _zero=zero, **common)


def _zero_choices(op: str, zero: dict | None):
    """The zero-corner field combinations that apply to ``op`` (the others stay default)."""
    zero = zero or {}
    dims = [(f, tuple(zero[f]) if op in ZERO_FIELD_OPS[f] and zero.get(f) else (d,))
            for f, d in ZERO_DEFAULTS.items()]
    for vals in product(*(v for _, v in dims)):
        yield {f: v for (f, _), v in zip(dims, vals) if v != ZERO_DEFAULTS[f]}


def _make(_zero=None, **kw):
    if kw.get("rho") is None:
        return
    for z in _zero_choices(kw["op"], _zero):
        try:
            yield Spec(arch="custom", **kw, **z)
        except ValueError:
            continue
