"""Accumulation orders: the one home of the tree type, its text and JSON forms, the
builders of well-known orders, and the one evaluator with the per-format arithmetic.

Programs produce trees here (Triton's reductions from their layouts, ``triton/reduce.py``;
schedules, ``schedule_tree.py``; collectives, :mod:`.ranges`); FPRev (``torch_mma_emu.fprev``,
a tool above this layer) reveals and verifies them.

>>> from torch_mma_emu import order
>>> t = order.SumTree.parse("((0+1)+2)")
>>> float(order.evaluate(t, [1e8, 1.0, -1e8], dtype="float32"))
0.0
"""
from . import arith, builders
from .builders import blocked, compose, fused_chain, pairwise, reversed_sum, sequential, strided
from .evaluator import evaluate, exact_sum, fold, round_exact, truncated_sum
from .ranges import Ranges
from .tree import JSON_FORMAT, KINDS, SumTree

__all__ = ["SumTree", "KINDS", "JSON_FORMAT", "arith", "builders", "evaluate", "fold",
           "exact_sum", "truncated_sum", "round_exact", "Ranges",
           "sequential", "reversed_sum", "pairwise", "strided", "blocked", "fused_chain",
           "compose"]
