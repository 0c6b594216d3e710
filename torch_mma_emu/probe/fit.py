"""``fit(samples, in_format, out_dtype)``: the specs of the model space that reproduce every
recorded sample, best first - for data recorded on a device one cannot access.

The search reads a few features off the data first (the lengths K, NaN outputs, how low the
alignment exponent goes, whether results are ever larger than the exact value), collapses
the dimensions the data provably cannot see, enumerates the rest with cheap early
rejection, and ranks what fits by closeness to known registry entries, then simplicity.
What the data cannot tell is said in ``result.undetermined`` and shows as ties.

Bounds (docs/probe.md, "When the samples cannot decide"): samples longer than
``MMA_EMU_FIT_MAX_K`` products are refused before any work (every candidate runs every
sample); once more models reproduce every sample than there are samples (and at least
``max_consistent``) the search stops - the samples cannot decide, more are needed - and
says so with a :class:`FitUndecidedWarning` instead of running the whole space.
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field

import torch

from .. import elementary as elem
from ..elementary import C_ROUNDED
from ..formats import INT_OF_SIZE, formats_of_dtype, out_format
from ..limits import limit
from ..spec import Spec
from . import search, space
from .samples import Samples, check_bit_patterns, from_arrays, load
from .targets import values_of


MAX_K_ENV = "MMA_EMU_FIT_MAX_K"
MAX_CONSISTENT_DEFAULT = 64


class FitUndecidedWarning(UserWarning):
    """The samples given to ``fit`` cannot decide between the models reproducing them."""


def max_k() -> int:
    """The longest sample ``fit`` takes: ``MMA_EMU_FIT_MAX_K`` (limits.py; 4096 products)."""
    return limit("fit_k")


@dataclass
class DataFeatures:
    samples: int
    ks: list
    nan_outputs: bool
    min_emax: int | None            # lowest alignment exponent any sample reaches
    exact_rn: bool                  # every d is the exact sum rounded to nearest
    c_zero: bool = False            # every c is zero: where c joins cannot show

    def describe(self) -> str:
        low = "all zero" if self.min_emax is None else f"2**{self.min_emax}"
        return (f"{self.samples} samples, K = {', '.join(map(str, self.ks))}; "
                f"{'some' if self.nan_outputs else 'no'} NaN outputs; lowest alignment "
                f"exponent {low}; "
                + ("every result is the exact sum rounded to nearest" if self.exact_rn
                   else "results are not all the exact sum rounded to nearest")
                + ("; every c is zero" if self.c_zero else ""))


def data_features(samples: Samples) -> DataFeatures:
    iface = samples.iface
    nan_out = False
    min_emax = None
    rn = True
    c_zero = True
    odt = iface.out_dtype
    for b in samples.batches:
        a = values_of(b.A[:, 0, :], iface.fmt_a)
        bb = values_of(b.B[:, :, 0], iface.fmt_b)
        c = b.C.reshape(-1).to(torch.float64)
        c_zero &= bool((c == 0).all())
        if b.scale_a is not None:
            continue
        d = _decode(b.D, odt)
        nan_out |= bool(torch.isnan(d).any())
        # exponent of the largest term: products' exponents add, c's is its own
        ea = torch.frexp(a)[1] - 1
        eb = torch.frexp(bb)[1] - 1
        ep = torch.where((a != 0) & (bb != 0), ea + eb, torch.full_like(ea, -10 ** 6))
        ec = torch.where(c != 0, torch.frexp(c)[1] - 1, torch.full_like(ea[:, 0], -10 ** 6))
        em = torch.maximum(ep.max(dim=1).values, ec)
        em = em[em > -10 ** 6]
        if em.numel():
            m = int(em.min())
            min_emax = m if min_emax is None else min(min_emax, m)
        for i in range(a.shape[0]):
            di = float(d[i])
            if not math.isfinite(di):
                continue
            row = [float(x) * float(y) for x, y in zip(a[i], bb[i])] + [float(c[i])]
            if not all(math.isfinite(x) for x in row):
                continue
            ex = math.fsum(row)
            if rn and torch.tensor(ex, dtype=torch.float64).to(odt).item() != di:
                rn = False
    return DataFeatures(len(samples), samples.ks, nan_out, min_emax, rn, c_zero)


def _decode(codes: torch.Tensor, dtype) -> torch.Tensor:
    return codes.to(INT_OF_SIZE[dtype.itemsize]).view(dtype).to(torch.float64)


@dataclass
class FitResult:
    candidates: list                      # search.Candidate, best first
    features: DataFeatures
    undetermined: list = field(default_factory=list)
    checked: int = 0
    seconds: float = 0.0
    source: str = ""
    filled: dict = field(default_factory=dict)   # arith key -> fields taken from the registry
    closest: list = field(default_factory=list)  # (Spec, mismatches) when nothing fits
    multipass_checked: int = 0                   # how many of ``checked`` are multi-pass
    consistent: int = 0          # distinct models reproducing every sample (before ``limit``)
    stopped_early: bool = False  # the search stopped at ``max_consistent`` fitting models
    space: int = 0               # candidate specs in the space searched
    estimate: object = None      # fit_estimate.Estimate: more samples needed (undecided)

    @property
    def undecided(self) -> bool:
        """More than one model reproduces every sample: the samples cannot decide."""
        return self.consistent > 1

    def verdict(self) -> str:
        """One line on whether the samples decide, '' when they do (or nothing fits)."""
        if not self.undecided:
            return ""
        n = f"at least {self.consistent}" if self.stopped_early else str(self.consistent)
        s = self.features.samples
        line = (f"undecided: {n} models reproduce all {s} sample{'s' if s != 1 else ''}, "
                "which cannot decide between them; more samples (that make them differ) "
                "are needed")
        if self.estimate is not None:
            line += ": " + self.estimate.describe()
        if self.stopped_early:
            line += (f"; the search stopped after {self.checked} of {self.space} candidates "
                     "(fit's max_consistent)")
        return line

    @property
    def specs(self) -> list[Spec]:
        return [c.spec for c in self.candidates]

    @property
    def best(self) -> Spec | None:
        return self.candidates[0].spec if self.candidates else None

    def describe(self, limit: int = 12) -> str:
        lines = [f"{self.source}: {self.features.describe()}",
                 f"{self.checked} candidate specs ({self.multipass_checked} multi-pass) "
                 f"checked in {self.seconds:.1f} s; "
                 f"{self.consistent} reproduce every sample"]
        if self.undecided:
            lines.append("  " + self.verdict())
        limit = max(0, limit)
        for i, c in enumerate(self.candidates[:limit]):
            f = self.filled.get(search.arith_key(c.spec))
            tail = f" [{', '.join(f)} from the registry: the data cannot tell]" if f else ""
            lines.append(f"  {i + 1}. {c.describe()}{tail}")
        if len(self.candidates) > limit:
            lines.append(f"  ... {len(self.candidates) - limit} more")
        if not self.candidates and self.closest:
            lines.append("  no spec of the model space fits; the closest:")
            for sp, bad in self.closest[:limit]:
                lines.append(f"    {sp.describe()}: {bad} of {self.features.samples} "
                             "samples differ")
        lines += [f"  the data cannot tell: {u}" for u in self.undetermined]
        return "\n".join(lines)




def _from_tensors(a, b, c, d, in_format, out_dtype):
    """Torch tensors of their natural dtypes (a, b: fp8/fp16/bf16/fp32; c, d: the output
    dtype) or integer tensors of fp32 bit patterns, as numpy arrays ``from_arrays`` takes;
    the formats default from the dtypes."""
    ts = dict(a=a, b=b, c=c, d=d)
    for k, t in ts.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"samples: {k} is a {type(t).__name__}, the others are torch "
                            "tensors; pass all four as tensors or all as arrays")
        if t.is_complex() or t.dtype == torch.bool:
            raise TypeError(f"samples: {k} has dtype {t.dtype}; allowed: fp8/fp16/bf16/fp32 "
                            "values (c, d: the output dtype) or uint32 fp32 bit patterns")
    if a.dtype != b.dtype:
        raise TypeError(f"samples: a is {a.dtype} but b is {b.dtype} (say in_format='fmtA,fmtB' "
                        "and pass values of one dtype, or bit patterns)")
    if in_format is None:
        own = formats_of_dtype(a.dtype) if a.dtype not in (torch.float32, torch.float64) else ()
        if a.is_floating_point() and len(own) == 1:
            in_format = own[0]
        else:
            raise ValueError(f"samples: say in_format= for a, b of dtype {a.dtype} "
                             "(float32 may hold fp32, tf32 or xf32 values)")
    if out_dtype is None and d.is_floating_point():
        try:
            out_dtype = out_format(d.dtype)
        except TypeError:
            raise TypeError(f"samples: d has dtype {d.dtype}; the output is fp16, fp32 or "
                            "fp64") from None

    def arr(t, name):
        t = t.detach().cpu()
        if t.is_floating_point():
            return t.to(torch.float64).numpy()      # exact for every input/output dtype
        x = t.to(torch.int64).numpy()               # fp32 bit patterns (or their int32 view)
        check_bit_patterns(x, name)
        return x & 0xFFFFFFFF
    return from_arrays(arr(a, "a"), arr(b, "b"), arr(c, "c"), arr(d, "d"), in_format,
                       out_dtype, source="tensors")


def _as_samples(samples, in_format, out_dtype) -> Samples:
    if isinstance(samples, Samples):
        return samples
    seq = None
    if isinstance(samples, dict):
        missing = [k for k in "abcd" if k not in samples]
        if missing:
            raise ValueError(f"the samples dict lacks {missing} (needs a, b, c, d)")
        seq = [samples[k] for k in "abcd"]
    elif isinstance(samples, (tuple, list)) and len(samples) == 4:
        seq = list(samples)
    if seq is not None and any(isinstance(x, torch.Tensor) for x in seq):
        return _from_tensors(*seq, in_format, out_dtype)
    if isinstance(samples, (str,)) or hasattr(samples, "__fspath__"):
        return load(samples, in_format, out_dtype)
    if isinstance(samples, dict):
        missing = [k for k in "abcd" if k not in samples]
        if missing:
            raise ValueError(f"the samples dict lacks {missing} (needs a, b, c, d)")
        return from_arrays(samples["a"], samples["b"], samples["c"], samples["d"], in_format,
                           out_dtype)
    if isinstance(samples, (tuple, list)) and len(samples) == 4:
        return from_arrays(*samples, in_format, out_dtype)
    raise TypeError("samples must be a probe Samples, a path to an .npz with arrays a, b, c, "
                    "d, a dict of those arrays, or a tuple (a, b, c, d)")


def fit(samples, in_format=None, out_dtype=None, *, ops=None, limit: int | None = None,
        passes: bool = True, max_consistent: int | None = MAX_CONSISTENT_DEFAULT,
        estimate: bool = True) -> FitResult:
    """The specs reproducing every sample ``(a, b, c, d)``, best first.

    ``samples``: a path to an ``.npz`` (arrays a (S, K), b (S, K), c (S,), d (S,) - uint32
    fp32 bit patterns or float values), a dict or tuple of those arrays or of torch tensors
    (a, b of their natural dtype - fp8, fp16, bf16, fp32 - c, d of the output dtype; or
    integer tensors of fp32 bit patterns), or :class:`~torch_mma_emu.probe.samples.Samples`.
    ``in_format``/``out_dtype`` name the types (read from index.json for files of
    tests/data/hwdata, from the dtypes for tensors).  ``ops`` restricts the op kinds
    searched.  ``passes``: also search multi-pass instructions (docs/model.md 2.1): every
    split of an instruction's k into passes (contiguous, alternating pairs, quads, ...),
    with c in the first pass or added last.  When nothing fits, ``result.closest`` holds
    the nearest candidates with their mismatch counts.

    ``result.consistent`` counts the models reproducing every sample; more than one
    (``result.undecided``) means the samples cannot decide between them, which
    ``describe()`` says.  The search stops once more models fit than there are samples and
    at least ``max_consistent`` (default 64; None: no bound) - a file of one or two samples
    leaves thousands, and running them all takes minutes - and then warns
    (:class:`FitUndecidedWarning`).  Samples longer than
    ``MMA_EMU_FIT_MAX_K`` products (default 4096) raise ``ValueError`` before any work.
    ``estimate`` (undecided results): how many more samples would decide
    (``result.estimate``, :mod:`.fit_estimate`: the best 64 models on 256 random inputs).
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or
                              limit < 1):
        raise ValueError(f"limit must be a positive int or None, got {limit!r}")
    if not isinstance(passes, bool):
        raise TypeError(f"passes must be True or False, got {passes!r}")
    if max_consistent is not None and (isinstance(max_consistent, bool) or
                                       not isinstance(max_consistent, int) or
                                       max_consistent < 2):
        raise ValueError(f"max_consistent must be an int >= 2 or None, got {max_consistent!r}")
    if ops is not None:
        ops = [ops] if isinstance(ops, str) else list(ops)
        known = elem.names()
        if not ops or any(o not in known for o in ops):
            raise ValueError(f"ops must name elementary operations among {known}, got {ops!r}")
    t0 = time.perf_counter()
    s = _as_samples(samples, in_format, out_dtype)
    iface = s.iface
    kmax = max(s.ks)
    if kmax > max_k():
        raise ValueError(f"fit: the samples hold K = {kmax} products each, over the limit of "
                         f"{max_k()} (every candidate model runs every sample, so time and "
                         f"memory grow with K); set {MAX_K_ENV}={kmax} to allow it")
    feats = data_features(s)
    undetermined = []
    Ls = [L for L in space.POW2_L if L < kmax] + [kmax]
    nan_bits = [None]
    if not feats.nan_outputs:
        undetermined.append("the NaN encoding (no NaN in the data)")
    floors = list(space.KNOWN_FLOORS)
    if feats.min_emax is None or all(f is None or feats.min_emax >= f
                                     for f in space.KNOWN_FLOORS):
        floors = [None]
        undetermined.append("a lower cap of the alignment exponent at -133: " + (
            "every sample is zero" if feats.min_emax is None else
            f"no sample aligns below 2**{feats.min_emax}"))
    nans = [None, *space.nan_choices(iface.out.name)[1:]] if feats.nan_outputs else nan_bits
    cands = list(space.space(iface, ops=ops, Ls=Ls, floors=floors, nan_bits=nans))
    n_multi = 0
    if passes:
        # every c is zero: c in the first pass or added last cannot differ (but for the
        # sign of a zero), so only the first is searched
        joins = ("first",) if feats.c_zero else ("first", "final")
        if feats.c_zero:
            undetermined.append("where c joins a multi-pass instruction (every c is zero)")
        structs = space.structures(kmax, joins)
        multi = list(space.multipass_space(iface, structs, ops=ops, floors=floors,
                                           nan_bits=nans))
        n_multi = len(multi)
        cands += multi
    # likely models first: correctly rounded data points at exact sums (E-FDPA, FMA);
    # single fused operations before multi-pass ones
    def prior(sp):
        # the correctly rounded operations: c and the products' exact sum rounded once
        exact = sp.elementary.c_joins == C_ROUNDED and sp.elementary.fused
        return (sp.multipass, 0 if exact == feats.exact_rn else 1, sp.elementary.rank)
    cands.sort(key=prior)
    near = []
    stats: dict = {}
    # more models fitting than there are samples (and at least max_consistent): the
    # samples are far too few to decide, and running the rest would only add to the count
    stop = None if max_consistent is None else max(max_consistent, len(s))
    found = search.survivors(cands, s, near, stop_after=stop, stats=stats)
    if any(sp.L == kmax and sp.elementary.fixed_L is None and not sp.multipass for sp in found):
        undetermined.insert(0, f"the fused length beyond K: L = {kmax} stands for every "
                            f"L >= {kmax} (each sample is one fused operation then)")
    filled = {}
    done = []
    for sp in found:
        sp2, fields = _complete(sp, feats, kmax, s)
        done.append(sp2)
        filled.setdefault(search.arith_key(sp2), fields)
    ranked = search.annotate(search.rank(_dedupe(done)))
    undetermined += _ties([c.spec for c in ranked])
    closest = [] if ranked else search.closest_misses(near, s)
    consistent = len(ranked)
    est = None
    if estimate and consistent > 1:
        from .fit_estimate import samples_needed
        est = samples_needed([c.spec for c in ranked], s)
    if limit:
        ranked = ranked[:limit]
    res = FitResult(ranked, feats, undetermined, stats["checked"], time.perf_counter() - t0,
                    s.source, filled, closest,
                    max(0, n_multi - (len(cands) - stats["checked"])), consistent, stats["stopped"],
                    len(cands), est)
    if res.stopped_early:
        warnings.warn(FitUndecidedWarning(f"fit: {s.source}: {res.verdict()}"), stacklevel=2)
    return res


def _ties(specs) -> list[str]:
    """What differs among the specs that fit: the dimensions the data leaves open."""
    if len(specs) < 2:
        return []
    out = []
    Fs = sorted({sp.F for sp in specs if sp.elementary.has_F})
    if len(Fs) > 1:
        run = Fs == list(range(Fs[0], Fs[-1] + 1))
        out.append("F: " + (f"{Fs[0]}..{Fs[-1]}" if run else ", ".join(map(str, Fs)))
                   + " all fit")
    shapes = list(dict.fromkeys(
        (f"{sp.passes} x {sp.L} ({sp.pass_layout()})" if sp.passes > 1 else f"one op of L={sp.L}")
        + (", c last" if sp.c_join == "final" else "") for sp in specs))
    if len(shapes) > 1:
        more = f" and {len(shapes) - 6} more" if len(shapes) > 6 else ""
        out.append(f"the instruction's shape: {len(shapes)} fit ({'; '.join(shapes[:6])}{more})")
    rhos = sorted({sp.rho for sp in specs})
    if len(rhos) > 1:
        out.append(f"the final rounding: {', '.join(rhos)} all fit")
    ops = list(dict.fromkeys(sp.op for sp in specs))
    if len(ops) > 1:
        out.append(f"the operation: {', '.join(ops)} all fit")
    return out


def _complete(sp: Spec, feats: DataFeatures, kmax: int, samples: Samples) -> tuple[Spec, list]:
    """Fill the dimensions the data cannot see from the closest known spec (a registry
    entry for these formats), when that entry agrees with everything the data shows;
    returns the spec and the visible fields so filled (L, emax_floor)."""
    best = None
    for r in search.known_specs(sp):
        if r.op != sp.op or r.F != sp.F or r.rho != sp.rho or r.F2 != sp.F2 or \
                r.align_round != sp.align_round or r.P != sp.P or r.G != sp.G:
            continue
        if (r.passes, r.c_join) != (sp.passes, sp.c_join) or \
                (sp.passes > 1 and (r.L, r.width) != (sp.L, sp.width)):
            continue
        if not (r.L == sp.L or (sp.L == kmax and r.L >= kmax)):
            continue
        if r.emax_floor != sp.emax_floor and sp.emax_floor is not None:
            continue
        best = r
        break
    if best is None:
        return sp, []
    ch = {}
    if sp.L == kmax and best.L >= kmax and not sp.multipass:
        ch["L"] = best.L
    if sp.emax_floor is None and best.emax_floor is not None and \
            (feats.min_emax is None or feats.min_emax >= best.emax_floor):
        ch["emax_floor"] = best.emax_floor
    if not feats.nan_outputs:
        ch["nan_bits"] = best.nan_bits
    # the zero corners (docs/model.md section 6): the entry's choices, kept only where the
    # data still fits them (recorded data rarely reaches them)
    zero = {f: getattr(best, f) for f in space.ZERO_DEFAULTS if getattr(best, f) != getattr(sp, f)}
    if zero and search.mismatches(sp.replace(**ch, **zero), samples) == 0:
        ch.update(zero)
    shown = [k for k in ("L", "emax_floor") if k in ch and ch[k] != getattr(sp, k)]
    return (sp.replace(**ch) if ch else sp), shown


def _dedupe(specs):
    seen, out = set(), []
    for sp in specs:
        k = search.arith_key(sp)
        if k not in seen:
            seen.add(k)
            out.append(sp)
    return out


__all__ = ["fit", "FitResult", "DataFeatures", "data_features", "FitUndecidedWarning", "max_k"]
