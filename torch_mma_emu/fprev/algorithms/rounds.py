"""Runs many revelation sub-problems at once and batches their probes.

A sub-problem is a generator that yields :class:`Probes` (independent probe requests; it is
sent back their counts) or :class:`Spawn` (sub-problems to solve; it is sent back their
results) and finally returns its result.  The scheduler advances all of them in rounds: all
probes requested in a round go to the target together, so a matmul answers one probe per
row and a CUDA target synchronises once per round.

Packing: on IEEE fp32/fp64 targets, probes of different sub-problems share one row as bit
fields (:mod:`..probes`).  A sub-problem's probes stay inside its own subtree unless they
reach the node where it hangs, and then they also mask its context leaf, which makes its
field read 0.  So: rows whose fields all read non-zero are exact; a row with a zero field is
run again with its fields alone (:func:`Scheduler._execute`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InconsistentError, NondeterministicError, ProbeRangeError
from ..probes import decode, field_bits
from ..rows import cluster_masks, mask_pair


class Req:
    """One probe on ``support``: +big at ``plus`` and -big at ``minus``, or, when
    ``cluster`` (an array of leaves) is given, a cluster test masking all of it.

    ``packable``: may share a row with other fields (its masks reach beyond its support
    only together with its context leaf, see the module docstring).  ``confined``: its
    support is a known subtree, so its masks never reach other fields at all.
    """

    __slots__ = ("support", "plus", "minus", "cluster", "packable", "confined", "maxcount")

    def __init__(self, support, plus=-1, minus=-1, packable=False, cluster=None,
                 confined=False):
        self.support, self.plus, self.minus = support, plus, minus
        self.cluster, self.packable, self.confined = cluster, packable or confined, confined
        self.maxcount = support.size - (2 if cluster is None else len(cluster))


@dataclass
class Probes:
    reqs: list


@dataclass
class Spawn:
    jobs: list  # generators


@dataclass
class _Task:
    gen: object
    parent: "_Task | None" = None
    slot: int = 0
    reqs: list = field(default_factory=list)
    waiting: int = 0
    child_results: list = field(default_factory=list)


class Scheduler:
    def __init__(self, target, *, verify: bool = False, progress=None, pack: bool = True):
        self.target = target
        self.values = target.values
        self.verify = verify
        self.progress = progress
        self.pack = pack and target.values.mask_levels > 1
        self.probes = 0
        self.rounds = 0

    # ------------------------------------------------------------------ driving
    def run(self, root_gen):
        root = _Task(root_gen)
        ready: list[_Task] = []
        result = self._advance(root, None, ready)
        while ready:
            self.rounds += 1
            batch, ready = ready, []
            answers = self._execute([r for t in batch for r in t.reqs])
            pos = 0
            for t in batch:
                k = len(t.reqs)
                vals, pos = answers[pos:pos + k], pos + k
                t.reqs = []
                out = self._advance(t, vals, ready)
                if out is not _PENDING:
                    result = out
        return result

    def _advance(self, task: _Task, value, ready: list):
        """Send ``value`` into ``task`` and keep going until it waits for probes; finished
        tasks hand their result to their parent.  Returns the root's result when done."""
        work = [(task, value)]
        root_result = _PENDING
        while work:
            t, val = work.pop()
            try:
                step = t.gen.send(val)
            except StopIteration as stop:
                if t.parent is None:
                    root_result = stop.value
                    continue
                p = t.parent
                p.child_results[t.slot] = stop.value
                p.waiting -= 1
                if p.waiting == 0:
                    work.append((p, p.child_results))
                continue
            if isinstance(step, Probes):
                if step.reqs:
                    t.reqs = step.reqs
                    ready.append(t)
                else:
                    work.append((t, []))
            elif isinstance(step, Spawn):
                if not step.jobs:
                    work.append((t, []))
                    continue
                t.waiting = len(step.jobs)
                t.child_results = [None] * len(step.jobs)
                for i, g in enumerate(step.jobs):
                    work.append((_Task(g, t, i), None))
            else:
                raise TypeError(f"sub-problem yielded {step!r}")
        return root_result

    # ------------------------------------------------------------------ probing
    def _execute(self, reqs: list) -> list:
        """Counts for the requests (None where the count saturated the accumulator)."""
        answers: list = [None] * len(reqs)
        todo = list(range(len(reqs)))
        solo = set() if self.pack else set(todo)
        cap = self.values.capacity
        while todo:
            rows, layout = self._pack(reqs, todo, solo)
            q = self._counts(rows, layout, reqs)
            todo = []
            for lay, qi in zip(layout, q.tolist()):
                if len(lay) == 1:
                    i = lay[0][0]
                    # counts at or above capacity may have been rounded: unknown
                    answers[i] = qi if qi < cap else None
                    continue
                got = [(i, (qi >> shift) & ((1 << b) - 1)) for i, shift, b in lay]
                if any(c == 0 and not reqs[i].confined for i, c in got):
                    # a field reached its context and may have masked the other fields
                    for i, c in got:
                        todo.append(i)
                        if c == 0:
                            solo.add(i)
                    continue
                for i, c in got:
                    if c > reqs[i].maxcount:
                        raise ProbeRangeError(f"field count {c} exceeds the {reqs[i].maxcount} "
                                              "units it can hold: not a plain sum")
                    answers[i] = c
        self.probes += len(reqs)
        if self.progress is not None:
            self.progress(self.probes)
        return answers

    def _pack(self, reqs, todo, solo):
        """Rows for the requests, and per row its fields ``(request, shift, bits)``.
        Requests of one sub-problem share a support; sub-problems are packed side by side,
        one request of each per row, so consecutive rows reuse the same supports (a 1-D
        target then only moves masks)."""
        values = self.values
        bits_avail, levels = values.bits, values.mask_levels
        by_sup: dict[int, list[int]] = {}
        for i in todo:
            by_sup.setdefault(id(reqs[i].support), []).append(i)
        groups, rows, layout = [], [], []
        for g in by_sup.values():
            r0 = reqs[g[0]]
            if r0.packable and field_bits(max(reqs[i].maxcount for i in g)) < bits_avail:
                if solo:
                    single = [i for i in g if i in solo]
                    g = [i for i in g if i not in solo]
                else:
                    single = []
                if g:
                    groups.append(g)
            else:
                single = g
            if single:
                sig, fields = object(), ((r0.support, 0),)
                for i in single:
                    rows.append((sig, fields) + self._masks(reqs[i], 0))
                    layout.append(((i, 0, 0),))
        # first-fit decreasing into a few open packs (groups of similar length share rows)
        packs, open_packs = [], []
        for g in sorted(groups, key=len, reverse=True):
            b = field_bits(max(reqs[i].maxcount for i in g))
            for pk in open_packs:
                if pk[1] + b <= bits_avail and len(pk[0]) < levels:
                    pk[0].append((g, pk[1], b))
                    pk[1] += b
                    break
            else:
                pk = [[(g, 0, b)], b]
                packs.append(pk)
                open_packs.append(pk)
                if len(open_packs) > 8:
                    open_packs.pop(0)
        for pack, _ in packs:
            live = len(pack)
            sig = fields = None
            for k in range(len(pack[0][0])):
                while len(pack[live - 1][0]) <= k:
                    live -= 1
                    sig = None
                if sig is None:  # composition changed (a shorter group ran out)
                    sig = object()
                    fields = tuple((reqs[g[0]].support, shift) for g, shift, _ in pack[:live])
                masks, bulk, lay = [], [], []
                for lvl in range(live):
                    g, shift, b = pack[lvl]
                    m, bk = self._masks(reqs[g[k]], lvl)
                    masks.extend(m)
                    bulk.extend(bk)
                    lay.append((g[k], shift, b))
                rows.append((sig, fields, tuple(masks), tuple(bulk)))
                layout.append(tuple(lay))
        return rows, layout

    def _masks(self, r: Req, level: int) -> tuple:
        if r.cluster is None:
            return mask_pair(r.plus, r.minus, self.values, level), ()
        return (), (cluster_masks(r.cluster, self.values, level),)

    def _counts(self, rows, layout, reqs) -> np.ndarray:
        out = self.target.run(rows)
        if self.verify:
            # run again in reverse order (other rows, other buffer history) and compare
            again = self.target.run(rows[::-1])[::-1]
            diff = np.flatnonzero(~((out == again) | (np.isnan(out) & np.isnan(again))))
            if len(diff):
                i = int(diff[0])
                raise NondeterministicError(
                    f"{self.target.describe()}: the same probe gave {out[i]!r} and then "
                    f"{again[i]!r}; the summation order is not deterministic")
        cap = self.values.capacity
        # a count at or above capacity may have been rounded up past the support size
        limit = np.array([(lambda c: c if c < cap else 2 * (c + cap))(reqs[lay[0][0]].maxcount)
                          if len(lay) == 1
                          else (1 << sum(b for _, _, b in lay)) - 1 for lay in layout])
        return decode(out, self.values, np.maximum(limit, 0))


_PENDING = object()


def inconsistent(msg: str) -> InconsistentError:
    return InconsistentError(
        msg + ". The answers fit no summation tree: the target may be non-deterministic, "
        "depend on the values it sums (sorting, compensation), or not be a plain sum.")
