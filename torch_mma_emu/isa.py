"""Which matrix instructions exist, as data: one :class:`Instruction` per instruction.

This table says what an instruction *is* (its shape, operand and output types, its PTX /
SASS / AMD ISA names, the native kernel that issues it); how it *computes* on an arch is a
registry row (registry.py), which points here by ``Instruction.id``.  Which archs run it is
read off those rows (``registry.instruction_archs``), never restated here.  A user's
``instruction=`` is resolved by :func:`names_of`: the id, the display name, the family, the
PTX / SASS / ISA names and the explicit ``aliases`` (normalised: case, spaces, ``-`` and
``_`` ignored), never by matching parts of words.

:data:`KERNELS` are the instruction-level CUDA kernels of csrc/cuda/mma_instr.cu
(``native.mma_instruction``): their ``kind`` and :data:`KERNEL_TYPES` are the enums ``Kind``
and ``Type`` there, csrc/core/layout.h's MMA_INSTR_KINDS / MMA_INSTR_TYPES (a code is the
position; torch_mma_emu/cpp.py checks the two sides agree at import).  An instruction names the
kernel that issues it; rows whose instruction has none are not run natively.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional

# Who issues the instruction: the families Triton's instruction choice names as paths
# (torch_mma_emu.triton.target_rules), in that order; "fma" is the scalar (SIMT / vector ALU) path.
FAMILIES = ("wgmma", "mma.sync", "tcgen05", "mfma", "fma")

FP8 = ("fp8_e4m3", "fp8_e5m2")
FP8_FNUZ = ("fp8_e4m3fnuz", "fp8_e5m2fnuz")
F8F6F4 = ("fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1")


@dataclass(frozen=True)
class Instruction:
    id: str                          # stable key: registry rows and users name it
    name: str                        # display name (Spec.instruction, tme.instructions())
    family: str                      # one of FAMILIES
    shape: tuple                     # (m, n, k) of one instruction; None where it varies
    inputs: tuple[str, ...]          # operand formats (A and B, any mix of these)
    outputs: tuple[str, ...]         # accumulator formats
    ptx: str = ""                    # NVIDIA PTX
    sass: str = ""                   # NVIDIA SASS
    isa: str = ""                    # AMD ISA mnemonic
    scales: tuple[str, ...] = ()     # block-scale formats (kind::mx*)
    group: bool = False              # issued by a warpgroup / CTA (wgmma, tcgen05), not a warp
    kernel: Optional[str] = None     # the KERNELS entry that issues it
    aliases: tuple[str, ...] = ()    # further names instruction= accepts

    @property
    def k(self) -> Optional[int]:
        return self.shape[2]

    def names(self) -> tuple[str, ...]:
        """Every name this instruction answers to (``instruction=``): also its PTX shape
        ("m16n8k16") where it is a warp-level mma.sync."""
        shape = ("m{}n{}k{}".format(*self.shape) if self.family == "mma.sync" else "")
        own = (self.id, self.name, self.family, self.ptx, self.sass, self.isa, shape,
               *self.aliases)
        return tuple(n for n in own if n)


def _i(id, name, family, shape, inputs, outputs, **kw) -> Instruction:
    inputs = (inputs,) if isinstance(inputs, str) else inputs
    outputs = (outputs,) if isinstance(outputs, str) else outputs
    return Instruction(id, name, family, shape, inputs, outputs, **kw)


def _tcgen05(kind, k, inputs, outputs, scales=()):
    return _i(f"tcgen05.{kind}", f"tcgen05.mma kind::{kind}", "tcgen05",
              (None, None, k), inputs, outputs, ptx=f"tcgen05.mma.cta_group::1.kind::{kind}",
              scales=scales, group=True, aliases=("tcgen05.mma", f"kind::{kind}"))


def _sm120(kind, name, k, inputs, outputs, scales=(), ptx_kind=None, kernel=None, aliases=()):
    ptx = f"mma.sync.aligned.m16n8k{k}" + (f".kind::{ptx_kind}" if ptx_kind else
                                            ".tf32" if kind == "tf32" else "")
    return _i(f"sm120.{kind}", name, "mma.sync", (16, 8, k), inputs, outputs,
              ptx=ptx, scales=scales, kernel=kernel, aliases=aliases)


INSTRUCTIONS: dict[str, Instruction] = {x.id: x for x in [
    # -- NVIDIA scalar and fp64 ---------------------------------------------------------------
    _i("ffma", "CUDA-core FFMA", "fma", (1, 1, 1), "fp32", "fp32", ptx="fma.rn.f32",
       sass="FFMA"),
    _i("dfma", "DFMA (CUDA cores)", "fma",
       (1, 1, 1), "fp64", "fp64", ptx="fma.rn.f64", sass="DFMA"),
    _i("dmma", "DMMA", "mma.sync", (8, 8, 4), "fp64", "fp64",
       ptx="mma.sync.aligned.m8n8k4.f64"),
    # -- NVIDIA warp-level mma.sync -----------------------------------------------------------
    _i("hmma.884", "HMMA.884 (mma.m8n8k4)", "mma.sync", (8, 8, 4), "fp16",
       ("fp32", "fp16"), ptx="mma.sync.aligned.m8n8k4", sass="HMMA.884",
       aliases=("mma.m8n8k4",)),
    _i("hmma.1688", "HMMA.1688 (mma.m16n8k8)", "mma.sync", (16, 8, 8), "fp16",
       ("fp32", "fp16"), ptx="mma.sync.aligned.m16n8k8", sass="HMMA.1688",
       kernel="mma.m16n8k8", aliases=("mma.m16n8k8",)),
    _i("hmma.16816", "HMMA.16816 (mma.m16n8k16, 2 x k8)", "mma.sync",
       (16, 8, 16), ("fp16", "bf16"), ("fp32", "fp16"), ptx="mma.sync.aligned.m16n8k16",
       sass="HMMA.16816", kernel="mma.m16n8k16", aliases=("mma.m16n8k16",)),
    _i("hmma.1684", "HMMA.1684 (mma.m16n8k8 tf32, 2 x k4)", "mma.sync", (16, 8, 8), "tf32", "fp32", ptx="mma.sync.aligned.m16n8k8.tf32",
       sass="HMMA.1684", kernel="mma.m16n8k8.tf32", aliases=("mma.m16n8k8",)),
    _i("qmma.16832", "QMMA.16832 (mma.sync.m16n8k32, 2 x k16)", "mma.sync",
       (16, 8, 32), FP8, ("fp32", "fp16"), ptx="mma.sync.aligned.m16n8k32", sass="QMMA.16832",
       kernel="mma.m16n8k32", aliases=("mma.sync.m16n8k32",)),
    # Hopper's and Blackwell's warp-level fp8 instruction (docs/model.md section 2.1): not what
    # libraries use there, an instruction variant.  SASS on sm_90a: F2FP unpack to fp16 pairs,
    # two HMMA.16816 from zero, HADD2 / FADD of c.
    _i("mma.sync.m16n8k32", "mma.sync.m16n8k32 (fp8)", "mma.sync",
       (16, 8, 32), FP8, ("fp32", "fp16"), ptx="mma.sync.aligned.m16n8k32",
       sass="F2FP + 2 x HMMA.16816", kernel="mma.m16n8k32", aliases=("mma.m16n8k32",)),
    # -- Hopper warpgroup wgmma (N = 8 ... 256) ------------------------------------------------
    _i("hgmma.k16", "HGMMA (wgmma.m64nNk16)", "wgmma", (64, None, 16),
       ("fp16", "bf16"), ("fp32", "fp16"), ptx="wgmma.mma_async.m64nNk16", sass="HGMMA",
       group=True, kernel="wgmma.m64n8k16", aliases=("wgmma.m64nNk16",)),
    _i("hgmma.k8.tf32", "HGMMA (wgmma.m64nNk8 tf32)", "wgmma", (64, None, 8), "tf32",
       "fp32", ptx="wgmma.mma_async.m64nNk8.tf32", sass="HGMMA", group=True,
       kernel="wgmma.m64n8k8.tf32", aliases=("wgmma.m64nNk8",)),
    _i("qgmma.k32", "QGMMA (wgmma.m64nNk32)", "wgmma", (64, None, 32), FP8,
       ("fp32", "fp16"), ptx="wgmma.mma_async.m64nNk32", sass="QGMMA", group=True,
       kernel="wgmma.m64n8k32", aliases=("wgmma.m64nNk32",)),
    # -- Blackwell (sm100) tcgen05.mma, issued by one thread for the CTA (M = 64 / 128) ---------
    _tcgen05("f16", 16, ("fp16", "bf16"), ("fp32", "fp16")),
    _tcgen05("tf32", 8, "tf32", "fp32"),
    _tcgen05("f8f6f4", 32, F8F6F4, ("fp32", "fp16")),
    _tcgen05("mxf4", 64, "fp4_e2m1", "fp32", scales=("ue8m0",)),
    _tcgen05("mxf8f6f4", 32, F8F6F4, "fp32", scales=("ue8m0",)),
    _tcgen05("mxf4nvf4", 64, "fp4_e2m1", "fp32", scales=("ue4m3",)),
    # -- RTX Blackwell (sm120): warp-level mma.sync ---------------------------------------------
    _sm120("f16", "mma.sync m16n8k16 (f16/bf16)", 16, ("fp16", "bf16"), ("fp32", "fp16"),
           kernel="mma.m16n8k16"),
    _sm120("tf32", "mma.sync m16n8k8 (tf32)", 8, "tf32", "fp32", kernel="mma.m16n8k8.tf32"),
    _sm120("f8f6f4", "mma.sync kind::f8f6f4", 32, F8F6F4, ("fp32", "fp16"), ptx_kind="f8f6f4",
           aliases=("kind::f8f6f4",)),
    _sm120("mxf4", "mma.sync kind::mxf4", 64, "fp4_e2m1", "fp32", scales=("ue8m0",),
           ptx_kind="mxf4.block_scale", aliases=("kind::mxf4",)),
    _sm120("mxf8f6f4", "mma.sync kind::mxf8f6f4", 32, F8F6F4, "fp32", scales=("ue8m0",),
           ptx_kind="mxf8f6f4.block_scale", aliases=("kind::mxf8f6f4",)),
    _sm120("mxf4nvf4", "mma.sync kind::mxf4nvf4", 64, "fp4_e2m1", "fp32", scales=("ue4m3",),
           ptx_kind="mxf4nvf4.block_scale", aliases=("kind::mxf4nvf4",)),
    # -- AMD CDNA ---------------------------------------------------------------------------
    _i("mfma.f32", "v_mfma_f32_*_f32", "mfma", (None, None, None), "fp32", "fp32",
       isa="v_mfma_f32_*_f32"),
    _i("v_fma_f64", "v_fma_f64 (vector ALU)", "fma", (1, 1, 1), "fp64", "fp64",
       isa="v_fma_f64"),
    _i("mfma.f64", "v_mfma_f64_*", "mfma", (None, None, None), "fp64",
       "fp64", isa="v_mfma_f64_*"),
    _i("mfma.32x32x8f16", "v_mfma_f32_32x32x8f16", "mfma", (32, 32, 8),
       "fp16", "fp32", isa="v_mfma_f32_32x32x8f16"),
    _i("mfma.32x32x4bf16", "v_mfma_f32_32x32x4bf16", "mfma", (32, 32, 4),
       "bf16", "fp32", isa="v_mfma_f32_32x32x4bf16"),
    _i("mfma.32x32x8bf16_1k", "v_mfma_f32_32x32x8bf16_1k", "mfma", (32, 32, 8),
       "bf16", "fp32", isa="v_mfma_f32_32x32x8bf16_1k"),
    _i("mfma.32x32x4_xf32", "v_mfma_f32_32x32x4_xf32", "mfma", (32, 32, 4), "xf32",
       "fp32", isa="v_mfma_f32_32x32x4_xf32"),
    _i("mfma.32x32x8_f16", "v_mfma_f32_32x32x8_f16", "mfma", (32, 32, 8), "fp16",
       "fp32", isa="v_mfma_f32_32x32x8_f16"),
    _i("mfma.32x32x8_bf16", "v_mfma_f32_32x32x8_bf16", "mfma", (32, 32, 8), "bf16",
       "fp32", isa="v_mfma_f32_32x32x8_bf16"),
    _i("mfma.32x32x16_fp8", "v_mfma_f32_32x32x16_fp8_fp8", "mfma", (32, 32, 16),
       FP8_FNUZ, "fp32", isa="v_mfma_f32_32x32x16_fp8_fp8"),
]}


# --------------------------------------------------------------------------------------------
# The native instruction kernels (csrc/cuda/mma_instr.cu)
# --------------------------------------------------------------------------------------------

class Kernel(NamedTuple):
    """One kernel of csrc/cuda/mma_instr.cu, keyed in KERNELS by its name (the
    ``instruction=`` of ``native.mma_instruction``)."""
    kind: int                        # enum Kind of mma_instr.cu
    k: int                           # K of one instruction
    rows: int                        # M of one tile (a warp's 16, a warpgroup's 64)
    inputs: tuple                    # operand formats
    min_cc: tuple                    # the compute capability it needs
    sm90a: bool = False              # wgmma: needs the sm_90a build, runs on sm90 only

    def runs_on(self, cc) -> bool:
        return tuple(cc) >= self.min_cc and (not self.sm90a or cc[0] == 9)


KERNELS: dict[str, Kernel] = {
    "mma.m16n8k16": Kernel(0, 16, 16, ("fp16", "bf16"), (8, 0)),
    "mma.m16n8k8": Kernel(1, 8, 16, ("fp16", "bf16"), (8, 0)),
    "mma.m16n8k8.tf32": Kernel(2, 8, 16, ("tf32",), (8, 0)),
    "mma.m16n8k32": Kernel(3, 32, 16, FP8, (8, 9)),
    "wgmma.m64n8k16": Kernel(4, 16, 64, ("fp16", "bf16"), (9, 0), True),
    "wgmma.m64n8k8.tf32": Kernel(5, 8, 64, ("tf32",), (9, 0), True),
    "wgmma.m64n8k32": Kernel(6, 32, 64, FP8, (9, 0), True),
}
# operand format -> enum Type of mma_instr.cu
KERNEL_TYPES = {"fp16": 0, "bf16": 1, "tf32": 2, "fp8_e4m3": 3, "fp8_e5m2": 4}
# operand format -> the accumulators the kernels (and cuBLAS, Triton) take for it, default first
KERNEL_OUTPUTS = {"fp16": ("fp32", "fp16"), "bf16": ("fp32",), "tf32": ("fp32",),
                  "fp8_e4m3": ("fp32", "fp16"), "fp8_e5m2": ("fp32", "fp16")}


# --------------------------------------------------------------------------------------------
# Queries
# --------------------------------------------------------------------------------------------

def norm(name: str) -> str:
    """The form names are compared in: case, spaces, ``-`` and ``_`` ignored."""
    return str(name).lower().replace(" ", "").replace("-", "").replace("_", "")


_NAMES = {iid: frozenset(norm(n) for n in ins.names()) for iid, ins in INSTRUCTIONS.items()}


def answers_to(iid: str, name: str) -> bool:
    """Whether instruction ``iid`` is the one ``name`` (an ``instruction=`` argument) means."""
    return norm(name) in _NAMES[iid]


def get(iid: str) -> Instruction:
    if iid not in INSTRUCTIONS:
        raise ValueError(f"unknown instruction id {iid!r}; known: {', '.join(INSTRUCTIONS)}")
    return INSTRUCTIONS[iid]


def issued_by(kernel: str) -> tuple[str, ...]:
    """Ids of the instructions native kernel ``kernel`` issues (on one arch or another)."""
    return tuple(i.id for i in INSTRUCTIONS.values() if i.kernel == kernel)

