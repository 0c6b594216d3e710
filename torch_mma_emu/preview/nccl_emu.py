"""An emulated NCCL backend for the distributed preview: collectives that run over gloo
(any process group that can ``all_gather``) and give NCCL's bits.

Every rank gathers all ranks' inputs and folds them in NCCL's order with NCCL's arithmetic
(:mod:`torch_mma_emu.order.nccl`: ring or tree, channel split and chunking, one rounding
per hop, PreMulSum for AVG on floats, SumPostDiv on integers), so every rank holds the
result a real NCCL run with the same algorithm, protocol, channel count and rings / trees
would give.  Costs one all_gather of the tensor per collective.

>>> nccl = NcclCollectives(algo="ring", nchannels=2)      # doctest: +SKIP
>>> with nccl:                                             # doctest: +SKIP
...     dist.all_reduce(x)           # torch.distributed.all_reduce / reduce_scatter_tensor
>>> with tme.emulate("sm90", collectives="nccl-ring"):     # doctest: +SKIP
...     ddp(x).sum().backward()      # DDP's gradient all-reduce in NCCL's order too

DDP: its C++ reducer calls the process group's allreduce directly, past
``torch.distributed``; its public seam is a comm hook.  Inside the block a DDP model built
there, or called there, gets :func:`routed_hook` registered (unless it has a hook of its
own, which is left alone and warned about): NCCL's order while a block is open, the
default all-reduce (bucket times 1/world_size, then ``dist.all_reduce``) outside.
``nccl.ddp_hook`` is the hook itself, for registering by hand.
"""
from __future__ import annotations

import warnings
from typing import Optional

import numpy as np
import torch
import torch.distributed as dist

from ..order import nccl as model
from ..switches import Patches

_OPS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.AVG: "avg"}

# emulate(collectives=...)'s names: name -> NcclCollectives keyword arguments
CHOICES = {"nccl-ring": dict(algo="ring"), "nccl-tree": dict(algo="tree")}
_ACTIVE: list = []          # the open NcclCollectives blocks, innermost last (process-wide)


def _np_dtype(t: torch.Tensor):
    return t.dtype if t.is_floating_point() else str(t.dtype).replace("torch.", "")


def collectives_of(value) -> Optional["NcclCollectives"]:
    """``emulate(collectives=...)``'s value as an :class:`NcclCollectives` (None: none)."""
    if value is None or isinstance(value, NcclCollectives):
        return value
    if isinstance(value, str) and value in CHOICES:
        return NcclCollectives(**CHOICES[value])
    raise ValueError(f"collectives must be None, one of {sorted(CHOICES)} or an "
                     f"NcclCollectives(...) instance, got {value!r}")


def routed_hook(state, bucket):
    """The DDP comm hook registered inside a block: NCCL's order (:meth:`NcclCollectives.
    ddp_hook` of the innermost open block) while one is open, else DDP's default
    all-reduce (bucket times 1/world_size in the bucket's dtype, ``dist.all_reduce``)."""
    if _ACTIVE:
        return _ACTIVE[-1].ddp_hook(state, bucket)
    t = bucket.buffer()
    t.mul_(1.0 / dist.get_world_size(state))
    return dist.all_reduce(t, group=state, async_op=True).get_future().then(
        lambda fut: fut.value()[0])


def _route_ddp(ddp) -> None:
    """Register :func:`routed_hook` on ``ddp`` once; a model with a hook of its own (Python
    or builtin) keeps it, with a warning."""
    if getattr(ddp, "_tme_routed", False) or not hasattr(ddp, "_comm_hooks"):
        return
    ddp._tme_routed = True
    try:
        if ddp._comm_hooks:
            raise RuntimeError("has a hook")
        ddp.register_comm_hook(ddp.process_group, routed_hook)
    except RuntimeError:       # the reducer takes one hook (register_builtin_comm_hook too)
        warnings.warn("emulated NCCL collectives: this DDP model has a comm hook of its own; "
                      "its gradient all-reduce is left to that hook (call nccl.ddp_hook in "
                      "it for NCCL's order)", stacklevel=3)


class NcclCollectives:
    """NCCL's reduction orders for ``torch.distributed`` collectives (see the module
    docstring).  ``algo``: ``"ring"`` or ``"tree"``; ``proto``: ``"simple"``, ``"ll"``,
    ``"ll128"``; ``nchannels``: the collective's channels (``NCCL_MIN_NCHANNELS`` =
    ``NCCL_MAX_NCHANNELS`` on a real run); ``rings``: per-channel rings (lists or NCCL's
    ``Channel cc/NN : 0 a b ...`` lines; default 0, 1, ..., n-1); ``trees``: channel ->
    ``{rank: (up, [downs])}`` (``order.nccl.parse_trees`` of the ``Trees`` lines; default
    NCCL's double binary tree over ``nnodes`` nodes, one GPU each unless given)."""

    def __init__(self, algo: str = "ring", proto: str = "simple", nchannels: Optional[int] = None,
                 rings=None, trees=None, nnodes: Optional[int] = None):
        model.check_choice("algorithm", algo, model.ALGOS)
        model.check_choice("protocol", proto, model.PROTOS)
        self.algo, self.proto = algo, proto
        self.nchannels = nchannels if nchannels is not None else (2 if algo == "tree" else 1)
        model.check_positive("nchannels", self.nchannels)
        self.rings, self.trees, self.nnodes = rings, trees, nnodes
        self._patches = Patches()
        self.calls: dict = {}

    def summary_line(self) -> str:
        """The line ``em.summary()`` adds: the model and the collectives it folded."""
        done = ", ".join(f"{k} x{n}" for k, n in sorted(self.calls.items())) or "none yet"
        return f"collectives: {self.describe()}: {done}"

    def describe(self) -> str:
        return (f"NCCL {model.VERSION} {self.algo}/{self.proto}, {self.nchannels} channel(s)"
                " (emulated over the process group's all_gather)")

    # -- orders ------------------------------------------------------------------------
    def ranges(self, func: str, nranks: int, count: int, dtype):
        """The per-position trees of ``func`` (``"all_reduce"``, ``"reduce_scatter"``)."""
        if func == "reduce_scatter":
            if self.algo != "ring":
                raise ValueError("NCCL reduce_scatter has no tree algorithm (ring here; PAT, "
                                 "NVLS, CollNet are not modelled)")
            return model.ring_reduce_scatter(nranks, count, rings=self.rings)
        if self.algo == "ring":
            return model.ring_allreduce(nranks, count, dtype, proto=self.proto,
                                        nchannels=self.nchannels, rings=self.rings)
        return model.tree_allreduce(nranks, count, dtype, proto=self.proto,
                                    nchannels=self.nchannels, trees=self.trees,
                                    nnodes=self.nnodes)

    def _gather(self, x: torch.Tensor, group) -> torch.Tensor:
        ws = dist.get_world_size(group)
        flat = x.detach().reshape(-1).contiguous()
        out = torch.empty(ws * flat.numel(), dtype=flat.dtype)
        dist.all_gather_into_tensor(out, flat.cpu(), group=group)
        return out.reshape(ws, -1)

    def _fold(self, func, stacked: torch.Tensor, op, dtype) -> torch.Tensor:
        if op not in _OPS:
            raise ValueError(f"the emulated NCCL backend models ReduceOp.SUM and AVG, got {op}")
        ws, count = stacked.shape
        if func == "reduce_scatter":
            count //= ws
        ranges = self.ranges(func, ws, count, _np_dtype(stacked))
        got = model.reduce_values(ranges, stacked, _np_dtype(stacked), _OPS[op])
        self.calls[func] = self.calls.get(func, 0) + 1
        return torch.from_numpy(np.ascontiguousarray(got)).to(dtype)

    # -- collectives -------------------------------------------------------------------
    def all_reduce(self, tensor: torch.Tensor, op=dist.ReduceOp.SUM, group=None,
                   async_op: bool = False):
        """``dist.all_reduce`` in NCCL's order (in place; ``async_op`` runs synchronously
        and returns a completed work)."""
        res = self._fold("all_reduce", self._gather(tensor, group), op, tensor.dtype)
        with torch.no_grad():
            tensor.copy_(res.reshape(tensor.shape))
        return _Done(tensor) if async_op else None

    def reduce_scatter_tensor(self, output: torch.Tensor, input: torch.Tensor,
                              op=dist.ReduceOp.SUM, group=None, async_op: bool = False):
        """``dist.reduce_scatter_tensor`` in NCCL's ring order."""
        stacked = self._gather(input, group)
        res = self._fold("reduce_scatter", stacked, op, input.dtype)
        r, n = dist.get_rank(group), output.numel()
        with torch.no_grad():
            output.copy_(res[r * n:(r + 1) * n].reshape(output.shape))
        return _Done(output) if async_op else None

    def ddp_hook(self, state, bucket):
        """A DDP communication hook (``ddp.register_comm_hook(None, nccl.ddp_hook)``): the
        bucket times 1/world_size (as DDP's own allreduce does), then NCCL's allreduce SUM
        over the bucket's positions."""
        t = bucket.buffer()
        group = state
        t.mul_(1.0 / dist.get_world_size(group))
        self.all_reduce(t, group=group)
        fut = torch.futures.Future()
        fut.set_result(t)
        return fut

    # -- a with block patching torch.distributed ----------------------------------------
    def __enter__(self):
        ar, rs = self.all_reduce, self.reduce_scatter_tensor     # one bound method each
        for mod in (dist, dist.distributed_c10d):
            self._patches.set(mod, "all_reduce", ar)
            self._patches.set(mod, "reduce_scatter_tensor", rs)
        ddp = torch.nn.parallel.DistributedDataParallel

        def init(orig):
            def __init__(module, *args, **kwargs):
                orig(module, *args, **kwargs)
                _route_ddp(module)
            return __init__

        def forward(orig):
            def fwd(module, *args, **kwargs):
                _route_ddp(module)
                return orig(module, *args, **kwargs)
            return fwd
        self._patches.wrap(ddp, "__init__", init)
        self._patches.wrap(ddp, "forward", forward)
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc):
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        self._patches.undo()


class _Done:
    """A finished work object (what ``async_op=True`` returns)."""

    def __init__(self, tensor):
        self._t = tensor

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def result(self):
        return [self._t]
