"""Checking candidate models against samples, and ranking the ones that fit.

A candidate is a :class:`~torch_mma_emu.spec.Spec`; it *fits* when ``emulated_mm`` with it
reproduces every sample bit for bit.  Batches are tried small first, so most wrong
candidates are rejected after a few dozen samples.  Ranking prefers models close to a known
registry entry for the same formats, then simpler ones.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..spec import OPS, ZERO_OPS, Spec
from .samples import Samples
from .targets import output_codes

# fields that change arithmetic (arch, instruction, notes do not)
ARITH_FIELDS = ("op", "in_format", "in_format_b", "out_format", "L", "F", "F2", "rho", "P",
                "G", "scale_format", "block_size", "emax_floor", "align_round",
                "flush_inputs", "nan_bits", "passes", "pass_width", "c_join",
                "zero_sign", "zero_exp", "cancelled_group", "tr_renorm")
_OP_RANK = {op: i for i, op in enumerate(("fma", "e_fdpa", "t_fdpa", "st_fdpa", "gst_fdpa",
                                          "tr_fdpa", "gtr_fdpa", "ftz_addmul"))}


def op_rank(op: str) -> int:
    """How simple an elementary operation is taken to be (fma first; unknown ones last)."""
    return _OP_RANK.get(op, len(_OP_RANK) + 1)


def _floor_and_zero_exp(sp: Spec) -> tuple:
    """(emax_floor, zero_exp) in one form per arithmetic.  A zero_exp at or below the floor
    never raises e_max above it.  A T/ST/GST floor at or below the output's emin acts only
    on sums with a zero term, as a zero_exp does: without one, c != 0 (a subnormal counts
    at emin) already puts e_max at emin or above.  So Hopper's floor -133 with zero_exp
    -133 is sm120's zero_exp -133 alone (docs/model.md section 6.3)."""
    fl, ze = sp.emax_floor, sp.zero_exp
    if fl is None:
        return fl, ze
    if ze is not None and ze <= fl:
        ze = None
    if sp.op in ZERO_OPS and sp.passes == 1 and fl <= sp.fmt_out.emin:
        return None, fl if ze is None else ze
    return fl, ze


def arith_key(sp: Spec) -> tuple:
    """The arithmetic identity of a spec (NaN encoding normalised, a redundant floor or
    zero-term exponent dropped)."""
    vals = []
    fz = _floor_and_zero_exp(sp)
    for f in ARITH_FIELDS:
        v = getattr(sp, f)
        if f in ("emax_floor", "zero_exp"):
            v = fz[f == "zero_exp"]
        if f == "nan_bits":
            v = sp.nan_encoding
        if f == "in_format_b" and v is None:
            v = sp.in_format
        if f in ("F2", "align_round") and sp.op not in ("tr_fdpa", "gtr_fdpa"):
            v = None
        if f == "F" and sp.op in ("fma", "e_fdpa", "ftz_addmul"):
            v = None
        if f == "pass_width":
            v = sp.width if sp.passes > 1 else None
        vals.append(v)
    return tuple(vals)


def mismatches(spec: Spec, samples: Samples, stop_at: int = 1) -> int:
    """Number of samples the spec gets wrong (stops counting at ``stop_at``; 0: count all)."""
    from ..ops import emulated_mm
    bad = 0
    iface = samples.iface
    for b in samples.batches:
        D = emulated_mm(b.A, b.B, b.C, arch=spec, in_format=iface.in_format_arg,
                        out_dtype=iface.out_dtype, scale_a=b.scale_a, scale_b=b.scale_b)
        bad += int((output_codes(D.reshape(-1)) != b.D).sum())
        if stop_at and bad >= stop_at:
            return bad
    return bad


def survivors(candidates, samples: Samples, near: list | None = None,
              stop_after: int | None = None, stats: dict | None = None) -> list[Spec]:
    """The candidates reproducing every sample (duplicates by arithmetic removed).

    ``near``: when given, receives ``(mismatches in the first small batch, spec)`` of every
    rejected candidate (free: that batch is run in full anyway), for closest-miss reports.
    ``stop_after``: stop once that many fit (the samples are then far from deciding);
    ``stats`` receives ``checked`` (candidates run) and ``stopped`` (True when cut short)."""
    fast = samples.split()
    seen, out = set(), []
    if stats is not None:
        stats.update(checked=0, stopped=False)
    for sp in candidates:
        if stop_after is not None and len(out) >= stop_after:
            if stats is not None:
                stats["stopped"] = True
            break
        if stats is not None:
            stats["checked"] += 1
        k = arith_key(sp)
        if k in seen:
            continue
        seen.add(k)
        bad = mismatches(sp, fast)
        if bad == 0:
            out.append(sp)
        elif near is not None:
            near.append((bad, sp))
    return out


def closest_misses(near: list, samples: Samples, n: int = 5) -> list[tuple[Spec, int]]:
    """The ``n`` rejected candidates with the fewest mismatches over all samples (shortlist:
    the fewest in the first batch), as ``(spec, mismatches)``, fewest first."""
    short = sorted(near, key=lambda t: t[0])[:max(4 * n, 20)]
    full = [(sp, mismatches(sp, samples, stop_at=0)) for _, sp in short]
    return sorted(full, key=lambda t: t[1])[:n]


def distance(sp: Spec, ref: Spec) -> int:
    """Number of arithmetic fields in which two specs differ."""
    return sum(a != b for a, b in zip(arith_key(sp), arith_key(ref)))


def known_specs(sp_like: Spec) -> list[Spec]:
    """Registry entries with the same input, output and scale formats."""
    from ..registry import all_specs
    fb = sp_like.in_format_b or sp_like.in_format
    return [r for r in all_specs()
            if r.in_format == sp_like.in_format and (r.in_format_b or r.in_format) == fb
            and r.out_format == sp_like.out_format and r.scale_format == sp_like.scale_format
            and r.block_size == sp_like.block_size]


def closest_known(sp: Spec) -> tuple[int, Spec | None]:
    best = (len(ARITH_FIELDS) + 1, None)
    for r in known_specs(sp):
        d = distance(sp, r)
        if d < best[0]:
            best = (d, r)
    return best


def _known_fit(sp: Spec) -> tuple[int, int]:
    """(distance to the closest registry entry, minus the number of archs at that distance)."""
    ds = [distance(sp, r) for r in known_specs(sp)]
    if not ds:
        return len(ARITH_FIELDS) + 1, 0
    d = min(ds)
    return d, -ds.count(d)


def rank(specs) -> list[Spec]:
    """Closest to a known registry entry first (among equals, the arithmetic more registry
    rows share: a floor and a zero-term exponent at the same value look alike to the
    probes), then simpler (lower op rank, smaller L, no floor, F nearest 24)."""
    def key(sp):
        d, shared = _known_fit(sp)
        return (d, shared, sp.passes, sp.c_join != "first", _OP_RANK.get(sp.op, len(OPS)),
                sp.passes * sp.L, sp.width != sp.L, sp.emax_floor is not None,
                abs(sp.F - 24), sp.F2, sp.align_round != "rd")
    return sorted(specs, key=key)


@dataclass
class Candidate:
    spec: Spec
    distance: int
    known: Spec | None
    same_as: tuple = ()            # archs whose registry entry has this arithmetic

    def describe(self) -> str:
        if self.distance == 0 and self.same_as:
            near = " = registry " + ", ".join(self.same_as)
        elif self.known is not None:
            near = f" ({self.distance} field(s) from registry {self.known.arch})"
        else:
            near = ""
        return self.spec.describe() + near


def annotate(specs) -> list[Candidate]:
    out = []
    for sp in specs:
        d, k = closest_known(sp)
        same = tuple(dict.fromkeys(r.arch for r in known_specs(sp) if distance(sp, r) == 0))
        out.append(Candidate(sp, d, k, same))
    return out


__all__ = ["arith_key", "mismatches", "survivors", "closest_misses", "rank", "distance", "closest_known",
           "known_specs", "annotate", "Candidate"]
