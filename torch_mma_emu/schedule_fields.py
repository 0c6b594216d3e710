"""What a :class:`Schedule` is: its fields, their checks and its string form (the order
of operations they describe: the docstring of :mod:`torch_mma_emu.schedule`)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

from . import codec
from .limits import check
from .schedule_split import GRAIN_CUBLAS, MERGES
from .schedule_tree import parse_tree, tree_text

_DEFAULTS = {"split_k": 1, "reduce": "sequential", "workspace": "fp32", "alpha": 1.0,
             "beta": 1.0, "epilogue": "fma", "merge": "workspace"}
REDUCES = ("sequential", "pairwise", "halves")
# how K is dealt to the split-K slices: None (contiguous slices) or "interleaved" (tiles of
# split_grain elements, tile t to slice t mod split_k: cuBLASLt 12.8's sm89 fp8 kernels)
SPLIT_LAYOUTS = ("interleaved",)
WORKSPACES = ("fp32", "fp64")
EPILOGUES = ("fma", "mul_add")
INPUT_PRECISIONS = ("tf32", "tf32_rn", "tf32x3", "ieee")
C_MODES = ("chain", "epilogue")
# The bound of the K-length fields (promote_every, dot_k, residue_tile, split_grain): the
# kernels count products in 32-bit ints, so no K is longer and a longer field means nothing.
# split_k is bounded by limits.py (MMA_EMU_MAX_SPLIT_K) where it is read or run: check_bounds.
MAX_K_FIELD = (1 << 31) - 1


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
    split_layout: Optional[str] = None  # None: contiguous slices; "interleaved": tiles of
    #                                    split_grain dealt round-robin (schedule_split.py)

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
        if self.split_layout is not None and self.split_layout not in SPLIT_LAYOUTS:
            errs.append(f"split_layout must be None or one of {SPLIT_LAYOUTS}, got "
                        f"{self.split_layout!r}")
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
        if self.split_layout == "interleaved" and (
                self.split_grain is None or self.split_grain == GRAIN_CUBLAS or
                self.residue_tile is not None or self.input_precision == "tf32x3" or
                self.merge != "workspace"):
            errs.append("split_layout='interleaved' deals tiles of an explicit split_grain "
                        "(an int) to the slices; it does not combine with residue_tile, "
                        "tf32x3 or the fp16 merges")
        if self.dot_k is not None and self.input_precision != "tf32x3":
            errs.append("dot_k applies to input_precision='tf32x3' only")
        if self.input_precision == "tf32x3" and self.promote_every is not None:
            errs.append("promote_every does not combine with tf32x3 (its three products per "
                        "tile chain through one accumulator)")
        if self.tree is not None:
            if not isinstance(self.tree, str):
                errs.append(f"tree must be the text of a SumTree, got {type(self.tree).__name__}")
            if split or self.promote_every is not None or self.input_precision == "tf32x3" \
                    or self.residue_tile is not None or self.split_layout is not None:
                errs.append("a tree schedule fixes the whole order: split_k, promote_every, "
                            "residue_tile and tf32x3 do not combine with it")
        if errs:
            raise ValueError("invalid Schedule: " + "; ".join(errs))
        if isinstance(self.tree, str):
            parse_tree(self.tree)  # raises ValueError for a malformed tree
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
        text = tree if isinstance(tree, str) else tree_text(tree)
        if text is None:
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
            bits.append(f"tree of {parse_tree(self.tree).n} leaves")
        if self.input_precision:
            bits.append(f"input {self.input_precision}" +
                        (f" per dot of {self.dot_k}" if self.dot_k else ""))
        if self.split_k > 1:
            merge = f"{self.reduce}, {self.workspace}" if self.merge == "workspace" \
                else self.merge
            grain = f", grain {self.split_grain}" if self.split_grain else ""
            if self.split_layout:
                grain += f", {self.split_layout} tiles"
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
        """The schedule a string names; a user's text, so its split_k is held to
        MMA_EMU_MAX_SPLIT_K here (as where the schedule runs: :meth:`check_bounds`)."""
        return cls(**codec.decode("schedule", s, FIELD_KINDS)).check_bounds()

    def check_bounds(self) -> "Schedule":
        """This schedule when its split_k is within MMA_EMU_MAX_SPLIT_K (limits.py), else
        :class:`.limits.LimitError`.  Checked where a schedule is read from a user or run,
        never at construction: the presets are built at import, and a malformed variable
        must fail the work that uses it, not ``import torch_mma_emu``."""
        if self.split_k > 1:
            check("split_k", self.split_k, "split_k")
        return self

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
