"""What a preview did: one :class:`Record` per routed (or deliberately native) op call."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

__all__ = ["Record", "Recorder", "KERNEL_NATIVE", "is_kernel_label"]

# PyTorch's own kernels that multiply no matrices (reductions: aten_reductions.py) are
# recorded with the format "torch <version> CUDA kernel" where modelled and KERNEL_NATIVE
# where they ran in the CPU's order; emulated_count / native_count count products only.
KERNEL_NATIVE = "CPU order"


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
        """A call of PyTorch's own non-product kernels (a reduction), not a product."""
        return is_kernel_label(self.format)


class Recorder:
    """Counts every call by (op, phase, format); keeps the records when ``keep`` is set."""

    def __init__(self, keep: bool):
        self.keep = keep
        self.records: list[Record] = []
        self.counts: Counter = Counter()

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
        if any(fmt != "native" for (_, _, fmt) in self.counts):
            text += "\n" + SCHEDULE_ASSUMPTION
        return text


# what the emulation of torch's products assumes, said wherever its answer depends on it
SCHEDULE_ASSUMPTION = ("assumed: every mm in a block runs one schedule (the block's), whatever "
                       "its shape; a library (cuBLAS, hipBLASLt) may choose its kernel and "
                       "split-K per shape, which is not modelled")


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
