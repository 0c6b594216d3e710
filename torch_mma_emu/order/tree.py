"""The summation tree: how an implementation combines its n summands (the one tree type of
every accumulation order: FPRev reveals them, schedules, Triton's reductions and the
collectives produce them, :mod:`.evaluator` runs them).

Leaves are the summand indices ``0..n-1``; internal nodes have ids ``n, n+1, ...``.  A node
with two children is an addition (``"add"``: an IEEE addition, or a 2-term fused sum - the
two are indistinguishable to FPRev).  A node with three or more children is a multi-term
fused summation (seed 001 section 5.2): ``"fused"`` when large terms swamp the small ones
(truncated/aligned fixed-point sums, e.g. NVIDIA Tensor Cores) or ``"exact"`` when the small
terms survive next to cancelling large ones (seed 003 eq. 9, e.g. AMD CDNA1).

Everything here is iterative: trees of 65536 leaves can be chains 65535 deep.
"""
from __future__ import annotations

import json
import operator
from typing import Iterable, Sequence

from ..limits import check

KINDS = ("add", "fused", "exact")
_OPEN = {"add": "(", "fused": "[", "exact": "{"}
_CLOSE = {"(": ")", "[": "]", "{": "}"}
_KIND_OF_OPEN = {"(": "add", "[": "fused", "{": "exact"}
JSON_FORMAT = "torch_mma_emu.fprev.SumTree"     # the name it was first stored under
_DIGITS = frozenset("0123456789")


def _node_ids(children, node: int) -> tuple:
    """A node's children as ints: leaf or node ids (Python or NumPy integers), never a
    string, float or bool that ``int()`` would quietly turn into one."""
    if isinstance(children, (str, bytes)) or not hasattr(children, "__iter__"):
        raise ValueError(f"node {node}: children must be a list of leaf or node ids, got "
                         f"{children!r:.60}")
    out = []
    for c in children:
        if isinstance(c, bool) or not hasattr(c, "__index__"):
            raise ValueError(f"node {node}: a child must be an integer (a leaf or node id), "
                             f"got {type(c).__name__} {c!r:.40}")
        out.append(operator.index(c))
    return tuple(out)


class SumTree:
    """A rooted tree over the leaves ``0..n-1`` (see module docstring).

    Build one from internal nodes ``[(kind, children), ...]`` (ids ``n + index``), from the
    compact text form (:meth:`parse`), or with the builders in :mod:`.builders`.  Equality
    ignores the order of children.  ``meta`` carries free-form provenance (target, dtype,
    device, probes used, ...) and takes no part in equality.
    """

    __slots__ = ("n", "kinds", "children", "root", "meta", "_parent", "_size", "_key",
                 "_levels")

    def __init__(self, n: int, nodes: Sequence[tuple[str, Sequence[int]]] = (),
                 root: int | None = None, meta: dict | None = None, *, _trusted=False):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"a summation tree needs n >= 1 leaves, got {n!r}")
        self.n = n
        self.kinds: list[str] = []
        self.children: list[tuple[int, ...]] = []
        for kind, ch in nodes:
            ch = tuple(ch) if _trusted else _node_ids(ch, n + len(self.children))
            if not isinstance(kind, str) or kind not in KINDS:
                raise ValueError(f"node kind must be one of {KINDS}, got {kind!r}")
            if len(ch) < 2:
                raise ValueError(f"an internal node needs at least 2 children, got {ch}")
            if kind == "add" and len(ch) > 2:
                raise ValueError(f"an 'add' node has 2 children, got {len(ch)} ({ch}); a sum "
                                 "of more terms rounded once is 'fused' or 'exact'")
            # FPRev cannot tell a 2-term fused sum from an addition: store both as "add".
            self.kinds.append("add" if len(ch) == 2 else kind)
            self.children.append(ch)
        total = n + len(self.children)
        if root is None:
            root = total - 1
        self.root = int(root)
        self.meta = dict(meta or {})
        self._parent = None
        self._size = None
        self._key = None
        self._levels = None         # levels()
        if not _trusted:
            self._check()

    def _check(self) -> None:
        # parents in a dict first: memory follows the nodes given, not n, until the tree is
        # known to be whole (a JSON file can claim any n)
        n, total = self.n, self.num_nodes
        par: dict[int, int] = {}
        for idx, ch in enumerate(self.children):
            for c in ch:
                if not 0 <= c < total or c == n + idx:
                    raise ValueError(f"node {n + idx} has an invalid child {c}")
                if c in par:
                    raise ValueError(f"node {c} has two parents ({par[c]} and {n + idx})")
                par[c] = n + idx
        if not 0 <= self.root < total or self.root in par:
            raise ValueError(f"invalid root {self.root}")
        if len(par) != total - 1:
            orphans = []
            for v in range(total):
                if v not in par and v != self.root:
                    orphans.append(v)
                    if len(orphans) == 10:
                        break
            raise ValueError(f"nodes not connected to the root: {orphans}"
                             + (f" (of {total - 1 - len(par)})" if len(orphans) == 10 else ""))
        parent = [-1] * total
        for c, p in par.items():
            parent[c] = p
        self._parent = parent
        self.sizes()  # also proves the structure is acyclic

    # ------------------------------------------------------------------ structure
    @property
    def num_nodes(self) -> int:
        return self.n + len(self.children)

    def is_leaf(self, v: int) -> bool:
        return v < self.n

    def kind(self, v: int) -> str:
        return "leaf" if v < self.n else self.kinds[v - self.n]

    def child_list(self, v: int) -> tuple[int, ...]:
        return () if v < self.n else self.children[v - self.n]

    def parent(self, v: int) -> int:
        """Parent id, or -1 for the root."""
        if self._parent is None:
            par = [-1] * self.num_nodes
            for idx, ch in enumerate(self.children):
                for c in ch:
                    par[c] = self.n + idx
            self._parent = par
        return self._parent[v]

    def postorder(self) -> list[int]:
        """Internal node ids, children before parents."""
        out, stack = [], [(self.root, False)]
        while stack:
            v, done = stack.pop()
            if v < self.n:
                continue
            if done:
                out.append(v)
            else:
                stack.append((v, True))
                stack.extend((c, False) for c in reversed(self.children[v - self.n]))
        return out

    def sizes(self) -> list[int]:
        """Number of leaves under every node (indexed by node id)."""
        if self._size is None:
            size = [1] * self.n + [0] * len(self.children)
            order = self.postorder()
            if len(order) != len(self.children):
                raise ValueError("the nodes do not form a tree (cycle or unreachable node)")
            for v in order:
                size[v] = sum(size[c] for c in self.children[v - self.n])
            if size[self.root] != self.n:
                raise ValueError("not every leaf hangs under the root")
            self._size = size
        return self._size

    def leaves(self, v: int | None = None) -> list[int]:
        """Leaves under ``v`` (default: the root) in left-to-right order."""
        v = self.root if v is None else v
        out, stack = [], [v]
        while stack:
            u = stack.pop()
            if u < self.n:
                out.append(u)
            else:
                stack.extend(reversed(self.children[u - self.n]))
        return out

    def levels(self) -> list:
        """The internal nodes grouped by height (one more than the highest child's):
        ``[(nodes, children), ...]`` lowest first, ``children`` the nodes' child tuples
        (the order :func:`.evaluator.fold` runs them in).  Cached."""
        if self._levels is None:
            n, h, by = self.n, [0] * self.num_nodes, {}
            for v in self.postorder():
                h[v] = 1 + max(h[c] for c in self.children[v - n])
                by.setdefault(h[v], []).append(v)
            self._levels = [(by[k], [self.children[v - n] for v in by[k]]) for k in sorted(by)]
        return self._levels

    def depth(self) -> int:
        """Length of the longest root-to-leaf path (a single leaf has depth 0)."""
        d = [0] * self.num_nodes
        for v in self.postorder():
            d[v] = 1 + max(d[c] for c in self.children[v - self.n])
        return d[self.root]

    def arities(self) -> dict[tuple[str, int], int]:
        """Histogram ``{(kind, number of children): count}``."""
        h: dict[tuple[str, int], int] = {}
        for k, ch in zip(self.kinds, self.children):
            h[(k, len(ch))] = h.get((k, len(ch)), 0) + 1
        return h

    def lca_size(self, i: int, j: int) -> int:
        """Leaves under the lowest common ancestor of leaves ``i`` and ``j``."""
        for x in (i, j):
            if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < self.n:
                raise ValueError(f"lca_size takes leaves 0..{self.n - 1}, got {x!r}")
        seen = set()
        v = i
        while v != -1:
            seen.add(v)
            v = self.parent(v)
        v = j
        while v not in seen:
            v = self.parent(v)
        return self.sizes()[v]

    # ------------------------------------------------------------------ equality
    def canonical(self) -> tuple:
        """A flat token tuple that is equal for trees equal up to the order of children.

        Children are sorted by their smallest leaf; an internal node is written as
        ``(-1 - kind code, arity)`` followed by its children.
        """
        if self._key is None:
            low = list(range(self.n)) + [0] * len(self.children)
            for v in self.postorder():
                low[v] = min(low[c] for c in self.children[v - self.n])
            toks, stack = [], [self.root]
            while stack:
                v = stack.pop()
                if v < self.n:
                    toks.append(v)
                    continue
                ch = sorted(self.children[v - self.n], key=low.__getitem__)
                toks.append(-1 - KINDS.index(self.kinds[v - self.n]))
                toks.append(len(ch))
                stack.extend(reversed(ch))
            self._key = (self.n, tuple(toks))
        return self._key

    def __eq__(self, other) -> bool:
        if not isinstance(other, SumTree):
            return NotImplemented
        return self.canonical() == other.canonical()

    def __hash__(self) -> int:
        return hash(self.canonical())

    def __repr__(self) -> str:
        text = self.to_text()
        if len(text) > 120:
            text = text[:100] + " ... " + text[-15:]
        return f"SumTree(n={self.n}, {text})"

    # ------------------------------------------------------------------ text form
    def to_text(self) -> str:
        """Compact text: ``(a+b)`` addition, ``[a+b+c]`` fused, ``{a+b+c}`` exact fused sum.

        Children keep their stored order (the order the revelation found them in).
        """
        if self.n == 1 and not self.children:
            return "0"
        out, stack = [], [self.root]
        while stack:
            v = stack.pop()
            if isinstance(v, str):
                out.append(v)
            elif v < self.n:
                out.append(str(v))
            else:
                op = _OPEN[self.kinds[v - self.n]]
                out.append(op)
                ch = self.children[v - self.n]
                items: list = [_CLOSE[op]]
                for k, c in enumerate(reversed(ch)):
                    items.append(c)
                    if k < len(ch) - 1:
                        items.append("+")
                stack.extend(items)
        return "".join(out)

    @classmethod
    def parse(cls, text: str, n: int | None = None) -> "SumTree":
        """Inverse of :meth:`to_text`.  ``n`` defaults to 1 + the largest leaf index."""
        nodes: list[tuple[str, list[int]]] = []
        stack: list[tuple[str, list[int]]] = []
        leaves: list[int] = []
        top: list[int] = []
        i, s = 0, "".join(text.split())
        while i < len(s):
            ch = s[i]
            if ch in _KIND_OF_OPEN:
                stack.append((ch, []))
                i += 1
            elif ch in ")]}":
                if not stack or _CLOSE[stack[-1][0]] != ch:
                    raise ValueError(f"unbalanced {ch!r} at position {i} in tree text")
                op, kids = stack.pop()
                nodes.append((_KIND_OF_OPEN[op], kids))
                node_ref = -len(nodes)  # resolved to an id once n is known
                (stack[-1][1] if stack else top).append(node_ref)
                i += 1
            elif ch == "+":
                i += 1
            elif ch in _DIGITS:         # ASCII only: isdigit() also takes other scripts'
                j = i
                while j < len(s) and s[j] in _DIGITS:
                    j += 1
                leaf = int(s[i:j])
                leaves.append(leaf)
                (stack[-1][1] if stack else top).append(leaf)
                i = j
            else:
                raise ValueError(f"unexpected character {ch!r} at position {i} in tree text")
        if stack or len(top) != 1:
            raise ValueError("tree text must hold exactly one balanced expression")
        if n is None:
            n = max(leaves) + 1
        check("tree_leaves", len(leaves), "tree text: leaves")
        if len(leaves) != n or sorted(leaves) != list(range(n)):
            raise ValueError(f"tree text must use every leaf 0..{n - 1} exactly once")
        fix = lambda c: c if c >= 0 else n + (-c - 1)  # noqa: E731
        built = [(k, [fix(c) for c in kids]) for k, kids in nodes]
        return cls(n, built, root=fix(top[0]))

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict:
        return {"format": JSON_FORMAT, "version": 1, "n": self.n, "root": self.root,
                "nodes": [[k, list(ch)] for k, ch in zip(self.kinds, self.children)],
                "meta": self.meta}

    def to_json(self, indent: int | None = None) -> str:
        """JSON with a flat node list (no nesting, so deep chains serialise)."""
        return json.dumps(self.to_dict(), indent=indent, default=str)

    @classmethod
    def from_dict(cls, d: dict) -> "SumTree":
        if not isinstance(d, dict) or d.get("format") != JSON_FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"not a serialised SumTree (format {got!r})")
        missing = [k for k in ("n", "nodes", "root") if k not in d]
        if missing:
            raise ValueError(f"serialised SumTree lacks {missing}")
        try:
            nodes = [(k, ch) for k, ch in d["nodes"]]
        except (TypeError, ValueError):
            raise ValueError("serialised SumTree: nodes must be [kind, [children]] pairs") \
                from None
        n, root = d["n"], d["root"]
        for name, v in (("n", n), ("root", root)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"serialised SumTree: {name} must be an integer, got {v!r}")
        check("tree_leaves", max(n, len(nodes)), "serialised SumTree: leaves n")
        meta = d.get("meta") or {}
        if not isinstance(meta, dict):
            raise ValueError(f"serialised SumTree: meta must be an object, got "
                             f"{type(meta).__name__}")
        return cls(n, nodes, root=root, meta=meta)

    @classmethod
    def from_json(cls, s: str) -> "SumTree":
        if not isinstance(s, (str, bytes, bytearray)):
            raise TypeError(f"SumTree.from_json takes JSON text, got {type(s).__name__}")
        try:
            d = json.loads(s)
        except RecursionError:
            raise ValueError("not a serialised SumTree: the JSON nests too deeply") from None
        except ValueError as e:
            raise ValueError(f"not a serialised SumTree: not JSON ({e})") from None
        return cls.from_dict(d)

    # ------------------------------------------------------------------ conveniences
    def describe(self) -> str:
        """One-line summary of the pattern ("sequential", "pairwise", ...)."""
        from .describe import describe
        return describe(self)

    def to_dot(self, **kw) -> str:
        from .render import to_dot
        return to_dot(self, **kw)

    def render(self, path, **kw) -> str:
        """Draw the tree to ``path`` (.png, .svg or .pdf) with graphviz; returns the path."""
        from .render import render
        return render(self, path, **kw)

    def replay(self, x, **kw):
        """Sum ``x[..., 0:n]`` in this order (see :func:`.evaluator.evaluate`)."""
        from .evaluator import evaluate
        return evaluate(self, x, **kw)

    def subtree(self, v: int) -> "SumTree":
        """The subtree at v, leaves relabelled by rank."""
        leaves = sorted(self.leaves(v))
        rank = {leaf: i for i, leaf in enumerate(leaves)}
        nodes, ids, stack = [], {}, [(v, False)]
        while stack:
            u, done = stack.pop()
            if u < self.n:
                continue
            if not done:
                stack.append((u, True))
                stack.extend((c, False) for c in self.children[u - self.n])
                continue
            ch = [rank[c] if c < self.n else ids[c] for c in self.children[u - self.n]]
            ids[u] = len(leaves) + len(nodes)
            nodes.append((self.kinds[u - self.n], ch))
        if v < self.n:
            return SumTree(1)
        return SumTree(len(leaves), nodes, root=ids[v], _trusted=True)

    def contract(self, parts: list) -> "SumTree":
        """The tree over the parts: part roots become leaves 0..k-1."""
        idx = {v: i for i, v in enumerate(parts)}
        k = len(parts)
        nodes, ids, stack = [], {}, [(self.root, False)]
        while stack:
            u, done = stack.pop()
            if u in idx:
                continue
            if not done:
                stack.append((u, True))
                stack.extend((c, False) for c in self.children[u - self.n])
                continue
            ch = [idx[c] if c in idx else ids[c] for c in self.children[u - self.n]]
            ids[u] = k + len(nodes)
            nodes.append((self.kinds[u - self.n], ch))
        return SumTree(k, nodes, root=ids[self.root] if self.root in ids else 0, _trusted=True)

    def relabel(self, mapping: Sequence[int] | Iterable[int]) -> "SumTree":
        """The same shape with leaf ``i`` renamed ``mapping[i]`` (a permutation of 0..n-1)."""
        m = list(mapping)
        if sorted(m) != list(range(self.n)):
            raise ValueError("relabel needs a permutation of 0..n-1")
        fix = lambda c: m[c] if c < self.n else c  # noqa: E731
        return SumTree(self.n, [(k, [fix(c) for c in ch])
                                for k, ch in zip(self.kinds, self.children)],
                       root=fix(self.root), meta=self.meta)
