"""``features(target, in_format, out_dtype)``: the feature tests of seeds 000, 004 and 002 in
the order of seed 000's Figure 3 (each later test sharpened by the earlier ones)."""
from __future__ import annotations

import time

from . import accumulator, corners, passes, precision, special, structure, subnormal
from .session import Ctx
from .report import Feature, FeatureReport, Interval
from .targets import make_target


class ProbeError(RuntimeError):
    """The target does not behave like a dot-product-accumulate unit at all."""


def _sanity(ctx: Ctx) -> None:
    r = ctx.runner
    vecs = [r.raw([1.0], [1.0], 0.0), r.raw([1.0, 1.0], [1.0, 1.0], 1.0),
            r.raw([0.0], [0.0], 0.0)]
    outs = ctx.run(vecs)
    want = [1.0, 3.0, 0.0]
    if [o.value for o in outs] != want:
        raise ProbeError(f"{ctx.target.describe()} does not compute d = c + sum a*b on trivial "
                         f"inputs: 1*1+0, 1*1+1*1+1, 0*0+0 gave {[o.value for o in outs]}")


def probe(target, in_format=None, out_dtype=None, *, scale_format=None, block_size=None,
          instruction=None, order: bool = True) -> Ctx:
    """Run every feature test; returns the session (report in ``ctx.report``, every probe
    vector and answer in ``ctx.runner.log``)."""
    t = make_target(target, in_format, out_dtype, scale_format=scale_format,
                    block_size=block_size, instruction=instruction)
    ctx = Ctx(t)
    t0 = time.perf_counter()
    _sanity(ctx)
    special.nan_encoding(ctx)
    special.special_values(ctx)
    special.zero_sign(ctx)
    corners.zero_result_sign(ctx)
    subnormal.subnormal_inputs(ctx)
    subnormal.subnormal_outputs(ctx)
    subnormal.subnormal_accumulation(ctx)
    accumulator.products_exact(ctx)
    structure.block_width(ctx)
    passes.pass_structure(ctx)
    precision.fused_precision(ctx)
    precision.align_rounding(ctx)
    structure.scale_groups(ctx)
    precision.c_joins(ctx)
    precision.c_alignment(ctx)
    precision.output_precision(ctx)
    precision.final_rounding(ctx)
    precision.c_add_precision(ctx)
    precision.exponent_floor(ctx)
    corners.cancelled_group_scale(ctx)
    corners.tr_carry(ctx)
    corners.acc_flush_interval(ctx)
    accumulator.normalize_at_end(ctx)
    accumulator.carry_bits(ctx)
    accumulator.monotonicity(ctx)
    special.overflow(ctx)
    special.product_overflow(ctx)
    _extra_bits(ctx)
    if order:
        structure.order(ctx)
    ctx.report.probes = len(ctx.runner.log)
    ctx.report.seconds = time.perf_counter() - t0
    return ctx


def _extra_bits(ctx: Ctx):
    """Seed 000's 'extra bits': fraction bits of the fused sum beyond the output's."""
    F = ctx.fact("fused_precision")
    pe = ctx.fact("output_precision")
    if F is None or pe is None or not pe.exact:
        return ctx.add("extra_bits", None, "needs F and the output precision")
    base = pe.lo - 1
    if F.hi is None:
        return ctx.add("extra_bits", Interval(max(0, F.lo - base), None),
                       f"F {F} vs {base} fraction bits of the output")
    return ctx.add("extra_bits", Interval(F.lo - base, F.hi - base),
                   f"F = {F} vs {base} fraction bits of the output")


def features(target, in_format=None, out_dtype=None, *, scale_format=None, block_size=None,
             instruction=None, order: bool = True) -> FeatureReport:
    """The numerical features of a matrix unit (seed 000 Table III, seed 004, seed 002).

    ``target``: an arch name or alias (``"sm80"``, ``"H100"``), a :class:`Spec`, ``"native"``
    (this machine's GPU instruction), a callable ``f(a_values, b_values, c_value) -> float``
    or a :class:`~torch_mma_emu.probe.targets.Target`.  ``in_format``: ``"fp16"``,
    ``"bf16"``, ``"tf32"``, ``"fp8_e4m3"``, ... or ``"fmtA,fmtB"``; ``out_dtype``: fp32
    (default), fp16 or fp64.  ``order``: also reveal the accumulation order with FPRev.

    >>> rep = features("sm80", "fp16")                      # doctest: +SKIP
    >>> rep["block_width"].value, rep["fused_precision"].value  # doctest: +SKIP
    (Interval(lo=8, hi=8), Interval(lo=24, hi=24))
    """
    return probe(target, in_format, out_dtype, scale_format=scale_format,
                 block_size=block_size, instruction=instruction, order=order).report


__all__ = ["features", "probe", "ProbeError", "Feature", "FeatureReport", "Interval"]
