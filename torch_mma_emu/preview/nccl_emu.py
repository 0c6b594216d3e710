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
from ..order import nccl_extra, nccl_pat
from ..switches import Patches

_OPS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.AVG: "avg",
        dist.ReduceOp.PREMUL_SUM: "premul_sum"}
# torch.distributed's names patched inside a block: the reductions folded in NCCL's order ...
_ALL_REDUCE = ("all_reduce",)
_REDUCE_SCATTER = ("reduce_scatter_tensor", "reduce_scatter_single", "_reduce_scatter_base")
# ... and the gathers, which have no arithmetic: run natively, counted in the summary
_ALL_GATHER = ("all_gather_single", "all_gather_into_tensor", "_all_gather_base", "all_gather")
_GATHERED = "all_gather (native, no arithmetic)"
# the emulation's own gather, never counted (all_gather_into_tensor is deprecated in 2.13)
_NATIVE_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

# emulate(collectives=...)'s names: name -> NcclCollectives keyword arguments
CHOICES = {"nccl-ring": dict(algo="ring"), "nccl-tree": dict(algo="tree")}
# NcclCollectives' algorithms beyond order.nccl's ring / tree: PAT (reduce-scatter; its
# all-reduce runs the ring), NVLS / CollNet (unverified exact node), symmetric kernels
CHOICES.update({"nccl-pat": dict(algo="pat"), "nccl-nvls": dict(algo="nvls"),
                "nccl-nvls-tree": dict(algo="nvls_tree"),
                "nccl-collnet": dict(algo="collnet_direct"),
                "nccl-symmetric": dict(algo="symmetric")})
ALGOS = model.ALGOS + ("pat",) + nccl_extra.UNVERIFIED
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


def reduce_op(op) -> tuple:
    """A ``torch.distributed`` reduce op as ``(order.nccl op name, PreMulSum factor)``:
    SUM, AVG, ``ReduceOp.PREMUL_SUM(factor)`` with a float factor; others refused."""
    kind = getattr(op, "op", op)            # ReduceOp(...) objects carry their RedOpType
    if kind not in _OPS:
        raise ValueError("the emulated NCCL backend models ReduceOp.SUM, AVG and "
                         f"PREMUL_SUM(float factor), got {op}")
    if _OPS[kind] != "premul_sum":
        return _OPS[kind], None
    factor = getattr(op, "factor", None)
    if not isinstance(factor, (int, float)):
        raise ValueError("the emulated NCCL backend models PREMUL_SUM with a float factor, "
                         f"got {factor!r}")
    return "premul_sum", float(factor)


def process_group_of(group, tag: str = ""):
    """The ProcessGroup of a functional collective's ``group`` (a ProcessGroup, a group
    name, a 1-D DeviceMesh, ``(mesh, dim)``, a list of ranks)."""
    from torch.distributed import _functional_collectives as funcol
    if isinstance(group, tuple) and len(group) == 2 and hasattr(group[0], "get_group"):
        return group[0].get_group(group[1])
    if hasattr(group, "get_group"):
        return group.get_group()
    pg = funcol._resolve_group(group, tag)
    return dist.distributed_c10d._resolve_process_group(pg) if isinstance(pg, str) else pg


class _FunctionalAllReduce(torch.autograd.Function):
    """Out of place all-reduce in NCCL's order; backward: NCCL's all-reduce SUM of the
    gradient (what the native functional all_reduce's backward runs)."""

    @staticmethod
    def forward(ctx, tensor, nccl, op, pg):
        ctx.nccl, ctx.pg, ctx.op = nccl, pg, op
        out = tensor.detach().clone(memory_format=torch.contiguous_format)
        nccl.all_reduce(out, op=op, group=pg)
        return out

    @staticmethod
    def backward(ctx, grad):
        if ctx.op != dist.ReduceOp.SUM:
            raise RuntimeError("all_reduce backward only supports 'sum' reduction")
        g = grad.detach().clone(memory_format=torch.contiguous_format)
        ctx.nccl.all_reduce(g, group=ctx.pg)
        return g, None, None, None


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
    NCCL's double binary tree over ``nnodes`` nodes, one GPU each unless given).
    ``algo`` may also be ``"pat"`` (reduce-scatter; the all-reduce runs the ring), ``"nvls"``,
    ``"nvls_tree"``, ``"collnet_direct"``, ``"collnet_chain"`` (one exact node, unverified)
    or ``"symmetric"`` (unverified; ``nblocks``: the kernel's grid); ``strict=True``
    refuses the unverified ones."""

    fold_values = staticmethod(model.reduce_values)     # the library's arithmetic

    def __init__(self, algo: str = "ring", proto: str = "simple", nchannels: Optional[int] = None,
                 rings=None, trees=None, nnodes: Optional[int] = None, strict: bool = False,
                 nblocks: int = 1):
        model.check_choice("algorithm", algo, ALGOS)
        model.check_choice("protocol", proto, model.PROTOS)
        if strict and algo in nccl_extra.UNVERIFIED:
            raise ValueError(f"NCCL algorithm {algo!r} is modelled but unverified (its "
                             "reduction order is not documented or not checked); strict=True "
                             f"allows {', '.join(model.ALGOS + ('pat',))}")
        self.strict, self.nblocks = strict, nblocks
        self.algo, self.proto = algo, proto
        self.nchannels = nchannels if nchannels is not None else (2 if algo == "tree" else 1)
        model.check_positive("nchannels", self.nchannels)
        self.rings, self.trees, self.nnodes = rings, trees, nnodes
        self._patches = Patches()
        self.calls: dict = {}
        self._gathering = False

    def summary_line(self) -> str:
        """The line ``em.summary()`` adds: the model and the collectives it folded."""
        done = ", ".join(f"{k} x{n}" for k, n in sorted(self.calls.items())) or "none yet"
        return f"collectives: {self.describe()}: {done}"

    def describe(self) -> str:
        flag = " [order unverified]" if self.algo in nccl_extra.UNVERIFIED else ""
        return (f"NCCL {model.VERSION} {self.algo}/{self.proto}{flag}, {self.nchannels} "
                "channel(s) (emulated over the process group's all_gather)")

    # -- orders ------------------------------------------------------------------------
    def ranges(self, func: str, nranks: int, count: int, dtype, op: str = "sum"):
        """The per-position trees of ``func`` (``"all_reduce"``, ``"reduce_scatter"``) with
        ``op`` (``order.nccl.OPS``; NCCL's ring / tree orders do not depend on it)."""
        if self.algo not in model.ALGOS:
            return self._other_ranges(func, nranks, count, dtype, op)
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

    def _other_ranges(self, func, nranks, count, dtype, op):
        """PAT, NVLS / CollNet, symmetric (see the class docstring); PAT with a scaling op
        (AVG on floats, PREMUL_SUM) runs the ring, as NCCL does (src/enqueue.cc)."""
        algo = self.algo
        if func == "reduce_scatter":
            if algo == "pat" and op == "sum":
                return nccl_pat.pat_reduce_scatter(nranks, count, dtype,
                                                   nchannels=self.nchannels)
            if algo == "pat":             # AVG / PREMUL_SUM: PreMulSum or SumPostDiv
                note = "reduce_scatter on the ring (NCCL runs PAT without scaling ops only)"
                self.calls[note] = self.calls.get(note, 0) + 1
                return model.ring_reduce_scatter(nranks, count, rings=self.rings)
            if algo == "symmetric":
                return nccl_extra.symmetric_reduce_scatter(nranks, count)
            if algo in ("nvls", "collnet_direct"):
                return nccl_extra.exact_node(nranks, nranks * count)
            raise ValueError(f"NCCL has no {algo} reduce_scatter (ring, pat, nvls, "
                             "collnet_direct, symmetric)")
        if algo == "pat":
            return model.ring_allreduce(nranks, count, dtype, proto=self.proto,
                                        nchannels=self.nchannels, rings=self.rings)
        if algo == "symmetric":
            return nccl_extra.symmetric_allreduce(nranks, count, dtype, nblocks=self.nblocks)
        return nccl_extra.exact_node(nranks, count)

    def _gather(self, x: torch.Tensor, group) -> torch.Tensor:
        ws = dist.get_world_size(group)
        flat = x.detach().reshape(-1).contiguous()
        if model.fp8_format(flat.dtype) is not None:   # gathered as bytes (no fp8 in gloo)
            return self._gather(flat.view(torch.uint8), group).view(flat.dtype)
        out = torch.empty(ws * flat.numel(), dtype=flat.dtype)
        # the emulation's own gather: not counted, even where a torch function mode sends
        # it back through the patched module attribute
        was, self._gathering = self._gathering, True
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # deprecated name, older torch
                _NATIVE_GATHER(out, flat.cpu(), group=group)
        finally:
            self._gathering = was
        return out.reshape(ws, -1)

    def _fold(self, func, stacked: torch.Tensor, op, dtype) -> torch.Tensor:
        kind, factor = reduce_op(op)
        ws, count = stacked.shape
        if func == "reduce_scatter":
            count //= ws
        ranges = self.ranges(func, ws, count, _np_dtype(stacked), kind)
        acc = nccl_extra.accumulator(self.algo, stacked.dtype) if kind == "sum" else None
        got = self.fold_values(ranges, stacked, _np_dtype(stacked), kind, factor=factor,
                               **({} if acc is None else {"acc": acc}))
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

    reduce_scatter_single = reduce_scatter_tensor       # FSDP2's call (torch >= 2.13)

    def _reduce_scatter_base(self, output, input, op=dist.ReduceOp.SUM, group=None,
                             async_op: bool = False):
        return self.reduce_scatter_tensor(output, input, op=op, group=group, async_op=async_op)

    def _counted(self, native):
        """``native`` (a torch.distributed gather) run as is, counted in the summary."""
        def gather(*args, **kwargs):
            if self._gathering:       # ours, or a deprecated name calling the new one
                return native(*args, **kwargs)
            self.calls[_GATHERED] = self.calls.get(_GATHERED, 0) + 1
            self._gathering = True
            try:
                return native(*args, **kwargs)
            finally:
                self._gathering = False
        return gather

    def functional_all_reduce(self, tensor: torch.Tensor, reduceOp: str, group, tag: str = ""):
        """``torch.distributed._functional_collectives.all_reduce`` (DTensor's Partial ->
        Replicate, tensor parallel's RowwiseParallel output) in NCCL's order: a new tensor;
        differentiable like the native one (backward: an all-reduce SUM of the gradient, in
        NCCL's order too)."""
        op = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG}.get(str(reduceOp).lower())
        if op is None:
            raise ValueError("the emulated NCCL backend models functional all_reduce 'sum' and "
                             f"'avg', got {reduceOp!r}")
        return _FunctionalAllReduce.apply(tensor, self, op, process_group_of(group, tag))

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
            for name in _ALL_REDUCE + _REDUCE_SCATTER + _ALL_GATHER:
                if not hasattr(mod, name):
                    continue
                if name in _ALL_GATHER:
                    self._patches.set(mod, name, self._counted(getattr(mod, name)))
                else:
                    self._patches.set(mod, name, ar if name in _ALL_REDUCE else rs)
        from torch.distributed import _functional_collectives as funcol
        self._patches.set(funcol, "all_reduce", self.functional_all_reduce)
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
