"""NCCL algorithms whose order is not read from a schedule (modelled version NCCL 2.30.7):
NVLS / NVLS_Tree and CollNet (one exact node: every rank summed at once, rounded once;
UNVERIFIED) and the symmetric-memory kernels (a chain from the owning rank in a float32
accumulator).

* NVLS / NVLS_Tree (src/device/all_reduce.h runNvls*, prims ``multimem.ld_reduce``): the
  NVSwitch adds the ranks' values inside the switch; the order of those additions is not
  documented.  ``multimem.ld_reduce`` on f16 / bf16 takes ``.acc::f32`` (PTX ISA), so a
  sum of a few fp16 / bf16 values in f32 is modelled as exact, then rounded once to the type.
  For NVLS_Tree across nodes the node sums would combine in the tree: not modelled (the
  exact node spans all ranks).
* CollNet (Direct / Chain): the reduction happens in the network (SHARP); its order and
  arithmetic are the switch's: modelled as the same exact node.
* Symmetric kernels (src/device/symmetric/all_reduce.cuh allreduceDeep / allreduceEnds):
  the rank that owns an element loads its own value, then the ranks after it (rank + 1,
  ..., wrapping), accumulating in ``ncclSymkAccumType`` (float for FuncSum on half and
  bfloat16; src/device/symmetric/primitives.cuh), rounded to the type once.  Which rank
  owns which element (:func:`symmetric_owners`, src/device/symmetric/all_reduce.cuh
  ``allreduce``): threads are numbered lane + 32 * (rank + nRanks * (block + nBlocks *
  warp)) (``flattenIx``), so warps go round-robin over the ranks; a "deep" part of 16-byte
  packs gives each warp 2048 bytes (4 x 32 packs), a part of 4-byte packs 512 bytes (for
  2- and 4-byte types), each part a whole number of nRanks * nBlocks chunks (8192 / 2048
  bytes); the last elements go one per thread (owner (i // 32) % nRanks).  Buffers are
  taken as 16-byte aligned (no head part); ``nblocks`` (the kernel's grid, NCCL picks it)
  is an argument.

Nothing here is checked against NCCL's code or a GPU: :data:`UNVERIFIED` names them, and
the emulated backend refuses them in strict mode.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from . import nccl
from .ranges import Ranges
from .tree import SumTree

UNVERIFIED = ("nvls", "nvls_tree", "collnet_direct", "collnet_chain", "symmetric")


def exact_node(nranks: int, count: int) -> Ranges:
    """One node over every rank at every position (``"exact"``: summed exactly, rounded
    once; for 2 ranks an addition)."""
    nccl.check_positive("nranks", nranks, 2)
    nccl.check_positive("count", count)
    kind = "add" if nranks == 2 else "exact"
    return Ranges([(0, count, SumTree(nranks, [(kind, list(range(nranks)))]))])


def accumulator(algo: str, dtype) -> Optional[str]:
    """The accumulation format of ``algo`` on ``dtype`` for :func:`.nccl.reduce_values`'s
    ``acc``: ``"f32"`` for the symmetric kernels on fp16 / bf16 / fp8, else None (every
    hop, or the exact node, rounds into the type)."""
    name = str(dtype).replace("torch.", "")
    small = name in ("float16", "half", "bfloat16", "f16", "bf16") or \
        nccl.fp8_format(dtype) is not None
    return "f32" if algo == "symmetric" and small else None


def symmetric_owners(nranks: int, count: int, esize: int, nblocks: int = 1) -> np.ndarray:
    """The rank that reduces each element in the symmetric all-reduce (see the module
    docstring): an int array of ``count``."""
    nccl.check_positive("nblocks", nblocks)
    own = np.empty(count, np.int64)
    nbytes, cursor = count * esize, 0
    # (pack bytes, bytes of one warp's tile, bytes per chunk of 4 warps, applies)
    for pack, applies in ((16, True), (4, esize <= 4)):
        if not applies:
            continue
        tile = 4 * 32 * pack
        chunks = (nbytes - cursor) // (4 * tile)
        chunks -= chunks % (nranks * nblocks)
        end = cursor + chunks * 4 * tile
        pos = np.arange(cursor // esize, end // esize)
        own[pos] = ((pos * esize - cursor) // tile) % nranks
        cursor = end
    rest = np.arange(cursor // esize, count)
    own[rest] = ((rest - cursor // esize) // 32) % nranks
    return own


def symmetric_allreduce(nranks: int, count: int, dtype="float32", *, owner=None,
                        nblocks: int = 1) -> Ranges:
    """The per-position chains of NCCL's symmetric all-reduce: from the owning rank through
    the ranks after it.  ``owner``: a sequence or array of ``count`` ranks, or a callable
    position -> rank (default :func:`symmetric_owners` with ``nblocks``)."""
    nccl.check_positive("nranks", nranks, 2)
    nccl.check_positive("count", count)
    if owner is None:
        own = symmetric_owners(nranks, count, nccl.element_size(dtype), nblocks)
    elif callable(owner):
        own = np.array([owner(p) for p in range(count)])
    else:
        own = np.asarray(owner)
    if own.shape != (count,) or own.dtype.kind not in "iu" or own.min() < 0 \
            or own.max() >= nranks:
        raise ValueError(f"owner must give a rank 0..{nranks - 1} for each of the {count} "
                         "positions")
    chains: dict = {}
    pieces = []
    starts = np.flatnonzero(np.diff(own, prepend=-1) != 0).tolist() + [count]
    for a, b in zip(starts, starts[1:]):
        o = int(own[a])
        if o not in chains:
            chains[o] = _chain(nranks, [(o + k) % nranks for k in range(nranks)])
        pieces.append((a, b, chains[o]))
    return nccl.merged(pieces)


def symmetric_reduce_scatter(nranks: int, count: int) -> Ranges:
    """NCCL's symmetric reduce-scatter: rank d reduces its own block d, from its value
    through the ranks after it (src/device/symmetric/reduce_scatter.cuh)."""
    nccl.check_positive("nranks", nranks, 2)
    nccl.check_positive("count", count)
    return Ranges([(d * count, (d + 1) * count,
                    _chain(nranks, [(d + k) % nranks for k in range(nranks)]))
                   for d in range(nranks)])


def _chain(nranks: int, order) -> SumTree:
    nodes, acc = [], order[0]
    for r in order[1:]:
        nodes.append(("add", [acc, r]))
        acc = nranks + len(nodes) - 1
    return SumTree(nranks, nodes, root=acc)
