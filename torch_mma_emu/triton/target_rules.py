"""Triton's per-target rules, in one place: which matrix instruction Triton makes of one
``tl.dot`` on an arch (:func:`choose`, a :class:`DotPlan`), the backend's dot options, the
smallest dot, the precision of a reduction's dot, the path of ``tl.dot_scaled``, which
archs reduce with DPP and how fp32 is converted to fp8.

The rules follow Triton 3.6's compiler (AccelerateMatmul.cpp and supportMMA for NVIDIA,
AccelerateAMDMatmul.cpp for AMD, F32DotTC.cpp for the fp32 splits, the backends'
compiler.py for the options) and are checked against the TTGIR that the installed Triton
compiles for each target (tests/triton_emu/test_triton_choice.py, no GPU needed).  docs/triton.md has
the table.  NVIDIA rules are by compute capability (``NV_CC``), AMD rules by CDNA generation
(``Arch.cdna``): never by an arch's name.  Pure Python: importing this module does not
import Triton.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Optional

from ..isa import FAMILIES, INSTRUCTIONS
from ..registry import ARCHS, DEFAULT_ARCH, canonical_arch, family_archs, row as registry_row

# Triton's scalar type names -> the project's format names (triton.language dtype.name)
TL_FORMATS = {"fp16": "fp16", "bf16": "bf16", "fp32": "fp32", "fp64": "fp64",
              "fp8e4nv": "fp8_e4m3", "fp8e5": "fp8_e5m2", "fp8e4b8": "fp8_e4m3fnuz",
              "fp8e5b16": "fp8_e5m2fnuz"}
OCP_FP8 = ("fp8_e4m3", "fp8_e5m2")
FNUZ_FP8 = ("fp8_e4m3fnuz", "fp8_e5m2fnuz")
PATHS = FAMILIES          # the instruction families of isa.py
PRECISIONS = ("tf32", "tf32x3", "ieee", "bf16x3", "bf16x6")
NV_CC = {a.name: 10 * a.capability[0] + a.capability[1] for a in ARCHS.values()
         if a.capability}                # Triton's "cuda:90" form
# Triton enables XF32 (input_precision="tf32") on CDNA3 only (the AMD compiler.py's
# parse_options; CDNA4 has no xf32 MFMA)
XF32_CDNA = 3
_BITS = {"fp16": 16, "bf16": 16, "fp32": 32, "tf32": 32, "fp64": 64}
# the instruction families of each vendor's archs
_VENDOR_PATHS = {v: {p for p in PATHS if any(ARCHS[a].vendor == v for a in family_archs(p))}
                 for v in ("nvidia", "amd")}


@dataclass(frozen=True)
class DotPlan:
    """How one ``tl.dot`` runs on the target: ``path`` (the instruction family),
    ``fmt_a``/``fmt_b`` (what the instruction multiplies, after Triton's conversions),
    ``out`` (the accumulator format of the instruction chain), ``convert`` (Triton converts
    both operands to this format first, exactly: fp8 -> fp16, or to the accumulator type on
    the FMA path), ``promote_every`` (Hopper fp8: K elements per partial accumulator added
    in fp32), ``round_result`` (the fp32 chain is rounded to this format after the dot: AMD
    keeps fp16 accumulators in fp32), ``instruction`` (a registry variant; None: the arch's
    default row), ``row`` (the id of the arch's instruction of this path, isa.py,
    that the default row models; None where the default row, of another family, stands in),
    ``note`` (assumptions) and ``arch`` (the target; None for a plan made without one)."""

    path: str
    fmt_a: str
    fmt_b: str
    out: str
    convert: Optional[str] = None
    promote_every: Optional[int] = None
    round_result: Optional[str] = None
    instruction: Optional[str] = None
    note: str = ""
    row: Optional[str] = None
    arch: Optional[str] = None

    @property
    def in_format(self) -> str:
        return self.fmt_a if self.fmt_a == self.fmt_b else f"{self.fmt_a},{self.fmt_b}"

    def model(self) -> Optional[str]:
        """The id of the registry row whose arithmetic runs the plan (what ``run_plan``
        hands ``emulated_mm``); None without an arch."""
        if self.arch is None:
            return None
        return _model_row(self.arch, self.fmt_a, self.fmt_b, self.out,
                          self.instruction or self.row)

    def describe(self) -> str:
        """The plan as ``em.counts`` / ``em.summary()`` name it: the instruction family and
        types, Triton's conversions, the instruction issued and the registry row that models
        it ("standing in" where the arch has no row of this family for these types)."""
        s = f"{self.path} {self.in_format}->{self.out}"
        if self.convert:
            s += f" (operands converted to {self.convert})"
        if self.promote_every:
            s += f", fp32 promotion every {self.promote_every}"
        if self.round_result:
            s += f", rounded to {self.round_result}"
        if self.instruction:
            s += f": instruction {self.instruction}"
        elif self.row:
            s += f": instruction {INSTRUCTIONS[self.row].name}"
        else:
            s += f": instruction {self.path} (no {self.arch or 'registry'} row of its own)"
        model = self.model()
        if model is not None:
            stand_in = model != self.row and not self.instruction
            s += f", model {self.arch} {model}" + (" standing in" if stand_in else "")
        return s


def _nv_path(cc, fmt, out, imp, M, N, K, batched, num_warps):
    """Triton's getMMAVersionSafe + supportMMA: wgmma / tcgen05 where they apply."""
    bits = _BITS.get(fmt, 8)
    ok_type = fmt in ("fp16", "bf16", "tf32") or fmt in OCP_FP8
    if cc == 90:
        if (ok_type and not batched and num_warps % 4 == 0 and M % 64 == 0 and N % 16 == 0
                and K >= 256 // bits
                and not (fmt in OCP_FP8 and out == "fp32" and imp < 32)):
            return "wgmma"
    elif 100 <= cc < 110:
        if ok_type and not batched and num_warps in (4, 8) and M % 64 == 0 and N % 16 == 0:
            return "tcgen05"
    return "mma.sync"


def _nv_plan(arch, fa, fb, out, precision, imp, M, N, K, batched, num_warps, force):
    cc = NV_CC[arch]
    for f in (fa, fb):
        if f in FNUZ_FP8:
            raise TypeError(f"torch_mma_emu.triton: {f} (AMD fnuz fp8) has no tl.dot on NVIDIA "
                            f"{arch}; Triton's CUDA backend takes float8e4nv / float8e5")
        if f == "fp8_e4m3" and cc < 89:
            raise TypeError(f"torch_mma_emu.triton: Triton does not support float8e4nv "
                            f"(torch.float8_e4m3fn) on {arch} (it needs sm89 or newer); "
                            "float8e5 (torch.float8_e5m2) is upcast to fp16 there")
    if fa == "fp64":
        return DotPlan(force or "fma", "fp64", "fp64", "fp64",
                       note=f"fp64: FMA chain (the arch's fp64 instruction, "
                            f"{INSTRUCTIONS[ARCHS[arch].fp64].name}, computes the same)")
    if fa == "fp32" and (precision == "ieee" or cc < 80):
        if force not in (None, "fma"):
            raise ValueError(f"torch_mma_emu.triton: fp32 tl.dot with input_precision="
                             f"{precision!r} runs on the FMA path, not {force}")
        return DotPlan("fma", "fp32", "fp32", "fp32")
    fmt = "tf32" if fa == "fp32" else fa
    if cc < 80 or force == "fma":        # Triton: MMA below sm80 is deprecated -> FMA path
        if out != "fp32":
            raise NotImplementedError(f"torch_mma_emu.triton: the FMA path with a {out} "
                                      "accumulator (an fp16 FMA chain) is not modelled")
        return DotPlan("fma", "fp32", "fp32", "fp32", convert="fp32",
                       note="Triton's FMA path: operands converted to fp32, FMA chain along K")
    path = force or _nv_path(cc, fmt, out, imp, M, N, K, batched, num_warps)
    if path not in _VENDOR_PATHS["nvidia"]:
        raise ValueError(f"torch_mma_emu.triton: {arch} has no {path} path")
    if arch not in family_archs(path):
        raise ValueError(f"torch_mma_emu.triton: {path} does not exist on {arch}")
    fmt_b = "tf32" if fb == "fp32" else fb
    note = ""
    if path == "mma.sync" and cc in (90, 100):
        note = ("mma.sync computes like the registry row (the sm90 rows were recorded through "
                "mma.sync; on sm100 this is assumed)")
    if fmt in OCP_FP8:
        native = path in ("wgmma", "tcgen05") or cc == 89 or cc // 10 == 12
        if not native:   # Triton upcasts fp8 to fp16 for mma.sync where SASS would anyway
            return DotPlan(path, "fp16", "fp16", out, convert="fp16",
                           note="fp8 operands converted to fp16 (exact), fp16 mma.sync")
        P = None
        if path == "wgmma" and out == "fp32" and imp <= K:
            P = max(1, -(-imp // 32)) * 32       # each wgmma is k32; promote at >= imp
        return DotPlan(path, fmt, fmt_b, out, promote_every=P, note=note)
    return DotPlan(path, fmt, fmt_b, out, note=note)


def _mfma_kdim(version, fmt, non_k):
    """K of one MFMA instruction (Triton's MfmaGroup), for the 32x32 and 16x16 variants."""
    if fmt == "fp32":
        return 2 if non_k == 32 else 4
    if fmt == "xf32":
        return 4 if non_k == 32 else 8
    if fmt in FNUZ_FP8:
        return 16 if non_k == 32 else 32
    if fmt == "bf16" and version == 1:
        return 4 if non_k == 32 else 8
    return 8 if non_k == 32 else 16


def _amd_plan(arch, fa, fb, out, precision, imp, M, N, K, batched, num_warps, force):
    v = ARCHS[arch].cdna
    if fa == "fp64":         # the family of the arch's fp64 instruction: vector ALU or MFMA
        return DotPlan(force or INSTRUCTIONS[ARCHS[arch].fp64].family, "fp64", "fp64", "fp64",
                       note=f"fp64: FMA chain (the arch's fp64 instruction, "
                            f"{INSTRUCTIONS[ARCHS[arch].fp64].name}, computes the same)")
    if fa == "fp32":
        if precision == "tf32" and v != XF32_CDNA:
            have = ", ".join(a.name for a in ARCHS.values() if a.cdna == XF32_CDNA)
            raise ValueError(f"torch_mma_emu.triton: input_precision='tf32' needs "
                             f"CDNA{XF32_CDNA} ({have}) on AMD, not {arch}")
        fmt = "xf32" if precision == "tf32" else "fp32"
    else:
        fmt = fa
    convert = None
    fmt_b = fmt if fa == "fp32" else fb
    if {fa, fb} & set(FNUZ_FP8) and v != 3:
        force = force or "fma"             # fnuz MFMA on CDNA3 only: elsewhere the FMA path
    elif {fa, fb} & set(OCP_FP8):
        fmt = fmt_b = convert = "fp16"     # no MFMA for them: Triton converts to fp16
    non_k = 32 if min(M, N) >= 32 else (16 if min(M, N) >= 16 else 0)
    path = force
    if path is None:
        if non_k == 0:
            raise NotImplementedError(
                f"torch_mma_emu.triton: a tl.dot of {M}x{N} on {arch}: Triton picks a 4x4 "
                "MFMA for tiles under 16 rows or columns, which is not modelled; use tiles of "
                "16 or more (or instruction='fma' for the FMA path)")
        path = "mfma" if K % _mfma_kdim(v, fmt, non_k) == 0 else "fma"
    if path not in _VENDOR_PATHS["amd"]:
        raise ValueError(f"torch_mma_emu.triton: {arch} has no {path} path")
    if path == "fma":
        if out != "fp32":
            raise NotImplementedError("torch_mma_emu.triton: the FMA path with an fp16 "
                                      "accumulator is not modelled")
        return DotPlan("fma", "fp32", "fp32", "fp32", convert="fp32",
                       note=f"K = {K} is not a multiple of the MFMA's K: Triton's FMA path")
    rnd = "fp16" if out == "fp16" else None    # MFMA accumulates in fp32 only
    note = "MFMA 16x16 computes like the registry's 32x32 row (L_max per seed 003 Table 7)" \
        if non_k == 16 else ""
    return DotPlan("mfma", fmt, fmt_b, "fp32", convert=convert, round_result=rnd, note=note)


def choose(arch: str, fmt_a: str, fmt_b: str, out: str, precision: str = "tf32",
           max_num_imprecise_acc: int = 0, shape=(64, 64, 64), batched: bool = False,
           num_warps: int = 4, instruction: Optional[str] = None) -> DotPlan:
    """The plan of one ``tl.dot`` of ``shape = (M, N, K)`` on ``arch``.

    ``fmt_a``/``fmt_b``: project format names of the operands (``TL_FORMATS``); ``out``:
    the dot's result type (fp32 / fp16 / fp64); ``precision``: the tf32 / ieee choice for fp32
    operands (tf32x3 / bf16x3 / bf16x6 are split into several dots by the caller);
    ``instruction``: a path in ``PATHS`` to override Triton's choice."""
    arch = canonical_arch(arch)
    if instruction is not None and instruction not in PATHS:
        raise ValueError(f"torch_mma_emu.triton: instruction={instruction!r} is not a path; "
                         f"paths: {', '.join(PATHS)} (registry instruction names go through "
                         "emulate(..., instruction=...) as variants)")
    M, N, K = shape
    if fmt_a != fmt_b and not (fmt_a in OCP_FP8 + FNUZ_FP8 and fmt_b in OCP_FP8 + FNUZ_FP8):
        raise TypeError(f"torch_mma_emu.triton: tl.dot of {fmt_a} x {fmt_b}: Triton takes "
                        "equal types (fp8 types mix)")
    vendor = ARCHS[arch].vendor
    make = _nv_plan if vendor == "nvidia" else _amd_plan
    plan = make(arch, fmt_a, fmt_b, out, precision, max_num_imprecise_acc, M, N, K, batched,
                num_warps, instruction)
    return replace(plan, row=_row_of(arch, plan.fmt_a, plan.fmt_b, plan.out, plan.path),
                   arch=arch)


@lru_cache(maxsize=None)
def _model_row(arch, fa, fb, out, instruction) -> Optional[str]:
    try:
        return registry_row(arch, fa, out, in_format_b=fb, instruction=instruction).instruction
    except ValueError:
        return None


@lru_cache(maxsize=None)
def _row_of(arch, fa, fb, out, path) -> Optional[str]:
    """The instruction id of the arch's default row for these types when it is of the
    path's family (the instruction Triton issues), else None."""
    try:
        r = registry_row(arch, fa, out, in_format_b=fb)
    except ValueError:
        return None
    return r.instruction if r.instr.family == path else None



# -- the backend's other rules for a target ------------------------------------------------

def gpu_target(arch: Optional[str]) -> tuple:
    """The fields of Triton's ``GPUTarget`` for ``arch``: ("cuda", 90, 32), ("hip", "gfx942",
    64) (AMD's wave size: 64 before gfx10, the HIP backend's HIPOptions); no arch (a Spec's
    block): the default arch's."""
    a = ARCHS[canonical_arch(arch if arch is not None else DEFAULT_ARCH)]
    if a.vendor == "nvidia":
        return ("cuda", NV_CC[a.name], 32)
    return ("hip", a.name, 64 if a.gfx_version[0] < 10 else 32)


def backend_dot_options(arch: str) -> dict:
    """The target backend's dot defaults that Triton's interpreter options carry (Triton 3.6
    third_party/{nvidia,amd}/backend/compiler.py)."""
    a = ARCHS[canonical_arch(arch)]
    if a.vendor == "nvidia":
        cc = NV_CC[a.name]
        return dict(default_dot_input_precision="tf32",
                    allowed_dot_input_precisions=("tf32", "tf32x3", "ieee", "bf16x3",
                                                  "bf16x6"),
                    max_num_imprecise_acc_default=2**30 if cc == 90 else 0,
                    supported_fp8_dtypes=("fp8e4b15", "fp8e5")
                    + (("fp8e4nv",) if cc >= 89 else ()),
                    deprecated_fp8_dot_operand_dtypes=("fp8e4b15",) if cc >= 90 else ())
    return dict(default_dot_input_precision="ieee",
                allowed_dot_input_precisions=("bf16x3", "bf16x6", "ieee")
                + (("tf32",) if a.cdna == XF32_CDNA else ()),
                max_num_imprecise_acc_default=0,
                supported_fp8_dtypes=("fp8e4b8", "fp8e4nv", "fp8e5", "fp8e5b16"),
                deprecated_fp8_dot_operand_dtypes=())


def _nv_min_dot_size(lhs, rhs):       # the CUDA backend's min_dot_size
    return (1, 1, 32) if lhs.scalar.primitive_bitwidth == 8 else (1, 1, 16)


def _amd_min_dot_size(lhs, rhs):
    return (1, 1, 1)


def min_dot_size(arch: Optional[str]):
    """The backend's ``min_dot_size`` codegen function (None: no target)."""
    if arch is None:
        return None
    return _nv_min_dot_size if ARCHS[canonical_arch(arch)].vendor == "nvidia" \
        else _amd_min_dot_size


def reduce_dot_precision(arch: str) -> str:
    """The precision of the dot Triton makes of ``tl.sum(x[:, :, None] * y[None, :, :], 1)``
    (combine.py): "tf32", which AMD runs as fp32 MFMA where it has no XF32."""
    a = ARCHS[canonical_arch(arch)]
    return "ieee" if a.vendor == "amd" and a.cdna != XF32_CDNA else "tf32"


def scaled_dot_path(arch: str, fa: str, fb: str, M: int, ndim: int,
                    num_warps: int) -> Optional[str]:
    """The instruction of a ``tl.dot_scaled`` on an NVIDIA ``arch``: "tcgen05" or
    "mma.sync" block-scaled (sm100 / sm120 class), None where Triton decomposes it into
    plain dots (bf16 / fp16 operands, other archs)."""
    cc = NV_CC[canonical_arch(arch)]
    tc_ok = 100 <= cc < 110 and num_warps in (4, 8) and M % 64 == 0 and ndim == 2
    if (tc_ok or cc // 10 == 12) and "bf16" not in (fa, fb) and "fp16" not in (fa, fb):
        return "tcgen05" if tc_ok else "mma.sync"
    return None


def fp8_through_fp16(arch: Optional[str]) -> bool:
    """fp32 -> fp8 goes through fp16 (``cvt.rz.f16.f32``, then ``cvt.rn.satfinite``): the PTX
    Triton 3.6 emits for compute capability 8.9 (convert.py)."""
    return arch is not None and NV_CC.get(canonical_arch(arch)) == 89


@dataclass(frozen=True)
class Fp8Cast:
    """How a float -> fp8 conversion rounds on a target (convert.py applies it): nearest
    even after an optional step through fp16 (``through_f16``: "rz" or "rn"); finite values
    beyond the format saturate to its largest finite value, except those at most
    ``nan_above`` in magnitude (where set), which keep the rounded code after the largest
    (0x7F: a NaN in e4m3fn); infinities saturate (``inf_nan`` False) or become NaN; NaN
    becomes ``nan_code`` (with the input's sign in the OCP formats; None: torch's code)."""
    through_f16: Optional[str] = None
    nan_above: Optional[float] = None
    inf_nan: bool = False
    nan_code: Optional[int] = None


def fp8_cast(arch: Optional[str], src: str, dst: str) -> Fp8Cast:
    """The conversion of a ``src`` float to fp8 ``dst`` that Triton 3.6 compiles for ``arch``
    (read from its PTX and LLVM IR, compiled on the CPU; tests/triton_emu/test_triton_casts.py
    evaluates that IR bit for bit).  NVIDIA: ``cvt.rn.satfinite`` (sm89: fp32 through
    ``cvt.rz.f16.f32``).  AMD: OCP formats in software (e5m2 NaN 0x7E; fp16 -> e4m3fn
    keeps 464 < |x| < 480 as 0x7F); fnuz formats by ``v_cvt_pk_fp8_f32`` / ``bf8`` on CDNA3
    (with the MODE clamp bit Triton sets: finite overflow saturates; infinity -> NaN, an
    assumption), in software through fp16 (round to nearest) on CDNA1 / CDNA2."""
    a = ARCHS.get(canonical_arch(arch)) if arch is not None else None
    if a is None or a.vendor != "amd":
        return Fp8Cast(through_f16="rz" if src == "fp32" and fp8_through_fp16(arch) else None)
    if dst in FNUZ_FP8:
        pre = "rn" if src == "fp32" and (a.cdna or 0) < 3 else None
        return Fp8Cast(through_f16=pre, inf_nan=True, nan_code=0x80)
    return Fp8Cast(nan_above=479.75 if (src, dst) == ("fp16", "fp8_e4m3") else None,
                   nan_code=0x7E if dst == "fp8_e5m2" else 0x7F)


# DPP wave reductions: CDNA2 and later (Triton 3.6 excludes gfx906 / gfx908 from its DPP path)
DPP_ARCHS = tuple(a.name for a in ARCHS.values() if a.cdna is not None and a.cdna >= 2)


# -- which models apply to a target (the decisions compiled.py, extras.py, target_math.py,
# layout.py, context.py and the driver stand-ins ask; keyed by registry facts) -------------

def ptx_modelled(arch: Optional[str]) -> bool:
    """Whether the target's elementwise code is read from the PTX Triton compiles on the
    CPU (math routines, libdevice calls, fp32 contraction; target_math.py, contract.py):
    archs with a CUDA compute capability.  Elsewhere (AMD, a Spec) math is float64 rounded
    and contraction is named as not modelled."""
    return arch is not None and ARCHS[canonical_arch(arch)].capability is not None


def reduction_target(arch: Optional[str]) -> tuple[Optional[tuple], str]:
    """(the ``GPUTarget`` fields whose TTGIR gives the reductions' order, "") or (None, why
    they run in NumPy's order): every NVIDIA arch, the AMD archs with DPP wave reductions."""
    if arch is None:
        return None, "a Spec names no GPU"
    a = ARCHS[canonical_arch(arch)]
    if a.vendor == "amd" and a.name not in DPP_ARCHS:
        return None, (f"AMD reductions are modelled on {' / '.join(DPP_ARCHS)}, not "
                      f"{a.name}")
    return gpu_target(a.name), ""


def fused_reduction_products(arch: Optional[str]) -> bool:
    """Whether a product feeding a reduction's in-thread fold is contracted into it
    (``fma.rn.f32``, read from the PTX: contract.fold_products): the PTX-modelled archs."""
    return ptx_modelled(arch)


def scaled_dot_modelled(arch: Optional[str]) -> bool:
    """Whether ``tl.dot_scaled`` is modelled on ``arch`` (NVIDIA: native or decomposed)."""
    return ptx_modelled(arch)


def device_capability(arch: str) -> tuple[int, int]:
    """What ``torch.cuda.get_device_capability()`` answers on ``arch``: the compute
    capability on NVIDIA, ROCm torch's (gfx major, minor) on AMD ("gfx942" -> (9, 4))."""
    a = ARCHS[canonical_arch(arch)]
    return a.capability if a.capability is not None else a.gfx_version
