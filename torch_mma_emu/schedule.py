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

# The schedule, one module per job; this module is the public face (import from here):
from .schedule_fields import (C_MODES, EPILOGUES, FIELD_KINDS, INPUT_PRECISIONS,  # noqa: F401
                              MAX_K_FIELD, REDUCES, WORKSPACES, Schedule)
from .schedule_presets import (PRESETS, Preset, as_schedule, load_schedule,  # noqa: F401
                               preset, presets)
from .schedule_run import run_scheduled  # noqa: F401
from .schedule_split import ScheduleRowError  # noqa: F401
from .schedule_tree import TreeScheduleError, compile_tree, node_capacity  # noqa: F401

__all__ = ["Schedule", "PRESETS", "preset", "presets", "load_schedule", "compile_tree",
           "run_scheduled"]
