"""MMA-Sim (the ``mmasim`` package, seed 003's simulator) as a differential oracle.

Every instruction both models is listed in :data:`CASES` with its mmasim constructor
(mmasim picks its own parameters) and the registry row of ours it maps to.  :func:`run_case`
draws samples of one dot product each (one instruction's K) in several kinds (random bits,
zeros, tiny values, exact cancellation, zeroed / cancelling scale groups), runs both, and
:func:`classify` names the documented corner (docs/model.md section 6) that explains each
difference; anything else is ``"unexplained"``.
"""
from __future__ import annotations

import collections
import dataclasses

import torch

import torch_mma_emu as tme
from torch_mma_emu import registry
from torch_mma_emu.formats import FORMATS

# mmasim's operand names -> ours
_NV = {"f16": "fp16", "bf16": "bf16", "tf32": "tf32", "e4m3": "fp8_e4m3", "e5m2": "fp8_e5m2",
       "e2m3": "fp6_e2m3", "e3m2": "fp6_e3m2", "e2m1": "fp4_e2m1", "f32": "fp32"}
_AMD = {"f16": "fp16", "bf16": "bf16", "xf32": "xf32", "fp8": "fp8_e4m3fnuz",
        "bf8": "fp8_e5m2fnuz"}
_F8F6F4 = ["e5m2", "e4m3", "e3m2", "e2m3", "e2m1"]
_FP8 = ["e5m2", "e4m3"]
_OUT = {"fp32": torch.float32, "fp16": torch.float16}


@dataclasses.dataclass(frozen=True)
class Case:
    """One mmasim instruction and the instruction of ours it maps to."""
    kind: str              # mmasim class: MMA, WGMMA, TCGen05MMA, ...BlockScale, MFMA
    march: str             # mmasim arch name ("Hopper", "CDNA3")
    shape_and_type: str    # mmasim's instruction string
    arch: str              # our arch
    fa: str
    fb: str
    out: str
    c_fmt: str             # the format C comes in (fp16 for Volta m8n8k4.f32.f16.f16.f16)
    op: str = ""           # our op (filled by CASES)
    instruction: str = ""  # our instruction id
    scale: str | None = None
    block: int = 0
    spec: object = None    # our Spec where no registry row has the instruction's K (below)

    @property
    def name(self) -> str:
        return f"{self.march}:{self.kind}:{self.shape_and_type}"


def _our(arch, fa, fb, out, instruction=None, scale=None, block=0):
    r = registry.row(arch, fa, out, in_format_b=fb, instruction=instruction, scale_format=scale)
    return r.op, r.instruction


def _nv_case(kind, march, st, arch, instruction=None):
    q = st.split(".")
    if kind in ("MMABlockScale", "TCGen05MMABlockScale"):
        if kind == "MMABlockScale":
            _shape, _k, blk, d, a, b, _c, s = q
        else:
            _shape, _k, blk, d, a, b, s = q
        scale, block = s, int(blk[5:])
        c = d
        # mmasim's kind -> our instruction: kind::mxf4nvf4 with E8M0 scales is our mxf4
        sk = _k.removeprefix("kind::")
        sk = "mxf4" if sk == "mxf4nvf4" and s == "ue8m0" else sk
        instruction = f"{'tcgen05' if arch == 'sm100' else 'sm120'}.{sk}"
    else:
        scale, block = None, 0
        q = [x for x in q if not x.startswith("kind::")]
        if kind == "MMA":
            _shape, d, a, b, c = q
        else:
            _shape, d, a, b = q
            c = d
    fa, fb, out, cf = _NV[a], _NV[b], _NV[d], _NV[c]
    op, ins = _our(arch, fa, fb, out, instruction, scale, block)
    return Case(kind, march, st, arch, fa, fb, out, cf, op, ins, scale, block)


def _mfma_case(march, suffix, arch, instruction=None):
    from mmasim.amd import MFMA
    m = MFMA(march, suffix)
    tname = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float8_e4m3fnuz: "fp8",
             torch.float8_e5m2fnuz: "bf8", torch.float32: "xf32"}
    fa, fb = _AMD[tname[m.a_type]], _AMD[tname[m.b_type]]
    op, ins = _our(arch, fa, fb, "fp32", instruction)
    spec = None
    if op == "ftz_addmul":
        # CDNA2 flushes the accumulator once per instruction, L = its K (docs/model.md 6.6);
        # the registry has the 32x32 instructions, the others run our row at their own K
        row_spec = registry.spec(arch, fa, "fp32", in_format_b=fb, instruction=ins)
        spec = row_spec if row_spec.L == m.k else row_spec.replace(L=m.k)
    return Case("MFMA", march, suffix, arch, fa, fb, "fp32", "fp32", op, ins, spec=spec)


_MMA_ARCH = {"Volta": "sm70", "Turing": "sm75", "Ampere": "sm80", "Ada Lovelace": "sm89",
             "Hopper": "sm90", "Blackwell": "sm100", "RTX Blackwell": "sm120"}
_MFMA_ARCH = {"CDNA1": "gfx908", "CDNA2": "gfx90a", "CDNA3": "gfx942"}


def _cases() -> list[Case]:
    from mmasim.amd import isa_mfma
    from mmasim.nv_ptx import isa_mma, isa_tcgen05mma, isa_wgmma
    out = []
    for march, sts in isa_mma.mma_shape_and_type.items():
        for st in sts:
            if ".f64." in st:
                continue          # IEEE fp64 FMA: not a tensor-core dot product
            arch = _MMA_ARCH[march]
            if march == "Turing" and st in isa_mma.volta_mma_shape_and_type:
                arch = "sm70"     # mmasim: Turing runs m8n8k4 as Volta does
            out.append(_nv_case("MMA", march, st, arch))
    for march, sts in isa_mma.mma_block_scale_shape_and_type.items():
        out += [_nv_case("MMABlockScale", march, st, _MMA_ARCH[march]) for st in sts]
    # wgmma / tcgen05: N (and M) only change the tile; one per type
    for st in isa_wgmma.wgmma_shape_and_type["Hopper"]:
        if st.startswith("m64n8k"):
            out.append(_nv_case("WGMMA", "Hopper", st, "sm90"))
    for st in isa_tcgen05mma.tcgen05mma_shape_and_type["Blackwell"]:
        if st.startswith("m128n8k"):
            out.append(_nv_case("TCGen05MMA", "Blackwell", st, "sm100"))
    for st in isa_tcgen05mma.tcgen05mma_block_scale_shape_and_type["Blackwell"]:
        if st.startswith("m128n8k"):
            out.append(_nv_case("TCGen05MMABlockScale", "Blackwell", st, "sm100"))
    for march, sufs in isa_mfma.arch_mfma_suffix.items():
        for suf in sufs:
            if "f64" in suf or (suf.endswith("f32") and not suf.endswith("xf32")):
                continue          # IEEE FMA chains
            ins = None
            if march == "CDNA2" and suf.endswith("bf16") and not suf.endswith("_1k"):
                ins = "mfma.32x32x4bf16"   # the CDNA1-era bf16 instruction (P = 2)
            out.append(_mfma_case(march, suf, _MFMA_ARCH[march], ins))
    return out


def mmasim_op(case: Case):
    from mmasim import amd, nv_ptx
    if case.kind == "MFMA":
        return amd.MFMA(case.march, case.shape_and_type)
    return getattr(nv_ptx, case.kind)(case.march, case.shape_and_type)


# --------------------------------------------------------------------------------------
# Sample generation: integer codes of each format, then mmasim's and our tensors
# --------------------------------------------------------------------------------------

def _fields(fmt: str):
    f = FORMATS[fmt]
    return f.exp_bits, f.man_bits, f.bias


def _encode(fmt, sign, efield, mant):
    e, m, _ = _fields(fmt)
    code = (sign << (e + m)) | (efield << m) | mant
    if fmt in ("tf32", "xf32"):
        code = code << 13
    return code


def _max_efield(fmt):
    """The largest exponent field of a finite value that is safe in every format."""
    e, _, _ = _fields(fmt)
    return (1 << e) - 1 if e <= 3 or fmt == "fp8_e4m3" else (1 << e) - 2


def _codes_random(fmt, shape, g):
    """Uniform random bits of the format (NaN, Inf, subnormals included)."""
    e, m, _ = _fields(fmt)
    n = 1 + e + m
    c = torch.randint(0, 1 << n, shape, generator=g, dtype=torch.int64)
    return c << 13 if fmt in ("tf32", "xf32") else c


def _codes_exp(fmt, shape, exps, g):
    """Finite values with unbiased exponent ``exps`` (clamped to the format; subnormal below
    emin, the mantissa random), random sign."""
    e, m, bias = _fields(fmt)
    ef = (exps + bias).clamp(0, _max_efield(fmt))
    mant = torch.randint(0, 1 << m, shape, generator=g, dtype=torch.int64)
    if fmt == "fp8_e4m3":   # e4m3fn: the top field's largest mantissa is NaN
        mant = torch.where(ef == _max_efield(fmt), mant.clamp(max=(1 << m) - 2), mant)
    sign = torch.randint(0, 2, shape, generator=g, dtype=torch.int64)
    if fmt.endswith("fnuz"):   # fnuz: sign with a zero code is NaN
        sign = torch.where((ef == 0) & (mant == 0), 0, sign)
    return _encode(fmt, sign, ef, mant)


def _emin(fmt):
    e, _, bias = _fields(fmt)
    return 1 - bias


def _emax(fmt):
    e, _, bias = _fields(fmt)
    return _max_efield(fmt) - bias


def _zero_codes(fmt, codes, mask, g):
    """Codes with ``mask`` set to zeros of random sign (+0 only for fnuz)."""
    e, m, _ = _fields(fmt)
    sh = e + m + (13 if fmt in ("tf32", "xf32") else 0)
    neg = torch.randint(0, 2, codes.shape, generator=g, dtype=torch.int64) << sh
    if fmt.endswith("fnuz"):
        neg = torch.zeros_like(neg)
    return torch.where(mask, neg, codes)


def _neg(fmt, codes):
    e, m, _ = _fields(fmt)
    sh = e + m + (13 if fmt in ("tf32", "xf32") else 0)
    flipped = codes ^ (1 << sh)
    if fmt.endswith("fnuz"):   # -0 is NaN in fnuz
        flipped = torch.where(codes == 0, codes, flipped)
    return flipped


KINDS = ("bits", "normal", "zeros", "tiny", "cancel", "zero_groups")


def sample_codes(case: Case, N: int, K: int, nblk: int, kind: str, g: torch.Generator):
    """Integer codes (a (N, K), b (N, K), c (N,)) and scale codes ((N, nblk) each or None)."""
    fa, fb, fc = case.fa, case.fb, case.c_fmt
    ri = lambda lo, hi, shape: torch.randint(lo, hi + 1, shape, generator=g, dtype=torch.int64)
    if kind == "bits":
        a, b, c = (_codes_random(fa, (N, K), g), _codes_random(fb, (N, K), g),
                   _codes_random(fc, (N,), g))
    else:
        span_a = (_emin(fa) - 1, _emax(fa))
        span_b = (_emin(fb) - 1, _emax(fb))
        if kind == "tiny":   # products near the bottom of the output range (and below)
            target = _emin(case.out) - ri(-3, 26 if case.out == "fp32" else 14, (N, 1))
            if case.scale == "ue8m0":   # the scales carry the target, elements near 1
                scale_exp = target.expand(N, nblk)
                target = torch.zeros_like(target)
            ea = ri(*span_a, (N, K)) if not case.scale else ri(-1, 1, (N, K)).clamp(*span_a)
            eb = (target - ea).clamp(*span_b)
            ea = (target - eb).clamp(*span_a)
            ec = _emin(fc) + ri(-11, 3, (N,))
        else:
            mid_a, mid_b = sum(span_a) // 2, sum(span_b) // 2
            w = 3 if kind in ("cancel", "zero_groups") else 8
            ea = (mid_a + ri(-w, w, (N, K))).clamp(*span_a)
            eb = (mid_b + ri(-w, w, (N, K))).clamp(*span_b)
            ec = mid_a + mid_b + ri(-12, 4, (N,))
        a, b = _codes_exp(fa, (N, K), ea, g), _codes_exp(fb, (N, K), eb, g)
        c = _codes_exp(fc, (N,), ec, g)
        if kind in ("zeros", "tiny"):
            a = _zero_codes(fa, a, torch.rand((N, K), generator=g) < 0.4, g)
            b = _zero_codes(fb, b, torch.rand((N, K), generator=g) < 0.2, g)
            c = _zero_codes(fc, c, torch.rand((N,), generator=g) < 0.5, g)
        if kind == "cancel":
            # pairs (2i, 2i+1) with a' = a, b' = -b: each pair sums to exactly 0, within
            # every group of 16 (gst_fdpa) and every chunk; c is a zero, or a value
            a[:, 1::2] = a[:, 0::2]
            b[:, 1::2] = _neg(fb, b[:, 0::2])
            c = _zero_codes(fc, c, torch.rand((N,), generator=g) < 0.7, g)
        if kind == "zero_groups":
            # whole groups of 16 zeroed (a or b), the others cancel pairwise or not
            grp = torch.rand((N, K // 16 if K >= 16 else 1), generator=g) < 0.5
            mask = grp.repeat_interleave(16 if K >= 16 else K, dim=1)[:, :K]
            canc = torch.rand((N, 1), generator=g) < 0.5
            a[:, 1::2] = torch.where(canc, a[:, 0::2], a[:, 1::2])
            b[:, 1::2] = torch.where(canc, _neg(fb, b[:, 0::2]), b[:, 1::2])
            a = _zero_codes(fa, a, mask, g)
            c = _zero_codes(fc, c, torch.rand((N,), generator=g) < 0.7, g)
    sa = sb = None
    if case.scale:
        if case.scale == "ue8m0":
            if kind == "tiny":
                sa = (127 + scale_exp // 2 + ri(-1, 1, (N, nblk))).clamp(0, 254)
                sb = (127 + scale_exp - scale_exp // 2 + ri(-1, 1, (N, nblk))).clamp(0, 254)
            elif kind == "bits":
                sa, sb = ri(0, 255, (N, nblk)), ri(0, 255, (N, nblk))
            else:
                sa, sb = ri(127 - 20, 127 + 20, (N, nblk)), ri(127 - 20, 127 + 20, (N, nblk))
        else:   # ue4m3: positive finite codes (sign bit clear, not 0x7F)
            lo, hi = (1, 40) if kind == "tiny" else (0, 126)
            sa, sb = ri(lo, hi, (N, nblk)), ri(lo, hi, (N, nblk))
    return a, b, c, sa, sb


_DT = {"fp16": (torch.int16, torch.float16), "bf16": (torch.int16, torch.bfloat16),
       "fp32": (torch.int32, torch.float32), "tf32": (torch.int32, torch.float32),
       "xf32": (torch.int32, torch.float32),
       "fp8_e4m3": (torch.uint8, torch.float8_e4m3fn), "fp8_e5m2": (torch.uint8, torch.float8_e5m2),
       "fp8_e4m3fnuz": (torch.uint8, torch.float8_e4m3fnuz),
       "fp8_e5m2fnuz": (torch.uint8, torch.float8_e5m2fnuz)}


def _tensor(fmt, codes):
    """Our operand tensor of these codes (uint8 codes for fp6 / fp4)."""
    if fmt not in _DT:
        return codes.to(torch.uint8)
    it, ft = _DT[fmt]
    bits = FORMATS[fmt].container_bits or FORMATS[fmt].bits
    c = codes & ((1 << bits) - 1)
    c = torch.where(c >= 1 << (bits - 1), c - (1 << bits), c) if it != torch.uint8 else c
    return c.to(it).view(ft)


def _mmasim_operand(case, fmt, codes):
    if fmt not in _DT:
        if case.kind.endswith("BlockScale") and fmt == "fp4_e2m1" and "mxf4" in case.shape_and_type:
            u = codes.to(torch.uint8)   # packed: element 2i in the high nibble
            return (u[..., 0::2] << 4) | u[..., 1::2]
        return (codes << 2).to(torch.uint8) if fmt == "fp4_e2m1" else codes.to(torch.uint8)
    return _tensor(fmt, codes)


@dataclasses.dataclass
class Result:
    case: Case
    kinds: list           # per sample kind
    a: torch.Tensor       # our operand tensors, (N, K)
    b: torch.Tensor
    c: torch.Tensor       # (N,) in C's format
    sa: torch.Tensor | None
    sb: torch.Tensor | None
    ours: torch.Tensor    # (N,) bits as int64
    theirs: torch.Tensor
    alt: tuple = ()       # the ALTERNATIVES our model ran with (with_alternative)


def _bits(t):
    it = {torch.float32: torch.int32, torch.float16: torch.int16}[t.dtype]
    return t.contiguous().view(it).to(torch.int64) & ((1 << (8 * t.element_size())) - 1)


def run_case(case: Case, n_per_kind: int, seed: int = 0, kinds=KINDS) -> Result:
    op = mmasim_op(case)
    K = op.k
    nblk = K // case.block if case.block else 0
    g = torch.Generator().manual_seed(seed)
    parts = []
    use = [k for k in kinds if k != "zero_groups" or case.scale or case.op == "t_fdpa"]
    for kind in use:
        parts.append((kind, sample_codes(case, n_per_kind, K, nblk, kind, g)))
    cat = lambda i: None if parts[0][1][i] is None else torch.cat([p[1][i] for p in parts])
    ca, cb, cc, csa, csb = (cat(i) for i in range(5))
    kinds_l = [k for k, _ in parts for _ in range(n_per_kind)]
    A, B, C = _tensor(case.fa, ca), _tensor(case.fb, cb), _tensor(case.c_fmt, cc)
    ma, mb = _mmasim_operand(case, case.fa, ca), _mmasim_operand(case, case.fb, cb)
    sa = sb = None
    if case.scale:
        sdt = torch.float8_e8m0fnu if case.scale == "ue8m0" else torch.float8_e4m3fn
        sa, sb = csa.to(torch.uint8).view(sdt), csb.to(torch.uint8).view(sdt)
        theirs = op.dpa(ma, mb, C, sa, sb)
    else:
        theirs = op.dpa(ma, mb, C)
    ours = emulate(case, A, B, C, sa, sb)
    return Result(case, kinds_l, A, B, C, sa, sb, _bits(ours), _bits(theirs.to(_OUT[case.out])))


def emulate(case: Case, A, B, C, sa=None, sb=None, arch=None):
    """Our result for each sample (one dot product each) as a (N,) tensor.  C goes in its
    own dtype (an fp16 C on sm70 fp32 output is read as it is: ``Spec.c_format``)."""
    kw = {}
    if sa is not None:
        kw = dict(scale_a=(sa.view(torch.uint8) if case.scale == "ue8m0" else sa)[:, None, :],
                  scale_b=(sb.view(torch.uint8) if case.scale == "ue8m0" else sb)[:, :, None])
    arch = arch if arch is not None else case.spec
    d = tme.emulated_mm(A[:, None, :], B[:, :, None], C[:, None, None], arch=arch or case.arch,
                        in_format=f"{case.fa},{case.fb}", out_dtype=_OUT[case.out],
                        instruction=None if arch is not None else case.instruction, **kw)
    return d[:, 0, 0]


CASES_CACHE: list[Case] = []


def cases() -> list[Case]:
    if not CASES_CACHE:
        CASES_CACHE.extend(_cases())
    return CASES_CACHE


# --------------------------------------------------------------------------------------
# Differences and the documented corners that explain them (docs/model.md section 6)
# --------------------------------------------------------------------------------------

# The corners, in the order the classifier tries them; docs/model.md section 6 has one
# subsection per name (tests/test_peer_mmasim.py checks that).  Our defaults follow mmasim
# where the corner is a model choice: ALTERNATIVES gives the other choice as Spec changes
# (what the model did before), so a run with it shows the corner and only it.
CORNERS = ("zero_sign", "cancelled_group", "zero_exp", "tr_renorm", "gfx90a_flush",
           "volta_fp16_c", "gtr_nan")
ALTERNATIVES = {
    "zero_sign": lambda s: {"zero_sign": "keep"},
    "cancelled_group": lambda s: {"cancelled_group": "drop"},
    "zero_exp": lambda s: {"zero_exp": None},
    "tr_renorm": lambda s: {"tr_renorm": False},
    "gfx90a_flush": lambda s: {"L": s.P},
    "volta_fp16_c": lambda s: {"c_format": None},
}
APPLIES = {
    "zero_sign": lambda c: c.op in ("t_fdpa", "st_fdpa", "gst_fdpa"),
    "cancelled_group": lambda c: c.op == "gst_fdpa",
    "zero_exp": lambda c: c.op in ("t_fdpa", "st_fdpa", "gst_fdpa"),
    "tr_renorm": lambda c: c.op in ("tr_fdpa", "gtr_fdpa"),
    "gfx90a_flush": lambda c: c.op == "ftz_addmul",
    "volta_fp16_c": lambda c: c.c_fmt == "fp16" and c.out == "fp32",
    "gtr_nan": lambda c: c.op == "gtr_fdpa",
}


def _nan(bits, out):
    if out == "fp32":
        return ((bits >> 23) & 0xFF == 0xFF) & (bits & 0x7FFFFF != 0)
    return ((bits >> 10) & 0x1F == 0x1F) & (bits & 0x3FF != 0)


def differs(r: Result) -> torch.Tensor:
    """Samples whose bits differ (AMD: any NaN equals any NaN; mmasim writes NVIDIA's NaN)."""
    d = r.ours != r.theirs
    if r.case.kind == "MFMA":
        d &= ~(_nan(r.ours, r.case.out) & _nan(r.theirs, r.case.out))
    return d


def our_spec(case: Case, sample: Result):
    """The registry Spec ``emulated_mm`` runs for this case."""
    if case.spec is not None:
        return case.spec
    r = sample
    sc = (lambda t, a_side: None if t is None else _our_scales(r, t[:1], a_side))
    return tme.resolve_spec(r.a[:1, None, :], r.b[:1, :, None], case.arch,
                            in_format=f"{case.fa},{case.fb}", out_dtype=_OUT[case.out],
                            instruction=case.instruction, scale_a=sc(r.sa, True),
                            scale_b=sc(r.sb, False))


def _our_scales(r, s, a_side):
    s = s.view(torch.uint8) if r.case.scale == "ue8m0" else s
    return s[:, None, :] if a_side else s[:, :, None]


def with_alternative(r: Result, corners) -> Result:
    """The same samples with our model switched to the ALTERNATIVES of ``corners``."""
    spec = our_spec(r.case, r)
    change = {}
    for name in corners:
        change.update(ALTERNATIVES[name](spec))
    alt = spec.replace(**change)
    ours = _bits(emulate(r.case, r.a, r.b, r.c, r.sa, r.sb, arch=alt))
    return dataclasses.replace(r, ours=ours, alt=tuple(corners))


def classify(r: Result) -> dict:
    """{corner: count} of the differing samples; "unexplained" for the rest.  A difference
    of a run with ALTERNATIVES is explained by such a corner when restoring our default for
    it (cumulatively, in CORNERS order) gives mmasim's bits; gtr_nan (mmasim's error, not
    a choice of ours) by its defining condition: a NaN input on gfx942 fp8 that mmasim loses
    and we keep."""
    bad = differs(r).nonzero().flatten()
    counts = collections.Counter()
    left = bad
    case = r.case
    if r.alt and len(left):
        spec = our_spec(case, r)
        alts = [n for n in CORNERS if n in r.alt]
        for i, name in enumerate(alts):
            if not len(left):
                break
            change = {}
            for other in alts[i + 1:]:
                change.update(ALTERNATIVES[other](spec))
            sa = None if r.sa is None else r.sa[left]
            sb = None if r.sb is None else r.sb[left]
            fixed = _bits(emulate(case, r.a[left], r.b[left], r.c[left], sa, sb,
                                  arch=spec.replace(**change) if change else spec))
            ok = fixed == r.theirs[left]
            counts[name] += int(ok.sum())
            left = left[~ok]
    if len(left) and APPLIES["gtr_nan"](case):
        nan_in = _nan(_bits(r.c[left]), "fp32") | r.a[left].float().isnan().any(1) | \
            r.b[left].float().isnan().any(1)
        lost = nan_in & _nan(r.ours[left], "fp32") & ~_nan(r.theirs[left], "fp32")
        counts["gtr_nan"] += int(lost.sum())
        left = left[~lost]
    if len(left):
        counts["unexplained"] += len(left)
    return {k: v for k, v in counts.items() if v}


# --------------------------------------------------------------------------------------
# A K other than the instruction's (docs/model.md 6.8): mmasim's ``dpa`` takes any length,
# the hardware only its instruction's K; a GEMM runs ceil(K / k) instructions on operands
# zero padded to a multiple of k, each one's D the next one's C
# --------------------------------------------------------------------------------------

def mmasim_per_instruction(op, A, B, C):
    """mmasim's result for (N, K) operands as a GEMM runs them: K zero padded (+0) to a
    multiple of the instruction's ``op.k``, one ``dpa`` per instruction, chained through C."""
    K, k = A.shape[-1], op.k
    pad = -K % k
    if pad:
        A = torch.cat([A, torch.zeros(*A.shape[:-1], pad, dtype=A.dtype)], -1)
        B = torch.cat([B, torch.zeros(*B.shape[:-1], pad, dtype=B.dtype)], -1)
    for k0 in range(0, K + pad, k):
        C = op.dpa(A[..., k0:k0 + k], B[..., k0:k0 + k], C)
    return C


def tiny_bf16_ftz_samples(n: int, K: int, g: torch.Generator):
    """bf16 operands whose products lie near fp32's least normal (2^-128 .. 2^-122: some
    flushed, some not), random signs, half of a and a tenth of b signed zeros; an fp32 c of
    either sign, normal below 2^-122 or subnormal, a fifth of them signed zeros.  Sums there
    cancel into the subnormal range and flush to zeros of either sign: FTZ-AddMul's
    sign-of-zero corners."""
    ri = lambda lo, hi, shape: torch.randint(lo, hi, shape, generator=g)  # noqa: E731
    ea = ri(57, 71, (n, K))
    eb = 254 - ea - ri(123, 129, (n, K))     # product exponent -128 .. -123 (and a carry)
    sa, sb = ri(0, 2, (n, K)) << 15, ri(0, 2, (n, K)) << 15
    a = sa | (ea << 7) | ri(0, 128, (n, K))
    b = sb | (eb << 7) | ri(0, 128, (n, K))
    a = torch.where(torch.rand(n, K, generator=g) < 0.5, sa, a)
    b = torch.where(torch.rand(n, K, generator=g) < 0.1, sb, b)
    sc = ri(0, 2, (n,)) << 31
    c = sc | (ri(0, 5, (n,)) << 23) | ri(0, 1 << 23, (n,))
    c = torch.where(torch.rand(n, generator=g) < 0.2, sc, c)
    return _tensor("bf16", a), _tensor("bf16", b), _tensor("fp32", c)
