"""The model of one matrix-unit instruction: an elementary operation plus its parameters.

A :class:`Spec` says how one output element ``d = c + sum_k a_k b_k`` is computed
(seed 003, Section 4): ``acc = c``; for each chunk of ``L`` consecutive k (zero padded)
``acc = op(a[chunk], b[chunk], acc)``; ``d = acc``.  The registry maps architectures to
specs; users may build their own (``spec("sm90", "fp16").replace(F=27)``).

Elementary operations (seed 003 Table 1, Algorithms 1-11):

``fma``        IEEE fused multiply-add chain (L = 1), RNE, in the output format.
``ftz_addmul`` AMD CDNA2: FTZ products, pairwise FTZ additions of P products, FTZ add to acc.
``e_fdpa``     exact fused dot-product-add, RNE to fp32 (AMD CDNA1).
``t_fdpa``     truncated FDPA: align at max exponent, truncate to F fraction bits, then rho.
``st_fdpa``    t_fdpa with one E8M0 scale pair per block (MXFP8/6/4).
``gst_fdpa``   exact dot per group of G, times the block scales, then truncated fused sum.
``tr_fdpa``    AMD CDNA3: truncated sum of the L products, then round-down add of c.
``gtr_fdpa``   AMD CDNA3 FP8: even/odd truncated groups, round-down combination and add of c.

Multi-pass instructions (docs/model.md section 2.1): with ``passes > 1`` one instruction
covers ``passes * L`` consecutive k and runs one fused operation (a *pass*) per subset of
``L`` of them; k belongs to pass ``(k // pass_width) % passes`` (``pass_width = L``:
contiguous blocks; 2: alternating pairs, as in how fp8 bytes unpack from 32-bit registers).
Each pass's result is rounded to the output format and is the next pass's accumulator.
``c_join="first"``: c is the first pass's accumulator; ``"final"``: the passes start from
+0 and c is added by one IEEE addition in the output format at the end of the instruction.
"""
from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field
from functools import lru_cache

from . import codec
from .formats import FORMATS, NAN_STYLES, Format

# the names of the ops and rhos; their codes are the C++ core's (csrc/core/layout.h)
OPS = ("fma", "ftz_addmul", "e_fdpa", "t_fdpa", "st_fdpa", "gst_fdpa", "tr_fdpa", "gtr_fdpa")

# Output conversions (seed 003 Table 2) plus the IEEE ones used by FMA / AMD paths.
RHOS = ("rz_fp32", "rz_e8m13", "rne_fp32", "rne_fp16", "rne_fp64")
RHO_OUT = {"rz_fp32": "fp32", "rz_e8m13": "fp32", "rne_fp32": "fp32",
           "rne_fp16": "fp16", "rne_fp64": "fp64"}

ALIGN_ROUNDINGS = ("rd", "rz")
ZERO_SIGNS = ("keep", "plus")
CANCELLED_GROUPS = ("drop", "keep")
ZERO_OPS = ("t_fdpa", "st_fdpa", "gst_fdpa")  # the ops the zero corners apply to
C_MODES = ("chain", "epilogue")
C_JOINS = ("first", "final")
C_FORMATS = ("fp16",)  # the narrower C an instruction may read (Spec.c_format)
MULTIPASS_OPS = ("t_fdpa", "e_fdpa", "tr_fdpa", "gtr_fdpa")  # unscaled fused operations
MAX_PASS_L = 64       # the C++ core gathers one pass's operands into arrays of this size

# Canonical NaN encodings of the output (None: the IEEE default quiet NaN).
NVIDIA_NAN = {"fp32": 0x7FFFFFFF, "fp16": 0x7FFF, "fp64": 0x7FFFFFFFFFFFFFFF}
IEEE_NAN = {"fp32": 0x7FC00000, "fp16": 0x7E00, "fp64": 0x7FF8000000000000}

NO_FLOOR = -(1 << 20)  # "no lower cap on the alignment exponent"
MAX_FLOOR = 1 << 16    # |emax_floor| of a real cap is far below this (seed 002: -133)


@dataclass(frozen=True)
class Spec:
    """Everything that decides the bits of an emulated matrix product."""

    op: str
    in_format: str                  # format of A
    out_format: str                 # "fp32" | "fp16" | "fp64": accumulator and result
    L: int = 1                      # fused length (chunk of K per elementary op)
    F: int = 0                      # fraction bits kept in the fused sum
    F2: int = 0                     # tr/gtr: fraction bits of the product sum before adding c
    rho: str = "rne_fp32"           # final conversion
    P: int = 0                      # ftz_addmul: products summed pairwise per group
    G: int = 0                      # gst_fdpa: exact-dot group length
    in_format_b: str | None = None  # format of B when it differs from A
    scale_format: str | None = None  # "ue8m0" | "ue4m3" for block-scaled ops
    block_size: int = 0             # K elements per scale
    emax_floor: int | None = None   # lower cap of the alignment exponent (seed 002: -133)
    align_round: str = "rd"         # tr/gtr_fdpa rounding of the c addition ("rd" hardware)
    flush_inputs: bool = False      # ftz_addmul: input subnormals -> +0
    nan_bits: int | None = None     # output NaN encoding; None = IEEE default quiet NaN
    passes: int = 1                 # fused operations (passes) per instruction
    pass_width: int = 0             # k go to pass (k // pass_width) % passes; 0 = L
    c_join: str = "first"           # "first": c is pass 1's accumulator; "final": IEEE add
    # the zero corners of T/ST/GST-FDPA (docs/model.md section 6)
    zero_sign: str = "keep"         # "keep": a sum that rounds to zero keeps its sign; "plus": +0
    zero_exp: int | None = None     # exponent zero terms take in e_max (None: they take none)
    cancelled_group: str = "drop"   # gst: a group cancelling to 0 "drop"s / "keep"s its scale exp
    tr_renorm: bool = False         # tr/gtr: T' + c' renormalised, RD to F2 bits (MMA-Sim 2.1)
    # t_fdpa: a C of this (narrower) format enters the first instruction as it is (sm70/sm75
    # fp16 -> fp32: m8n8k4.f32.f16.f16.f16, an fp16 subnormal C aligned at fp16's emin -14);
    # None: C is converted to the output format first (docs/model.md 2 and 6.4)
    c_format: str | None = None
    arch: str = "custom"
    instruction: str = ""
    notes: str = field(default="", compare=False)

    # -- validation ---------------------------------------------------------------------
    def __post_init__(self):
        errs = self._kind_errors()
        if errs:
            raise ValueError("invalid Spec: " + "; ".join(errs))
        if self.op not in OPS:
            errs.append(f"op must be one of {OPS}, got {self.op!r}")
        for fname in ("in_format", "in_format_b", "out_format", "scale_format"):
            v = getattr(self, fname)
            if v is not None and v not in FORMATS:
                errs.append(f"{fname}={v!r} is not a known format ({', '.join(FORMATS)})")
        if self.out_format not in ("fp32", "fp16", "fp64"):
            errs.append("out_format must be fp32, fp16 or fp64")
        if self.rho not in RHOS:
            errs.append(f"rho must be one of {RHOS}")
        elif RHO_OUT[self.rho] != self.out_format:
            errs.append(f"rho={self.rho} does not produce {self.out_format}")
        if self.L < 1 or self.L > 256:
            errs.append("L must be in 1..256")
        if not 0 <= self.F <= 40:
            errs.append("F must be in 0..40 (the C++ core keeps the fused sum in 64 bits)")
        if not 0 <= self.F2 <= 40:
            errs.append("F2 must be in 0..40")
        if self.align_round not in ALIGN_ROUNDINGS:
            errs.append(f"align_round must be one of {ALIGN_ROUNDINGS}")
        if self.op == "fma" and self.L != 1:
            errs.append("fma has L = 1")
        if self.op == "fma" and self.in_format != self.out_format:
            errs.append("fma takes inputs in the output format (fp32 or fp64)")
        if self.op == "ftz_addmul" and (self.P not in (2, 4) or self.L % self.P):
            errs.append("ftz_addmul needs P in (2, 4) dividing L")
        if self.op in ("st_fdpa", "gst_fdpa"):
            if self.scale_format not in ("ue8m0", "ue4m3"):
                errs.append(f"{self.op} needs scale_format ue8m0 or ue4m3")
            if self.block_size <= 0 or self.L % self.block_size and self.block_size % self.L:
                errs.append(f"{self.op} needs a block_size that tiles L")
        elif self.scale_format is not None:
            errs.append(f"{self.op} takes no block scales")
        if self.op == "gst_fdpa" and (self.G <= 0 or self.L % self.G or self.block_size % self.G):
            errs.append("gst_fdpa needs a group G dividing L and the block size")
        if self.op == "gst_fdpa" and max(self.fmt_a.exp_bits, self.fmt_b.exp_bits) > 3:
            errs.append("gst_fdpa takes element formats with at most 3 exponent bits "
                        "(fp4, fp6)")
        if self.op == "st_fdpa" and self.scale_format != "ue8m0":
            errs.append("st_fdpa takes ue8m0 scales")
        if self.op == "gtr_fdpa" and self.L % 2:
            errs.append("gtr_fdpa needs an even L")
        if self.op in ("t_fdpa", "st_fdpa", "gst_fdpa", "tr_fdpa", "gtr_fdpa") and self.F < 1:
            errs.append(f"{self.op} needs F >= 1")
        if self.op in ("tr_fdpa", "gtr_fdpa") and self.F2 < 1:
            errs.append(f"{self.op} needs F2 >= 1")
        if self.op in ("fma", "e_fdpa", "ftz_addmul", "tr_fdpa", "gtr_fdpa") and \
                not self.rho.startswith("rne"):
            errs.append(f"{self.op} rounds to nearest (rho rne_*)")
        errs += self._multipass_errors() + self._range_errors() + self._zero_errors()
        if errs:
            raise ValueError("invalid Spec: " + "; ".join(errs))
        # the op's string now, not on first use: Dynamo reads the cached string as a guarded
        # constant, and cannot trace the encoder (see ops._spec_string)
        self.to_string()

    def _kind_errors(self) -> list[str]:
        """Each field of the kind its annotation says (ints: anything with __index__, kept
        as int; flush_inputs: a bool or 0/1)."""
        errs = []
        for name, kind in FIELD_KINDS.items():
            v = getattr(self, name)
            if v is None and name in _OPTIONAL:
                continue
            if kind == "int":
                if isinstance(v, bool) or not hasattr(v, "__index__"):
                    errs.append(f"{name} must be an int, got {v!r}")
                    continue
                object.__setattr__(self, name, operator.index(v))
            elif kind == "bool":
                if v not in (0, 1) or not isinstance(v, (bool, int)):
                    errs.append(f"{name} must be True or False, got {v!r}")
                    continue
                object.__setattr__(self, name, bool(v))
            elif not isinstance(v, str):
                errs.append(f"{name} must be a str, got {type(v).__name__}")
        return errs

    def _range_errors(self) -> list[str]:
        errs = []
        if self.emax_floor is not None and not -MAX_FLOOR <= self.emax_floor <= MAX_FLOOR:
            errs.append(f"emax_floor must be in -{MAX_FLOOR}..{MAX_FLOOR} or None, "
                        f"got {self.emax_floor}")
        bits = FORMATS[self.out_format].bits if self.out_format in FORMATS else 64
        if self.nan_bits is not None and not 0 <= self.nan_bits < 1 << bits:
            errs.append(f"nan_bits must be a {self.out_format} bit pattern in "
                        f"0..0x{(1 << bits) - 1:X} or None, got {self.nan_bits:#x}")
        for name in ("block_size", "P", "G"):
            if not 0 <= getattr(self, name) < 1 << 16:
                errs.append(f"{name} must be in 0..65535, got {getattr(self, name)}")
        return errs

    def _zero_errors(self) -> list[str]:
        errs = []
        if self.zero_sign not in ZERO_SIGNS:
            errs.append(f"zero_sign must be one of {ZERO_SIGNS}, got {self.zero_sign!r}")
        if self.cancelled_group not in CANCELLED_GROUPS:
            errs.append(f"cancelled_group must be one of {CANCELLED_GROUPS}, "
                        f"got {self.cancelled_group!r}")
        if self.zero_exp is not None and not -MAX_FLOOR <= self.zero_exp <= MAX_FLOOR:
            errs.append(f"zero_exp must be in -{MAX_FLOOR}..{MAX_FLOOR} or None, "
                        f"got {self.zero_exp}")
        if self.op not in ZERO_OPS and (self.zero_sign != "keep" or self.zero_exp is not None):
            errs.append(f"zero_sign / zero_exp apply to {ZERO_OPS}, not {self.op}")
        if self.op != "gst_fdpa" and self.cancelled_group != "drop":
            errs.append("cancelled_group applies to gst_fdpa only")
        if self.tr_renorm and self.op not in ("tr_fdpa", "gtr_fdpa"):
            errs.append("tr_renorm applies to tr_fdpa and gtr_fdpa only")
        if self.c_format is not None and (self.c_format not in C_FORMATS or
                                          self.op != "t_fdpa" or self.out_format != "fp32"):
            errs.append(f"c_format takes None or one of {C_FORMATS}, on t_fdpa with fp32 "
                        f"output (got {self.c_format!r} on {self.op} -> {self.out_format})")
        return errs

    def _multipass_errors(self) -> list[str]:
        errs = []
        if isinstance(self.passes, bool) or not isinstance(self.passes, int) or \
                not 1 <= self.passes <= 16:
            errs.append(f"passes must be an int in 1..16, got {self.passes!r}")
            return errs
        if isinstance(self.pass_width, bool) or not isinstance(self.pass_width, int) or \
                self.pass_width < 0:
            errs.append(f"pass_width must be an int >= 0 (0 = L), got {self.pass_width!r}")
        elif self.pass_width and self.L % self.pass_width:
            errs.append(f"pass_width={self.pass_width} must divide L={self.L}")
        if self.c_join not in C_JOINS:
            errs.append(f"c_join must be one of {C_JOINS}, got {self.c_join!r}")
        if self.multipass:
            if self.op not in MULTIPASS_OPS:
                errs.append(f"passes > 1 or c_join='final' take one of {MULTIPASS_OPS}, "
                            f"not {self.op}")
            if self.passes > 1 and self.L > MAX_PASS_L:
                errs.append(f"a pass covers at most {MAX_PASS_L} k (L={self.L})")
            if self.passes * self.L > 256:
                errs.append("an instruction covers at most 256 k (passes * L)")
        return errs

    # -- conveniences -------------------------------------------------------------------
    @property
    def fmt_a(self) -> Format:
        return FORMATS[self.in_format]

    @property
    def fmt_b(self) -> Format:
        return FORMATS[self.in_format_b or self.in_format]

    @property
    def fmt_out(self) -> Format:
        return FORMATS[self.out_format]

    @property
    def scaled(self) -> bool:
        return self.scale_format is not None

    @property
    def multipass(self) -> bool:
        """Not one fused operation per chunk with c inside: passes or a final c addition."""
        return self.passes > 1 or self.c_join == "final"

    @property
    def width(self) -> int:
        """The effective pass width (``pass_width`` or L)."""
        return self.pass_width or self.L

    @property
    def instr_k(self) -> int:
        """k covered by one instruction: ``passes * L``."""
        return self.passes * self.L

    def pass_ks(self) -> list[list[int]]:
        """For each pass, the positions k (within one instruction) it sums, ascending."""
        n = self.instr_k
        return [[k for k in range(n) if (k // self.width) % self.passes == p]
                for p in range(self.passes)]

    def pass_layout(self) -> str:
        """Name of the pass layout: contiguous, alternating pairs/quads/..."""
        if self.passes == 1:
            return "one pass"
        w = self.width
        if w == self.L:
            return "contiguous"
        return {1: "alternating single k", 2: "alternating pairs", 4: "alternating quads",
                8: "alternating octets"}.get(w, f"alternating runs of {w}")

    @property
    def nan_encoding(self) -> int:
        return self.nan_bits if self.nan_bits is not None else IEEE_NAN[self.out_format]

    def replace(self, **changes) -> "Spec":
        """A copy with some fields changed, e.g. ``spec.replace(F=27)`` (arch becomes custom)."""
        changes.setdefault("arch", "custom")
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        bits = [f"{self.op}", f"L={self.L}"]
        if self.op in ("t_fdpa", "st_fdpa", "gst_fdpa", "tr_fdpa", "gtr_fdpa"):
            bits.append(f"F={self.F}")
        if self.op in ("tr_fdpa", "gtr_fdpa"):
            bits.append(f"F2={self.F2}")
            bits.append(f"align={self.align_round}")
        if self.P:
            bits.append(f"P={self.P}")
        if self.G:
            bits.append(f"G={self.G}")
        if self.scaled:
            bits.append(f"scale={self.scale_format}/{self.block_size}")
        if self.emax_floor is not None:
            bits.append(f"emax_floor={self.emax_floor}")
        bits.append(f"rho={self.rho}")
        if self.passes > 1:
            bits.append(f"passes={self.passes}x{self.L} ({self.pass_layout()}"
                        + (f", width {self.width}" if self.width != self.L else "") + ")")
        if self.c_join != "first":
            bits.append(f"c_join={self.c_join}")
        if self.zero_sign != "keep":
            bits.append(f"zero_sign={self.zero_sign}")
        if self.zero_exp is not None:
            bits.append(f"zero_exp={self.zero_exp}")
        if self.cancelled_group != "drop":
            bits.append(f"cancelled_group={self.cancelled_group}")
        if self.tr_renorm:
            bits.append("tr_renorm")
        if self.c_format is not None:
            bits.append(f"c_format={self.c_format}")
        return " ".join(bits)

    # -- serialisation (codec.py): lets a custom spec travel through the op's ``arch`` string
    def to_string(self) -> str:
        """'spec:field=value,...' (None, "" and the single-pass defaults of the multi-pass
        fields left out); computed once per Spec."""
        s = self.__dict__.get("_string")
        if s is None:
            s = codec.encode("spec", ((k, v) for k, v in
                                      ((k, getattr(self, k)) for k in FIELD_KINDS)
                                      if v is not None and v != "" and
                                      (k, v) not in _DEFAULTS_OMITTED), escape_all=True)
            object.__setattr__(self, "_string", s)
        return s

    @classmethod
    def from_string(cls, s: str) -> "Spec":
        """The Spec of a string :meth:`to_string` wrote (cached: the op parses each once)."""
        return parse_spec(s)

    # -- the parameters the C++ kernels read ----------------------------------------------
    def param_values(self, c_mode: str = "chain", c_in: str | None = None) -> dict:
        """The kernels' parameters by name (MMA_PARAMS, csrc/core/layout.h); op, rho and the
        NaN styles as names, which torch_mma_emu/cpp.py numbers as the extension does.
        ``fs_*`` describe the scale format (zeros when unscaled).  ``c_in``: the format C
        came in; where it is ``c_format`` the first chunk aligns c at that format's emin."""
        nan = self.nan_encoding
        v = {"op": self.op, "L": self.L, "F": self.F, "F2": self.F2, "rho": self.rho,
             "P": self.P, "G": self.G, "block": self.block_size,
             "emax_floor": self.emax_floor if self.emax_floor is not None else NO_FLOOR,
             "align_rd": int(self.align_round == "rd"), "flush_inputs": int(self.flush_inputs),
             "epilogue": int(c_mode == "epilogue"),
             "nan_lo": nan & 0xFFFFFFFF, "nan_hi": (nan >> 32) & 0xFFFFFFFF,
             "passes": self.passes, "pass_width": self.width,
             "c_final": int(self.c_join == "final"),
             "zero_exp": self.zero_exp if self.zero_exp is not None else NO_FLOOR,
             "zero_plus": int(self.zero_sign == "plus"),
             "group_keep": int(self.cancelled_group == "keep"),
             "tr_renorm": int(self.tr_renorm),
             "c_emin": (FORMATS[c_in].emin if c_in is not None and c_in == self.c_format
                        else NO_FLOOR)}
        sc = FORMATS[self.scale_format] if self.scale_format else None
        for key, f in (("fa", self.fmt_a), ("fb", self.fmt_b), ("fo", self.fmt_out), ("fs", sc)):
            v.update({f"{key}_code": f.code if f else 0, f"{key}_ebits": f.exp_bits if f else 0,
                      f"{key}_mbits": f.man_bits if f else 0, f"{key}_bias": f.bias if f else 0,
                      f"{key}_nan_style": f.nan_style if f else NAN_STYLES[0],
                      f"{key}_signed": int(f.signed) if f else 0,
                      f"{key}_container": f.container_bits if f else 0})
        return v


# The serialised fields, in order, with the kind of each value: every compared field of the
# dataclass (its annotations say the kind; notes is free text and stays out).
FIELD_KINDS = codec.field_kinds(Spec)
# single-pass specs serialise as before the multi-pass fields existed
_DEFAULTS_OMITTED = {("passes", 1), ("pass_width", 0), ("c_join", "first"),
                     ("zero_sign", "keep"), ("cancelled_group", "drop"),
                     ("tr_renorm", False)}
_OPTIONAL = {f.name for f in dataclasses.fields(Spec) if f.type.endswith("| None")}
_REQUIRED = [f.name for f in dataclasses.fields(Spec)
             if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]


def as_spec(x) -> Spec | None:
    """``x`` as a Spec when it is one or its string ('spec:...'); None otherwise (an arch
    name or alias)."""
    if isinstance(x, Spec):
        return x
    if isinstance(x, str) and x.startswith("spec:"):
        return parse_spec(x)
    return None


def arch_label(arch) -> str:
    """How a message names an ``arch`` argument: an arch name as given; a Spec (or its
    'spec:...' string) by what it computes, "custom Spec [fp16 -> fp32: t_fdpa L=16 F=27
    ...]" ("sm90 Spec [...]" when it names its arch), never its dataclass repr."""
    sp = as_spec(arch)
    if sp is None:
        return str(arch)
    fmts = sp.in_format if sp.in_format_b in (None, sp.in_format) else \
        f"{sp.in_format} x {sp.in_format_b}"
    return f"{sp.arch} Spec [{fmts} -> {sp.out_format}: {sp.describe()}]"


def parse_spec(s: str) -> Spec:
    """The Spec of a 'spec:...' string (:meth:`Spec.to_string`), parsed once per string."""
    if not isinstance(s, str):
        raise TypeError(f"a serialised Spec is a str ('spec:...'), got {type(s).__name__}")
    return _parse_spec(s)


@lru_cache(maxsize=4096)
def _parse_spec(s: str) -> Spec:
    kw = codec.decode("spec", s, FIELD_KINDS)
    missing = [k for k in _REQUIRED if k not in kw]
    if missing:
        raise ValueError(f"serialised spec lacks the field(s) {', '.join(missing)}: "
                         f"{s!r} (Spec.to_string() writes every field)")
    return Spec(**kw)

