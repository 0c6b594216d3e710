"""``infer_spec``: seed 003's closed loop.  Probe the features, build the specs they allow,
check them bit for bit on the probe vectors plus random inputs of the three families, and
widen the neighbourhood (revise) until a model reproduces everything."""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from .. import elementary as elem
from ..spec import IEEE_NAN, Spec
from . import search, space
from .features import probe
from .report import FeatureReport, Interval
from .samples import Samples, from_runner_log, random_samples


class InferenceError(RuntimeError):
    """No spec of the model space reproduces the target."""


@dataclass
class Inference:
    spec: Spec
    report: FeatureReport
    candidates: list = field(default_factory=list)      # search.Candidate, best first
    rounds: list = field(default_factory=list)          # what each round of the loop did
    samples: int = 0
    seconds: float = 0.0

    def describe(self) -> str:
        lines = [f"inferred: {self.spec.describe()}"]
        lines += [f"  round {i + 1}: {r}" for i, r in enumerate(self.rounds)]
        if len(self.candidates) > 1:
            lines.append(f"  {len(self.candidates)} specs fit all {self.samples} checks; "
                         "the others:")
            lines += [f"    {c.describe()}" for c in self.candidates[1:8]]
        return "\n".join(lines)


def _interval_values(iv: Interval | None, lo=1, hi=40):
    if iv is None:
        return None
    if iv.exact:
        return [iv.lo]
    a = iv.lo if iv.lo is not None else lo
    b = iv.hi if iv.hi is not None else hi
    vals = list(range(max(a, lo), min(b, hi) + 1))
    return vals or None


def hints(rep: FeatureReport, iface, wide: bool = False) -> dict:
    """Restrictions of the model space implied by the features (``wide``: the
    neighbourhood of round 2: every dimension relaxed around the observed value)."""
    h: dict = {}
    out = iface.out.name
    W = rep.value("block_width")
    F = rep.value("fused_precision")
    nonfused = F is None and "one at a time" in rep["fused_precision"].detail
    exact = F is not None and F.hi is None and F.lo >= 41
    # op kind
    if W is not None and W.exact and W.lo == 1:
        ops = list(elem.names(c_joins=elem.C_ROUNDED, fused=True))   # FMA, E-FDPA
    elif nonfused or rep.value("subnormal_inputs") is False:
        ops = list(elem.names(fused=False))                          # FTZ-AddMul
    elif exact:
        ops = list(elem.names(c_joins=elem.C_ROUNDED, fused=True, fixed_L=None))
    elif iface.scaled:
        g = rep.value("product_groups")
        kind = "G" if isinstance(g, str) and g.startswith("G") else "" if g == "none" else None
        ops = list(elem.names(scaled=True, **({} if kind is None else {"groups": kind})))
    else:
        cj = rep.value("c_joins")
        after = list(elem.names(c_joins=elem.C_AFTER, groups="even/odd" if rep.value(
            "product_groups") == "even/odd" else ""))
        fused = list(elem.names(c_joins=elem.C_FUSED, scaled=False))
        ops = fused if cj is True else after if cj is False else fused + after
    if wide:
        ops = None
    h["ops"] = ops
    # fused length
    if W is None:
        h["Ls"] = None
    elif W.exact:
        h["Ls"] = [W.lo] if not wide else sorted({max(1, W.lo // 2), W.lo, W.lo * 2})
    else:
        h["Ls"] = [W.lo] if not wide else [W.lo, 2 * W.lo]
    # precision
    if F is not None and not exact:
        vals = _interval_values(F, lo=1, hi=40)
        if wide and vals is not None:
            vals = sorted(set(range(max(1, vals[0] - 3), min(40, vals[-1] + 3) + 1)))
        h["Fs"] = vals
    # final conversion
    fr = rep.value("final_rounding") or ""
    pe = rep.value("output_precision")
    rhos = set()
    if fr.startswith("RZ") or "RZ" in fr.split("/"):
        rz = {r.bits: r.name for r in elem.RHOS.values() if r.mode == "rz"}   # by bits
        rhos.add(rz.get(pe.lo, rz[max(rz)]) if pe is not None and pe.exact else rz[max(rz)])
        if pe is not None and not pe.exact:
            rhos |= set(rz.values())
    if "RNE" in fr.split("/") or fr.startswith("RNE"):
        rhos.add(elem.nearest_rho(out))
    h["rhos"] = None if wide or not rhos else sorted(rhos)
    h["zero"] = _zero_hints(rep, iface, wide)
    h["flush_Ls"] = None if wide else _flush_hint(rep, iface)
    if not wide and rep.value("exponent_floor") is not None:
        fl = rep.value("exponent_floor")
        h["floors"] = [fl.lo, None] if fl.exact else [None]
    # c added after the products (CDNA3)
    f2 = rep.value("c_add_precision")
    if f2 is not None and not wide:
        h["F2s"] = _interval_values(f2, lo=1, hi=40)
    ca = rep.value("c_alignment") or ""
    if not wide and ca:
        al = [m for m in ("rd", "rz") if m.upper() in ca.split(" ")[0].split("/")]
        h["aligns"] = al or None
    g = rep.value("product_groups")
    if isinstance(g, str) and g.startswith("G = ") and not wide:
        h["Gs"] = [int(g[4:])]
    nb = rep.value("nan_encoding")
    if nb is not None:
        h["nan_bits"] = [None if nb == IEEE_NAN[out] else nb]
    return h


# the zero corners' fields (docs/model.md section 6), their deciding feature and its reading
_DECIDED = {"zero_sign": ("zero_result_sign", {"-0": "keep", "+0": "plus"}),
            "cancelled_group": ("cancelled_group_scale", {True: "keep", False: "drop"}),
            "tr_renorm": ("tr_carry", {True: True, False: False})}
_BOTH = {"zero_sign": ("keep", "plus"), "cancelled_group": ("drop", "keep"),
         "tr_renorm": (False, True)}


def _zero_hints(rep: FeatureReport, iface, wide: bool) -> dict:
    """The zero corners' values to search: the probe's reading where it decides the field;
    where it cannot (the formats never reach the corner), the registry's choice for these
    formats (both choices act alike on every probe, so the cheap one suffices), else both.
    ``wide``: every choice, plus the floor seen as a zero-term exponent."""
    fl = rep.value("exponent_floor")
    if wide:
        zero = dict(_BOTH, zero_exp=space.known_zero_exps(iface))
        if fl is not None and fl.exact and fl.lo not in zero["zero_exp"]:
            zero["zero_exp"] = (*zero["zero_exp"], fl.lo)
        return zero
    zero = {}
    for f, (feat, read) in _DECIDED.items():
        v = rep.value(feat)
        zero[f] = (read[v],) if v in read else space.known_values(iface, f) or _BOTH[f]
    # zero_exp: a floor the exponent_floor probe sees (its vectors hold zero terms) is
    # emax_floor or zero_exp (or both: search.arith_key knows when they coincide)
    if fl is not None and fl.exact:
        zero["zero_exp"] = (None, fl.lo)
    else:
        # unseen (no cap down to fl.hi, or not observable): the registry's values there
        top = fl.hi if fl is not None and fl.hi is not None else None
        known = space.known_values(iface, "zero_exp") or space.known_zero_exps(iface)
        zero["zero_exp"] = tuple(z for z in known if z is None or top is None or z <= top) \
            or (None,)
    return zero


def _flush_hint(rep: FeatureReport, iface):
    """ftz_addmul's L (products between two flushes of the accumulator input, docs/model.md
    6.6): the acc_flush_interval probe's reading; where no input reaches it (fp16 products
    stay far above fp32's subnormals, so every L acts alike), the registry's L for these
    formats, else L = P (the fused width the probes see)."""
    iv = rep.value("acc_flush_interval")
    if iv is not None:
        return [iv.lo] if iv.exact else [L for L in space.POW2_L if L >= iv.lo]
    known = space.known_values(iface, "L", ops=elem.names(has_P=True))   # FTZ-AddMul
    W = rep.value("block_width")
    return list(known) if known else [W.lo] if W is not None and W.exact else None


def infer(target, in_format=None, out_dtype=None, *, scale_format=None, block_size=None,
          instruction=None, checks: int = 3000, seed: int = 0, order: bool = False,
          max_candidates: int = 200_000) -> Inference:
    """Probe ``target``, then find the specs reproducing every probe and ``checks`` random
    inputs (seed 003 Steps 3-4); see :func:`infer_spec`."""
    if isinstance(checks, bool) or not isinstance(checks, int) or checks < 1:
        raise ValueError(f"checks must be a positive int, got {checks!r}")
    t0 = time.perf_counter()
    ctx = probe(target, in_format, out_dtype, scale_format=scale_format,
                block_size=block_size, instruction=instruction, order=order)
    rep, iface = ctx.report, ctx.iface
    W = rep.value("block_width")
    if W is not None and W.lo > 256:
        raise InferenceError(f"{ctx.target.describe()}: fuses {W} products in one operation; "
                             "the model space stops at L = 256 (see features() for the rest)")
    w = W.lo if W is not None else 8
    ks = sorted({max(1, w), 2 * w + 1, 3, max(1, w // 2) + 1, 3 * w})
    samples = from_runner_log(iface, ctx.runner.log)
    rnd = random_samples(ctx.target, checks, ks, seed=seed)
    samples.batches += rnd.batches
    rounds, found = [], []
    # multi-pass layouts seen by the pass_structure probe (features), or every layout of
    # an instruction of the fused length (whole model space)
    seen = list(getattr(ctx, "pass_structures", []))
    every = space.structures(min(max(w, 1), 64))
    for name, h in (("features", hints(rep, iface)),
                    ("neighbourhood", hints(rep, iface, wide=True)),
                    ("whole model space", {"zero": {"zero_sign": ("keep", "plus")}})):
        cands, cut = [], False
        structs = every if name == "whole model space" else seen
        # the features' rounding describes the final c addition, not the passes: every rho
        multi = space.multipass_space(iface, structs, floors=h.get("floors"),
                                      nan_bits=h.get("nan_bits"),
                                      zero=h.get("zero")) if structs else ()
        for sp in itertools.chain(multi, space.space(iface, **h)):
            if len(cands) >= max_candidates:
                cut = True
                break
            cands.append(sp)
        cands = search.rank(cands)
        found = search.survivors(cands, samples)
        rounds.append(f"{name}: {len(cands)} candidate specs"
                      f"{f' (cut at max_candidates={max_candidates})' if cut else ''}, "
                      f"{len(found)} reproduce {len(samples)} probe and random results")
        if found:
            break
    if not found:
        raise InferenceError(f"{ctx.target.describe()}: no spec of the model space reproduces "
                             f"the probes ({'; '.join(rounds)}); see features() for what "
                             "the unit does")
    ranked = search.annotate(search.rank(found))
    best = ranked[0].spec
    name = f"inferred from {ctx.target.label}"
    best = best.replace(arch="custom", instruction=name[:120])
    return Inference(best, rep, ranked, rounds, len(samples), time.perf_counter() - t0)


def infer_spec(target, in_format=None, out_dtype=None, *, scale_format=None,
               block_size=None, instruction=None, checks: int = 3000, seed: int = 0) -> Spec:
    """A :class:`~torch_mma_emu.spec.Spec` for ``target`` built from its features.

    The features restrict the model space (op kind, L, F, F2, rho, floor, alignment
    rounding, NaN encoding, the zero corners' fields, FTZ-AddMul's flush interval); every
    spec left is checked bit for bit against the probe vectors and ``checks`` random
    inputs run on the target; when none fits, the loop widens
    to the neighbourhood and then the whole space (seed 003's revise step).  Among the specs
    that fit, the one closest to a known registry entry for these formats, then the
    simplest, is returned.  ``infer(...)`` returns the details (report, ties, rounds).

    >>> sp = infer_spec("sm90", "fp16")                    # doctest: +SKIP
    >>> sp.describe()                                      # doctest: +SKIP
    't_fdpa L=16 F=25 rho=rz_fp32'
    """
    return infer(target, in_format, out_dtype, scale_format=scale_format,
                 block_size=block_size, instruction=instruction, checks=checks,
                 seed=seed).spec


__all__ = ["infer", "infer_spec", "Inference", "InferenceError", "hints", "Samples"]
