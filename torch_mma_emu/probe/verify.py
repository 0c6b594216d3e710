"""``verify(spec, target, n)``: seed 003 Step 4.  Random inputs of the three families
(normal, cancellation, bit streams; torch_mma_emu.inputs) run on the target and on the
model; any difference is a failure, shrunk by zeroing elements while it persists."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ..inputs import FAMILIES
from ..limits import check
from ..spec import Spec
from .samples import check_schedule, random_batches
from .targets import (MASK64, make_target, output_codes, scale_values, spec_interface,
                      values_of)


@dataclass
class Counterexample:
    """A failing input, shrunk: only ``nonzero`` products left (of ``K``)."""

    family: str
    K: int
    a: list
    b: list
    c: float
    target_code: int
    model_code: int
    target_value: float
    model_value: float
    nonzero: int
    before_shrinking: int
    scale_a: list | None = None
    scale_b: list | None = None

    def describe(self) -> str:
        terms = [f"a[{k}]={x!r} b[{k}]={y!r}" for k, (x, y) in enumerate(zip(self.a, self.b))
                 if x != 0 or y != 0] or ["all products zero"]
        sc = f" scales {self.scale_a} x {self.scale_b}" if self.scale_a else ""
        return (f"{self.family} input, K={self.K}, {self.nonzero} nonzero product(s) (from "
                f"{self.before_shrinking}): " + ", ".join(terms) + f", c={self.c!r}{sc}: "
                f"target {self.target_value!r} (0x{self.target_code:X}), model "
                f"{self.model_value!r} (0x{self.model_code:X})")


@dataclass
class VerifyResult:
    spec: Spec
    target: str
    n: int
    mismatches: int
    by_family: dict = field(default_factory=dict)
    seconds: float = 0.0
    counterexample: Counterexample | None = None

    @property
    def ok(self) -> bool:
        return self.mismatches == 0

    def describe(self) -> str:
        fam = ", ".join(f"{k} {v[1]}/{v[0]}" for k, v in self.by_family.items())
        s = (f"{self.spec.describe()} vs {self.target}: {self.mismatches} mismatches in "
             f"{self.n} inputs ({fam}) in {self.seconds:.1f} s")
        if self.counterexample is not None:
            s += "\n  smallest failing input: " + self.counterexample.describe()
        return s


def _model(spec: Spec, target, A, B, C, sa, sb):
    from ..ops import emulated_mm
    return emulated_mm(A, B, C, arch=spec, in_format=target.iface.in_format_arg,
                       out_dtype=target.iface.out_dtype, scale_a=sa, scale_b=sb)


def _differs(spec, target, A, B, C, sa, sb) -> torch.Tensor:
    dt = output_codes(target(A, B, C, sa, sb).reshape(-1))
    dm = output_codes(_model(spec, target, A, B, C, sa, sb).reshape(-1))
    return dt != dm


def ks_for(spec: Spec) -> list[int]:
    L = spec.L
    return sorted({L, 2 * L, 3 * L - 1 if L > 1 else 3, max(1, L // 2), 1, L + 1})


def verify(spec: Spec, target, n: int = 100_000, *, in_format=None, out_dtype=None,
           seed: int = 0, families=FAMILIES, ks=None, batch: int = 8192,
           shrink: bool = True, instruction=None) -> VerifyResult:
    """Compare ``spec`` with ``target`` bit for bit on ``n`` random inputs (split over the
    three input families of seed 003 section 3.1.4 and the lengths ``ks``; default: around
    the spec's fused length, so chains of several elementary operations are covered).

    ``target`` is anything :func:`~torch_mma_emu.probe.make_target` takes; its formats
    default to the spec's.  On a mismatch the first failing input is shrunk (elements set to
    zero while the mismatch persists) and reported as ``result.counterexample``.
    """
    if not isinstance(spec, Spec):
        raise TypeError(f"verify takes a Spec (e.g. from infer_spec), got "
                        f"{type(spec).__name__}")
    ks = ks_for(spec) if ks is None else list(ks)
    check_schedule(n, ks, families, batch)
    check("probe_verify", n, "verify: n")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    fmt = in_format or (spec.in_format if spec.in_format_b is None
                        else f"{spec.in_format},{spec.in_format_b}")
    t = make_target(target, fmt, out_dtype or spec.out_format,
                    scale_format=spec.scale_format, block_size=spec.block_size or None,
                    instruction=instruction)
    if t.iface != spec_interface(spec):
        raise ValueError(f"the spec is for {spec_interface(spec).describe()}, the target for "
                         f"{t.iface.describe()}")
    g = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    res = VerifyResult(spec, t.describe(), 0, 0, {f: [0, 0] for f in families})
    first = None
    for fam, K, kw in random_batches(spec, n, ks, families, g, batch):
        A, B = kw["A"], kw["B"]
        S = A.shape[0]
        C = kw["C"] if kw["C"] is not None else torch.zeros(S, 1, 1, dtype=t.iface.out_dtype)
        sa, sb = kw.get("scale_a"), kw.get("scale_b")
        bad = _differs(spec, t, A, B, C, sa, sb)
        nb = int(bad.sum())
        res.n += S
        res.mismatches += nb
        res.by_family[fam][0] += S
        res.by_family[fam][1] += nb
        if nb and first is None:
            j = int(bad.nonzero()[0])
            sel = (lambda x: None if x is None else x[j:j + 1])
            first = (fam, sel(A), sel(B), sel(C), sel(sa), sel(sb))
    res.seconds = time.perf_counter() - t0
    if first is not None:
        res.counterexample = shrink_failure(spec, t, *first, shrink=shrink)
    return res


def shrink_failure(spec, target, family, A, B, C, sa, sb, shrink=True) -> Counterexample:
    """Seed 003: zero out input elements while the mismatch persists (greedy, one element
    at a time, each pass trying every remaining element in one batched call)."""
    A, B, C = A.clone(), B.clone(), C.clone()
    K = A.shape[2]

    def nz():
        av = values_of(A[0, 0, :], target.iface.fmt_a)
        bv = values_of(B[0, :, 0], target.iface.fmt_b)
        return [k for k in range(K) if not (av[k] == 0 and bv[k] == 0)]
    before = len(nz())
    while shrink:
        live = nz()
        variants = []
        for k in live:
            a2, b2 = A.clone(), B.clone()
            a2[0, 0, k] = 0
            b2[0, k, 0] = 0
            variants.append((a2, b2, C))
        if C.reshape(-1)[0].item() != 0:     # (NaN != 0 too)
            variants.append((A, B, torch.zeros_like(C)))
        if not variants:
            break
        n = len(variants)
        rep = (lambda x: None if x is None else x.expand(n, *x.shape[1:]).contiguous())
        bad = _differs(spec, target, torch.cat([v[0] for v in variants]),
                       torch.cat([v[1] for v in variants]), torch.cat([v[2] for v in variants]),
                       rep(sa), rep(sb))
        hit = bad.nonzero()
        if hit.numel() == 0:
            break
        A, B, C = variants[int(hit[0])]
    dt = target(A, B, C, sa, sb).reshape(-1)
    dm = _model(spec, target, A, B, C, sa, sb).reshape(-1)
    sc = (lambda s: None if s is None else scale_values(s.reshape(-1).unsqueeze(0),
                                                        spec.scale_format)[0].tolist())
    return Counterexample(
        family, K, values_of(A[0, 0, :], target.iface.fmt_a).tolist(),
        values_of(B[0, :, 0], target.iface.fmt_b).tolist(), float(C.reshape(-1)[0]),
        int(output_codes(dt)[0]) & MASK64, int(output_codes(dm)[0]) & MASK64, float(dt[0]),
        float(dm[0]),
        len(nz()), before, sc(sa), sc(sb))


__all__ = ["verify", "VerifyResult", "Counterexample", "shrink_failure", "ks_for"]
