"""The result of probing: one :class:`Feature` per numerical property, in a
:class:`FeatureReport` that renders as the rows of seed 000 Table III, seed 003 Table 4 and
the seed 002 summary.

A feature's ``value`` is what the probes showed; ``None`` means the probes could not observe
it for these formats (``detail`` says why).  Integer parameters that the probes can only
bound are :class:`Interval` values (``Interval(25, 25)`` is exact; ``Interval(8, None)``
means "8 or more, larger values behave identically on everything these formats can feed").
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Interval:
    lo: int | None          # None: unbounded below
    hi: int | None          # None: unbounded above

    @property
    def exact(self) -> bool:
        return self.hi is not None and self.lo == self.hi

    def __contains__(self, x) -> bool:
        if x is None:
            return False
        if x == math.inf:
            return self.hi is None
        return (self.lo is None or self.lo <= x) and (self.hi is None or x <= self.hi)

    def __str__(self) -> str:
        if self.exact:
            return str(self.lo)
        if self.hi is None:
            return f">= {self.lo}"
        if self.lo is None:
            return f"<= {self.hi}"
        return f"{self.lo}..{self.hi}"

    def to_json(self):
        return {"lo": self.lo, "hi": self.hi}


@dataclass
class Feature:
    name: str
    value: Any
    detail: str = ""
    evidence: list = field(default_factory=list, repr=False)   # [(Vec, Out), ...]

    @property
    def observed(self) -> bool:
        return self.value is not None

    def text(self) -> str:
        v = self.value
        if v is None:
            return "n/a"
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, int) and self.name == "nan_encoding":
            return f"0x{v:X}"
        return str(v)

    def to_json(self):
        v = self.value
        if isinstance(v, Interval):
            v = v.to_json()
        elif isinstance(v, (set, frozenset)):
            v = sorted(v)
        elif v is not None and not isinstance(v, (bool, int, float, str, list, dict)):
            v = str(v)
        return {"value": v, "detail": self.detail}


# Display order and labels (seed 000 Table III first, then seed 003 Table 4 parameters).
LABELS = {
    "subnormal_inputs": "subnormal inputs handled",
    "subnormal_outputs": "subnormal outputs produced",
    "subnormal_accumulation": "subnormals accumulated",
    "products_exact": "products exact",
    "block_width": "fused length (block FMA width)",
    "pass_structure": "passes per instruction",
    "product_groups": "product groups in a fused sum",
    "fused_precision": "fraction bits F of the fused sum",
    "extra_bits": "extra bits beyond the output",
    "align_rounding": "rounding of aligned terms",
    "c_joins": "c joins the fused sum",
    "c_alignment": "rounding of c's alignment",
    "c_add_precision": "fraction bits F2 adding c",
    "output_precision": "output precision (bits)",
    "final_rounding": "final rounding",
    "normalize_at_end": "normalisation only at the end",
    "carry_bits": "carry bits (at least)",
    "monotonic": "monotonic",
    "exponent_floor": "alignment exponent floor",
    "nan_encoding": "NaN encoding",
    "special_values": "inf / NaN rules",
    "overflow": "output overflow",
    "product_overflow": "products overflow (|ab| >= 2^128)",
    "zero_sign": "sign of an exact zero sum",
    "zero_result_sign": "sign of a sum rounding to zero",
    "cancelled_group_scale": "cancelled block's scale aligns",
    "tr_carry": "T'+c' renormalised on a carry",
    "order": "accumulation order (FPRev)",
}


@dataclass
class FeatureReport:
    target: str
    interface: str
    features: dict = field(default_factory=dict)
    probes: int = 0
    seconds: float = 0.0

    def __getitem__(self, name) -> Feature:
        return self.features[name]

    def value(self, name, default=None):
        f = self.features.get(name)
        return default if f is None else f.value

    def add(self, f: Feature) -> Feature:
        self.features[f.name] = f
        return f

    def rows(self) -> list[list[str]]:
        out = []
        for name, label in LABELS.items():
            if name in self.features:
                f = self.features[name]
                out.append([label, f.text(), f.detail])
        return out

    def table(self) -> str:
        from ..text_table import format_table
        return format_table(["feature", "value", "how it shows"], self.rows(),
                            title=f"{self.target}: {self.interface}")

    def to_json(self) -> dict:
        return {"target": self.target, "interface": self.interface, "probes": self.probes,
                "seconds": round(self.seconds, 3),
                "features": {k: f.to_json() for k, f in self.features.items()}}
