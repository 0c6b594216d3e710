"""The published algorithms of seed 001, kept as baselines.

* :func:`basic_fprev` - BasicFPRev (Algorithm 2): all n(n-1)/2 probes, then the tree
  bottom-up with union-find.  Binary trees only.
* :func:`fprev` - FPRev (Algorithm 4): probes on demand, multiway nodes.
* :func:`modified_fprev` - Algorithm 5: Algorithm 4 with a scaled unit and zeroed
  summands, for narrow input formats and accumulators whose precision limits n.

They probe the way the published code does: one persistent input, single summands set and
reset by tensor indexing, one call and one ``.item()`` per probe.  Recursion is driven by an
explicit stack (right-to-left sums recurse n deep).

Unlike the published code, each algorithm first calibrates the target (the probe values
must swamp the units wherever the masks sit, see :meth:`..targets.base.Target.calibrate`)
and, once the tree is built, checks it against every probe answer it was built from (no
extra probes): the answer to a probe must be the number of units the tree leaves outside
the masks' lowest common ancestor.  A target that fits no tree the algorithm can build
(a non-deterministic or value-dependent order; for Algorithm 2, any multi-term fused node,
which it cannot represent) raises :class:`~..errors.InconsistentError` instead of returning
a plausible-looking tree.  What this check cannot see: answers the algorithm never asked
for (use ``verify=True`` for random extra probes).
"""
from __future__ import annotations

import math

from ..errors import InconsistentError, ProbeRangeError
from .assemble import Assembler


class _Prober:
    def __init__(self, target):
        target.calibrate()  # the probe values must swamp the units wherever big sits
        self.t = target
        self.s = target.baseline_session()
        self.big, self.unit = target.values.big, target.values.unit
        self.probes = 0
        self.zeros: set[int] = set()  # summands currently set to 0 (Algorithm 5)
        # every answer, for the consistency check: support key -> pivot -> [(j, count)]
        self.support = None  # None: every summand carries a unit
        self.records: dict = {}

    def count(self, i: int, j: int, limit: int) -> int:
        """Units surviving +big at i and -big at j."""
        s = self.s
        s.set(i, self.big)
        s.set(j, -self.big)
        out = s.run()
        s.set(i, self.unit)
        s.set(j, self.unit)
        self.probes += 1
        q = out / self.unit
        if not math.isfinite(q) or q != round(q) or not 0 <= q <= limit:
            raise ProbeRangeError(f"probe answer {out!r} is not a count of units (at most "
                                  f"{limit}): the big value did not swamp the units")
        self.records.setdefault(self.support, {}).setdefault(i, []).append((j, int(q)))
        return int(q)

    def set_support(self, leaves: set) -> None:
        """Algorithm 5: units on ``leaves``, zeros on every other summand."""
        want_zero = set(range(self.t.n)) - leaves
        for k in want_zero - self.zeros:
            self.s.set(k, 0.0)
        for k in self.zeros - want_zero:
            self.s.set(k, self.unit)
        self.zeros = want_zero
        self.support = None if not want_zero else frozenset(leaves)


def _predicted(tree, support, pivot, others):
    """Units a probe (+big at ``pivot``, -big at each of ``others`` in turn, units on
    ``support`` - None: every leaf) should read if the target sums in the order of ``tree``:
    the units outside the masks' lowest common ancestor; at an exact (non-swamped) node
    also those of its children holding no mask."""
    n = tree.n
    if support is None:
        cnt = tree.sizes()
    else:
        cnt = [1 if v < n and v in support else 0 for v in range(tree.num_nodes)]
        for v in tree.postorder():
            cnt[v] = sum(cnt[c] for c in tree.children[v - n])
    total = cnt[tree.root]
    path, v, prev = {}, pivot, -1
    while v != -1:
        path[v] = prev
        prev, v = v, tree.parent(v)
    memo: dict[int, tuple] = {}
    out = []
    for j in others:
        walk, u = [], j
        while u not in path and u not in memo:
            walk.append(u)
            u = tree.parent(u)
        if u in memo:
            lca, cj = memo[u]
        else:
            lca, cj = u, walk[-1]
        for w in walk:
            memo[w] = (lca, cj)
        if tree.kinds[lca - n] == "exact":
            out.append(total - cnt[cj] - cnt[path[lca]])
        else:
            out.append(total - cnt[lca])
    return out


def _check(tree, pr, name: str, extra: str = "") -> None:
    """Raise InconsistentError unless ``tree`` predicts every answer ``pr`` collected."""
    for support, by_pivot in pr.records.items():
        for i, answers in by_pivot.items():
            want = _predicted(tree, support, i, [j for j, _ in answers])
            for (j, got), w in zip(answers, want):
                if got != w:
                    raise InconsistentError(
                        f"{pr.t.describe()}: {name} built {tree.describe()!r}, but its probe "
                        f"with +big at {i} and -big at {j} read {got} units where that tree "
                        f"predicts {w}: the target does not sum in one fixed order "
                        f"(non-deterministic or value-dependent){extra}")


def _drive(gen):
    """Run a generator-recursion: a generator yields sub-generators and is sent their
    return values."""
    stack, value = [gen], None
    while True:
        try:
            sub = stack[-1].send(value)
            stack.append(sub)
            value = None
        except StopIteration as stop:
            stack.pop()
            value = stop.value
            if not stack:
                return value


def basic_fprev(target):
    """Algorithm 2 (BasicFPRev)."""
    pr, n = _Prober(target), target.n
    L = []
    for i in range(n):
        for j in range(i + 1, n):
            L.append((n - pr.count(i, j, n - 2), i, j))
    L.sort()
    asm = Assembler(n)
    root = list(range(n))  # union-find over current subtree roots

    def find(x):
        while root[x] != x:
            root[x] = root[root[x]]
            x = root[x]
        return x

    owner = list(range(n))  # find() representative -> tree node
    top = 0
    for _, i, j in L:
        a, b = find(i), find(j)
        if a != b:
            top = asm.new("add", [owner[a], owner[b]])
            root[b] = a
            owner[a] = top
    tree = asm.tree(owner[find(0)] if n > 1 else 0)
    _check(tree, pr, "Algorithm 2 (BasicFPRev)",
           ", or it has multi-term fused nodes, which Algorithm 2 cannot represent (it "
           "builds binary trees only; use algorithm='fprev' or 'default')")
    return tree, {"probes": pr.probes}


def fprev(target):
    """Algorithm 4 (FPRev)."""
    pr, n = _Prober(target), target.n
    asm = Assembler(n)

    def build(I):
        if len(I) == 1:
            return I[0], 1
        i = min(I)
        L: dict[int, list] = {}
        for j in I:
            if j != i:
                L.setdefault(n - pr.count(i, j, n - 2), []).append(j)
        r = i
        for lval in sorted(L):
            J = L[lval]
            sub, n_tc = yield build(J)
            if len(J) == n_tc:
                r = asm.new("add", [r, sub])
            else:  # T' is part of a larger multiway node: r is another child of its root
                asm.attach(sub, [r], "fused")
                r = sub
        return r, max(L)

    root, _ = _drive(build(list(range(n))))
    tree = asm.tree(root)
    _check(tree, pr, "Algorithm 4 (FPRev)")
    return tree, {"probes": pr.probes}


def modified_fprev(target):
    """Algorithm 5 (modified FPRev): probes count units on ``All`` only."""
    pr, n = _Prober(target), target.n
    asm = Assembler(n)

    def build(I, All):
        if len(I) == 1:
            return I[0], 1
        i = min(I)
        pr.set_support(All)
        L: dict[int, int] = {}
        for j in I:
            if j != i:
                L[j] = len(All) - pr.count(i, j, len(All) - 2)
        lmax = max(L.values())
        J = {j for j, v in L.items() if v == lmax}
        r, _ = yield build(sorted(set(I) - J), All - J)          # ignoring J
        K = set(I) - J - {i}
        sub, n_tc = yield build(sorted(J), All - K)              # I - J treated as {i}
        pr.set_support(All)
        if len(J) == n_tc:
            r = asm.new("add", [r, sub])
        else:
            asm.attach(sub, [r], "fused")
            r = sub
        return r, lmax

    root, _ = _drive(build(list(range(n)), set(range(n))))
    pr.set_support(set(range(n)))
    tree = asm.tree(root)
    _check(tree, pr, "Algorithm 5 (modified FPRev)")
    return tree, {"probes": pr.probes}
