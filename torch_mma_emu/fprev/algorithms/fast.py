"""Our default revelation algorithm.

It follows FPRev (seed 001 Algorithm 4): pick a pivot leaf p of a leaf set J, measure
l(p, j) for every other j, group the j by l (the subtrees hanging off p's path to the root),
solve each group recursively, and stack the groups onto p's path.  What differs:

* Restricted supports.  A sub-problem on a group G puts units only on G and on one
  *context* leaf (its parent's pivot), zeros elsewhere.  Counts stay small (accumulators
  whose precision limits n work without Algorithm 5's re-probing), and whether G is one
  complete subtree or several children of a multi-term node (Algorithm 4's
  ``max(L_min(J)) > |J|`` test) shows as the context leaf being masked.
* Batching.  Every sub-problem is a generator run by :mod:`.rounds`, so all probes of a
  round go to the target in one batch (matmul rows, one CUDA synchronisation), and on
  fp32/fp64 several sub-problems share one row as bit fields.
* Structure shortcut (1-D fp32/fp64 targets, :mod:`.structure`): splits into contiguous
  blocks or strided ways are guessed and verified with cluster tests, and a split found
  for one subtree is tried first on the next subtree of the same size.
* Non-swamped fused sums (seed 003 eq. 9: ``FusedSum(U, v.., -U) = sum v``).  There
  l(p, j) = |child of p| + |child of j|, so a level may hold k equal children
  (|G| = k * (l - base)) or extend the node of the previous level.  When both readings fit,
  one extra probe decides (:meth:`Solver._same_node_test`).
* Accumulator saturation: counts at or above the exact-count capacity are re-probed on
  the (complete) subtree of the leaves that saturated.

Every level must satisfy the size arithmetic of one of these cases, otherwise the target
is reported as inconsistent rather than given a wrong tree.
"""
from __future__ import annotations

import numpy as np

from ..rows import Support
from .assemble import Assembler
from .rounds import Probes, Req, Scheduler, Spawn, inconsistent
from .structure import find_partition

MIN_SHORTCUT = 8  # below this many leaves plain probing is as cheap as any shortcut


def _support(leaves) -> Support:
    return Support(np.asarray(leaves, dtype=np.int64))


class Solver:
    def __init__(self, asm: Assembler, *, shortcuts: bool):
        self.asm = asm
        self.shortcuts = shortcuts
        self.hints: dict[int, object] = {}  # size -> partition spec that held, or False
        self.exact_seen = False

    # ------------------------------------------------------------------ known subtrees
    def block(self, S: np.ndarray):
        """Sub-problem: the tree over S (sorted leaves) known to be a whole subtree."""
        m = len(S)
        use = self.shortcuts and m >= MIN_SHORTCUT and not self.exact_seen
        if use:
            parts = yield from find_partition(S, _support(S), self.hints.get(m))
            self.hints[m] = False if parts is None else parts[1]
            if parts is not None:
                return (yield from self._combine_parts(parts[0]))
        root, _ = yield from self.pivot(S.tolist(), None, confined=True)
        return root

    def _combine_parts(self, parts: list):
        """Each part is a subtree: solve the first, the rest (likely its copies) together,
        then the tree over one representative per part, and graft the parts in."""
        first = yield from self.block(parts[0])
        rest = yield Spawn([self.block(p) for p in parts[1:]])
        roots = [first] + list(rest)
        reps = np.array([p[0] for p in parts], dtype=np.int64)
        order = np.argsort(reps)
        top = yield from self.block(reps[order])
        if top < self.asm.n:
            raise inconsistent("a partition into subtrees reduced to one part")
        graft = {int(reps[i]): roots[i] for i in range(len(parts))}
        asm, stack, combine = self.asm, [top], []
        while stack:  # the tree over the representatives has only them as leaves
            v = stack.pop()
            combine.append(v)
            kids = asm.kids[v]
            for i, c in enumerate(kids):
                if c < asm.n:
                    kids[i] = graft[c]
                else:
                    stack.append(c)
        for v in reversed(combine):  # children before parents
            asm.size[v] = sum(asm.node_size(c) for c in asm.kids[v])
        return top

    # ------------------------------------------------------------------ FPRev core
    def pivot(self, J: list, ctx, confined: bool = False):
        """Sub-problem: the tree over ``J`` given the context leaf ``ctx`` (None when J is
        a known subtree).  Returns ``(node, merged)``: ``merged`` is True when the root of
        J's tree is the node where ``ctx`` attaches (J spans several children of a swamped
        multi-term node)."""
        asm = self.asm
        if len(J) == 1:
            return J[0], False
        p = J[0]
        S = J if ctx is None else J + [ctx]
        nS = len(S)
        others = J[1:]
        sup = _support(S)
        counts = yield Probes([Req(sup, p, j, ctx is not None, confined=confined)
                               for j in others])
        level: dict[int, list] = {}
        sat = []
        for j, c in zip(others, counts):
            if c is None:
                sat.append(j)
            else:
                level.setdefault(nS - c, []).append(j)
        while sat:
            # the saturated j (small LCA) plus p form a complete subtree: probe it alone
            sub = _support([p] + sat)
            counts = yield Probes([Req(sub, p, j, confined=True) for j in sat])
            nxt = [j for j, c in zip(sat, counts) if c is None]
            if len(nxt) == len(sat):
                raise inconsistent(f"counts keep saturating for leaves {sat[:8]}")
            for j, c in zip(sat, counts):
                if c is not None:
                    level.setdefault(sub.size - c, []).append(j)
            sat = nxt
        lv = sorted(level.items())
        subs = yield from self._groups(lv, p)

        r, size_r = p, 1
        top, base, top_other, extendable = None, None, [], False
        merged_up = False
        for (v, G), (R, R_merged) in zip(lv, subs):
            g, d = len(G), v - size_r
            if merged_up:
                raise inconsistent(f"leaves {G[:8]} lie above the node that holds the context")
            with_ctx = ctx is not None and v == nS
            if g == d - with_ctx:
                if R_merged:
                    if R < asm.n or asm.kind[R] == "exact":
                        raise inconsistent(f"group {G[:8]} claims to share a node with {p}")
                    asm.attach(R, [r], "fused")
                    r, top, extendable = R, R, False
                else:
                    base, top_other = size_r, list(G)
                    r = top = asm.new("add", [r, R])
                    extendable = True
                size_r = v - with_ctx
                merged_up = with_ctx
                continue
            if with_ctx or R_merged:
                raise inconsistent(f"level {v} with {g} leaves after {size_r}: "
                                   "sizes do not add up")
            same = extendable and v > base and g % (v - base) == 0
            new = d > 0 and g % d == 0 and g // d >= 2
            if same and new:
                same = yield from self._same_node_test(p, G[0], top_other)
                new = not same
            if same:
                kids = self._split(R, g // (v - base), v - base)
                asm.attach(top, kids, "exact")
                top_other += G
            elif new:
                kids = self._split(R, g // d, d)
                base, top_other = size_r, list(G)
                r = top = asm.new("exact", [r] + kids)
                extendable = True
            else:
                raise inconsistent(f"pivot {p}: {g} leaves {G[:8]} at LCA size {v} after a "
                                   f"subtree of {size_r}: sizes do not add up")
            self.exact_seen = True
            size_r += g
        if size_r != len(J):
            raise inconsistent(f"pivot {p}: groups cover {size_r} of {len(J)} leaves")
        return r, merged_up

    def _groups(self, lv: list, p: int):
        """Solve the groups hanging off p's path.  With shortcuts, a large group first gets
        a cluster test (is it one subtree?) and is then solved as a block; groups of a size
        seen for the first time go first so that the split found for them (a hint) saves
        the search for the others."""
        subs: list = [(G[0], False) for _, G in lv]  # single leaves need no sub-problem
        big = [k for k, (_, G) in enumerate(lv) if len(G) > 1]
        if not big:
            return subs
        if not (self.shortcuts and not self.exact_seen):
            got = yield Spawn([self.pivot(lv[k][1], p) for k in big])
            for k, res in zip(big, got):
                subs[k] = res
            return subs
        test = [k for k in big if len(lv[k][1]) >= MIN_SHORTCUT]
        whole = set()
        if test:
            reqs = [Req(_support(lv[k][1] + [p]), cluster=np.asarray(lv[k][1]), packable=True)
                    for k in test]
            counts = yield Probes(reqs)
            whole = {k for k, c in zip(test, counts) if c == 1}
        seen, first, later = set(self.hints), [], []
        for k in big:
            size = len(lv[k][1])
            (later if size in seen else first).append(k)
            seen.add(size)
        for batch in (first, later):
            jobs = [self._block_job(lv[k][1]) if k in whole else self.pivot(lv[k][1], p)
                    for k in batch]
            got = yield Spawn(jobs)
            for k, res in zip(batch, got):
                subs[k] = res
        return subs

    def _block_job(self, G: list):
        root = yield from self.block(np.sort(np.asarray(G, dtype=np.int64)))
        return root, False

    def _split(self, R: int, k: int, c: int) -> list:
        """The k children of size c that the group tree R stands for (a non-swamped node
        has them as direct children)."""
        asm = self.asm
        if k == 1:
            return [R]
        if R < asm.n or len(asm.kids[R]) != k or any(asm.node_size(x) != c
                                                      for x in asm.kids[R]):
            raise inconsistent(f"expected {k} equal subtrees of {c} leaves in a non-swamped sum")
        return asm.dissolve(R)

    def _same_node_test(self, p: int, g: int, other: list):
        """Is g's subtree another child of the non-swamped node that already holds
        ``other`` (then ``other``'s units survive the cancelling masks at p and g), or does
        it hang higher (then ``other`` was swamped together with p)?"""
        c, = yield Probes([Req(_support([p, g] + other), p, g)])
        if c == len(other):
            return True
        if c == 0:
            return False
        raise inconsistent(f"same-node test for leaves {p}, {g} read {c} "
                           f"(expected 0 or {len(other)})")


def reveal_default(target, *, verify: bool = False, progress=None, shortcuts=None):
    """Run our algorithm on ``target``; returns (tree, stats).

    ``shortcuts`` enables :mod:`.structure`.  Its cluster tests are only sound when every
    multi-term node swamps (a non-swamped/exact sum, or compensated summation, can pass
    them wrongly), so the default is on only for one-probe-per-call fp32/fp64 targets known
    to use IEEE additions (``target.ieee``: torch.sum, torch.dot, NumPy)."""
    target.check_independence()
    target.calibrate()
    if shortcuts is None:
        shortcuts = target.ieee and target.rows_per_call == 1 and \
            target.values.mask_levels > 1
    asm = Assembler(target.n)
    solver = Solver(asm, shortcuts=shortcuts)
    sched = Scheduler(target, verify=verify, progress=progress)
    root = sched.run(solver.block(np.arange(target.n, dtype=np.int64)))
    return asm.tree(root), {"probes": sched.probes, "rounds": sched.rounds}
