"""An emulated RCCL backend for the distributed preview: :class:`NcclCollectives`'
machinery (gloo's all_gather, then one fold per collective; DDP's hook, the functional
all_reduce) with RCCL 2.21.5's orders (:mod:`torch_mma_emu.order.rccl`: NCCL's ring and
tree with RCCL's channel split and chunking) or an MSCCL XML algorithm
(:mod:`torch_mma_emu.order.msccl`).

>>> with tme.emulate("sm90", collectives="rccl-ring"):          # doctest: +SKIP
...     ddp(x).sum().backward()
>>> alg = MscclAlgorithm("allreduce-ring.xml")                     # doctest: +SKIP
>>> with tme.emulate("sm90", collectives=alg):                     # doctest: +SKIP
...     dist.all_reduce(t)     # MSCCL's per-chunk trees where RCCL would run the XML

An MSCCL algorithm runs where RCCL 2.21.5 would run it: all_reduce SUM (no AVG /
PREMUL_SUM), in place (torch's all_reduce is), on ``ngpus`` ranks, a count that is a
multiple of ``nchunksperloop``, a byte size in [minBytes, maxBytes], and no more channels
than ``comm_channels`` if given (src/misc/msccl/msccl_lifecycle.cc 128-133, 307-310,
333-337); other calls fall back to RCCL's ``algo`` (ring unless given) and are counted in
the summary.
reduce_scatter runs RCCL's ring.
"""
from __future__ import annotations

from typing import Optional

from ..order import nccl as nccl_model
from ..order import rccl as model
from ..order.msccl import MscclAlgorithm
from . import nccl_emu
from .nccl_emu import NcclCollectives

# emulate(collectives=...)'s RCCL names: name -> RcclCollectives keyword arguments
CHOICES = {"rccl-ring": dict(algo="ring"), "rccl-tree": dict(algo="tree")}


def collectives_of(value) -> Optional[NcclCollectives]:
    """``emulate(collectives=...)``'s value: None; ``"nccl-ring"`` / ``"nccl-tree"`` / an
    :class:`NcclCollectives` (:func:`.nccl_emu.collectives_of`); ``"rccl-ring"`` /
    ``"rccl-tree"`` or an :class:`MscclAlgorithm` as an :class:`RcclCollectives`."""
    if isinstance(value, str) and value in CHOICES:
        return RcclCollectives(**CHOICES[value])
    if isinstance(value, MscclAlgorithm):
        return RcclCollectives(msccl=value)
    if value is None or isinstance(value, NcclCollectives) or (
            isinstance(value, str) and value in nccl_emu.CHOICES):
        return nccl_emu.collectives_of(value)
    raise ValueError(f"collectives must be None, one of {sorted(nccl_emu.CHOICES)}, "
                     f"{sorted(CHOICES)}, an NcclCollectives(...) / RcclCollectives(...) "
                     f"instance or an MscclAlgorithm, got {value!r}")


class RcclCollectives(NcclCollectives):
    """RCCL's reduction orders for ``torch.distributed`` collectives.  ``algo``,
    ``proto``, ``nchannels``, ``rings``, ``trees``, ``nnodes``: as
    :class:`NcclCollectives` (RCCL's split and chunking); ``comm_channels``: the
    communicator's channels in place of ``nchannels`` (``NCCL_MIN_NCHANNELS`` =
    ``NCCL_MAX_NCHANNELS``): each collective then uses
    :func:`~torch_mma_emu.order.rccl.collective_channels` of them, as RCCL drops channels
    for small messages; ``nthreads``: the kernel's threads (``NCCL_NTHREADS``; sets LL /
    LL128's alignment, default 256); ``msccl``: an :class:`MscclAlgorithm` or the path of
    its XML, run where RCCL would run it."""

    fold_values = staticmethod(model.reduce_values)

    def __init__(self, algo: str = "ring", proto: str = "simple",
                 nchannels: Optional[int] = None, rings=None, trees=None,
                 nnodes: Optional[int] = None, nthreads: int = model.NTHREADS, msccl=None,
                 comm_channels: Optional[int] = None):
        super().__init__(algo, proto, nchannels, rings, trees, nnodes)
        nccl_model.check_positive("nthreads", nthreads)
        if comm_channels is not None:
            if nchannels is not None:
                raise ValueError("give nchannels (the collective's) or comm_channels (the "
                                 "communicator's), not both")
            nccl_model.check_positive("comm_channels", comm_channels)
        self.nthreads, self.comm_channels = nthreads, comm_channels
        if msccl is not None and not isinstance(msccl, MscclAlgorithm):
            msccl = MscclAlgorithm(msccl)
        if msccl is not None:
            msccl.chunk_trees()       # a schedule that cannot run fails here, not mid-step
        self.msccl = msccl

    def describe(self) -> str:
        chans = (f"{self.nchannels} channel(s)" if self.comm_channels is None else
                 f"up to {self.comm_channels} channel(s)")
        own = f"RCCL {model.VERSION} {self.algo}/{self.proto}, {chans}"
        if self.msccl is not None:
            own = f"MSCCL {self.msccl.name!r} ({self.msccl.proto}) else {own}"
        return own + " (emulated over the process group's all_gather)"

    def ranges(self, func: str, nranks: int, count: int, dtype, op: str = "sum"):
        """The per-position trees of ``func`` (``"all_reduce"``, ``"reduce_scatter"``) with
        ``op`` (MSCCL runs SUM only)."""
        if func == "reduce_scatter":
            if self.algo != "ring":
                raise ValueError("RCCL reduce_scatter has no tree algorithm (ring here)")
            return model.ring_reduce_scatter(nranks, count, rings=self.rings)
        if self.msccl is not None:
            why = self.msccl.applies(nranks, count, count * model.element_size(dtype))
            if why is None and not self.msccl.inplace:
                why = "the algorithm is out-of-place only (inplace=0)"
            if why is None and op != "sum":     # msccl_lifecycle.cc 307-310: no pre/post op
                why = f"op {op}: MSCCL runs no pre/post op"
            if why is None and self.comm_channels is not None and \
                    self.comm_channels < self.msccl.nchannels:     # msccl_lifecycle.cc 128-133
                why = (f"NCCL_MAX_NCHANNELS {self.comm_channels} < the algorithm's "
                       f"{self.msccl.nchannels} channels")
            if why is None:
                return self.msccl.ranges(count)
            key = f"MSCCL not run ({why}): RCCL {self.algo}"
            self.calls[key] = self.calls.get(key, 0) + 1
        nch = self.nchannels if self.comm_channels is None else model.collective_channels(
            count, dtype, nranks, self.algo, self.proto, self.comm_channels, self.nthreads)
        if self.algo == "ring":
            return model.ring_allreduce(nranks, count, dtype, proto=self.proto,
                                        nchannels=nch, rings=self.rings,
                                        nthreads=self.nthreads)
        return model.tree_allreduce(nranks, count, dtype, proto=self.proto,
                                    nchannels=nch, trees=self.trees, nnodes=self.nnodes,
                                    nthreads=self.nthreads, comm_channels=self.comm_channels)
