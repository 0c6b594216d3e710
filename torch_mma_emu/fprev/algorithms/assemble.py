"""A mutable tree under construction; becomes a :class:`~..tree.SumTree` at the end."""
from __future__ import annotations

from ...order import SumTree


class Assembler:
    def __init__(self, n: int):
        self.n = n
        self.kind: dict[int, str] = {}
        self.kids: dict[int, list[int]] = {}
        self.size: dict[int, int] = {}
        self._next = n

    def node_size(self, v: int) -> int:
        return 1 if v < self.n else self.size[v]

    def new(self, kind: str, children) -> int:
        v = self._next
        self._next += 1
        self.kind[v] = kind
        self.kids[v] = list(children)
        self.size[v] = sum(self.node_size(c) for c in children)
        return v

    def attach(self, v: int, children, kind: str) -> None:
        self.kids[v].extend(children)
        self.size[v] += sum(self.node_size(c) for c in children)
        self.kind[v] = kind

    def dissolve(self, v: int) -> list[int]:
        """Remove internal node v, returning its children."""
        kids = self.kids.pop(v)
        del self.kind[v], self.size[v]
        return kids

    def tree(self, root: int, meta: dict | None = None) -> SumTree:
        ids = sorted(self.kids)
        renum = {v: self.n + i for i, v in enumerate(ids)}
        fix = lambda c: c if c < self.n else renum[c]  # noqa: E731
        nodes = [(self.kind[v], [fix(c) for c in self.kids[v]]) for v in ids]
        return SumTree(self.n, nodes, root=fix(root), meta=meta, _trusted=True)
