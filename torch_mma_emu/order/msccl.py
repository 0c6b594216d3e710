"""MSCCL allreduce algorithms (the XML that RCCL 2.21.5 loads, ``tools/msccl-algorithms/``
of ROCm/rccl) turned into the reduction tree of every chunk: who adds what, in which order.

The schema and its meaning, read from RCCL 2.21.5 (cited as "src/..."):

* ``<algo ngpus nchunksperloop nchannels proto coll inplace outofplace minBytes
  maxBytes>`` holding one ``<gpu id i_chunks o_chunks s_chunks>`` per rank, each holding
  thread blocks ``<tb id send recv chan>`` of ``<step s type srcbuf srcoff dstbuf dstoff
  cnt depid deps hasdep>`` (src/misc/msccl/msccl_parser.cc mscclGetAlgoFromXmlFile,
  lines 304-700).  Buffers ``i`` / ``o`` / ``s`` (input, output, scratch), offsets and
  ``cnt`` in chunks.
* A rank's buffer of ``count`` elements is ``nchunksperloop`` chunks of ``count /
  nchunksperloop`` elements (src/misc/msccl/msccl_setup.cc 473); MSCCL runs only when
  the count divides (src/misc/msccl/msccl_lifecycle.cc 333-334) and the byte size lies in
  [minBytes, maxBytes] -- else RCCL's own algorithms run.
* Step types (msccl_parser.cc 499-541; src/device/msccl_kernel_impl.h 296-375): ``s``
  sends ``src``; ``r`` receives into ``dst``; ``rcs`` receives, copies to ``dst`` and
  sends on; ``rrs`` receives, adds its own ``src`` and sends the sum; ``rrc`` receives,
  adds ``src`` and stores in ``dst``; ``rrcs`` both; ``cpy`` copies ``src`` to ``dst``;
  ``re`` adds ``src`` into ``dst`` (consecutive ``re`` steps on one ``dst`` fuse into one
  pass, ``o = dst; o = src_k + o`` for each in order: the same chain; mscclReduce, lines
  81-113); ``nop`` only waits.  A step waits for step ``deps`` of thread block ``depid``
  of its GPU.  Sends and receives pair in order per (sender, receiver, channel)
  connection.

:class:`MscclAlgorithm` runs the steps symbolically (any order the dependencies and the
connections allow: the XML is meant to be race-free) and reads each chunk's expression in
the result buffer (``i`` run in place, ``o`` out of place); every rank must end
with the same expression, a sum of every rank's copy of that chunk.  Each addition is one
hop of RCCL's arithmetic (:func:`.rccl.reduce_values`).  Assumed, not verified on AMD
hardware: a chunk's elements all follow the chunk's tree (exact for ``cnt="1"`` steps and
for chunks no larger than the protocol's chunk size).
"""
from __future__ import annotations

import gzip
import os
import xml.etree.ElementTree as ET
from typing import Optional

from .ranges import Ranges
from .tree import SumTree

TYPES = ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop")
_SENDS = ("s", "rcs", "rrs", "rrcs")
_RECVS = ("r", "rcs", "rrs", "rrc", "rrcs")
_BUFS = {"i": "i_chunks", "o": "o_chunks", "s": "s_chunks"}
PROTOS = {"Simple": "simple", "LL": "ll", "LL128": "ll128"}


class MscclError(ValueError):
    """An MSCCL XML that cannot be read or does not compute an allreduce."""


def _int(node, name: str, where: str) -> int:
    v = node.get(name)
    if v is None:
        raise MscclError(f"MSCCL XML: {where} has no attribute {name!r}")
    try:
        return int(v)
    except ValueError:
        raise MscclError(f"MSCCL XML: {where} attribute {name}={v!r} is not an integer") \
            from None


class _Step:
    __slots__ = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps",
                 "hasdep", "where")

    def __init__(self, node, where: str, chunks: dict):
        self.where = where
        self.s = _int(node, "s", where)
        self.type = node.get("type")
        if self.type not in TYPES:
            raise MscclError(f"MSCCL XML: {where} has type {self.type!r}; the step types are "
                             f"{', '.join(TYPES)}")
        self.cnt = _int(node, "cnt", where)
        self.depid, self.deps = _int(node, "depid", where), _int(node, "deps", where)
        self.hasdep = _int(node, "hasdep", where)
        if self.hasdep not in (0, 1):
            raise MscclError(f"MSCCL XML: {where} has hasdep={self.hasdep} (0 or 1)")
        self.srcoff, self.dstoff = _int(node, "srcoff", where), _int(node, "dstoff", where)
        self.srcbuf, self.dstbuf = node.get("srcbuf"), node.get("dstbuf")
        if self.type == "nop":
            return
        if self.cnt < 1:
            raise MscclError(f"MSCCL XML: {where} moves cnt={self.cnt} chunks (at least 1)")
        for buf, off, used in ((self.srcbuf, self.srcoff, self.type in
                                ("s", "rrs", "rrc", "rrcs", "cpy", "re")),
                               (self.dstbuf, self.dstoff, self.type in
                                ("r", "rcs", "rrc", "rrcs", "cpy", "re"))):
            if not used:
                continue
            if buf not in _BUFS:
                raise MscclError(f"MSCCL XML: {where} names buffer {buf!r} (i, o or s)")
            if off < 0 or off + self.cnt > chunks[buf]:
                raise MscclError(f"MSCCL XML: {where} reaches chunks {off}..{off + self.cnt - 1}"
                                 f" of buffer {buf!r}, which has {chunks[buf]}")


def _check_waits(steps) -> None:
    """RCCL's parser rule (src/misc/msccl/msccl_parser.cc 545-549, 612-620): the waits of
    ``nop`` steps attach to the next instruction, which must wait on something itself
    (a ``re`` continuing the previous ``re`` into the same ``dst`` fuses with it)."""
    pending, last_re = False, None
    for st in steps:
        if st.type == "nop":
            pending = pending or st.depid >= 0
            continue
        key = (st.dstbuf, st.dstoff, st.srcbuf)
        if st.type == "re" and last_re == key and st.depid < 0:
            continue                                   # fused into the previous re
        if pending and st.depid < 0:
            raise MscclError(f"MSCCL XML: {st.where} follows nop waits without a wait of its "
                             "own (RCCL: 'the last reduction must be a part of the first "
                             "immediate instruction')")
        pending = False
        last_re = key if st.type == "re" and not st.hasdep else None


class MscclAlgorithm:
    """An MSCCL allreduce algorithm read from its XML (a path, ``.xml`` or ``.xml.gz``, or
    the XML text).  ``chunk_trees()``: one :class:`SumTree` over the ranks per chunk;
    ``ranges(count)``: the per-position trees of an allreduce of ``count`` elements."""

    def __init__(self, source):
        self.source = str(source)
        text = source
        if isinstance(source, os.PathLike) or (isinstance(source, str)
                                               and not source.lstrip().startswith("<")):
            path = os.fspath(source)
            if not os.path.exists(path):
                raise MscclError(f"MSCCL XML file not found: {path}")
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt") as f:
                text = f.read()
        try:
            root = ET.fromstring(text)
        except ET.ParseError as e:
            raise MscclError(f"MSCCL XML does not parse: {e}") from None
        if root.tag != "algo":
            raise MscclError(f"MSCCL XML: the top element is <{root.tag}>, not <algo>")
        self.name = root.get("name", "")
        self.coll = root.get("coll")
        if self.coll != "allreduce":
            raise MscclError(f"MSCCL XML: coll={self.coll!r}; only allreduce algorithms are "
                             "modelled")
        proto = root.get("proto")
        if proto not in PROTOS:
            raise MscclError(f"MSCCL XML: proto={proto!r} (Simple, LL or LL128)")
        self.proto = PROTOS[proto]
        self.ngpus = _int(root, "ngpus", "<algo>")
        self.nchunks = _int(root, "nchunksperloop", "<algo>")
        self.nchannels = _int(root, "nchannels", "<algo>")
        self.inplace = bool(_int(root, "inplace", "<algo>"))
        self.outofplace = bool(_int(root, "outofplace", "<algo>"))
        self.min_bytes = _int(root, "minBytes", "<algo>")
        self.max_bytes = _int(root, "maxBytes", "<algo>")
        if self.ngpus < 2 or self.nchunks < 1:
            raise MscclError(f"MSCCL XML: ngpus={self.ngpus}, nchunksperloop={self.nchunks}")
        self._gpus = self._read_gpus(root)
        self._trees: dict = {}

    def __repr__(self) -> str:
        return (f"MscclAlgorithm({self.name!r}: {self.ngpus} GPUs, {self.nchunks} chunks, "
                f"{self.proto}, {self.nchannels} channels)")

    def _read_gpus(self, root) -> dict:
        gpus: dict = {}
        for g in root.findall("gpu"):
            gid = _int(g, "id", "<gpu>")
            if not 0 <= gid < self.ngpus or gid in gpus:
                raise MscclError(f"MSCCL XML: gpu id {gid} is out of 0..{self.ngpus - 1} or "
                                 "repeated")
            chunks = {b: _int(g, a, f"<gpu id={gid}>") for b, a in _BUFS.items()}
            if chunks["i"] != self.nchunks:
                raise MscclError(f"MSCCL XML: gpu {gid} has i_chunks={chunks['i']}, the "
                                 f"allreduce input is nchunksperloop={self.nchunks}")
            tbs = {}
            for tb in g.findall("tb"):
                where = f"gpu {gid} tb {tb.get('id')}"
                tid = _int(tb, "id", where)
                if tid in tbs:
                    raise MscclError(f"MSCCL XML: {where} is repeated")
                send, recv = _int(tb, "send", where), _int(tb, "recv", where)
                chan = _int(tb, "chan", where)
                for peer in (send, recv):
                    if peer == gid or not -1 <= peer < self.ngpus:
                        raise MscclError(f"MSCCL XML: {where} has peer {peer} (another GPU, "
                                         "or -1)")
                steps = [_Step(st, f"{where} step {st.get('s')}", chunks)
                         for st in tb.findall("step")]
                if [st.s for st in steps] != list(range(len(steps))):
                    raise MscclError(f"MSCCL XML: {where} numbers its steps "
                                     f"{[st.s for st in steps][:8]}..., not 0, 1, 2, ...")
                _check_waits(steps)
                for st in steps:
                    if st.type in _SENDS and send < 0:
                        raise MscclError(f"MSCCL XML: {st.where} sends, its tb has send=-1")
                    if st.type in _RECVS and recv < 0:
                        raise MscclError(f"MSCCL XML: {st.where} receives, its tb has "
                                         "recv=-1")
                tbs[tid] = (send, recv, chan, steps)
            for tid, (_, _, _, steps) in tbs.items():
                for st in steps:
                    if st.depid >= 0 and (st.depid not in tbs or
                                          not 0 <= st.deps < len(tbs[st.depid][3])):
                        raise MscclError(f"MSCCL XML: {st.where} waits for tb {st.depid} step "
                                         f"{st.deps}, which gpu {gid} does not have")
            gpus[gid] = (chunks, tbs)
        if sorted(gpus) != list(range(self.ngpus)):
            raise MscclError(f"MSCCL XML: ngpus={self.ngpus} but <gpu> ids {sorted(gpus)}")
        return gpus

    # -- symbolic execution --------------------------------------------------------------
    def _run(self, inplace: bool) -> dict:
        """Run every step on symbols (``inplace``: the output buffer is the input):
        returns ``{gpu: {buffer: [expr per chunk]}}``; an expression is ``("x", rank,
        chunk)`` or ``("+", a, b)``."""
        bufs = {}
        for g, (chunks, _) in self._gpus.items():
            b = {"i": [("x", g, k) for k in range(self.nchunks)],
                 "s": [None] * chunks["s"]}
            b["o"] = b["i"] if inplace else [None] * chunks["o"]
            bufs[g] = b
        fifo: dict = {}                      # (sender, receiver, channel) -> [messages]
        done = {(g, t): 0 for g, (_, tbs) in self._gpus.items() for t in tbs}
        total = sum(len(tb[3]) for _, tbs in self._gpus.values() for tb in tbs.values())
        finished = 0
        while finished < total:
            progress = False
            for g, (_, tbs) in self._gpus.items():
                for t, (send, recv, chan, steps) in tbs.items():
                    while done[(g, t)] < len(steps):
                        st = steps[done[(g, t)]]
                        if st.depid >= 0 and done[(g, st.depid)] <= st.deps:
                            break
                        if st.type in _RECVS and not fifo.get((recv, g, chan)):
                            break
                        self._step(st, bufs[g], fifo, g, send, recv, chan)
                        done[(g, t)] += 1
                        finished += 1
                        progress = True
            if not progress:
                stuck = [f"gpu {g} tb {t} step {n}" for (g, t), n in done.items()
                         if n < len(self._gpus[g][1][t][3])][:4]
                raise MscclError("MSCCL XML deadlocks: no step can run (waiting: "
                                 f"{', '.join(stuck)})")
        left = [k for k, v in fifo.items() if v]
        if left:
            raise MscclError(f"MSCCL XML: messages sent but never received on (sender, "
                             f"receiver, channel) {left[:4]}")
        return bufs

    @staticmethod
    def _step(st, buf, fifo, g, send, recv, chan) -> None:
        def read(b, off):
            vals = buf[b][off:off + st.cnt]
            if any(v is None for v in vals):
                raise MscclError(f"MSCCL XML: {st.where} reads {b}[{off}..] before anything "
                                 "was written there")
            return list(vals)
        if st.type == "nop":
            return
        got = None
        if st.type in _RECVS:
            got = fifo[(recv, g, chan)].pop(0)
            if len(got) != st.cnt:
                raise MscclError(f"MSCCL XML: {st.where} receives cnt={st.cnt}, the matching "
                                 f"send sent {len(got)}")
        if st.type in ("rrs", "rrc", "rrcs"):          # own value first, then the peer's
            got = [("+", a, b) for a, b in zip(read(st.srcbuf, st.srcoff), got)]
        elif st.type == "s":
            got = read(st.srcbuf, st.srcoff)
        elif st.type == "cpy":
            got = read(st.srcbuf, st.srcoff)
        elif st.type == "re":                         # o = src + o (mscclReduce)
            got = [("+", d, s) for d, s in zip(read(st.dstbuf, st.dstoff),
                                               read(st.srcbuf, st.srcoff))]
        if st.type in ("r", "rcs", "rrc", "rrcs", "cpy", "re"):
            buf[st.dstbuf][st.dstoff:st.dstoff + st.cnt] = got
        if st.type in _SENDS:
            fifo.setdefault((g, send, chan), []).append(got)

    def _mode(self, inplace: Optional[bool]) -> bool:
        inplace = self.inplace if inplace is None else bool(inplace)
        if inplace and not self.inplace:
            raise MscclError(f"MSCCL algorithm {self.name!r} is out-of-place only (inplace=0)")
        if not inplace and not self.outofplace:
            raise MscclError(f"MSCCL algorithm {self.name!r} is in-place only (outofplace=0)")
        return inplace

    def chunk_trees(self, inplace: Optional[bool] = None) -> list:
        """One :class:`SumTree` over the ranks per chunk (leaf r: rank r's copy), run in
        place (``inplace=True``, what ``torch.distributed.all_reduce`` does; the default
        where the XML allows it) or out of place (the result in ``o``)."""
        inplace = self._mode(inplace)
        if inplace not in self._trees:
            bufs = self._run(inplace)
            out_buf = "i" if inplace else "o"
            trees = []
            for k in range(self.nchunks):
                exprs = {g: bufs[g][out_buf][k] for g in range(self.ngpus)}
                first = exprs[0]
                for g, e in exprs.items():
                    if e != first:
                        raise MscclError(f"MSCCL XML: ranks 0 and {g} end with different sums "
                                         f"for chunk {k} (not modelled)")
                trees.append(self._tree(first, k))
            self._trees[inplace] = trees
        return list(self._trees[inplace])

    def _tree(self, expr, k: int) -> SumTree:
        n = self.ngpus
        nodes: list = []
        seen: list = []

        def walk(e):
            if e is None:
                raise MscclError(f"MSCCL XML: chunk {k} of the result is never written")
            if e[0] == "x":
                if e[2] != k:
                    raise MscclError(f"MSCCL XML: chunk {k} of the result adds rank {e[1]}'s "
                                     f"chunk {e[2]}")
                seen.append(e[1])
                return e[1]
            a, b = walk(e[1]), walk(e[2])
            nodes.append(("add", [a, b]))
            return n + len(nodes) - 1
        root = walk(expr)
        if sorted(seen) != list(range(n)):
            raise MscclError(f"MSCCL XML: chunk {k} of the result sums ranks {sorted(seen)}, "
                             f"not every rank 0..{n - 1} once")
        return SumTree(n, nodes, root=root)

    # -- use -----------------------------------------------------------------------------
    def applies(self, nranks: int, count: int, nbytes: int) -> Optional[str]:
        """None if RCCL would run this algorithm on the collective, else why not."""
        if nranks != self.ngpus:
            return f"the algorithm is for {self.ngpus} ranks, not {nranks}"
        if count % self.nchunks:
            return f"count {count} is not a multiple of nchunksperloop {self.nchunks}"
        if nbytes < self.min_bytes or (self.max_bytes and nbytes > self.max_bytes):
            return f"{nbytes} bytes lie outside [{self.min_bytes}, {self.max_bytes}]"
        return None

    def ranges(self, count: int, inplace: Optional[bool] = None) -> Ranges:
        """The per-position trees of an allreduce of ``count`` elements per rank (a
        multiple of ``nchunks``): chunk k covers ``k*count/nchunks ...``."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1 \
                or count % self.nchunks:
            raise ValueError(f"MSCCL runs counts that are a multiple of nchunksperloop "
                             f"({self.nchunks}), got {count!r}")
        size = count // self.nchunks
        out: list = []
        for k, t in enumerate(self.chunk_trees(inplace)):
            if out and out[-1][2] == t:
                out[-1][1] = (k + 1) * size
            else:
                out.append([k * size, (k + 1) * size, t])
        return Ranges(tuple(r) for r in out)
