"""What a preview did: one :class:`Record` per routed (or deliberately native) op call."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

__all__ = ["Record", "Recorder", "KERNEL_NATIVE", "KERNEL_KINDS", "is_kernel_label"]

# PyTorch's own kernels that multiply no matrices (reductions: aten_reductions.py,
# elementwise math: aten_math.py) are recorded with the format "torch <version> CUDA kernel"
# where modelled and KERNEL_NATIVE where they ran in the CPU's order, with a kind of
# KERNEL_KINDS; emulated_count / native_count count products only.
KERNEL_NATIVE = "CPU order"
KERNEL_KINDS = frozenset({"elementwise", "reduction", "normalization"})


def is_kernel_label(fmt: str) -> bool:
    return fmt == KERNEL_NATIVE or fmt.startswith("torch ")


@dataclass(frozen=True)
class Record:
    op: str            # aten op name, e.g. "aten.addmm.default", or "EmulatedLinear"
    kind: str          # mm / addmm / bmm / baddbmm / conv / attention / scaled_mm / other
    phase: str         # "forward" or "backward" (an autograd node was running)
    format: str        # the plan's label ("bf16", "tf32", ...) or "native"
    arch: str
    shapes: tuple      # operand shapes
    note: str = ""     # why an op stayed native, or details
    module: str = ""   # module path below the root (named_modules() name), '' outside

    @property
    def emulated(self) -> bool:
        return self.format != "native"

    @property
    def kernel(self) -> bool:
        """A call of PyTorch's own non-product kernels (a reduction, elementwise math)."""
        return self.kind in KERNEL_KINDS or is_kernel_label(self.format)

    @property
    def product(self) -> bool:
        """A matrix product (not one of PyTorch's elementwise / reduction kernels)."""
        return not self.kernel


class Recorder:
    """Counts every call by (op, phase, format); keeps the records when ``keep`` is set.
    ``natives`` counts, by op name, the ops that ran natively without a record (the mode's
    census, census.py)."""

    def __init__(self, keep: bool):
        self.keep = keep
        self.records: list[Record] = []
        self.counts: Counter = Counter()
        self.natives: Counter = Counter()

    def add_native(self, op: str) -> None:
        self.natives[op] += 1

    def add(self, rec: Record) -> None:
        self.counts[(rec.op, rec.phase, rec.format)] += 1
        if self.keep:
            self.records.append(rec)

    @property
    def emulated_count(self) -> int:
        return sum(n for (op, ph, fmt), n in self.counts.items()
                   if fmt != "native" and not is_kernel_label(fmt))

    @property
    def native_count(self) -> int:
        return sum(n for (op, ph, fmt), n in self.counts.items() if fmt == "native")

    @property
    def kernel_count(self) -> int:
        """Calls of PyTorch's own non-product kernels (modelled or in the CPU's order)."""
        return sum(n for (op, ph, fmt), n in self.counts.items() if is_kernel_label(fmt))

    def summary(self) -> str:
        text = format_counts(self.counts.items())
        if any(fmt != "native" and not is_kernel_label(fmt) for (_, _, fmt) in self.counts):
            text += "\n" + SCHEDULE_ASSUMPTION
        line = format_natives(self.natives)
        return f"{text}\n{line}" if line else text


# what the emulation of torch's products assumes, said wherever its answer depends on it
SCHEDULE_ASSUMPTION = ("assumed: every mm in a block runs one schedule (the block's), whatever "
                       "its shape; a library (cuBLAS, hipBLASLt) may choose its kernel and "
                       "split-K per shape, which is not modelled")


def format_natives(natives: Counter, width: int = 96) -> str:
    """"ran natively, in the CPU's order: aten.cumsum x3, ..." (most calls first), wrapped."""
    if not natives:
        return ""
    items = [f"{op} x{n}" for op, n in sorted(natives.items(), key=lambda kv: (-kv[1], kv[0]))]
    lines, cur = [], "ran natively, in the CPU's order:"
    for i, it in enumerate(items):
        piece = f" {it}" + ("," if i < len(items) - 1 else "")
        if len(cur) + len(piece) > width:
            lines.append(cur)
            cur = "   "
        cur += piece
    lines.append(cur)
    return "\n".join(lines)


def format_counts(items: Iterable) -> str:
    rows = sorted(items, key=lambda kv: (kv[0][1], kv[0][0], kv[0][2]))
    if not rows:
        return "(no matrix products seen)"
    w0 = max(len("op"), *(len(k[0]) for k, _ in rows))
    w2 = max(len("format"), *(len(k[2]) for k, _ in rows))
    lines = [f"{'op':<{w0}}  {'phase':<8}  {'format':<{w2}}  calls"]
    for (op, ph, fmt), n in rows:
        lines.append(f"{op:<{w0}}  {ph:<8}  {fmt:<{w2}}  {n}")
    return "\n".join(lines)
