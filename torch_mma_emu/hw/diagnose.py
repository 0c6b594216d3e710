"""Hypotheses for a native path that differs from its model: the zero corners' other choices
(sign of a zero result, zero terms' exponent, cancelled scale groups, T' + c'
renormalisation), the other c_mode, other archs' models, other L / F, tf32 operands rounded,
split-K, Hopper's fp8 mma.sync as two HMMA."""
from __future__ import annotations

import torch

from .. import registry
from ..elementary import C_FUSED
from ..ops import emulated_mm
from ..registry import ARCHS, spec as registry_spec
from ..spec import CANCELLED_GROUPS, ZERO_SIGNS
from ..tf32 import tf32_round
from .common import compare, emulate


def split_k(spec, kw, dev, s, tree):
    """cuBLAS-style split-K hypothesis: s partial chains from 0, fp32 reduction, C added last."""
    A, B, C = kw["A"].to(dev), kw["B"].to(dev), kw["C"].to(dev)
    K = A.shape[-1]
    if K % s:
        return None
    step = K // s
    wide = torch.float64 if C.dtype == torch.float64 else torch.float32
    parts = []
    for i in range(s):
        sub = dict(kw, A=A[..., i * step:(i + 1) * step], B=B[..., i * step:(i + 1) * step, :],
                   C=None, arch=spec)
        parts.append(emulated_mm(**sub).to(wide))
    while len(parts) > 1:
        if tree:
            parts = [parts[i] + parts[i + 1] if i + 1 < len(parts) else parts[i]
                     for i in range(0, len(parts), 2)]
        else:
            parts = [parts[0] + parts[1]] + parts[2:]
    return (parts[0] + C.to(wide)).to(C.dtype)


def tf32_rounded(t: torch.Tensor) -> torch.Tensor:
    """fp32 words rounded to tf32 (nearest even) instead of truncated."""
    return tf32_round(t, "rne")


def _ieee_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + y rounded once to their dtype (fp32: torch's IEEE add; fp16: exact in float64
    first), NaN as NVIDIA's canonical pattern."""
    if x.dtype == torch.float16:
        r = (x.double() + y.double()).to(torch.float16)
        nan = torch.tensor(0x7FFF, dtype=torch.int16).view(torch.float16)
    else:
        r = x + y
        nan = torch.tensor(0x7FFFFFFF, dtype=torch.int32).view(torch.float32)
    return torch.where(torch.isnan(r), nan.to(r.device), r)


def fp8_as_fp16_hmma(kw, dev, arch, odt, chained: bool):
    """Hypothesis for the warp-level fp8 mma.m16n8k32 of Hopper (nvcc 13's SASS on sm_90a:
    fp8 -> fp16 unpack, two HMMA.16816 from zero, then FADD / HADD2 of the accumulator):
    per 32-wide instruction, h = HMMA(a[16:32], HMMA(a[0:16], 0)) (``chained``) or
    HMMA(a[0:16], 0) + HMMA(a[16:32], 0), then acc = acc + h, with the arch's fp16 model
    for HMMA (fp8 -> fp16 is exact)."""
    A = kw["A"].to(dev).to(torch.float16)
    B = kw["B"].to(dev).to(torch.float16)
    acc = kw["C"].to(dev).to(odt)
    s16 = registry_spec(arch, "fp16", odt)
    zero = torch.zeros_like(acc)
    for k0 in range(0, A.shape[-1], 32):
        lo = emulated_mm(A[..., k0:k0 + 16], B[..., k0:k0 + 16, :], zero, arch=s16)
        if chained:
            h = emulated_mm(A[..., k0 + 16:k0 + 32], B[..., k0 + 16:k0 + 32, :], lo, arch=s16)
        else:
            h = _ieee_add(lo, emulated_mm(A[..., k0 + 16:k0 + 32], B[..., k0 + 16:k0 + 32, :],
                                              zero, arch=s16))
        acc = _ieee_add(acc, h)
    return acc


# the exponent floor the MATLAB tensor-core models (seed 002) give zero terms for B200's fp16
# output: the one candidate for zero_exp that is not MMA-Sim's (docs/model.md 6.3)
MATLAB_FP16_FLOOR = -15


def corner_alternatives(spec):
    """(label, spec) for the choices the zero corners leave to evidence (issue 31, docs/model.md
    section 6): the other sign of a zero result, other exponents for zero terms (none, the
    MATLAB models' -15, MMA-Sim's per-arch values), the other rule for cancelled scale
    groups, T' + c' renormalised or not, FTZ-AddMul's accumulator flushed per group (L = P),
    an fp16 C converted first (c_format=None)."""
    out = []
    zf = spec.elementary.zero_fields
    if "zero_exp" in zf:
        out += [(f"zero_sign={z}", spec.replace(zero_sign=z)) for z in ZERO_SIGNS
                if z != spec.zero_sign]
        floors = [None, MATLAB_FP16_FLOOR] + sorted(
            {z for pair in registry.ZERO_EXP.values() for z in pair} | {registry.ZERO_EXP_GST})
        out += [(f"zero_exp={z}", spec.replace(zero_exp=z)) for z in floors if z != spec.zero_exp]
    if "cancelled_group" in zf:
        out += [(f"cancelled_group={c}", spec.replace(cancelled_group=c))
                for c in CANCELLED_GROUPS if c != spec.cancelled_group]
    if "tr_renorm" in zf:
        out.append((f"tr_renorm={not spec.tr_renorm}", spec.replace(tr_renorm=not spec.tr_renorm)))
    if spec.elementary.has_P and spec.L != spec.P:
        out.append((f"L={spec.P} (flush per group)", spec.replace(L=spec.P)))
    if spec.c_format is not None:
        out.append(("c_format=None", spec.replace(c_format=None)))
    return out


def diagnose(path, spec, kw, native_out, dev, c_mode, arch, odt):
    """Which hypotheses reproduce the native result on these inputs (0 mismatches)."""
    found = []

    def same(s, k, mode):
        try:
            return compare(native_out, emulate(s, k, dev, mode))[0] == 0
        except Exception:  # noqa: BLE001
            return False

    other = "chain" if c_mode == "epilogue" else "epilogue"
    for label, s2 in corner_alternatives(spec):
        if same(s2, kw, c_mode):
            found.append(f"{label} (docs/model.md section 6: the corner's other choice)")
    if same(spec, kw, other):
        found.append(f"c_mode={other}")
    fa, fb = spec.in_format, spec.in_format_b or spec.in_format
    for a in (n for n, ar in ARCHS.items() if ar.vendor == "nvidia"):
        if a == arch:
            continue
        try:
            s2 = registry_spec(a, fa, odt, in_format_b=fb)
        except (ValueError, TypeError):
            continue
        for mode in (c_mode, other):
            if same(s2, kw, mode):
                found.append(f"{a} model ({s2.describe()}), c_mode={mode}")
                break
    if spec.elementary.c_joins == C_FUSED and not spec.scaled:   # T-FDPA: sweep L and F
        for L in (4, 8, 16, 32):
            for F in sorted({13, 23, 24, 25, 26, 27, spec.F}):
                if (L, F) == (spec.L, spec.F):
                    continue
                if same(spec.replace(L=L, F=F), kw, c_mode):
                    found.append(f"L={L} F={F} ({spec.describe()} otherwise)")
    if fa == "tf32":
        k = dict(kw, A=tf32_rounded(kw["A"]), B=tf32_rounded(kw["B"]))
        for mode in (c_mode, other):
            if same(spec, k, mode):
                found.append(f"tf32 operands rounded (RNE), not truncated, c_mode={mode}")
                break
    if path == "mma:mma.m16n8k32" and registry.row(arch, fa, odt, in_format_b=fb).instr.group:
        for chained in (True, False):
            try:
                if compare(native_out, fp8_as_fp16_hmma(kw, dev, arch, odt, chained))[0] == 0:
                    found.append("fp8 -> fp16, two HMMA.16816 from zero " +
                                 ("chained" if chained else "added") + ", then + c (IEEE, "
                                 "per instruction)")
            except Exception:  # noqa: BLE001
                pass
    if path.startswith("cublas"):
        for s in (2, 3, 4, 8, 16):
            for tree in (False, True):
                try:
                    r = split_k(spec, kw, dev, s, tree)
                    if r is not None and compare(native_out, r)[0] == 0:
                        found.append(f"split-K into {s}, {'pairwise' if tree else 'sequential'} "
                                     "fp32 reduction, C added last")
                except Exception:  # noqa: BLE001
                    pass
    return found

