"""Feature reports and inferred specs as the tables of the seeds: seed 000 Table III (one
row per target and input format), seed 003 Table 4 (model parameters) and the seed 002
summary (product alignment, accumulator width, N_FMA, final rounding)."""
from __future__ import annotations

import math

from ..text_table import format_table
from .report import FeatureReport

TABLE3_HEADER = ["inputs", "output", "target", "subnormal inputs", "subnormal outputs",
                 "extra bits", "rounding", "FMA unit width", "order in one unit",
                 "output rounding"]
TABLE4_HEADER = ["target", "input", "output", "model", "L", "F", "F2", "rho", "other"]
SUMMARY_HEADER = ["input", "output", "target", "prd. align (I,F)", "acc. bits", "N_FMA",
                  "final rounding"]


def _yn(v) -> str:
    return "n/a" if v is None else ("yes" if v else "no")


def _pair(rep: FeatureReport) -> tuple[str, str]:
    inp, _, out = rep.interface.partition(" -> ")
    return inp, out.split(",")[0]


def table3_row(rep: FeatureReport) -> list:
    inp, out = _pair(rep)
    F = rep.value("fused_precision")
    W = rep.value("block_width")
    extra = rep.value("extra_bits")
    fma_chain = F is None and W is not None and W.exact and W.lo == 1
    if F is not None and F.hi is None and F.lo >= 41:
        extra_t = "exact"
    elif extra is not None:
        extra_t = str(extra)
    elif fma_chain:
        extra_t = "IEEE FMA"
    else:
        extra_t = "n/a"
    rnd = rep.value("align_rounding") or ("RNE" if fma_chain else "n/a")
    order = rep.value("order")
    order_t = "n/a" if order is None else ("no (fused)" if "fused" in order else order)
    return [inp, out, rep.target, _yn(rep.value("subnormal_inputs")),
            _yn(rep.value("subnormal_outputs")), extra_t, rnd,
            "n/a" if W is None else str(W), order_t, rep.value("final_rounding") or "n/a"]


def table3(reports) -> str:
    return format_table(TABLE3_HEADER, [table3_row(r) for r in reports],
                        title="Feature tests (seed 000 Table III)")


# Spec.parts() beyond the columns of Table 4, as its "other" column prints them
_OTHER = {"align_round": lambda v: f"align {v.upper()}", "G": lambda v: f"G={v}",
          "P": lambda v: f"P={v}", "scale": lambda v: f"{v[0]}/{v[1]}",
          "emax_floor": lambda v: f"emax floor {v}", "flush_inputs": lambda v: "FTZ inputs",
          "passes": lambda v: f"{v[0]} passes ({v[2]})",
          "c_join": lambda v: "c added last" if v == "final" else f"c_join={v}"}


def table4_row(target: str, sp) -> list:
    """One spec as a row of Table 4 (:meth:`Spec.parts`: the titles of its operation and
    rounding, its L, F and F2, "-" where the operation has none, the rest under "other")."""
    p = sp.parts()
    other = [fmt(p[k]) for k, fmt in ((k, _OTHER.get(k)) for k in p) if fmt is not None]
    inp = sp.in_format if sp.in_format_b is None else f"{sp.in_format} x {sp.in_format_b}"
    return [target, inp, sp.out_format, p["op"].title, p["L"], p.get("F", "-"),
            p.get("F2", "-"), p["rho"].title, ", ".join(other)]


def table4(rows) -> str:
    """rows: [(target label, spec), ...]"""
    return format_table(TABLE4_HEADER, [table4_row(t, sp) for t, sp in rows],
                        title="Model parameters (seed 003 Table 4)")


def summary_row(rep: FeatureReport, sp) -> list:
    inp, out = _pair(rep)
    if not sp.elementary.has_F:
        align = acc = "-"
    else:
        carry = math.ceil(math.log2(sp.L + 1))
        align = f"(2,{sp.F})"
        acc = str(2 + sp.F + carry)
    final = "RNE" if sp.rounding.nearest else "trunc."
    # N_FMA: products summed by one fused operation (FTZ-AddMul rounds every addition)
    return [inp, out, rep.target, align, acc, sp.L if sp.elementary.fused else 1, final]


def summary(rows) -> str:
    """rows: [(report, spec), ...] - seed 002's summary table."""
    return format_table(SUMMARY_HEADER, [summary_row(r, sp) for r, sp in rows],
                        title="Summary (seed 002): product alignment, accumulator, N_FMA")
