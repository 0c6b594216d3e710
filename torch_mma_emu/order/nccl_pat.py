"""NCCL's PAT reduce-scatter (one GPU per node; modelled version NCCL 2.30.7, NVIDIA/nccl).

PAT ("parallel aggregated trees") schedules a reduce-scatter in log2 steps: rank r sends to
r + 2^k and receives from r - 2^k (src/device/prims_simple.h, the PAT connections), and a
compute thread hands the workers one step at a time (src/include/collectives.h
``PatRSAlgorithm::getNextOp``).  :class:`PatRSSchedule` is a port of that step generator
(read, not copied; tests/order/test_order_nccl_pat.py holds it to NCCL's own code compiled on
the host, scripts/regen_nccl_pat.py); :func:`pat_reduce_scatter` runs every rank's steps
on symbolic values the way the kernel does (src/device/reduce_scatter.h, ``patReduce`` in
prims_simple.h) and reads off the summation tree of every output position.

One step (``patReduce``): the destination is the send buffer of dimension ``sendDim`` (in
the peer's memory, at the send step + ``stepOffset``, ``sendOffset``) or, with no send, the
rank's own output at ``outIx``; it receives ``recv + own input`` when nothing was written
there yet (the connection's ``accSize`` / the output's ``localAccSize`` below the end of the
write), else ``recv + what is there`` (aggregation); with no receive the receive term drops
out.  ``parallelFactor`` groups of workers run consecutive steps between the same two
barriers, so a round of that many steps reads the step counters and ``accSize`` as they
were at the round's start.  The simulation refuses (ValueError) anything it cannot place:
a read of a region never written, a region of other positions, two steps of a round on one
region, a deadlock.

NCCL runs PAT for reduce-scatter only with SUM-like ops: not for PreMulSum / SumPostDiv
(src/enqueue.cc: "Tree reduceScatter doesn't support scaling yet"), only with the Simple
protocol, and by default only with one GPU per node (ncclPatEnable).
"""
from __future__ import annotations

from typing import Optional

from . import nccl
from .ranges import Ranges
from .tree import SumTree

STEP_DEPTH = 8                 # NCCL_STEPS, the kernel's stepDepth argument
MAX_PARALLEL = 512 // 32       # NCCL_PAT_NWORKERS / WARP_SIZE
USED, SKIPPED = 0x1, 0x2       # PatUsed, PatSkipped
FIELDS = ("recvDim", "sendDim", "recvOffset", "sendOffset", "stepOffset", "postRecv",
          "postSend", "nelem", "last", "flags", "inpIx", "outIx")


def _ffs(i: int) -> int:
    """1 + index of the lowest set bit of the 32-bit ``i`` (0 for 0), as ffs(3)."""
    i &= 0xFFFFFFFF
    return (i & -i).bit_length()


def _cmod(a: int, b: int) -> int:
    """C's ``%`` (the sign of the dividend)."""
    r = abs(a) % abs(b)
    return -r if a < 0 else r


class PatRSSchedule:
    """The step sequence of one rank's PAT reduce-scatter on one channel: ``steps()`` yields
    dicts of :data:`FIELDS` (None where the step leaves the field unset).  Arguments as the
    kernel passes them: ``step_size`` = chunkCount * sizeof(T) bytes, ``elem_size``
    sizeof(T), the channel's part ``[offset, end)`` of the per-rank ``count``."""

    def __init__(self, step_size: int, offset: int, end: int, count: int, chunk_count: int,
                 rank: int, nranks: int, elem_size: int = 4, step_depth: int = STEP_DEPTH,
                 max_parallel: int = MAX_PARALLEL):
        nccl.check_positive("nranks", nranks, 2)
        if not 0 <= rank < nranks:
            raise ValueError(f"rank must be 0..{nranks - 1}, got {rank!r}")
        if not 0 <= offset < end <= count or chunk_count < 1:
            raise ValueError(f"PAT needs 0 <= offset < end <= count and chunk_count >= 1, got "
                             f"{offset}, {end}, {count}, {chunk_count}")
        self.offset, self.end, self.count, self.chunk = offset, end, count, chunk_count
        self.rank, self.n = rank, nranks
        self.pow2 = 1 << (nranks - 1).bit_length()        # nrPow2 = 1 << log2Up(nranks)
        delta, agg = self.pow2, 1
        part = end - offset
        while step_size // (part * elem_size * agg) >= 2 and agg < nranks // 2:
            agg, delta = agg * 2, delta // 2
        self.post_freq = agg
        self.parallel = min(max_parallel, agg)
        depth = step_depth
        while depth > 1 and agg < nranks // 2:
            depth //= 2
            agg, delta = agg * 2, delta // 2
        self.agg, self.agg_delta = agg, delta
        self._chunk_start()

    # the generator's state: phase 0..4, aggregated step ``as_`` (counting down), ``a`` the
    # step inside it up to ``last_a``, the scale of phases 2/3
    def _chunk_start(self):
        self.nelem = min(self.chunk, self.end - self.offset)
        self.phase, self.scale, self.as_ = 0, 1, self.agg_delta - 1
        self._sub_start()

    def _sub_start(self):
        self.a = self.skipped_at = self.step_offset = 0
        self.last_a = self.agg
        if self.phase >= 2:
            self.last_a //= 2 * self.scale
        if self.phase == 4:
            self.last_a = 1

    def _mirror(self, i: int, top: int) -> int:
        """mirrorInvert: the bits of ``i`` below ``top`` reversed, zeros counted."""
        out, mask, weight = 0, 1, top // 2
        while mask < top:
            if not i & mask:
                out += weight
            mask, weight = mask << 1, weight >> 1
        return out

    def _low_bit(self, i: int) -> int:
        f = _ffs(i)
        return f - 1 if f else self.pow2

    @staticmethod
    def _new_peer(i: int, pow2: int) -> bool:
        return bin(((i ^ (pow2 - 1)) + 1) & 0xFFFFFFFF).count("1") == 1

    def _posts(self, a: int) -> bool:
        return (a % self.post_freq) + 1 >= self.post_freq or a == self.last_a - 1

    def next_step(self) -> dict:
        """One getNextOp call."""
        st = dict.fromkeys(FIELDS)
        st.update(last=0, nelem=self.nelem, outIx=self.offset, stepOffset=self.step_offset)
        n, a, skip = self.n, self.a, False
        ph, ne = self.phase, self.nelem
        if a >= self.last_a:
            skip = True
        elif ph == 0:                    # send own input blocks out along dimension 0
            s = self._mirror(a, self.last_a) * self.agg_delta + self.as_
            skip = s >= n
            st.update(inpIx=((self.rank + s) % n) * self.count + self.offset, recvDim=-1,
                      sendDim=0, outIx=0, recvOffset=-1, sendOffset=(a % self.post_freq) * ne,
                      postSend=int(self._posts(a)), postRecv=0)
        elif ph == 1:                    # receive on one dimension, add, send on a lower one
            s = self._mirror(a, self.last_a) * self.agg_delta + self.as_
            skip = s >= n
            rd = self._low_bit(s)
            st.update(recvDim=rd, sendOffset=(a % self.post_freq) * ne,
                      recvOffset=(a % self.post_freq) * ne, postSend=0,
                      postRecv=int(self._posts(a)))
            if rd == 0 and self._posts(a):
                st["postSend"] = 1
            s -= 1 << rd
            st["inpIx"] = _cmod(self.rank + n + s, n) * self.count + self.offset
            st["sendDim"] = self._low_bit(s) if s else -1
            if st["sendDim"] == -1:
                st["sendOffset"] = -1
            elif self.as_ - (1 << rd) == 0:
                if self._new_peer(a, self.agg):
                    self.skipped_at = a
                    st["stepOffset"] = self.step_offset = 0
                st["sendOffset"] = ((a - self.skipped_at) % self.post_freq) * ne
            if s < n and skip:
                st.update(recvDim=-1, recvOffset=-1, postRecv=0)
                skip = False
            if rd > 0 and ((a - self.skipped_at) % self.post_freq) + 1 >= self.post_freq \
                    and not skip:
                self.step_offset += 1
        elif ph == 2:
            s = (2 * self._mirror(a, self.last_a) + 1) * self.scale * self.agg_delta + 1
            skip = s >= n
            st.update(postRecv=0, recvDim=0, postSend=int(a == self.last_a - 1))
            s -= 1
            if s < n and skip:
                st.update(recvDim=-1, recvOffset=-1)
                skip = False
            elif not skip:
                f = a + self.agg - self.agg // self.scale
                st["postRecv"] |= int((f + 1) % self.post_freq == 0)
                st["recvOffset"] = (f % self.post_freq) * ne
            st["inpIx"] = _cmod(self.rank + n + s, n) * self.count + self.offset
            st["sendDim"] = self._low_bit(s) if s else -1
            st["postSend"] |= int((a + 1) % self.post_freq == 0)
            st["sendOffset"] = (a % self.post_freq) * ne
        elif ph == 3:
            s = (2 * self._mirror(a, self.last_a) + 1) * self.scale * self.agg_delta
            st["postRecv"] = int(a == self.last_a - 1)
            skip = s >= n
            rd = self._low_bit(s)
            st.update(recvDim=rd, postSend=0)
            s -= 1 << rd
            st["postRecv"] |= int((a + 1) % self.post_freq == 0)
            st["recvOffset"] = (a % self.post_freq) * ne
            st["inpIx"] = _cmod(self.rank + n + s, n) * self.count + self.offset
            st["sendDim"] = self._low_bit(s) if s else -1
            if s < n and skip:
                st.update(recvDim=-1, recvOffset=-1, postRecv=0)
                skip = False
            if self._new_peer(a, self.agg // (2 * self.scale)):
                self.skipped_at = a
                st["stepOffset"] = self.step_offset = 0
            f = a - self.skipped_at
            if (f % self.post_freq) + 1 >= self.post_freq and not skip:
                self.step_offset += 1
            st["sendOffset"] = (f % self.post_freq) * ne if st["sendDim"] >= 0 else -1
        elif ph == 4:                    # the chunk's last step: into the own output
            st.update(recvDim=0, sendDim=-1, inpIx=self.rank * self.count + self.offset,
                      recvOffset=((self.agg - 1) % self.post_freq) * ne, sendOffset=-1,
                      postRecv=1, postSend=0)
            self.offset += self.chunk
        self.a += 1
        if self.a >= self.last_a and self.a >= self.parallel:
            if ph == 1:
                self.as_ -= 1
            if ph == 3:
                self.scale *= 2
            self.phase = ((2 if self.agg > 1 else 4) if self.as_ == 1 else 1) if ph == 0 else \
                (0 if self.as_ % 2 == 1 else 1) if ph == 1 else 3 if ph == 2 else \
                (2 if self.scale < self.agg else 4) if ph == 3 else 5
            if ph == 4:
                if self.offset >= self.end:
                    st["last"] = 2
                else:
                    self._chunk_start()
            else:
                self._sub_start()
        elif self.phase == 4 and self.offset >= self.end:
            st["last"] = 1
        st["flags"] = USED | (SKIPPED if skip else 0)
        return st

    def steps(self) -> list:
        """Every step up to the one marked ``last = 2``."""
        out = []
        while not out or out[-1]["last"] != 2:
            out.append(self.next_step())
            if len(out) > 1 << 22:
                raise RuntimeError("PAT schedule did not end")
        return out


class _Rank:
    """One rank's state in the simulation: its steps, step counters and accSize of every
    dimension, its output."""

    def __init__(self, sched: PatRSSchedule):
        self.steps = sched.steps()
        self.parallel = sched.parallel
        self.at = 0
        self.send_step, self.recv_step, self.acc = {}, {}, {}
        self.local_acc = 0
        self.out = {}


def _channel(nranks: int, offset: int, end: int, count: int, chunk: int, esize: int,
             conn_step: int) -> dict:
    """Simulate every rank on one channel: ``{(rank, outIx): (nelem, tree)}``; a tree is a
    leaf (the rank whose input it is) or a pair (received, own)."""
    ranks = [_Rank(PatRSSchedule(chunk * esize, offset, end, count, chunk, r, nranks, esize))
             for r in range(nranks)]
    bufs: dict = {}     # (sender, dim) -> {address: (inpIx of the data, nelem, tree)}
    posted: dict = {}   # (sender, dim) -> steps posted (the tail)
    while any(rk.at < len(rk.steps) for rk in ranks):
        moved = False
        for r, rk in enumerate(ranks):
            if rk.at >= len(rk.steps):
                continue
            rnd = rk.steps[rk.at:rk.at + rk.parallel]
            live = [s for s in rnd if not s["flags"] & SKIPPED]
            if any(s["recvDim"] >= 0 and posted.get(((r - (1 << s["recvDim"])) % nranks,
                                                     s["recvDim"]), 0)
                   <= rk.recv_step.get(s["recvDim"], 0) for s in live):
                continue                                 # waits for a peer
            _round(r, rk, live, nranks, bufs, posted, conn_step)
            rk.at += rk.parallel
            moved = True
        if not moved:
            raise ValueError(f"PAT simulation deadlocked ({nranks} ranks)")
    out = {}
    for r, rk in enumerate(ranks):
        for ix, (inp, ne, tree) in rk.out.items():
            if inp != r * count + ix:
                raise ValueError(f"PAT: rank {r}'s output at {ix} holds input {inp}")
            out[(r, ix)] = (ne, tree)
    return out


def _round(r, rk, live, nranks, bufs, posted, conn_step):
    """One round of ``parallelFactor`` steps of rank ``r`` (reads at the round's start,
    then the writes, then the counter updates, as between the kernel's two barriers)."""
    writes, updates = [], []
    for s in live:
        ne, inp = max(s["nelem"], 0), s["inpIx"]
        recv = None
        if s["recvDim"] >= 0:
            src = ((r - (1 << s["recvDim"])) % nranks, s["recvDim"])
            addr = rk.recv_step.get(s["recvDim"], 0) * conn_step + s["recvOffset"]
            got = bufs.get(src, {}).get(addr)
            if got is None or got[:2] != (inp, ne):
                raise ValueError(f"PAT: rank {r} reads {src} at {addr}: {got and got[:2]}, "
                                 f"wants input {inp} x{ne}")
            recv = got[2]
        if s["sendDim"] >= 0:
            d = s["sendDim"]
            where = bufs.setdefault((r, d), {})
            step = rk.send_step.get(d, 0) + s["stepOffset"]
            addr = step * conn_step + s["sendOffset"]
            fresh = rk.acc.get(d, 0) < s["sendOffset"] + ne + step * conn_step
            updates.append(("acc", d, s["sendOffset"] + ne + step * conn_step))
        else:
            where, addr = rk.out, s["outIx"]
            fresh = rk.local_acc < s["outIx"] + ne
            updates.append(("local", None, s["outIx"] + ne))
        if fresh:
            own = r
        else:
            old = where.get(addr)
            if old is None or old[:2] != (inp, ne):
                raise ValueError(f"PAT: rank {r} accumulates into an unwritten region at {addr}")
            own = old[2]
        writes.append((where, addr, (inp, ne, own if recv is None else (recv, own))))
        for k, dim in (("postSend", s["sendDim"]), ("postRecv", s["recvDim"])):
            if s[k] and dim >= 0:
                updates.append((k, dim, None))
    keys = [(id(w), a) for w, a, _ in writes]
    if len(set(keys)) != len(keys):
        raise ValueError(f"PAT: two steps of one round of rank {r} write one region")
    for where, addr, val in writes:
        where[addr] = val
    for kind, d, v in updates:
        if kind == "acc":
            rk.acc[d] = max(rk.acc.get(d, 0), v)
        elif kind == "local":
            rk.local_acc = max(rk.local_acc, v)
        elif kind == "postSend":
            rk.send_step[d] = rk.send_step.get(d, 0) + 1
            posted[(r, d)] = rk.send_step[d]
        else:
            rk.recv_step[d] = rk.recv_step.get(d, 0) + 1


def _sum_tree(nranks: int, nested) -> SumTree:
    nodes: list = []
    memo: dict = {}
    stack = [(nested, False)]
    while stack:                      # post-order, iteratively
        t, done = stack.pop()
        if isinstance(t, int) or id(t) in memo:
            continue
        if not done:
            stack.append((t, True))
            stack.extend((c, False) for c in t)
            continue
        ids = [c if isinstance(c, int) else memo[id(c)] for c in t]
        nodes.append(("add", ids))
        memo[id(t)] = nranks + len(nodes) - 1
    tree = SumTree(nranks, nodes, root=nested if isinstance(nested, int) else memo[id(nested)])
    if sorted(tree.leaves()) != list(range(nranks)):
        raise ValueError(f"PAT: a result does not sum every rank once: {tree.leaves()}")
    return tree


def pat_reduce_scatter(nranks: int, count: int, dtype="float32", *, nchannels: int = 1,
                       comm_channels: Optional[int] = None) -> Ranges:
    """The per-position trees of NCCL's PAT reduce-scatter of ``count`` elements per rank
    (the Simple protocol, the cbd channel split of :func:`.nccl.channel_parts`, each
    channel's PatRSAlgorithm run on every rank): positions ``d*count ...`` are rank d's
    output block."""
    nccl.check_positive("nranks", nranks, 2)
    nccl.check_positive("count", count)
    esize = nccl.element_size(dtype)
    conn_step = nccl.BUFFSIZE["simple"] // STEP_DEPTH // esize
    pieces = []
    for _, off, n, chunk in nccl.channel_parts("reduce_scatter", count, dtype, nranks,
                                               "simple", nchannels, "pat",
                                               comm_channels=comm_channels):
        got = _channel(nranks, off, off + n, count, chunk, esize, conn_step)
        memo: dict = {}
        for (r, ix), (ne, nested) in got.items():
            key = repr(nested)
            if key not in memo:
                memo[key] = _sum_tree(nranks, nested)
            pieces.append((r * count + ix, r * count + ix + ne, memo[key]))
    pieces.sort(key=lambda p: p[0])
    at = 0
    for s, e, _ in pieces:
        if s != at:
            raise ValueError(f"PAT: the outputs leave position {at} uncovered")
        at = e
    if at != nranks * count:
        raise ValueError("PAT: the outputs do not cover every position")
    return nccl.merged(pieces)
