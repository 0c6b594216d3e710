"""How a library kernel strings matrix-unit instructions together: a :class:`Schedule`.

``emulated_mm`` without a schedule runs one accumulator chain per output element
(docs/model.md, "The GEMM chain").  A schedule describes what library kernels do on top of that chain; the order
of operations, for one output element ``d = alpha * (A @ B) + beta * C``:

1. ``input_precision`` (float32 inputs on tensor-core archs): ``"tf32"`` (the hardware
   truncates the low 13 bits), ``"tf32_rn"`` (inputs rounded to tf32, nearest-even, first),
   ``"tf32x3"`` (Triton 3.6's F32DotTC: ``hi = cvt.rna.tf32(x)``, ``lo = x - hi``; per
   ``dot_k`` tile ``r = dot(a_lo, b_hi, +0); r = dot(a_hi, b_lo, r)``, NaN -> +0,
   ``r = dot(a_hi, b_hi, r); acc = r + acc`` in fp32: schedule_partials.f32dottc_tf32x3),
   ``"ieee"`` (fp32 FMA chain).  ``None``: the operands' own format.
2. K is cut into ``split_k`` slices at multiples of a grain G: the instruction's K
   (``Spec.L``, ``split_grain=None``; slices past K are empty, each +0), or ``split_grain``
   elements (``"cublas"``: 64 for 16-bit inputs, 128 for 8-bit ones; ``ceil(K / size)``
   slices, none empty): slice size ``ceil(ceil(K / G) / split_k) * G``, the last shorter.
   ``residue_tile = T``: each slice's chain runs its instructions over a leading residue
   tile of ``len % T`` elements first (its short group last), then whole groups.
3. Each slice is a chain from +0 (from C when ``split_k == 1`` and ``c_mode == "chain"``).
   With ``promote_every = P`` each slice is cut into blocks of P elements; each block is a
   chain from +0 whose result is added (IEEE, workspace format) to the slice's main
   accumulator, which starts from C (``c_mode="chain"``, ``split_k == 1``) or +0.
4. The slice results are merged (``merge``, schedule_split.MERGES): ``"workspace"``:
   IEEE additions in ``workspace`` ("fp32" or "fp64"), ``reduce="sequential"``
   (((p0 + p1) + p2) + ...) or ``"pairwise"`` (neighbours added level by level:
   ((p0 + p1) + (p2 + p3)), an odd last one carried up); ``"fp16_partials"`` /
   ``"fp16_serial"``: cuBLAS's fp16 merges, forward from partial 0.
5. Epilogue in the workspace format, C only read when C is in the epilogue and
   ``beta != 0``: ``"fma"``: ``fma(alpha, acc, beta * C)`` (CUTLASS LinearCombination),
   ``"mul_add"``: ``(alpha * acc) + (beta * C)``.  ``beta == 0`` or C in the chain:
   ``alpha * acc`` (skipped when alpha == 1).
6. One rounding to the output format (nearest even; NaN is the arch's NaN encoding).

A schedule can also be an FPRev summation tree (:meth:`Schedule.from_tree`): see
``compile_tree`` for how its nodes map to elementary operations and additions.

A Schedule is frozen and hashable and round-trips through a string (``to_string`` /
``from_string``), which is how it passes through the custom op under ``torch.compile``.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Optional

import torch

from . import codec, cpp
from .schedule_split import (GRAIN_CUBLAS, MERGES, ScheduleRowError, grain_elements, k_slices,
                             merge_partials, residue_program)
from .schedule_partials import check_node_products, check_partials, run_chains, scaled_chains
from .limits import LimitError, check
from .spec import Spec

__all__ = ["Schedule", "PRESETS", "preset", "presets", "load_schedule", "compile_tree",
           "run_scheduled"]

_DEFAULTS = {"split_k": 1, "reduce": "sequential", "workspace": "fp32", "alpha": 1.0,
             "beta": 1.0, "epilogue": "fma", "merge": "workspace"}
REDUCES = ("sequential", "pairwise")
WORKSPACES = ("fp32", "fp64")
EPILOGUES = ("fma", "mul_add")
INPUT_PRECISIONS = ("tf32", "tf32_rn", "tf32x3", "ieee")
C_MODES = ("chain", "epilogue")

# program opcodes, by name (csrc/core/layout.h MMA_SCHED_OPS, checked by cpp.py)
_PARTIAL, _C, _ZERO = cpp.SCHED["PARTIAL"], cpp.SCHED["C"], cpp.SCHED["ZERO"]
_ADD, _NODE, _CHAIN = cpp.SCHED["ADD"], cpp.SCHED["NODE"], cpp.SCHED["CHAIN"]
_CHAINS = cpp.SCHED["CHAINS"]
_EPI_ALPHA, _EPI_FMA = cpp.SCHED["EPI_ALPHA"], cpp.SCHED["EPI_FMA"]
_EPI_MULADD = cpp.SCHED["EPI_MULADD"]
_MAX_STACK = 64
# The bound of the K-length fields (promote_every, dot_k, residue_tile, split_grain): the
# kernels count products in 32-bit ints, so no K is longer and a longer field means nothing.
# split_k is bounded by limits.py (MMA_EMU_MAX_SPLIT_K).
MAX_K_FIELD = (1 << 31) - 1
_CPU_CHAINS = True   # tests switch it off to run the _gemm + PARTIAL route on the CPU too
_RESIDUE_CHAINS = True  # off (or _CPU_CHAINS off): residue tiles as NODE ops on the CPU too


@dataclass(frozen=True)
class Schedule:
    """A library's schedule on top of the instruction chain (see the module docstring)."""

    split_k: int = 1
    reduce: str = "sequential"
    workspace: str = "fp32"
    promote_every: Optional[int] = None
    c_mode: Optional[str] = None     # None: "chain" for split_k == 1, else "epilogue"
    alpha: float = 1.0
    beta: float = 1.0
    epilogue: str = "fma"
    input_precision: Optional[str] = None
    dot_k: Optional[int] = None      # K per tl.dot call for tf32x3, a multiple of Spec.L
    #                                  (None: all of K at once)
    tree: Optional[str] = None       # an FPRev SumTree in text form (from_tree)
    split_grain: Optional[str] = None  # slices start on multiples of this many K elements:
    #                                    an int (kept as its decimal text), "cublas" or None
    #                                    (the instruction's K)
    merge: str = "workspace"         # how the slices are merged: schedule_split.MERGES
    residue_tile: Optional[int] = None  # CUTLASS k-tile: leading residue tile per chain

    def __post_init__(self):
        errs = []
        g = self.split_grain
        if isinstance(g, int) and not isinstance(g, bool):
            object.__setattr__(self, "split_grain", str(g))
        elif g is not None and not (isinstance(g, str) and (g == GRAIN_CUBLAS or g.isdigit())):
            errs.append(f"split_grain must be a positive int, {GRAIN_CUBLAS!r} or None, "
                        f"got {g!r}")
        if self.split_grain is not None and self.split_grain != GRAIN_CUBLAS and not errs:
            if not self.split_grain.isascii() or len(self.split_grain) > 64:
                errs.append(f"split_grain must be ASCII decimal digits, got {g!r}")
            elif int(self.split_grain) < 1:
                errs.append(f"split_grain must be >= 1, got {g!r}")
            elif int(self.split_grain) > MAX_K_FIELD:
                errs.append(f"split_grain = {self.split_grain} is above the bound of "
                            f"{MAX_K_FIELD} (2^31 - 1: no kernel runs a longer K)")
        if self.merge not in MERGES:
            errs.append(f"merge must be one of {tuple(MERGES)}, got {self.merge!r}")
        for name in ("split_k", "promote_every", "dot_k", "residue_tile"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                errs.append(f"{name} must be an int, got {v!r}")
        for name in ("promote_every", "dot_k", "residue_tile"):
            v = getattr(self, name)
            if isinstance(v, int) and not isinstance(v, bool) and v > MAX_K_FIELD:
                errs.append(f"{name} = {v} is above the bound of {MAX_K_FIELD} (2^31 - 1: no "
                            "kernel runs a longer K)")
        if isinstance(self.split_k, int) and not isinstance(self.split_k, bool) and \
                self.split_k > 1:
            try:
                check("split_k", self.split_k, "split_k")
            except LimitError as e:
                errs.append(str(e))
        if isinstance(self.split_k, int) and self.split_k < 1:
            errs.append(f"split_k must be >= 1, got {self.split_k}")
        if isinstance(self.promote_every, int) and not isinstance(self.promote_every, bool) \
                and self.promote_every < 1:
            errs.append(f"promote_every must be >= 1 (or None), got {self.promote_every}")
        if isinstance(self.dot_k, int) and not isinstance(self.dot_k, bool) and self.dot_k < 1:
            errs.append(f"dot_k must be >= 1 (or None), got {self.dot_k}")
        if isinstance(self.residue_tile, int) and not isinstance(self.residue_tile, bool) \
                and self.residue_tile < 1:
            errs.append(f"residue_tile must be >= 1 (or None), got {self.residue_tile}")
        if self.reduce not in REDUCES:
            errs.append(f"reduce must be one of {REDUCES}, got {self.reduce!r}")
        if self.workspace not in WORKSPACES:
            errs.append(f"workspace must be one of {WORKSPACES}, got {self.workspace!r}")
        if self.epilogue not in EPILOGUES:
            errs.append(f"epilogue must be one of {EPILOGUES}, got {self.epilogue!r}")
        if self.input_precision is not None and self.input_precision not in INPUT_PRECISIONS:
            errs.append(f"input_precision must be one of {INPUT_PRECISIONS} or None, "
                        f"got {self.input_precision!r}")
        if self.c_mode is not None and self.c_mode not in C_MODES:
            errs.append(f"c_mode must be one of {C_MODES} or None, got {self.c_mode!r}")
        for name in ("alpha", "beta"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                errs.append(f"{name} must be a finite number, got {v!r}")
            else:
                object.__setattr__(self, name, float(v))
        if errs:
            raise ValueError("invalid Schedule: " + "; ".join(errs))
        split = self.split_k > 1
        if self.c_mode is None:
            object.__setattr__(self, "c_mode", "epilogue" if split else "chain")
        if split and self.c_mode == "chain":
            errs.append("split_k > 1 starts every slice from +0 and adds C in the epilogue: "
                        "use c_mode='epilogue' (or leave c_mode out)")
        if self.c_mode == "chain" and self.beta != 1.0:
            errs.append("with c_mode='chain' C enters the chain unscaled: beta must be 1 "
                        "(use c_mode='epilogue' for beta * C)")
        if self.merge != "workspace" and self.split_k == 1:
            errs.append(f"merge={self.merge!r} merges split-K slices: it needs split_k > 1")
        if self.merge != "workspace" and (self.reduce != "sequential" or
                                          self.workspace != "fp32"):
            errs.append(f"merge={self.merge!r} sums forward in fp32: it takes neither "
                        "reduce='pairwise' nor workspace='fp64'")
        if self.residue_tile is not None and (self.promote_every is not None or
                                              self.input_precision == "tf32x3"):
            errs.append("residue_tile runs each slice as one chain: it does not combine with "
                        "promote_every or tf32x3")
        if self.dot_k is not None and self.input_precision != "tf32x3":
            errs.append("dot_k applies to input_precision='tf32x3' only")
        if self.input_precision == "tf32x3" and self.promote_every is not None:
            errs.append("promote_every does not combine with tf32x3 (its three products per "
                        "tile chain through one accumulator)")
        if self.tree is not None:
            if not isinstance(self.tree, str):
                errs.append(f"tree must be the text of a SumTree, got {type(self.tree).__name__}")
            if split or self.promote_every is not None or self.input_precision == "tf32x3" \
                    or self.residue_tile is not None:
                errs.append("a tree schedule fixes the whole order: split_k, promote_every, "
                            "residue_tile and tf32x3 do not combine with it")
        if errs:
            raise ValueError("invalid Schedule: " + "; ".join(errs))
        if isinstance(self.tree, str):
            _parse_tree(self.tree)  # raises ValueError for a malformed tree
        # computed once: to_string() is then a plain attribute read under torch.compile
        object.__setattr__(self, "_string", self._serialise())

    # -- construction -----------------------------------------------------------------
    @classmethod
    def from_tree(cls, tree, **kw) -> "Schedule":
        """The order of an FPRev :class:`~torch_mma_emu.fprev.SumTree` for one output
        element, run for every output.  Leaves 0..K-1 are the products, leaf K (when the
        tree has K + 1 leaves) is C.  A multi-way node (or a 2-child node with a product
        child) is one elementary operation of the arch over its product children with at
        most one accumulator child (an internal node or C); a 2-child node of two sums is
        an IEEE addition in the workspace format.  ``kw``: workspace, alpha, beta,
        epilogue, input_precision."""
        from .fprev.tree import SumTree
        if isinstance(tree, SumTree):
            text = tree.to_text()
        elif isinstance(tree, str):
            text = tree
        else:
            raise TypeError(f"Schedule.from_tree takes a SumTree or its text, got "
                            f"{type(tree).__name__}")
        return cls(tree=text, **kw)

    def replace(self, **changes) -> "Schedule":
        if "split_k" in changes and "c_mode" not in changes:
            changes["c_mode"] = None
        return dataclasses.replace(self, **changes)

    # -- properties -------------------------------------------------------------------
    @property
    def is_plain(self) -> bool:
        """True when this is the plain instruction chain (C at its start, nothing else)."""
        return self == Schedule()

    def describe(self) -> str:
        if self.is_plain:
            return "plain chain"
        bits = []
        if self.tree is not None:
            bits.append(f"tree of {_parse_tree(self.tree).n} leaves")
        if self.input_precision:
            bits.append(f"input {self.input_precision}" +
                        (f" per dot of {self.dot_k}" if self.dot_k else ""))
        if self.split_k > 1:
            merge = f"{self.reduce}, {self.workspace}" if self.merge == "workspace" \
                else self.merge
            grain = f", grain {self.split_grain}" if self.split_grain else ""
            bits.append(f"split-K {self.split_k} ({merge}{grain})")
        if self.residue_tile:
            bits.append(f"residue tile {self.residue_tile}")
        if self.promote_every:
            bits.append(f"promote every {self.promote_every} into {self.workspace}")
        if self.tree is None:
            bits.append(f"C in {self.c_mode}")
        if self.alpha != 1.0 or self.beta != 1.0:
            bits.append(f"alpha={self.alpha:g} beta={self.beta:g} ({self.epilogue})")
        return ", ".join(bits)

    # -- serialisation (codec.py) ---------------------------------------------------
    def to_string(self) -> str:
        """'schedule:field=value,...' (fields at their defaults left out)."""
        return self._string

    def _serialise(self) -> str:
        return codec.encode("schedule", ((k, v) for k, v in
                                         ((k, getattr(self, k)) for k in FIELD_KINDS)
                                         if v is not None and v != _DEFAULTS.get(k)))

    @classmethod
    def from_string(cls, s: str) -> "Schedule":
        return cls(**codec.decode("schedule", s, FIELD_KINDS))

    def to_dict(self, **meta) -> dict:
        """JSON-ready form; ``meta`` (provenance: target, arch, ...) is stored alongside."""
        return {"format": "torch_mma_emu.Schedule", "schedule": self.to_string(),
                "describe": self.describe(), **meta}

    @classmethod
    def from_dict(cls, d: dict) -> "Schedule":
        if not isinstance(d, dict) or d.get("format") != "torch_mma_emu.Schedule" or \
                not isinstance(d.get("schedule"), str):
            raise ValueError("not a schedule file: expected {'format': "
                             "'torch_mma_emu.Schedule', 'schedule': 'schedule:...'}")
        return cls.from_string(d["schedule"])


FIELD_KINDS = codec.field_kinds(Schedule)


def load_schedule(x: str) -> Schedule:
    """A schedule from a JSON file written by ``--schedule-out`` / ``Schedule.to_dict``, a
    preset name or a serialised schedule (the CLI's ``--schedule``)."""
    import json
    import os
    if isinstance(x, str) and os.path.isfile(x):
        from .limits import check_file
        check_file(x, "the schedule file")          # before reading it
        try:
            with open(x, encoding="utf-8") as f:
                d = json.load(f)
        except (OSError, ValueError) as e:   # ValueError: not JSON, not UTF-8
            raise ValueError(f"cannot read the schedule file {x}: {e}") from None
        except RecursionError:
            raise ValueError(f"cannot read the schedule file {x}: its JSON nests too "
                             "deeply") from None
        return Schedule.from_dict(d)
    if isinstance(x, str) and (x.startswith("schedule:") or x in PRESETS):
        return as_schedule(x)
    if isinstance(x, str) and (x.endswith(".json") or os.sep in x):
        raise ValueError(f"schedule file not found: {x}")
    raise ValueError(f"--schedule {x!r} is not a schedule file, a preset "
                     f"({', '.join(PRESETS)}) or a serialised schedule")


def as_schedule(x) -> Optional[Schedule]:
    """A Schedule from a Schedule, its string, a preset name, a SumTree or None."""
    if x is None or isinstance(x, Schedule):
        return x
    if isinstance(x, str):
        if x.startswith("schedule:"):
            return Schedule.from_string(x)
        if x in PRESETS:
            return PRESETS[x].schedule
        raise ValueError(f"schedule={x!r} is neither a serialised schedule nor a preset; "
                         f"presets: {', '.join(PRESETS)}")
    from .fprev.tree import SumTree
    if isinstance(x, SumTree):
        return Schedule.from_tree(x)
    raise TypeError(f"schedule must be a Schedule, a preset name, a serialised schedule or a "
                    f"SumTree, got {type(x).__name__}")


# ---------------------------------------------------------------------------------------
# presets
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Preset:
    schedule: Schedule
    source: str
    verified: str = ""   # who measured these bits on which GPU; "" = nobody yet


_BITEQUIV = ("Meta's bitequiv reconstruction of cuBLAS (facebookexperimental/triton, "
             "bitequiv/cublas_equiv_gemm.py, PRs #2752, #2768, #2769)")
_BY_OTHERS = "measured by others on GB200 (sm_100), not yet by us"


PRESETS: dict[str, Preset] = {
    "plain": Preset(Schedule(), "one accumulator chain per output: CUTLASS / Triton "
                    "`acc = tl.dot(a, b, acc)` loops without split-K; cuBLAS's aligned "
                    f"GEMMs without split-K (SPLITK_NUM = 1) keep one fp32 accumulator over K "
                    f"({_BITEQUIV}; measured by others on GB200)"),
    "triton_fp8_hopper": Preset(
        Schedule(), "Triton tl.dot on fp8 (sm90 wgmma): max_num_imprecise_acc=None means "
        "no upcasting (triton.experimental.gluon warpgroup_mma docs), the wgmma chain runs "
        "in the tensor core's own accumulator"),
    "triton_fp8_hopper_imprecise_acc_32": Preset(
        Schedule(promote_every=32), "Triton tl.dot(..., max_num_imprecise_acc=32) on sm90: "
        "each wgmma (K = 32 for fp8) into a zeroed temporary, then an fp32 llvm.fadd into "
        "acc (Triton test/Conversion/tritongpu_to_llvm_hopper.mlir dot_high_precision_acc); "
        "assumes BLOCK_K is a multiple of 32"),
    "triton_fp8_hopper_imprecise_acc_128": Preset(
        Schedule(promote_every=128), "as above with max_num_imprecise_acc=128 (needs "
        "BLOCK_K >= 128; with BLOCK_K < 128 Triton does not promote at all)"),
    "deepseek_v3_promote_128": Preset(
        Schedule(promote_every=128, c_mode="epilogue"), "DeepSeek-V3 report section 3.3.2: "
        "WGMMA partial sums copied to fp32 CUDA-core registers every 128 elements (N_C = "
        "128, 4 WGMMAs); CUTLASS GmmaFP8Accumulation does the same"),
    "cublas_split_k_4": Preset(
        Schedule(split_k=4, split_grain="cublas"), f"{_BITEQUIV}: cuBLAS split-K (aligned "
        "shapes) cuts K at a grain G of 64 (fp16/bf16) or 128 (fp8) elements, chunk = "
        "ceil(ceil(K/G)/splits)*G, remainder in the last slice (checked by its authors on "
        "131,533 fp8 split-K shapes); one fp32 partial per slice from +0, merged forward in "
        "fp32 starting from partial 0 (splitKreduce<..., float>); the split count is cuBLAS's "
        "heuristic's SPLITK_NUM, 4 here", verified=_BY_OTHERS),
    "cublas_split_k_4_pairwise": Preset(
        Schedule(split_k=4, split_grain="cublas", reduce="pairwise"), "the slices of "
        "cublas_split_k_4 reduced as a tree of pairs: not a measured library order (cuBLAS "
        "merges forward), kept for FPRev and schedule-search comparisons"),
    "cublas_cutlass_residue_32": Preset(
        Schedule(residue_tile=32), f"{_BITEQUIV}: a non-aligned shape runs a CUTLASS kernel "
        "whose fp32 accumulator takes one MMA of 8 (s1688) or 16 (s16816) real k-elements at a "
        "time, the leading residue tile of K % ktile elements first with its short group at "
        "its end; ktile (32, 64 or 128) is cuBLAS's choice, 32 here; the MMA's K is the "
        "instruction's", verified=_BY_OTHERS),
    "cublas_cutlass_split_k_4_fp32": Preset(
        Schedule(split_k=4, split_grain="8", residue_tile=32), f"{_BITEQUIV}: non-aligned "
        "split-K through CUTLASS: slices at CUTLASS's kAlignK grain (8), each slice with its "
        "own leading residue tile (ktile 32), fp32 partials merged forward in fp32 from "
        "partial 0 (REDUCTION_SCHEME COMPUTE_TYPE; 12% of that family)",
        verified=_BY_OTHERS),
    "cublas_cutlass_split_k_4_fp16_partials": Preset(
        Schedule(split_k=4, split_grain="8", residue_tile=32, merge="fp16_partials"),
        f"{_BITEQUIV}: as cublas_cutlass_split_k_4_fp32, the partials rounded to fp16 then "
        "summed forward in fp32 (REDUCTION_SCHEME OUTPUT_TYPE, splitKreduce<..., __half>; "
        "17%)", verified=_BY_OTHERS),
    "cublas_cutlass_split_k_4_fp16_serial": Preset(
        Schedule(split_k=4, split_grain="8", residue_tile=32, merge="fp16_serial"),
        f"{_BITEQUIV}: as cublas_cutlass_split_k_4_fp32, a serial chain whose running sum is "
        "kept in fp16 between slices (REDUCTION_SCHEME NONE, GemmSplitKSerial; 70%)",
        verified=_BY_OTHERS),
    "scaled_mm_fast_accum": Preset(
        Schedule(c_mode="epilogue"), "torch._scaled_mm(use_fast_accum=True): cuBLASLt "
        "CUBLASLT_MATMUL_DESC_FAST_ACCUM=1, the fp8 chain never leaves the tensor core "
        "accumulator; bias added in the epilogue"),
    "scaled_mm_precise": Preset(
        Schedule(promote_every=128, c_mode="epilogue"), "torch._scaled_mm("
        "use_fast_accum=False): cuBLASLt promotes fp8 partial sums into fp32 registers; "
        "the interval (128 here) is not documented by NVIDIA"),
    "triton_tf32x3": Preset(
        Schedule(input_precision="tf32x3"), "Triton 3.6 tl.dot(input_precision='tf32x3'): "
        "F32DotTC pass (lib/Dialect/TritonGPU/Transforms/F32DotTC.cpp, its test "
        "test/TritonGPU/tf32x3-matmul.mlir, and the TTGIR Triton 3.6 emits for sm90): hi = "
        "cvt.rna.tf32, r = dot(lo, hi, 0), r = dot(hi, lo, r), NaN -> 0, r = dot(hi, hi, r), "
        "then acc + r in fp32 per tl.dot"),
    "triton_tf32": Preset(Schedule(input_precision="tf32"),
                          "Triton tl.dot default input_precision='tf32' on fp32 inputs"),
    "triton_ieee": Preset(Schedule(input_precision="ieee"),
                          "Triton tl.dot(input_precision='ieee'): FMA chain on CUDA cores"),
}


def presets() -> dict[str, str]:
    """Preset name -> one line: the schedule, its source and whether a GPU run verified it."""
    return {k: f"{v.schedule.describe()} | {v.verified or 'UNVERIFIED'} | "
               f"{v.source}" for k, v in PRESETS.items()}


def preset(name: str, **changes) -> Schedule:
    """The schedule of a named preset, optionally with fields changed."""
    if name not in PRESETS:
        raise ValueError(f"unknown schedule preset {name!r}; presets: {', '.join(PRESETS)}")
    s = PRESETS[name].schedule
    return s.replace(**changes) if changes else s


# ---------------------------------------------------------------------------------------
# trees -> programs
# ---------------------------------------------------------------------------------------

@lru_cache(maxsize=64)
def _parse_tree(text: str):
    from .fprev.tree import SumTree
    try:
        return SumTree.parse(text)
    except ValueError as e:
        raise ValueError(f"Schedule tree is not a valid SumTree: {e}") from None


def node_capacity(spec: Spec) -> int:
    """Products one elementary operation of ``spec`` takes."""
    if spec.scaled:
        raise ValueError(f"schedules on block-scaled instructions ({spec.op}) are not "
                         "supported yet")
    return spec.L      # every operation: FMA has L = 1; FTZ-AddMul's L products are flushed once


def _slots(ks: list[int], width: int) -> list[int]:
    """Chunk positions of a node's products: k mod width when they share one aligned
    window of the instruction (as in the chain), else ascending order."""
    if ks[0] // width == ks[-1] // width:
        return [k % width for k in ks]
    return list(range(len(ks)))


class TreeScheduleError(ScheduleRowError):
    """A tree schedule that this product cannot run: its K, its arch's elementary operation
    (a node wider than the fused length) or the interpreter's stack (``compare`` marks such
    rows instead of failing)."""


@lru_cache(maxsize=64)
def compile_tree(text: str, K: int, spec: Spec, has_c: bool, alpha: float,
                 beta: float, epilogue: str) -> tuple[int, ...]:
    """The interpreter program (csrc/core/schedule.h) of a tree for products of length K.

    Raises :class:`TreeScheduleError` when the tree does not fit K or the arch cannot run it."""
    tree = _parse_tree(text)
    if tree.n not in (K, K + 1):
        raise TreeScheduleError(f"the schedule's tree has {tree.n} leaves; a product with "
                                f"K = {K} needs K leaves (C in the epilogue) or K + 1 (leaf K "
                                "is C)")
    c_leaf = K if tree.n == K + 1 else None
    cap = node_capacity(spec)
    # what each internal node is: ("op", products, acc_child) or ("add", x, y)
    plan = {}
    need = {}
    for v in tree.postorder():
        ch = tree.child_list(v)
        prods = sorted(c for c in ch if c < K)
        sums = [c for c in ch if c >= K]      # internal nodes and the C leaf
        if len(ch) == 2 and not prods:
            plan[v] = ("add",) + tuple(sums)
            nx, ny = (need.get(c, 1) for c in sums)
            need[v] = max(nx, ny) if nx != ny else nx + 1
            continue
        if len(sums) > 1:
            raise TreeScheduleError(
                f"tree node {tree.to_text() if tree.n <= 64 else v} has {len(sums)} "
                f"non-product children; an elementary operation of {spec.arch} takes products "
                "and at most one accumulator")
        acc = sums[0] if sums else None
        if len(prods) > cap and not (cap == 1 and acc is None and len(prods) == 2):
            raise TreeScheduleError(
                f"a tree node sums {len(prods)} products, but one elementary operation of "
                f"{spec.arch} ({spec.op}, L={spec.L}) takes at most {cap}; this arch cannot "
                "run this tree")
        plan[v] = ("op", prods, acc)
        need[v] = need.get(acc, 1) if acc is not None else 1
    prog: list[int] = []

    def emit_op(prods, with_acc):
        if cap == 1 and len(prods) == 2 and not with_acc:   # FMA chain from +0, ascending k
            prog.extend([_NODE, 1, 0, 1, prods[0], 0, _NODE, 1, 1, 1, prods[1], 0])
            return
        prog.extend([_NODE, len(prods), int(with_acc), cap])
        for k, s in zip(prods, _slots(prods, cap)):
            prog.extend([k, s])

    if tree.root < K:           # a single product (K == 1): one operation from +0
        emit_op([tree.root], False)
    elif tree.root == c_leaf:
        raise TreeScheduleError("the tree's root is the C leaf")
    else:
        # iterative postfix emission; the operand needing the deeper stack goes first
        stack = [(tree.root, False)]
        while stack:
            v, done = stack.pop()
            if v == c_leaf:
                prog.append(_C)
                continue
            p = plan[v]
            if p[0] == "add":
                if done:
                    prog.append(_ADD)
                    continue
                x, y = p[1], p[2]
                if need.get(y, 1) > need.get(x, 1):
                    x, y = y, x
                stack.extend([(v, True), (y, False), (x, False)])
            else:
                _, prods, acc = p
                if done or acc is None:
                    emit_op(prods, acc is not None)
                else:
                    stack.extend([(v, True), (acc, False)])
    if need.get(tree.root, 1) > _MAX_STACK:
        raise TreeScheduleError(f"the tree needs {need[tree.root]} pending partial sums; "
                                f"the interpreter holds {_MAX_STACK}")
    prog.extend(_epilogue(has_c and c_leaf is None, alpha, beta, epilogue))
    return tuple(prog)


def _epilogue(c_in_epilogue: bool, alpha: float, beta: float, epilogue: str) -> list[int]:
    if c_in_epilogue and beta != 0.0:
        return [_EPI_FMA if epilogue == "fma" else _EPI_MULADD]
    return [_EPI_ALPHA] if alpha != 1.0 else []


# ---------------------------------------------------------------------------------------
# running a schedule
# ---------------------------------------------------------------------------------------

def _reduce_program(items: list[list[int]], how: str, empties: int = 0) -> list[int]:
    """Postfix code summing the sub-programs ``items`` (each pushes one value) followed by
    ``empties`` slices past K, each +0.  The empty slices cost nothing however many there
    are: +0 + +0 is +0, and x + +0 + +0 is x + +0 for every x (-0 + +0 is +0), so they reduce
    to at most one +0 per addition the order really makes with a non-empty value."""
    if how == "sequential" or len(items) + empties <= 2:
        out = list(items[0])
        for it in items[1:]:
            out += it + [_ADD]
        return out + ([_ZERO, _ADD] if empties else [])
    level, e = items, empties   # e: trailing +0 items of this level
    while len(level) + e > 1:
        nxt = [level[i] + level[i + 1] + [_ADD] for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:      # the last value pairs with the first +0, or is carried up
            nxt.append(level[-1] + [_ZERO, _ADD] if e else level[-1])
            e = -(-(e - 1) // 2) if e else 0
        else:
            e = -(-e // 2)      # +0 pairs: +0 each, an odd one carried up
        level = nxt
    return level[0]


def run_scheduled(sched: Schedule, spec: Spec, a3, b3, c3, has_c: bool,
                  lo=None, scales=None) -> torch.Tensor:
    """D (batch, M, N) in the spec's output dtype.  ``a3``/``b3``: the operands as _gemm
    takes them (codes, or float values for fma/ftz_addmul), ``c3`` (batch, M, N) in the
    output dtype; ``lo``: True for tf32x3 (a3, b3 are then the float32 inputs' bits, split
    into hi and lo parts K block by K block as the chains run);
    ``scales``: (scale_a, scale_b) codes (batch, M, nblk) / (batch, nblk, N) of a
    block-scaled product, whose slices and blocks then start on scale blocks."""
    Bt, M, K = a3.shape
    N = b3.shape[2]
    # the workspace is at least as wide as the output (fp64 products reduce in fp64)
    ws64 = sched.workspace == "fp64" or spec.out_format == "fp64"
    consts = [1.0 if ws64 else 0.0, sched.alpha, sched.beta]
    empty = a3.new_empty((Bt, M, 0)), b3.new_empty((Bt, 0, N))
    if sched.tree is not None:
        if scales is not None:
            raise TreeScheduleError("a tree schedule cannot run a block-scaled (MX/NVFP4) "
                                    "product: its per-node operations take no scales; use "
                                    "split_k / promote_every")
        prog = compile_tree(sched.tree, K, spec, has_c, sched.alpha, sched.beta,
                            sched.epilogue)
        return cpp.sched(spec, a3, b3, c3, c3.new_empty((0, M, N)), prog, consts)
    L = spec.L
    for name in ("promote_every", "dot_k"):     # blocks and tl.dot tiles hold whole instructions
        v = getattr(sched, name)
        if v is not None and v % L:
            raise ValueError(f"{name}={v} is not a multiple of the instruction's K "
                             f"({spec.instruction or spec.op}: L = {L})")
    if scales is not None:  # slices and blocks start on scale blocks as well
        L = math.lcm(L, spec.block_size)
        if sched.promote_every is not None and sched.promote_every % L:
            raise ValueError(f"promote_every={sched.promote_every} is not a multiple of "
                             f"{L}, the instruction's K and the scale block "
                             f"({spec.block_size}) together")
    grain = grain_elements(sched.split_grain, spec, L)
    if sched.residue_tile is not None:
        if scales is not None or lo is not None:
            raise ScheduleRowError("residue_tile cannot run block-scaled or tf32x3 products")
        # CPU: each slice as two CHAINs (any K); elsewhere and multi-pass: NODE ops
        residue_chains = _CPU_CHAINS and _RESIDUE_CHAINS and c3.device.type == "cpu" and \
            spec.passes == 1
        if not residue_chains:
            check_node_products(K)
        if sched.residue_tile % spec.L:
            raise ScheduleRowError(f"residue_tile={sched.residue_tile} is not a multiple of the "
                             f"instruction's K ({spec.instruction or spec.op}: L = {spec.L})")
    if sched.merge != "workspace" and spec.out_format != "fp32":
        raise ScheduleRowError(f"merge={sched.merge!r} rounds fp32 partials to fp16: it needs an "
                         f"instruction with fp32 output, not {spec.out_format}")
    c_in_chain = sched.c_mode == "chain"
    zero = torch.zeros((), dtype=c3.dtype, device=c3.device).expand(Bt, M, N)
    jobs: list[tuple[int, int, bool]] = []   # chains (k0, k1, starts from C)
    # The CPU kernel runs the slices' and blocks' chains itself (CHAIN ops, straight into
    # its reduction: no partial tensors); elsewhere _gemm computes them as PARTIALs.
    # (CHAIN ops start on whole instructions; the fp16 merges take the slices as partials)
    inline = _CPU_CHAINS and c3.device.type == "cpu" and lo is None and \
        grain % spec.L == 0 and sched.merge == "workspace"

    def push(k0, k1, from_c=False):
        if inline:
            return [_CHAIN, k0, k1, int(from_c)]
        jobs.append((k0, k1, from_c))
        return [_PARTIAL, len(jobs) - 1]

    slice_code = []
    ranges, empties = k_slices(K, grain, sched.split_k, sched.split_grain is not None)
    pe, seq = sched.promote_every, None
    if inline and pe is None and sched.residue_tile is None and len(ranges) > 2 and \
            sched.reduce == "sequential":
        # slice 0, then "+ each further slice's chain" as one CHAINS op: a few words
        # however many slices (split_k = 10^6 would otherwise be millions of them)
        seq = push(*ranges[0], c_in_chain) + [_CHAINS, ranges[1][0], K, ranges.size] + \
            ([_ZERO, _ADD] if empties else [])
    for (k0, k1) in (ranges if seq is None else ()):
        if sched.residue_tile is not None:
            slice_code.append(residue_program(k0, k1, spec.L, node_capacity(spec),
                                              sched.residue_tile, c_in_chain and has_c,
                                              residue_chains))
            continue
        if pe is None:
            slice_code.append(push(k0, k1, c_in_chain))
            continue
        code = [_C] if (c_in_chain and has_c) else [_ZERO]
        if inline and k1 > k0:          # the promotion loop as one CHAINS op
            code += [_CHAINS, k0, k1, pe]
        else:
            for b0 in range(k0, k1, pe):
                code += push(b0, min(k1, b0 + pe)) + [_ADD]
        slice_code.append(code)
    epi = _epilogue(has_c and not c_in_chain, sched.alpha, sched.beta, sched.epilogue)
    direct = inline or sched.residue_tile is not None   # no partials from _gemm
    if direct:
        parts, sc = c3.new_empty((0, M, N)), scales or (None, None)
    else:
        check_partials(len(jobs), Bt, M, N, c3.element_size())
        gemm = partial(cpp.gemm, spec)  # the plain chain: gemm(a, b, c, sa=None, sb=None)
        if scales is not None:
            parts = scaled_chains(jobs, a3, b3, c3, zero, gemm, scales, spec.block_size)
        else:
            parts = run_chains(jobs, a3, b3, c3, zero, gemm, lo, sched.dot_k,
                                spec.L * spec.passes)
        a3, b3, sc = *empty, (None, None)
    if sched.merge != "workspace":     # each slice's value, merged in fp16 here
        vals = [parts[code[1] * Bt:(code[1] + 1) * Bt] if len(code) == 2 and code[0] == _PARTIAL
                else cpp.sched(spec, a3, b3, c3, parts, code, consts, *sc) for code in slice_code]
        merged = merge_partials(vals, sched.merge)
        return cpp.sched(spec, *empty, c3, merged, [_PARTIAL, 0] + epi, consts)
    prog = (seq if seq is not None else _reduce_program(slice_code, sched.reduce, empties)) + epi
    return cpp.sched(spec, a3, b3, c3, parts, prog, consts, *sc)
