"""How a library kernel strings matrix-unit instructions together: a :class:`Schedule`.

``emulated_mm`` without a schedule runs one accumulator chain per output element
(docs/model.md, "The GEMM chain").  A schedule describes what library kernels do on top of that chain; the order
of operations, for one output element ``d = alpha * (A @ B) + beta * C``:

1. ``input_precision`` (float32 inputs on tensor-core archs): ``"tf32"`` (the hardware
   truncates the low 13 bits), ``"tf32_rn"`` (inputs rounded to tf32, nearest-even, first),
   ``"tf32x3"`` (Triton: ``hi = cvt.rna.tf32(x)``, ``lo = x - hi``; per ``dot_k`` tile
   ``acc = dot(a_lo, b_hi, acc); acc = dot(a_hi, b_lo, acc); acc = dot(a_hi, b_hi, acc)``),
   ``"ieee"`` (fp32 FMA chain).  ``None``: the operands' own format.
2. K is cut into ``split_k`` slices at multiples of the instruction's K (``Spec.L``):
   slice size ``ceil(ceil(K / L) / split_k) * L``, the last slice shorter, empty slices +0.
3. Each slice is a chain from +0 (from C when ``split_k == 1`` and ``c_mode == "chain"``).
   With ``promote_every = P`` each slice is cut into blocks of P elements; each block is a
   chain from +0 whose result is added (IEEE, workspace format) to the slice's main
   accumulator, which starts from C (``c_mode="chain"``, ``split_k == 1``) or +0.
4. The slice results are reduced with IEEE additions in ``workspace`` ("fp32" or "fp64"),
   ``reduce="sequential"`` (((p0 + p1) + p2) + ...) or ``"pairwise"`` (neighbours added
   level by level: ((p0 + p1) + (p2 + p3)), an odd last one carried up).
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
import os
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Optional

import torch

from . import codec, cpp
from .spec import Spec

__all__ = ["Schedule", "PRESETS", "preset", "presets", "load_schedule", "compile_tree",
           "run_scheduled"]

_DEFAULTS = {"split_k": 1, "reduce": "sequential", "workspace": "fp32", "alpha": 1.0,
             "beta": 1.0, "epilogue": "fma"}
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
_CPU_CHAINS = True   # tests switch it off to run the _gemm + PARTIAL route on the CPU too


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

    def __post_init__(self):
        errs = []
        for name in ("split_k", "promote_every", "dot_k"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                errs.append(f"{name} must be an int, got {v!r}")
        if isinstance(self.split_k, int) and self.split_k < 1:
            errs.append(f"split_k must be >= 1, got {self.split_k}")
        if isinstance(self.promote_every, int) and not isinstance(self.promote_every, bool) \
                and self.promote_every < 1:
            errs.append(f"promote_every must be >= 1 (or None), got {self.promote_every}")
        if isinstance(self.dot_k, int) and not isinstance(self.dot_k, bool) and self.dot_k < 1:
            errs.append(f"dot_k must be >= 1 (or None), got {self.dot_k}")
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
        if self.dot_k is not None and self.input_precision != "tf32x3":
            errs.append("dot_k applies to input_precision='tf32x3' only")
        if self.input_precision == "tf32x3" and self.promote_every is not None:
            errs.append("promote_every does not combine with tf32x3 (its three products per "
                        "tile chain through one accumulator)")
        if self.tree is not None:
            if not isinstance(self.tree, str):
                errs.append(f"tree must be the text of a SumTree, got {type(self.tree).__name__}")
            if split or self.promote_every is not None or self.input_precision == "tf32x3":
                errs.append("a tree schedule fixes the whole order: split_k, promote_every "
                            "and tf32x3 do not combine with it")
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
            bits.append(f"split-K {self.split_k} ({self.reduce}, {self.workspace})")
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
    verified: bool = False   # True once a GPU run has confirmed the bits


PRESETS: dict[str, Preset] = {
    "plain": Preset(Schedule(), "one accumulator chain per output: CUTLASS / Triton "
                    "`acc = tl.dot(a, b, acc)` loops without split-K", verified=False),
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
        Schedule(split_k=4), "cuBLAS-like split-K: 4 slices from +0, fp32 workspace, "
        "reduced in slice order, alpha/beta epilogue (CUTLASS ReduceSplitK); the split "
        "count cuBLAS picks depends on the shape and the GPU"),
    "cublas_split_k_4_pairwise": Preset(
        Schedule(split_k=4, reduce="pairwise"), "split-K reduced as a tree of pairs"),
    "scaled_mm_fast_accum": Preset(
        Schedule(c_mode="epilogue"), "torch._scaled_mm(use_fast_accum=True): cuBLASLt "
        "CUBLASLT_MATMUL_DESC_FAST_ACCUM=1, the fp8 chain never leaves the tensor core "
        "accumulator; bias added in the epilogue"),
    "scaled_mm_precise": Preset(
        Schedule(promote_every=128, c_mode="epilogue"), "torch._scaled_mm("
        "use_fast_accum=False): cuBLASLt promotes fp8 partial sums into fp32 registers; "
        "the interval (128 here) is not documented by NVIDIA"),
    "triton_tf32x3": Preset(
        Schedule(input_precision="tf32x3"), "Triton tl.dot(input_precision='tf32x3'): "
        "F32DotTC pass, hi = cvt.rna.tf32, three tf32 dots (lo*hi, hi*lo, hi*hi) chained "
        "through the accumulator (lib/Dialect/TritonGPU/Transforms/F32DotTC.cpp)"),
    "triton_tf32": Preset(Schedule(input_precision="tf32"),
                          "Triton tl.dot default input_precision='tf32' on fp32 inputs"),
    "triton_ieee": Preset(Schedule(input_precision="ieee"),
                          "Triton tl.dot(input_precision='ieee'): FMA chain on CUDA cores"),
}


def presets() -> dict[str, str]:
    """Preset name -> one line: the schedule, its source and whether a GPU run verified it."""
    return {k: f"{v.schedule.describe()} | {'verified' if v.verified else 'UNVERIFIED'} | "
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
    if spec.op == "fma":
        return 1
    if spec.op == "ftz_addmul":
        return spec.P
    return spec.L


def _slots(ks: list[int], width: int) -> list[int]:
    """Chunk positions of a node's products: k mod width when they share one aligned
    window of the instruction (as in the chain), else ascending order."""
    if ks[0] // width == ks[-1] // width:
        return [k % width for k in ks]
    return list(range(len(ks)))


class TreeScheduleError(ValueError):
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


def _tf32_round(x: torch.Tensor, mode: str) -> torch.Tensor:
    """float32 -> nearest tf32 value (mode "rne" or "rna": ties away, cvt.rna.tf32.f32);
    NaN and infinities are kept.  On the bits: add half an ulp of tf32 (less one, plus the
    kept lsb, for ties to even) and clear the 13 dropped bits; a carry into the exponent is
    the next binade or infinity, as IEEE rounding gives.  int32 arithmetic wraps, the sign
    bit is never reached from a finite magnitude."""
    bits = x.contiguous().view(torch.int32)
    half = 0x1000 if mode == "rna" else 0xFFF + ((bits >> 13) & 1)
    r = (bits + half) & ~0x1FFF
    special = (bits & 0x7F800000) == 0x7F800000
    return torch.where(special, bits, r).view(torch.float32).view(x.shape)


@dataclass(frozen=True)
class _Slices:
    """(k0, k1) of n slices of ``size`` products from 0, the last one ending at K: a lazy
    sequence (split_k = 10^6 makes no million tuples)."""
    K: int
    size: int
    n: int

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, s: int) -> tuple[int, int]:
        s = s + self.n if s < 0 else s
        if not 0 <= s < self.n:
            raise IndexError(s)
        return min(self.K, s * self.size), min(self.K, (s + 1) * self.size)

    def __iter__(self):
        return (self[s] for s in range(self.n))


def _k_ranges(K: int, L: int, parts: int) -> tuple[_Slices, int]:
    """The slices holding products, ceil(ceil(K / L) / parts) chunks of L each (at least one
    slice, empty when K is 0), and how many slices past K follow them."""
    chunks = -(-K // L)
    per = -(-chunks // parts)
    n = -(-chunks // per) if per else 1
    return _Slices(K, per * L, n), parts - n


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
    c_in_chain = sched.c_mode == "chain"
    zero = torch.zeros((), dtype=c3.dtype, device=c3.device).expand(Bt, M, N)
    jobs: list[tuple[int, int, bool]] = []   # chains (k0, k1, starts from C)
    # The CPU kernel runs the slices' and blocks' chains itself (CHAIN ops, straight into
    # its reduction: no partial tensors); elsewhere _gemm computes them as PARTIALs.
    inline = _CPU_CHAINS and c3.device.type == "cpu" and lo is None

    def push(k0, k1, from_c=False):
        if inline:
            return [_CHAIN, k0, k1, int(from_c)]
        jobs.append((k0, k1, from_c))
        return [_PARTIAL, len(jobs) - 1]

    slice_code = []
    ranges, empties = _k_ranges(K, L, sched.split_k)
    pe = sched.promote_every
    if inline and pe is None and len(ranges) > 2 and sched.reduce == "sequential":
        # slice 0, then "+ each further slice's chain" as one CHAINS op: a few words
        # however many slices (split_k = 10^6 would otherwise be millions of them)
        prog = push(*ranges[0], c_in_chain) + [_CHAINS, ranges[1][0], K, ranges.size] + \
            ([_ZERO, _ADD] if empties else [])
    else:
        for (k0, k1) in ranges:
            if pe is None:
                slice_code.append(push(k0, k1, c_in_chain))
                continue
            code = [_C] if (c_in_chain and has_c) else [_ZERO]
            if inline and k1 > k0:      # the promotion loop as one CHAINS op
                code += [_CHAINS, k0, k1, pe]
            else:
                for b0 in range(k0, k1, pe):
                    code += push(b0, min(k1, b0 + pe)) + [_ADD]
            slice_code.append(code)
        prog = _reduce_program(slice_code, sched.reduce, empties)
    prog += _epilogue(has_c and not c_in_chain, sched.alpha, sched.beta, sched.epilogue)
    if inline:
        return cpp.sched(spec, a3, b3, c3, c3.new_empty((0, M, N)), prog, consts,
                         *(scales or (None, None)))
    _check_partials(len(jobs), Bt, M, N, c3.element_size())
    gemm = partial(cpp.gemm, spec)      # the plain chain: gemm(a, b, c, sa=None, sb=None)
    if scales is not None:
        parts = _scaled_chains(jobs, a3, b3, c3, zero, gemm, scales, spec.block_size)
    else:
        parts = _run_chains(jobs, a3, b3, c3, zero, gemm, lo, sched.dot_k,
                            spec.L * spec.passes)
    return cpp.sched(spec, *empty, c3, parts, prog, consts)


PARTIALS_ENV = "MMA_EMU_SCHED_PARTIAL_BYTES"


def _check_partials(n: int, Bt: int, M: int, N: int, es: int) -> None:
    """The _gemm + PARTIAL route (CUDA, tf32x3) holds one (batch, M, N) result per chain:
    refuse before the work when they pass MMA_EMU_SCHED_PARTIAL_BYTES (default 2 GiB).  The
    CPU's CHAIN route holds none (its stack is a few entries deep, whatever split_k is)."""
    raw = os.environ.get(PARTIALS_ENV, "").strip()
    if raw and (not raw.isascii() or not raw.isdigit() or int(raw) < 1):
        raise ValueError(f"{PARTIALS_ENV}={raw!r}: expected a positive decimal integer (bytes)")
    limit = int(raw) if raw else 2 << 30
    need = n * Bt * M * N * es
    if need > limit:
        raise ValueError(f"schedule: {n} chains (slices x promotion blocks) each keep a "
                         f"({Bt}, {M}, {N}) partial result on this route (CUDA, or "
                         f"input_precision='tf32x3'): {need / 2 ** 20:.0f} MiB, over the "
                         f"{limit / 2 ** 20:.0f} MiB limit; use fewer slices or blocks, or "
                         f"raise {PARTIALS_ENV} (bytes)")


def _tf32x3_parts(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 bits -> (hi, lo) tf32 codes: hi = cvt.rna.tf32(x), lo = x - hi (exact)."""
    xf = x.view(torch.float32)
    hi = _tf32_round(xf, "rna")
    return hi.view(torch.int32), (xf - hi).view(torch.int32)


def _tf32x3_chain(a3, b3, k0, k1, start, gemm, dot_k, L):
    """tf32x3: three tf32 dots per tl.dot tile of dot_k, chained through the accumulator.
    Each dot runs K block by K block (the plain chain goes on exactly from its accumulator
    at a multiple of L), the hi / lo parts made per block: the working set stays about
    MMA_EMU_CPU_BLOCK_BYTES whatever K is."""
    acc, step = start, dot_k or max(k1 - k0, 1)
    Bt, M, _ = a3.shape
    N = b3.shape[2]
    blk = max(L, _block_bytes() // max(1, 16 * (M + N)) // L * L)
    for t0 in range(k0, k1, step):
        t1 = min(k1, t0 + step)
        for which in ("lh", "hl", "hh"):    # al * bh, ah * bl, ah * bh
            for u0 in range(t0, t1, blk):
                u1 = min(t1, u0 + blk)
                a = _tf32x3_parts(a3[:, :, u0:u1])[which[0] == "l"]
                b = _tf32x3_parts(b3[:, u0:u1, :])[which[1] == "l"]
                acc = gemm(a, b, acc)
    return acc


def _block_bytes() -> int:
    """The CPU kernel's K block budget (MMA_EMU_CPU_BLOCK_BYTES, default 32 MiB)."""
    raw = os.environ.get("MMA_EMU_CPU_BLOCK_BYTES", "")
    try:
        v = int(raw)
    except ValueError:
        v = 0
    return v if v > 0 else 32 << 20


def _scaled_chains(jobs, a3, b3, c3, zero, gemm, scales, block) -> torch.Tensor:
    """The partials of a block-scaled product: each chain with its scale blocks (every range
    starts on a block; an empty one is C or +0)."""
    sa, sb = scales
    outs = []
    for k0, k1, fc in jobs:
        start = c3 if fc else zero
        if k1 == k0:
            outs.append(start.expand(c3.shape).contiguous())
            continue
        b0, b1 = k0 // block, -(-k1 // block)
        outs.append(gemm(a3[:, :, k0:k1], b3[:, k0:k1, :], start, sa[:, :, b0:b1],
                         sb[:, b0:b1, :]))
    return torch.cat(outs) if outs else c3.new_empty((0,) + tuple(c3.shape[1:]))


def _run_chains(jobs, a3, b3, c3, zero, gemm, lo, dot_k, L=1) -> torch.Tensor:
    """The partial results (len(jobs) * batch, M, N) of chains over K ranges.  Chains of
    one length from +0 run as one batched _gemm call (their K ranges gathered into the
    batch dimension): one kernel launch, and the result is already the partials tensor."""
    Bt, M, _ = a3.shape
    N = b3.shape[2]
    if not jobs:
        return c3.new_empty((0, M, N))
    if lo is not None:
        outs = [_tf32x3_chain(a3, b3, k0, k1, c3 if fc else zero, gemm, dot_k, L)
                for k0, k1, fc in jobs]
        return torch.stack(outs).reshape(len(outs) * Bt, M, N)
    groups: dict = {}
    for j, (k0, k1, fc) in enumerate(jobs):
        groups.setdefault((k1 - k0, fc), []).append(j)
    if len(groups) == 1 and len(jobs) > 1 and not jobs[0][2]:
        length = jobs[0][1] - jobs[0][0]
        idx = torch.tensor([k0 for k0, _, _ in jobs], device=a3.device)[:, None] + \
            torch.arange(length, device=a3.device)
        ag = a3[:, :, idx].permute(2, 0, 1, 3).reshape(len(jobs) * Bt, M, length)
        bg = b3[:, idx, :].permute(1, 0, 2, 3).reshape(len(jobs) * Bt, length, N)
        return gemm(ag, bg, zero[:1].expand(len(jobs) * Bt, M, N))
    outs = [None] * len(jobs)
    for (length, fc), js in groups.items():
        if len(js) == 1 or fc:
            for j in js:
                k0, k1, _ = jobs[j]
                outs[j] = gemm(a3[:, :, k0:k1], b3[:, k0:k1, :], c3 if fc else zero)
            continue
        sub = _run_chains([jobs[j] for j in js], a3, b3, c3, zero, gemm, None, None)
        for t, j in enumerate(js):
            outs[j] = sub[t * Bt:(t + 1) * Bt]
    return outs[0] if len(outs) == 1 else torch.cat(outs)
