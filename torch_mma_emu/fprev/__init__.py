"""FPRev: reveal the accumulation order of sums, dot products, matmuls and collectives.

Seed 001 (Xie et al., FPRev) made fast and usable from PyTorch.  Probes put a large value
+M and its negative on two summands and ones (a *unit*) elsewhere; what survives counts the
summands added after +M and -M cancelled, i.e. the size of their lowest common ancestor in
the summation tree.  Enough such probes determine the tree.

>>> import torch
>>> from torch_mma_emu import fprev
>>> tree = fprev.reveal_sum(32)                   # doctest: +SKIP
>>> tree.describe()                               # doctest: +SKIP
'8-way strided, ways combined sequentially'
>>> tree.render("sum32.png")                      # doctest: +SKIP

The tree type, its builders and the evaluator (``replay``) live in torch_mma_emu.order and
are re-exported here.  See docs/fprev.md.
"""
from ..order import builders
from ..order import evaluate as replay
from ..order import exact_sum, truncated_sum
from ..order.builders import blocked, fused_chain, pairwise, reversed_sum, sequential, strided
from ..order.tree import SumTree
from .collectives import CollectiveReveal
from .errors import (FPRevError, InconsistentError, NondeterministicError,
                     ProbeRangeError)
from .probes import ProbeValues
from .reveal import (ALGORITHMS, reveal, reveal_allreduce, reveal_dot, reveal_matmul,
                     reveal_mv, reveal_sum, reveal_target)
from .targets.base import RowsTarget, Target, VectorTarget
from .verify import check_replay

__all__ = [
    "SumTree", "reveal", "reveal_sum", "reveal_dot", "reveal_mv", "reveal_matmul",
    "reveal_allreduce", "reveal_target", "ALGORITHMS", "CollectiveReveal",
    "Target", "VectorTarget", "RowsTarget", "ProbeValues",
    "replay", "exact_sum", "truncated_sum", "check_replay",
    "builders", "sequential", "reversed_sum", "pairwise", "strided", "blocked", "fused_chain",
    "FPRevError", "InconsistentError", "NondeterministicError", "ProbeRangeError",
]
