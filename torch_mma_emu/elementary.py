"""The elementary operations and output roundings (rho): one record each, the one table
every other module reads (seed 003 Tables 1 and 2, Algorithms 1-11).

A :class:`~torch_mma_emu.spec.Spec` names its operation and its rho by name; what the
operation carries (F, F2, scales, P, G), which roundings it allows, how c joins it, whether
it may run as a pass of a multi-pass instruction, which zero-corner fields apply, how it is
printed and ranked: all of it is read here.  The names and their order are the C++ core's
(``csrc/core/layout.h``, ``MMA_OPS`` / ``MMA_RHOS``); ``cpp.layout_errors`` checks them at
import, and tests/test_elementary.py fails on an operation's or a rounding's name spelled
anywhere else (the registry's rows and Spec's default rho aside).
"""
from __future__ import annotations

from dataclasses import dataclass

# how an operation takes A and B: IEEE values (fp32 / fp64 tensors, converted in ops.py) or
# the codes of their formats (decoded by the C++ core)
VALUES, CODES = "values", "codes"
# how c (the running accumulator) joins one operation
C_ROUNDED = "rounded"      # c and the products' exact sum (or the group's) rounded once, IEEE
C_FUSED = "fused"          # c is a term of the truncated fused sum
C_AFTER = "after"          # the products' truncated sum first, then c in a rounded step
C_JOIN_KINDS = (C_ROUNDED, C_FUSED, C_AFTER)
# the zero-corner fields of a Spec (docs/model.md section 6)
ZERO_FIELDS = ("zero_sign", "zero_exp", "cancelled_group", "tr_renorm")


@dataclass(frozen=True)
class Op:
    """One elementary operation: what a Spec with ``op=name`` computes per chunk of L."""

    name: str                  # as csrc/core/layout.h MMA_OPS spells it
    title: str                 # as tables and the README print it
    algorithm: str             # where seed 003 defines it
    origin: str                # whose hardware computes it
    summary: str               # what it does, in one line
    operands: str              # VALUES or CODES
    c_joins: str               # C_ROUNDED, C_FUSED or C_AFTER
    rank: int                  # simplicity for the fit's tie-breaks (0 = simplest)
    has_F: bool = False        # F fraction bits kept in the fused sum
    has_F2: bool = False       # F2 bits of the products' sum before c, and align_round
    scale_formats: tuple[str, ...] = ()   # block-scale formats taken (none: unscaled)
    P_choices: tuple[int, ...] = ()       # products summed pairwise per group (FTZ-AddMul)
    groups: str = ""           # products grouped before the sum: "G" (exact dots of G
    #                            products), "even/odd" (even and odd k apart), "" (none)
    nearest_only: bool = False  # rho must round to nearest (rne_*)
    passes: bool = False       # may run as a pass of a multi-pass instruction
    fused: bool = True         # a chunk's products summed before one rounding (FTZ-AddMul
    #                            rounds every addition)
    zero_fields: tuple[str, ...] = ()     # the zero-corner fields that apply
    fixed_L: int | None = None  # the one L it takes (FMA: 1)
    same_in_out: bool = False  # inputs in the output format (FMA)
    max_exp_bits: int | None = None       # element formats with at most this many exp bits
    narrow_c: bool = False     # may read a narrower C as it is (Spec.c_format)

    @property
    def scaled(self) -> bool:
        return bool(self.scale_formats)

    @property
    def has_P(self) -> bool:
        return bool(self.P_choices)

    @property
    def has_G(self) -> bool:
        return self.groups == "G"

    @property
    def L_multiple(self) -> int:
        """L is a multiple of this (even/odd groups: 2)."""
        return 2 if self.groups == "even/odd" else 1


_T = dict(operands=CODES, has_F=True, zero_fields=("zero_sign", "zero_exp"))
_TR = dict(operands=CODES, c_joins=C_AFTER, has_F=True, has_F2=True, nearest_only=True,
           passes=True, zero_fields=("tr_renorm",))

# in csrc/core/layout.h's order (MMA_OPS): a position is the C++ code
OPS: dict[str, Op] = {o.name: o for o in (
    Op("fma", "FMA", "Algorithms 3/4", "IEEE",
       "IEEE fused multiply-add chain (L = 1), RNE, in the output format",
       VALUES, C_ROUNDED, 0, nearest_only=True, fixed_L=1, same_in_out=True),
    Op("ftz_addmul", "FTZ-AddMul", "Algorithms 1/2", "AMD CDNA2",
       "FTZ products, pairwise FTZ additions of P products, FTZ add to acc",
       VALUES, C_ROUNDED, 7, P_choices=(2, 4), nearest_only=True, fused=False),
    Op("e_fdpa", "E-FDPA", "Algorithm 6", "AMD CDNA1",
       "exact fused dot-product-add, RNE to fp32",
       CODES, C_ROUNDED, 1, nearest_only=True, passes=True),
    Op("t_fdpa", "T-FDPA", "Algorithm 7", "NVIDIA",
       "truncated FDPA: align at max exponent, truncate to F fraction bits, then rho",
       c_joins=C_FUSED, rank=2, passes=True, narrow_c=True, **_T),
    Op("st_fdpa", "ST-FDPA", "Algorithm 8", "NVIDIA (MXFP8/6/4)",
       "t_fdpa with one E8M0 scale pair per block",
       c_joins=C_FUSED, rank=3, scale_formats=("ue8m0",), **_T),
    Op("gst_fdpa", "GST-FDPA", "Algorithm 9", "NVIDIA (MXFP4 / NVFP4)",
       "exact dot per group of G, times the block scales, then truncated fused sum",
       c_joins=C_FUSED, rank=4, scale_formats=("ue8m0", "ue4m3"), groups="G", max_exp_bits=3,
       **{**_T, "zero_fields": ("zero_sign", "zero_exp", "cancelled_group")}),
    Op("tr_fdpa", "TR-FDPA", "Algorithm 10", "AMD CDNA3",
       "truncated sum of the L products, then round-down add of c", rank=5, **_TR),
    Op("gtr_fdpa", "GTR-FDPA", "Algorithm 11", "AMD CDNA3 (fp8)",
       "even/odd truncated groups, round-down combination and add of c", rank=6,
       groups="even/odd", **_TR),
)}
NAMES: tuple[str, ...] = tuple(OPS)


def op(name: str) -> Op:
    """The record of an operation's name (ValueError naming the ones that exist)."""
    try:
        return OPS[name]
    except (KeyError, TypeError):
        raise ValueError(f"op must be one of {NAMES}, got {name!r}") from None


def names(**props) -> tuple[str, ...]:
    """The names of the operations whose properties have these values, in rank order
    (simplest first): ``names(scaled=False)``, ``names(passes=True, has_F2=False)``."""
    return tuple(o.name for o in sorted(OPS.values(), key=lambda o: o.rank)
                 if all(getattr(o, k) == v for k, v in props.items()))


def with_field(field: str) -> tuple[str, ...]:
    """The operations a zero-corner field applies to, in table order."""
    if field not in ZERO_FIELDS:
        raise ValueError(f"field must be one of {ZERO_FIELDS}, got {field!r}")
    return tuple(o.name for o in OPS.values() if field in o.zero_fields)


@dataclass(frozen=True)
class Rho:
    """One output rounding: the fused sum's value rounded to ``bits`` significant bits with
    the output format's exponent range (seed 003 Table 2, and the IEEE ones of FMA / AMD)."""

    name: str                  # as csrc/core/layout.h MMA_RHOS spells it
    mode: str                  # "rz" | "rne"
    out: str                   # the output format
    man_bits: int              # fraction bits kept (the output format's, or fewer)
    label: str                 # the precision's name in titles ("FP32", "E8M13")

    @property
    def bits(self) -> int:
        """Significant bits, hidden bit included."""
        return self.man_bits + 1

    @property
    def title(self) -> str:
        return f"{self.mode.upper()}-{self.label}"

    @property
    def nearest(self) -> bool:
        return self.mode == "rne"


# in csrc/core/layout.h's order (MMA_RHOS)
RHOS: dict[str, Rho] = {r.name: r for r in (
    Rho("rz_fp32", "rz", "fp32", 23, "FP32"),
    Rho("rz_e8m13", "rz", "fp32", 13, "E8M13"),     # subnormals: multiples of 2**-139
    Rho("rne_fp32", "rne", "fp32", 23, "FP32"),
    Rho("rne_fp16", "rne", "fp16", 10, "FP16"),
    Rho("rne_fp64", "rne", "fp64", 52, "FP64"),
)}
RHO_NAMES: tuple[str, ...] = tuple(RHOS)
OUT_FORMATS: tuple[str, ...] = tuple(dict.fromkeys(r.out for r in RHOS.values()))


def rhos_for(out: str, op_name: str) -> tuple[str, ...]:
    """The roundings an operation may end in for an output format (table order)."""
    o = op(op_name)
    return tuple(r.name for r in RHOS.values()
                 if r.out == out and (r.nearest or not o.nearest_only))


def nearest_rho(out: str) -> str:
    """The round-to-nearest rho of an output format."""
    return next(r.name for r in RHOS.values() if r.out == out and r.nearest)
