"""The architecture registry: how each instruction computes on each arch, as data.

Each :class:`Row` maps (arch, input formats, output format[, scale format]) to an elementary
operation and its parameters, and names the instruction that runs by its id in the
instruction table (isa.py: what the instruction is; this file: how it computes).
Sources: seed 003 Tables 3-7 (MMA-Sim), seed 002 (per-GPU summary, lower exponent cap),
recorded hardware in tests/data.  Adding a GPU means adding rows here (and its instructions
there); no code changes.

A row's ``formats`` lists the input formats it accepts for A and for B independently (NVIDIA
fp8 instructions take e4m3 x e5m2 mixes, Blackwell's kind::f8f6f4 any fp8/fp6/fp4 mix).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .elementary import OPS as ELEMENTARY
from .formats import INPUT_FORMATS, default_out, get_format, out_format, scales_text
from .isa import (F8F6F4, FP8, FP8_FNUZ, INSTRUCTIONS, KERNELS, Instruction, answers_to,
                  issued_by, norm)
from .spec import NVIDIA_NAN, Spec, as_spec

# --------------------------------------------------------------------------------------
# Architectures
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Arch:
    """One architecture and the facts code asks about it (every other module reads them here,
    never by the arch's name): ``fp32`` / ``fp64`` are the ids (isa.py) of the instructions
    that run fp32 x fp32 and fp64 x fp64 products (its ``_fma_rows``); ``cdna`` is an AMD
    arch's CDNA generation (Triton's and PyTorch's AMD rules are by generation)."""
    name: str
    vendor: str
    family: str
    gpus: tuple[str, ...]
    aliases: tuple[str, ...] = ()
    fp32: str = ""
    fp64: str = ""
    cdna: int | None = None

    @property
    def capability(self) -> tuple[int, int] | None:
        """CUDA compute capability (major, minor) of an NVIDIA arch ("sm89" -> (8, 9)); None
        for AMD.  The one place it is derived (SDPA selection, Triton's instruction choice)."""
        if self.vendor != "nvidia":
            return None
        digits = self.name[2:]
        return int(digits[:-1]), int(digits[-1])

    @property
    def gfx_version(self) -> tuple[int, int] | None:
        """(major, minor) of an AMD arch's gfx name, what ROCm's torch reports as its device
        capability ("gfx942" -> (9, 4), "gfx90a" -> (9, 0): the last digit is the stepping);
        None for NVIDIA."""
        if self.vendor != "amd":
            return None
        return int(self.name[3:-2]), int(self.name[-2], 16)


def _nv(name, family, gpus, aliases, fp64="dfma") -> Arch:
    # NVIDIA has no fp32 tensor-core input: fp32 runs as an FFMA chain; fp64 on DMMA where
    # the arch has the fp64 tensor core (sm80, sm90, sm100), else on the DFMA units
    return Arch(name, "nvidia", family, gpus, aliases, fp32="ffma", fp64=fp64)


def _amd(name, cdna, gpus, aliases, fp64="mfma.f64") -> Arch:
    return Arch(name, "amd", f"CDNA{cdna}", gpus, aliases, fp32="mfma.f32", fp64=fp64,
                cdna=cdna)


ARCHS: dict[str, Arch] = {a.name: a for a in [
    _nv("sm70", "Volta", ("V100",), ("volta",)),
    _nv("sm75", "Turing", ("T4",), ("turing",)),
    _nv("sm80", "Ampere", ("A100", "A30"), ("ampere",), fp64="dmma"),
    _nv("sm86", "Ampere (GA10x)", ("A40", "A10", "A2", "RTX3090"), ("ga10x",)),
    _nv("sm89", "Ada Lovelace", ("L40S", "L40", "L4", "RTX4090"), ("ada", "ada_lovelace", "lovelace")),
    _nv("sm90", "Hopper", ("H100", "H200", "GH200", "H800"), ("hopper", "sm90a"), fp64="dmma"),
    _nv("sm100", "Blackwell", ("B200", "GB200", "B100"), ("blackwell", "sm100a"), fp64="dmma"),
    _nv("sm120", "RTX Blackwell", ("RTX PRO 6000", "RTX5090"), ("rtx_blackwell", "sm120a")),
    # CDNA1 has no fp64 MFMA: fp64 runs on the vector ALU
    _amd("gfx908", 1, ("MI100",), ("cdna1",), fp64="v_fma_f64"),
    _amd("gfx90a", 2, ("MI250X", "MI250", "MI210"), ("cdna2",)),
    _amd("gfx942", 3, ("MI300X", "MI300A", "MI325X"), ("cdna3",)),
]}
# the arch a call that names none models (emulated_mm, the command lines' dry runs): Hopper
DEFAULT_ARCH = "sm90"

# Archs whose torch._scaled_mm (tensorwise scales, cuBLASLt) output follows the modelled
# cuBLASLt 12.8.3.14 epilogue (preview/scaled_epilogue.py) and split-K layout
# (schedule_split.py), with the evidence: arch -> (split layout, k-tile, evidence).
CUBLASLT_SCALED_MM: dict[str, tuple[str, int, str]] = {
    "sm89": ("interleaved", 64, "RTX 4060 recordings (cuBLASLt 12.8.3.14, torch 2.7.1) "
             "published by mmaemu 0.1.0"),
    "sm90": ("contiguous", 128, "H100 PCIe probe (cuBLASLt 12.8.3.14, torch 2.7.1) as "
             "replayed by mmaemu 0.1.0"),
}

_ALIAS: dict[str, str] = {}
for _a in ARCHS.values():
    for _n in (_a.name, *_a.aliases, *_a.gpus):
        _ALIAS[norm(_n)] = _a.name


# --------------------------------------------------------------------------------------
# GPUs: the device properties a kernel's launch depends on (PyTorch's reduction kernels
# size their grid from them: aten_cuda/config.py).  One row per part; ``emulate("H100 PCIe")``
# names one (its arch from ARCHS), ``emulate("sm90")`` gets the arch's first GPU.
# Figures: NVIDIA's data sheets / cudaDeviceProp (multiProcessorCount,
# maxThreadsPerMultiProcessor: 2048 on sm70/80/90/100, 1024 on sm75, 1536 on sm86/89/120).
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Gpu:
    name: str
    arch: str
    sms: int
    max_threads_per_sm: int


GPUS: dict[str, Gpu] = {g.name: g for g in [
    Gpu("V100", "sm70", 80, 2048),
    Gpu("T4", "sm75", 40, 1024),
    Gpu("A100", "sm80", 108, 2048),
    Gpu("A30", "sm80", 56, 2048),
    Gpu("A10", "sm86", 72, 1536),
    Gpu("A40", "sm86", 84, 1536),
    Gpu("RTX3090", "sm86", 82, 1536),
    Gpu("L40S", "sm89", 142, 1536),
    Gpu("L40", "sm89", 142, 1536),
    Gpu("L4", "sm89", 58, 1536),
    Gpu("RTX4090", "sm89", 128, 1536),
    Gpu("RTX 4060", "sm89", 24, 1536),
    Gpu("H100", "sm90", 132, 2048),          # the SXM part
    Gpu("H100 PCIe", "sm90", 114, 2048),
    Gpu("H200", "sm90", 132, 2048),
    Gpu("GH200", "sm90", 132, 2048),
    Gpu("H800", "sm90", 132, 2048),
    Gpu("B200", "sm100", 148, 2048),
    Gpu("RTX5090", "sm120", 170, 1536),
]}

# MIG slices: a GPU instance is a device of its own to CUDA (multiProcessorCount = its SMs),
# named "<part> MIG <profile>".  SMs per profile as `nvidia-smi mig -lgip` lists them
# (NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles": A100 / A30 slices of 1/7
# and 1/4 of the SMs, 14 SMs each; GH100 parts (H100 SXM5 80GB, H200 141GB) 16 / 26 / 32 /
# 60 / 64 / 132 SMs, the -lgip listing quoted in NVIDIA/mig-parted issue #120).  "+me"
# profiles have the SMs of the profile without it.
MIG_SLICES: dict[str, dict[str, int]] = {
    "A100": {"1g.5gb": 14, "2g.10gb": 28, "3g.20gb": 42, "4g.20gb": 56, "7g.40gb": 98,
             "1g.10gb": 14, "1g.20gb": 14, "2g.20gb": 28, "3g.40gb": 42, "4g.40gb": 56,
             "7g.80gb": 98},
    "A30": {"1g.6gb": 14, "2g.12gb": 28, "4g.24gb": 56},
    "H100": {"1g.10gb": 16, "1g.20gb": 26, "2g.20gb": 32, "3g.40gb": 60, "4g.40gb": 64,
             "7g.80gb": 132},
    "H200": {"1g.18gb": 16, "1g.35gb": 26, "2g.35gb": 32, "3g.71gb": 60, "4g.71gb": 64,
             "7g.141gb": 132},
}
for _part, _profiles in MIG_SLICES.items():
    for _prof, _sms in _profiles.items():
        _p = GPUS[_part]
        GPUS[f"{_part} MIG {_prof}"] = Gpu(f"{_part} MIG {_prof}", _p.arch, _sms,
                                           _p.max_threads_per_sm)
_GPU_ALIAS = {norm(k): k for k in GPUS}
_GPU_ALIAS.update({norm("H100 SXM"): "H100", norm("H100 SXM5"): "H100"})
_GPU_ALIAS.update({norm(f"{k}+me"): k for k in GPUS if " MIG " in k})
for _g in GPUS.values():
    _ALIAS.setdefault(norm(_g.name), _g.arch)
_ALIAS.setdefault(norm("H100 SXM"), "sm90")
_ALIAS.setdefault(norm("H100 SXM5"), "sm90")


def gpu(name=None) -> Gpu:
    """The GPU row named ``name`` (a GPU name such as ``"H100 PCIe"``, or an arch name /
    alias: its first GPU with a row); None: the default arch's."""
    if isinstance(name, Gpu):
        return name
    key = norm(str(name if name is not None else DEFAULT_ARCH))
    if key in _GPU_ALIAS:
        return GPUS[_GPU_ALIAS[key]]
    arch = canonical_arch(name if name is not None else DEFAULT_ARCH)
    for g in ARCHS[arch].gpus:
        if norm(g) in _GPU_ALIAS:
            return GPUS[_GPU_ALIAS[norm(g)]]
    raise ValueError(f"no GPU row for arch {arch}; name one of: {', '.join(GPUS)}")


def nvidia_arch_name(cc) -> str:
    """How the registry spells the NVIDIA arch of CUDA compute capability ``cc`` ((8, 7) ->
    "sm87"), whether or not it has rows (the inverse of ``Arch.capability``)."""
    return f"sm{int(cc[0])}{int(cc[1])}"


def arch_of_capability(cc) -> str | None:
    """The registry's NVIDIA arch of CUDA compute capability ``cc`` ((9, 0) -> "sm90");
    None if the registry has none."""
    name = nvidia_arch_name(cc)
    return name if name in ARCHS else None


def canonical_arch(name: str) -> str:
    key = norm(str(name))
    if key not in _ALIAS:
        raise ValueError(
            f"unknown arch {name!r}; supported: {', '.join(ARCHS)} "
            f"(aliases such as volta, hopper, cdna3, V100, A100, H100, B200, MI300X)")
    return _ALIAS[key]


# --------------------------------------------------------------------------------------
# Instruction rows
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    arch: str
    formats: tuple[str, ...]
    out: str
    op: str
    instruction: str         # id in instructions.INSTRUCTIONS
    params: dict = field(default_factory=dict)
    scale_format: str | None = None
    block_sizes: tuple[int, ...] = ()
    default: bool = True     # the instruction libraries use for these types
    source: str = ""

    @property
    def instr(self) -> Instruction:
        return INSTRUCTIONS[self.instruction]

    @property
    def name(self) -> str:
        """The instruction's display name (``Spec.instruction``, ``instructions()``)."""
        return self.instr.name

    def make_spec(self, fa: str, fb: str, block_size: int = 0) -> Spec:
        p = dict(self.params)
        vendor = ARCHS[self.arch].vendor
        if vendor == "nvidia":
            p.setdefault("nan_bits", NVIDIA_NAN[self.out])
            if "zero_exp" in ELEMENTARY[self.op].zero_fields:
                p.setdefault("zero_exp", ZERO_EXP_GST if self.op == "gst_fdpa" else
                             ZERO_EXP[self.arch][self.out == "fp32"])
        return Spec(op=self.op, in_format=fa, in_format_b=None if fb == fa else fb,
                    out_format=self.out, scale_format=self.scale_format,
                    block_size=block_size, arch=self.arch, instruction=self.name,
                    notes=self.source, **p)

    def first_spec(self) -> Spec:
        """The spec on the row's first input format and first block size (one per row)."""
        return self.make_spec(self.formats[0], self.formats[0],
                              self.block_sizes[0] if self.block_sizes else 0)



# The exponent zero terms (zero products, K padding, c = 0, zero groups) take in the alignment
# maximum of NVIDIA's fused ops, (fp16 output, fp32 output): MMA-Sim 2.1.1's hardware-probed
# values (docs/model.md section 6.3); sm86 takes Ampere's (not probed by MMA-Sim).
ZERO_EXP = {"sm70": (-19, -131), "sm75": (-20, -132), "sm80": (-20, -132), "sm86": (-20, -132),
            "sm89": (-20, -132), "sm90": (-21, -133), "sm100": (-21, -133), "sm120": (-21, -133)}
ZERO_EXP_GST = -139   # kind::mxf4 / mxf4nvf4 (GST-FDPA, F = 35)


def _t(L, F, rho, **kw):
    # NVIDIA's fused ops write a zero result as +0 (MMA-Sim 2.1, docs/model.md section 6.1)
    return dict(L=L, F=F, rho=rho, zero_sign="plus", **kw)


def _fma_rows(arch):
    """The fp64 and fp32 rows: chains of IEEE FMA on the arch's ``fp64`` / ``fp32``
    instructions."""
    a = ARCHS[arch]
    src = "seed 003 Tables 3, 6: chain of IEEE FMA"
    if a.vendor == "nvidia":
        src += "; NVIDIA has no fp32 tensor-core input, fp32 runs as an FFMA chain"
    src64 = src if INSTRUCTIONS[a.fp64].family != "fma" or a.vendor == "nvidia" else \
        f"IEEE FMA chain (no fp64 matrix core on {a.family})"
    return [
        Row(arch, ("fp64",), "fp64", "fma", a.fp64, dict(rho="rne_fp64"), source=src64),
        Row(arch, ("fp32",), "fp32", "fma", a.fp32, dict(rho="rne_fp32"), source=src),
    ]


def _nv_half_rows(arch, L, F, instr, tf32=None, bf16=True, floor=None):
    rows = []
    src = "seed 003 Table 4"
    fl = {} if floor is None else {"emax_floor": floor}
    if tf32:
        rows.append(Row(arch, ("tf32",), "fp32", "t_fdpa", tf32[2], _t(tf32[0], tf32[1], "rz_fp32", **fl),
                        source=src + ("; emax floor -133 from seed 002" if floor else "")))
    if bf16:
        rows.append(Row(arch, ("bf16",), "fp32", "t_fdpa", instr, _t(L, F, "rz_fp32", **fl),
                        source=src + ("; emax floor -133 from seed 002" if floor else "")))
    rows.append(Row(arch, ("fp16",), "fp32", "t_fdpa", instr, _t(L, F, "rz_fp32"), source=src))
    rows.append(Row(arch, ("fp16",), "fp16", "t_fdpa", instr, _t(L, F, "rne_fp16"), source=src))
    return rows


def _blackwell_rows(arch):
    r = _fma_rows(arch)
    kind = "tcgen05" if arch == "sm100" else "sm120"      # instruction ids f"{kind}.f16", ...
    r += _nv_half_rows(arch, 16, 25, f"{kind}.f16", tf32=(8, 25, f"{kind}.tf32"),
                       floor=-133 if arch == "sm100" else None)
    src4, src5 = "seed 003 Table 4", "seed 003 Table 5"
    r += [
        Row(arch, F8F6F4, "fp32", "t_fdpa", f"{kind}.f8f6f4", _t(32, 25, "rz_fp32"), source=src4),
        Row(arch, F8F6F4, "fp16", "t_fdpa", f"{kind}.f8f6f4", _t(32, 25, "rne_fp16"), source=src4),
        # MX (E8M0 scales, 32-element blocks).  FP4 defaults to kind::mxf4 (GST-FDPA).
        # a group whose products cancel keeps its scale exponent (MMA-Sim, section 6.2)
        Row(arch, ("fp4_e2m1",), "fp32", "gst_fdpa", f"{kind}.mxf4",
            _t(64, 35, "rz_fp32", G=16, cancelled_group="keep"), scale_format="ue8m0",
            block_sizes=(32, 16), source=src5),
        Row(arch, F8F6F4, "fp32", "st_fdpa", f"{kind}.mxf8f6f4",
            _t(32, 25, "rz_fp32"), scale_format="ue8m0", block_sizes=(32,), source=src4),
        # NVFP4 (UE4M3 scales, 16-element blocks)
        Row(arch, ("fp4_e2m1",), "fp32", "gst_fdpa", f"{kind}.mxf4nvf4",
            _t(64, 35, "rz_fp32", G=16, cancelled_group="keep"), scale_format="ue4m3",
            block_sizes=(16,), source=src5),
    ]
    return r


ROWS: list[Row] = []
# NVIDIA -------------------------------------------------------------------------------
ROWS += _fma_rows("sm70")
ROWS += [
    # an fp16 C is read as it is (m8n8k4.f32.f16.f16.f16: MMA-Sim, docs/model.md 6.4)
    Row("sm70", ("fp16",), "fp32", "t_fdpa", "hmma.884", _t(4, 23, "rz_fp32", c_format="fp16"),
        source="seed 003 Table 4"),
    Row("sm70", ("fp16",), "fp16", "t_fdpa", "hmma.884", _t(4, 23, "rne_fp16"), source="seed 003 Table 4"),
]
ROWS += _fma_rows("sm75")
ROWS += _nv_half_rows("sm75", 8, 24, "hmma.1688", bf16=False)
for _arch in ("sm80", "sm86"):
    ROWS += _fma_rows(_arch)
    ROWS += _nv_half_rows(_arch, 8, 24, "hmma.16816", tf32=(4, 24, "hmma.1684"))
ROWS += _fma_rows("sm89")
ROWS += _nv_half_rows("sm89", 8, 24, "hmma.16816", tf32=(4, 24, "hmma.1684"))
ROWS += [
    Row("sm89", FP8, "fp32", "t_fdpa", "qmma.16832", _t(16, 13, "rz_e8m13"), source="seed 003 Table 4"),
    Row("sm89", FP8, "fp16", "t_fdpa", "qmma.16832", _t(16, 13, "rne_fp16"), source="seed 003 Table 4"),
]
ROWS += _fma_rows("sm90")
ROWS += _nv_half_rows("sm90", 16, 25, "hgmma.k16", tf32=(8, 25, "hgmma.k8.tf32"), floor=-133)
ROWS += [
    Row("sm90", FP8, "fp32", "t_fdpa", "qgmma.k32", _t(32, 13, "rz_e8m13"), source="seed 003 Table 4"),
    Row("sm90", FP8, "fp16", "t_fdpa", "qgmma.k32", _t(32, 13, "rne_fp16"), source="seed 003 Table 4"),
]
ROWS += _blackwell_rows("sm100")
ROWS += _blackwell_rows("sm120")
# The warp-level fp8 instruction of Hopper and Blackwell (docs/model.md section 2.1): not
# what libraries use (wgmma / tcgen05.mma, the defaults above), so instruction variants.
# fp16 accumulators: the fp8 bytes are unpacked to fp16 pairs (exact) and run as two
# HMMA.16816 over alternating pairs of k (k mod 4 in {0, 1}, then {2, 3}), each from zero
# and rounded to the output format, then c is added (HADD2 / FADD).  F = 25 is the HMMA's
# (the recordings only bound it: F >= 18 (fp16), >= 20 (fp32)).
_MMA_SYNC_FP8 = "mma.sync.m16n8k32"
_PASSES = dict(passes=2, pass_width=2, c_join="final")
ROWS += [
    Row("sm90", FP8, "fp16", "t_fdpa", _MMA_SYNC_FP8, _t(16, 25, "rne_fp16", **_PASSES),
        default=False, source="recorded H100 fp8_e4m3 -> fp16 (tests/data/hwdata); SASS: "
        "F2FP unpack, 2 x HMMA.16816 from zero, HADD2"),
    # The recorded H100 fp8 -> fp32 samples (c = 0) are exactly QGMMA's arithmetic: one
    # fused op over 32 k, F = 13, E8M13.  With c = 0 where c joins is not observed; like QGMMA.
    Row("sm90", FP8, "fp32", "t_fdpa", _MMA_SYNC_FP8, _t(32, 13, "rz_e8m13"),
        default=False, source="recorded H100 fp8_e4m3/e5m2 -> fp32 (c = 0: where c joins "
        "is not observed)"),
    Row("sm100", FP8, "fp16", "t_fdpa", _MMA_SYNC_FP8, _t(16, 25, "rne_fp16", **_PASSES),
        default=False, source="recorded B200 fp8_e4m3 -> fp16 (tests/data/hwdata)"),
    Row("sm100", FP8, "fp32", "t_fdpa", _MMA_SYNC_FP8, _t(16, 25, "rz_fp32", **_PASSES),
        default=False, source="recorded B200 fp8_e4m3 -> fp32 (c added last; the pass "
        "layout is the fp16 instruction's: the fp32 samples do not show it)"),
]
# AMD ----------------------------------------------------------------------------------
ROWS += _fma_rows("gfx908")
ROWS += [
    Row("gfx908", ("fp16",), "fp32", "e_fdpa", "mfma.32x32x8f16", dict(L=4, rho="rne_fp32"), source="seed 003 Table 6"),
    Row("gfx908", ("bf16",), "fp32", "e_fdpa", "mfma.32x32x4bf16", dict(L=2, rho="rne_fp32"), source="seed 003 Table 6"),
]
ROWS += _fma_rows("gfx90a")
# L = the instruction's K: the accumulator input is flushed once per instruction (MMA-Sim,
# docs/model.md 6.6; L = P is the old flush per group of P)
_FTZ = dict(rho="rne_fp32", flush_inputs=True)
ROWS += [
    Row("gfx90a", ("fp16",), "fp32", "ftz_addmul", "mfma.32x32x8f16", dict(L=8, P=4, **_FTZ), source="seed 003 Table 6"),
    Row("gfx90a", ("bf16",), "fp32", "ftz_addmul", "mfma.32x32x8bf16_1k", dict(L=8, P=4, **_FTZ), source="seed 003 Table 6"),
    Row("gfx90a", ("bf16",), "fp32", "ftz_addmul", "mfma.32x32x4bf16", dict(L=4, P=2, **_FTZ),
        default=False, source="seed 003 Table 6 (CDNA1-era bf16 instruction, no _1k suffix)"),
]
ROWS += _fma_rows("gfx942")
# tr_renorm: MMA-Sim 2.1's final renormalisation (docs/model.md section 6.5)
_TR = dict(F=24, F2=31, rho="rne_fp32", tr_renorm=True)
ROWS += [
    Row("gfx942", ("xf32",), "fp32", "tr_fdpa", "mfma.32x32x4_xf32", dict(L=4, **_TR), source="seed 003 Table 7"),
    Row("gfx942", ("fp16",), "fp32", "tr_fdpa", "mfma.32x32x8_f16", dict(L=8, **_TR), source="seed 003 Table 7"),
    Row("gfx942", ("bf16",), "fp32", "tr_fdpa", "mfma.32x32x8_bf16", dict(L=8, **_TR), source="seed 003 Table 7"),
    Row("gfx942", FP8_FNUZ, "fp32", "gtr_fdpa", "mfma.32x32x16_fp8", dict(L=16, **_TR), source="seed 003 Table 7"),
]


# --------------------------------------------------------------------------------------
# Queries
# --------------------------------------------------------------------------------------

def archs() -> list[str]:
    """Canonical names of the supported architectures."""
    return list(ARCHS)


def instruction_archs(iid: str) -> tuple[str, ...]:
    """The archs whose registry rows run instruction ``iid`` (an id of isa.py), in ARCHS
    order: read off ROWS, so an instruction's archs are never restated."""
    if iid not in INSTRUCTIONS:
        raise ValueError(f"unknown instruction id {iid!r}; known: {', '.join(INSTRUCTIONS)}")
    have = {r.arch for r in ROWS if r.instruction == iid}
    return tuple(a for a in ARCHS if a in have)


def family_archs(family: str) -> tuple[str, ...]:
    """The archs with an instruction of this family (isa.FAMILIES), in ARCHS order."""
    have = {r.arch for r in ROWS if r.instr.family == family}
    return tuple(a for a in ARCHS if a in have)


def rows_for(arch: str) -> list[Row]:
    arch = canonical_arch(arch)
    return [r for r in ROWS if r.arch == arch]


def row(arch, in_format="fp16", out_dtype=None, *, in_format_b=None, instruction=None,
        scale_format=None) -> Row:
    """The registry row :func:`spec` models these types with (same arguments, no Spec)."""
    name = canonical_arch(arch)
    fa = get_format(in_format).name
    fb = get_format(in_format_b).name if in_format_b is not None else fa
    out = out_format(out_dtype) or default_out(fa)
    sf = get_format(scale_format).name if scale_format is not None else None
    rows = rows_for(name)
    cand = [r for r in rows if fa in r.formats and fb in r.formats]
    if not cand:
        have = sorted({f for r in rows for f in r.formats})
        pair = fa if fa == fb else f"{fa} x {fb}"
        where = [a for a in ARCHS if any(fa in r.formats and fb in r.formats
                                         for r in rows_for(a))]
        raise ValueError(f"{name} ({ARCHS[name].family}) has no instruction for {pair} inputs; "
                         f"supported input formats: {', '.join(have)}" +
                         (f"; {pair} runs on {archs_text(where)}" if where else ""))
    c2 = [r for r in cand if r.scale_format == sf]
    if not c2:
        raise ValueError(_no_scale_message(name, fa, fb, sf, cand))
    c3 = [r for r in c2 if r.out == out]
    if not c3:
        have = sorted({r.out for r in c2})
        raise ValueError(f"{name} has no {fa} instruction producing {out}; "
                         f"available outputs: {', '.join(have)}")
    if instruction is not None:
        c4 = [r for r in c3 if answers_to(r.instruction, instruction)]
        if not c4:
            raise ValueError(f"{name} has no instruction {instruction!r} for {fa} -> {out}"
                             f"{f' with {sf} scales' if sf else ''}; "
                             f"available: {', '.join(r.name for r in c3)}")
        return c4[0]
    defaults = [r for r in c3 if r.default]
    return (defaults or c3)[0]


def archs_text(names) -> str:
    """"sm100 (Blackwell) or sm120 (RTX Blackwell)": archs as a message names them."""
    named = [f"{a} ({ARCHS[a].family})" for a in names]
    return " or ".join(named) if len(named) < 3 else ", ".join(named[:-1]) + " or " + named[-1]


def archs_with(scale_format: str | None, in_format: str | None = None,
               in_format_b: str | None = None) -> list[str]:
    """The archs with an instruction taking ``scale_format`` (None: unscaled) and these input
    formats (None: any), in registry order: what a message offers where an arch lacks one."""
    fb = in_format_b or in_format
    return [a for a in ARCHS if any(r.scale_format == scale_format and in_format in
                                    (None, *r.formats) and fb in (None, *r.formats)
                                    for r in rows_for(a))]


def _no_scale_message(name: str, fa: str, fb: str, sf: str | None, cand: list[Row]) -> str:
    """``name`` has instructions for fa x fb, none taking ``sf``: what they take, and which
    archs take ``sf`` (derived from the rows: no arch is named here)."""
    pair = fa if fa == fb else f"{fa} x {fb}"
    have = sorted({r.scale_format or "" for r in cand})
    what = " and ".join(scales_text(h or None) for h in have)
    msg = (f"{name} ({ARCHS[name].family}) has no {pair} instruction with {scales_text(sf)}; "
           f"its {pair} instructions take {what}")
    others = [a for a in archs_with(sf, fa, fb) if a != name]
    if others:
        return msg + f"; {pair} with {scales_text(sf)} needs {archs_text(others)}"
    takes = [f for f in INPUT_FORMATS if any(f in r.formats for r in ROWS if r.scale_format == sf)]
    return msg + (f"; no arch in the registry takes {pair} with {scales_text(sf)}" +
                  (f" ({sf} scales go with {', '.join(takes)} inputs)" if takes else ""))


def spec(arch, in_format="fp16", out_dtype=None, *, in_format_b=None, instruction=None,
         scale_format=None, block_size=None) -> Spec:
    """The model used for ``arch`` with these types.

    ``arch`` may be a name/alias or a :class:`Spec` (returned as is after checking formats).
    ``out_dtype`` defaults to fp32 (fp64 for fp64 inputs).  ``instruction`` picks a
    non-default instruction where an arch has several (``instructions(arch, fmt)`` lists them):
    its id, name, family, PTX / SASS / ISA name or an alias of isa.py.
    Raises ``ValueError`` naming what is supported.
    """
    sp = as_spec(arch)
    if sp is not None:
        return sp
    row_ = row(arch, in_format, out_dtype, in_format_b=in_format_b, instruction=instruction,
               scale_format=scale_format)
    fa = get_format(in_format).name
    fb = get_format(in_format_b).name if in_format_b is not None else fa
    bs = 0
    if row_.scale_format is not None:
        bs = block_size if block_size is not None else row_.block_sizes[0]
        if bs not in row_.block_sizes:
            raise ValueError(f"{row_.arch} {row_.name} takes {row_.scale_format} scales per "
                             f"{' or '.join(map(str, row_.block_sizes))} elements, not {bs}")
    return row_.make_spec(fa, fb, bs)


def instructions(arch, in_format, out_dtype=None, scale_format=None) -> list[str]:
    """Names of the instructions available for these types (the default first)."""
    fa = get_format(in_format).name
    out = out_format(out_dtype) or default_out(fa)
    sf = get_format(scale_format).name if scale_format else None
    rows = [r for r in rows_for(arch) if fa in r.formats and r.out == out and r.scale_format == sf]
    rows.sort(key=lambda r: not r.default)
    return [r.name for r in rows]


def all_specs() -> list[Spec]:
    """One spec per registry row and input-format combination (for tests and tables)."""
    out = []
    for r in ROWS:
        for fa in r.formats:
            for fb in r.formats:
                for bs in (r.block_sizes or (0,)):
                    out.append(r.make_spec(fa, fb, bs))
    return out


def table() -> list[dict]:
    """Rows as dicts, for ``mma-emu archs`` and the README table."""
    res = []
    for r in ROWS:
        s = r.first_spec()
        res.append(dict(arch=r.arch, family=ARCHS[r.arch].family, formats="/".join(r.formats),
                        out=r.out, scale=(f"{r.scale_format}/{','.join(map(str, r.block_sizes))}"
                                          if r.scale_format else ""),
                        instruction=r.name + ("" if r.default else " (alt)"),
                        model=s.describe(), source=r.source))
    return res


def instruction_spec(arch, in_format: str, out_dtype=None, instruction: str = "",
                     in_format_b: str | None = None):
    """The emulator's model of one instruction kernel of ``isa.KERNELS`` (csrc/cuda/
    mma_instr.cu; ``native.mma_instruction``, the PTX interpreter's ``mma`` / ``wgmma``) on
    ``arch``.

    Returns ``(spec, source)``; ``spec`` is None when the registry has no model of that
    instruction yet (``source`` then says why).  Rules, in order:

    1. a registry row whose instruction (isa.py) this kernel issues (e.g. the
       instruction variant "mma.sync.m16n8k32" of sm90);
    2. the warp-level fp8 ``mma.m16n8k32`` on an arch whose fp8 default is a group-level
       instruction (wgmma, tcgen05): no model (it computes differently: the recordings in
       tests/data/hwdata), so None;
    3. otherwise the arch's default row, with L = min(L, the instruction's K): a chain of
       k-element instructions is a chain of k-element chunks (all-zero products change
       neither the alignment nor the sum), so ``mma.m16n8k8`` runs the L = 8 model.
    """
    if instruction not in KERNELS:
        raise ValueError(f"instruction_spec: unknown instruction {instruction!r}; known: "
                         f"{', '.join(KERNELS)}")
    kern = KERNELS[instruction]
    cc = ARCHS[canonical_arch(arch)].capability
    if kern.sm90a and not (cc and kern.runs_on(cc)):
        raise ValueError(f"instruction_spec: {instruction} exists on "
                         f"{arch_of_capability(kern.min_cc)} only, not {arch}")
    out = out_format(out_dtype)
    fb = in_format_b or in_format
    for iid in issued_by(instruction):
        try:
            s = spec(arch, in_format, out, in_format_b=fb, instruction=iid)
        except ValueError:
            continue
        return s, f"registry row '{s.instruction}'"
    base_row = row(arch, in_format, out, in_format_b=fb)  # ValueError: no such types
    base = base_row.make_spec(in_format, fb)
    group = base_row.instr.group
    k = KERNELS[instruction].k
    if instruction == "mma.m16n8k32" and group:
        return None, (f"no model yet: the registry has no {base.arch} mma.sync.m16n8k32 row "
                      f"for {in_format}{'' if fb == in_format else ' x ' + fb} -> "
                      f"{base.out_format} (the default '{base.instruction}' computes "
                      "differently; tests/data/hwdata)")
    same = (" (assumed for the warp-level instruction; the H100 recordings, taken through "
            "wmma, agree for fp16, bf16 and tf32)") if group else ""
    if base.elementary.fixed_L or base.L <= k:
        return base, f"default row '{base.instruction}'{same}"
    return base.replace(L=k, arch=base.arch, instruction=instruction), (
        f"default row '{base.instruction}' with L = {k} (one instruction = one chunk){same}")
