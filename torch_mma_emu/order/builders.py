"""Constructors of well-known summation orders, for comparing with revealed trees.

``sequential(8)`` is ``((((((0+1)+2)+3)+4)+5)+6)+7``; ``strided(32, 8, combine="pairwise")``
is NumPy's float32 sum of 32 numbers (seed 001 Figure 1); ``fused_chain(32, 8)`` is the
(8+1)-term fused chain of an Ampere Tensor Core (seed 001 Figure 4).  Each builder works on
any list of sub-tree ids, so they compose (``strided`` = ``sequential`` ways combined by
``pairwise``).
"""
from __future__ import annotations

from typing import Callable, Sequence

from .tree import SumTree

Combiner = Callable[["_Builder", Sequence[int]], int]


def _positive(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    return v


class _Builder:
    def __init__(self, n: int):
        self.n = _positive("n", n)
        self.nodes: list[tuple[str, list[int]]] = []

    def node(self, kind: str, children: Sequence[int]) -> int:
        children = list(children)
        if len(children) == 1:
            return children[0]
        self.nodes.append((kind, children))
        return self.n + len(self.nodes) - 1

    def chain(self, ids: Sequence[int]) -> int:
        """Left-to-right accumulation: ((a+b)+c)+..."""
        acc = ids[0]
        for v in ids[1:]:
            acc = self.node("add", [acc, v])
        return acc

    def pairwise(self, ids: Sequence[int], split: str = "half") -> int:
        """Recursive halving (depth log2 n, so plain recursion is fine); ``split="half"``
        puts ceil(n/2) on the left, ``"pow2"`` the largest power of two below n."""
        ids = list(ids)
        if len(ids) == 1:
            return ids[0]
        if split == "pow2":
            h = 1 << ((len(ids) - 1).bit_length() - 1)
        elif split == "half":
            h = (len(ids) + 1) // 2
        else:
            raise ValueError(f"split must be 'half' or 'pow2', got {split!r}")
        return self.node("add", [self.pairwise(ids[:h], split), self.pairwise(ids[h:], split)])

    def fused_chain(self, ids: Sequence[int], L: int, kind: str = "fused") -> int:
        """acc = fused(acc, next L terms), the first node fusing just L terms."""
        acc = None
        for k in range(0, len(ids), L):
            chunk = list(ids[k:k + L])
            acc = self.node(kind, chunk if acc is None else [acc] + chunk)
        return acc

    def tree(self, root: int) -> SumTree:
        return SumTree(self.n, self.nodes, root=root)


def _combiner(name) -> Combiner:
    if callable(name):
        return name
    table = {"sequential": lambda b, ids: b.chain(ids),
             "reversed": lambda b, ids: b.chain(list(reversed(ids))),
             "pairwise": lambda b, ids: b.pairwise(ids)}
    if name not in table:
        raise ValueError(f"combine must be one of {sorted(table)} or a callable, got {name!r}")
    return table[name]


def sequential(n: int, order: Sequence[int] | None = None) -> SumTree:
    """((x0 + x1) + x2) + ... in ``order`` (default 0..n-1)."""
    order = list(range(n)) if order is None else list(order)
    b = _Builder(n)
    return b.tree(b.chain(order))


def reversed_sum(n: int) -> SumTree:
    """((x_{n-1} + x_{n-2}) + ...) + x0."""
    return sequential(n, range(n - 1, -1, -1))


def pairwise(n: int, split: str = "half") -> SumTree:
    """Recursive pairwise (cascade) summation of 0..n-1."""
    b = _Builder(n)
    return b.tree(b.pairwise(list(range(n)), split))


def strided(n: int, ways: int, combine="pairwise", way="sequential") -> SumTree:
    """``ways`` accumulators, accumulator r summing x_r, x_{r+ways}, ... (``way`` order);
    the accumulators then combined by ``combine`` (in accumulator order)."""
    _positive("ways", ways)
    b = _Builder(n)
    way_f, comb_f = _combiner(way), _combiner(combine)
    roots = [way_f(b, list(range(r, n, ways))) for r in range(min(ways, n))]
    return b.tree(comb_f(b, roots))


def blocked(n: int, block: int, combine="sequential", inner="sequential") -> SumTree:
    """Consecutive blocks of ``block`` summands, each summed by ``inner``, the block sums
    combined by ``combine``."""
    _positive("block", block)
    b = _Builder(n)
    inner_f, comb_f = _combiner(inner), _combiner(combine)
    roots = [inner_f(b, list(range(s, min(n, s + block)))) for s in range(0, n, block)]
    return b.tree(comb_f(b, roots))


def fused_chain(n: int, L: int, kind: str = "fused") -> SumTree:
    """The chain of an MMA unit with fused length L and no C: fused(x0..x_{L-1}), then
    fused(previous, next L), ... - (L+1)-term fused sums (seed 001 Figure 4)."""
    _positive("L", L)
    b = _Builder(n)
    return b.tree(b.fused_chain(list(range(n)), L, kind))


def compose(n: int, groups: Sequence[Sequence[int]], inner="sequential",
            combine="sequential") -> SumTree:
    """Arbitrary groups of leaves, each summed by ``inner``, group sums combined by
    ``combine``."""
    b = _Builder(n)
    inner_f, comb_f = _combiner(inner), _combiner(combine)
    return b.tree(comb_f(b, [inner_f(b, list(g)) for g in groups]))


class TreeBuilder:
    """A ``SumTree`` over ``n`` leaves built add by add, as a kernel's code adds: ``add(a, b)``
    takes leaf indices or earlier results (``None``: nothing accumulated yet, the other
    operand passes through) and returns the result's id; ``tree(root)`` the finished tree."""

    def __init__(self, n: int):
        self.n = _positive("n", n)
        self.nodes: list = []

    def add(self, a, b):
        if a is None or b is None:
            return b if a is None else a
        self.nodes.append(("add", (a, b)))
        return self.n + len(self.nodes) - 1

    def tree(self, root) -> SumTree:
        return SumTree(self.n, self.nodes, root=root) if self.n > 1 else SumTree(1, [], root=0)

