"""DTensor sharding rule of ``mma_emu::emulated_mm``: what tensor parallelism needs of it.

``tme.convert`` under tensor parallelism (``parallelize_module`` with ``ColwiseParallel`` /
``RowwiseParallel``) hands the emulated Linear DTensor weights, so ``emulated_mm`` meets
DTensors.  Without a rule DTensor refuses ("no sharding strategy registered"); with it each
rank runs the emulated product on its local shards, as a tensor-parallel GPU job runs its
GEMMs on its shards:

* everything replicated -> replicated;
* A sharded along M (its rows), B replicated -> the output sharded along M (C, when given
  and not broadcast along M, sharded the same way);
* A replicated, B sharded along N (its columns; ``ColwiseParallel``'s weight) -> the output
  sharded along N (C likewise);
* A sharded along K, B sharded along K (``RowwiseParallel``) -> a partial sum: each rank's
  emulated partial product, which DTensor then all-reduces (a sum in the output dtype).  Only
  without C: with C (``c_mode="chain"``) DTensor gathers the operands and each rank computes
  the whole product, C in its accumulator (``convert``'s default bias is an epilogue added
  after the product, so a Linear bias never reaches the op);
* A and B sharded along a common batch dimension (no C) -> the output sharded along it.

Block-scaled products (scales given) only take the replicated strategy: DTensor gathers the
operands first.  Registered as soon as DTensor is in use: when ``torch_mma_emu`` is imported
after ``torch.distributed.tensor``, else on the first ``tme.emulated_mm`` call with a tensor
subclass (so a plain import never pays for loading DTensor).
"""
from __future__ import annotations

import sys

import torch

__all__ = ["register"]

_DONE = []


def _rule(A, B, C=None, scale_a=None, scale_b=None, *rest, **kwargs):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.placement_types import Partial

    a, b = len(A.shape), len(B.shape)
    o = max(a, b)
    nc = None if C is None else len(C.shape)
    tail = [None] * len(rest)
    scaled = scale_a is not None or scale_b is not None
    sc = [None if s is None else Replicate() for s in (scale_a, scale_b)]

    def c_place(dim_from_end):
        """C's placement when the output is sharded along ``o - dim_from_end``."""
        if C is None:
            return None
        d = nc - dim_from_end
        if d < 0 or C.shape[d] == 1:
            return Replicate()                 # broadcast along that dimension
        return Shard(d)

    out = [([Replicate()], [Replicate(), Replicate(), None if C is None else Replicate()]
            + sc + tail)]
    if scaled:
        return out
    out.append(([Shard(o - 2)], [Shard(a - 2), Replicate(), c_place(2), None, None] + tail))
    out.append(([Shard(o - 1)], [Replicate(), Shard(b - 1), c_place(1), None, None] + tail))
    if C is None:
        # K split: each rank's partial product, summed by DTensor's all-reduce.  Not with C:
        # DTensor would hand each rank C / n to chain into its accumulator, a sum no GPU
        # library computes; with C the operands are gathered and A@B+C is one product.
        out.append(([Partial()], [Shard(a - 1), Shard(b - 2), None, None, None] + tail))
        if a == b and a > 2:
            out.append(([Shard(0)], [Shard(0), Shard(0), None, None, None] + tail))
    return out


def register() -> bool:
    """Register the rule with DTensor (once) if DTensor is loaded; whether it is registered."""
    if _DONE:
        return True
    if "torch.distributed.tensor" not in sys.modules or not torch.distributed.is_available():
        return False
    try:
        from torch.distributed.tensor.experimental import register_sharding
    except ImportError:                         # pragma: no cover (torch without DTensor)
        return False
    register_sharding(torch.ops.mma_emu.emulated_mm.default)(_rule)
    _DONE.append(True)
    return True
