"""One-line summaries of summation trees.

Recognised, recursively (leaf positions are ranks among the subtree's leaves):

* chains: "sequential", "reversed", "sequential in order [...]", "chain of (L+1)-term fused
  sums" (each node fuses the previous one and L new summands);
* "pairwise" (balanced halving of contiguous ranges);
* splits into parts that are subtrees: "k-way strided" (part r holds positions i = r mod
  k) and "k blocks of s" (contiguous), with how each part is summed and how the parts are
  combined (the tree over the parts, described the same way);
* otherwise a count of node kinds and the depth.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:           # tree.py imports this module (SumTree.describe)
    from .tree import SumTree

_WORD = {"fused": "fused", "exact": "exact (non-swamped) fused"}


_MEMO: dict | None = None


def describe(tree: SumTree) -> str:
    global _MEMO
    outer = _MEMO is None
    if outer:
        _MEMO = {}  # sub-shapes recur across candidate splits: describe each once
    try:
        return _describe(tree)
    finally:
        if outer:
            _MEMO = None


def _describe(t: SumTree) -> str:
    if t.n == 1:
        return "single summand"
    key = t.canonical() if _MEMO is not None else None
    if key is not None and key in _MEMO:
        return _MEMO[key]
    for f in (_chain, _pairwise, _split):
        d = f(t)
        if d:
            break
    else:
        d = _generic(t)
    if key is not None:
        _MEMO[key] = d
    return d


# ---------------------------------------------------------------------- helpers
def _order_words(seq: list) -> str:
    n = len(seq)
    if seq == list(range(n)):
        return "sequential"
    if seq == list(range(n - 1, -1, -1)):
        return "reversed"
    shown = ", ".join(map(str, seq[:8])) + (", ..." if n > 8 else "")
    return f"sequential in order [{shown}]"


# ---------------------------------------------------------------------- chains
def _chain(t: SumTree) -> str | None:
    """Walk down the spine: every node has at most one internal child (or, for "blocks",
    one child that continues the spine and one subtree)."""
    v, steps = t.root, []
    while v >= t.n:
        ch = t.children[v - t.n]
        inner = [c for c in ch if c >= t.n]
        if len(inner) > 1:
            return None
        steps.append((t.kinds[v - t.n], [c for c in ch if c < t.n]))
        v = inner[0] if inner else -1
    steps.reverse()  # first addition first
    kinds = {k for k, _ in steps}
    if kinds == {"add"}:
        rest = [leaf for _, leaves in steps[1:] for leaf in leaves]
        a, b = sorted(steps[0][1])
        for seq in ([a, b] + rest, [b, a] + rest):
            words = _order_words(seq)
            if words != "sequential in order" and not words.startswith("sequential in"):
                return words
        return _order_words([a, b] + rest)
    # a 2-term first chunk, or a last chunk of one summand, is stored as an addition
    lo = 1 if len(steps) > 1 and steps[0][0] == "add" and len(steps[0][1]) == 2 else 0
    hi = len(steps) - 1 if len(steps) > 1 and steps[-1][0] == "add" and \
        len(steps[-1][1]) == 1 else len(steps)
    if lo < hi:
        kinds = {k for k, _ in steps[lo:hi]}
    sizes = [len(s[1]) for s in steps]
    if len(steps) > 2:
        L = max(set(sizes[1:-1]), key=sizes.count)
    elif len(steps) == 2 and sizes[0] == sizes[1] + 1:
        L = sizes[1]          # the first chunk also takes the accumulator's initial value
    else:
        L = max(sizes)
    if len(kinds) == 1 and all(x == L for x in sizes[1:-1]):
        word = _WORD[kinds.pop()]
        if len(steps) == 1:
            return f"one {t.n}-term {word} sum"
        firsts = [min(s[1]) for s in steps]
        consecutive = all(sorted(s[1]) == list(range(f, f + len(s[1])))
                          for s, f in zip(steps, firsts)) and firsts == sorted(firsts)
        extra = f", the last adding {sizes[-1]}" if sizes[-1] != L else ""
        head = f", the first fusing {sizes[0]}" if sizes[0] != L else ""
        where = " over consecutive chunks" if consecutive else ""
        return f"chain of ({L}+1)-term {word} sums{where}{head}{extra}"
    return None


# ---------------------------------------------------------------------- pairwise
def _pairwise(t: SumTree) -> str | None:
    if set(t.kinds) != {"add"}:
        return None
    lo, hi = {}, {}
    for v in range(t.n):
        lo[v] = hi[v] = v
    for v in t.postorder():
        a, b = t.children[v - t.n]
        if lo[a] > lo[b]:
            a, b = b, a
        if hi[a] + 1 != lo[b]:
            return None
        sa, sb = hi[a] - lo[a] + 1, hi[b] - lo[b] + 1
        if abs(sa - sb) > 1 and sa != 1 << (sa + sb - 1).bit_length() - 1:
            return None
        lo[v], hi[v] = lo[a], hi[b]
    return "pairwise" if t.n > 3 else None


# ---------------------------------------------------------------------- splits
def _split(t: SumTree) -> str | None:
    """The finest split into "ways" or "blocks" whose parts are all subtrees.  A part
    holding position 0 must be an ancestor of leaf 0, so only ancestor sizes are tried;
    parts are matched to nodes by a 64-bit hash of their leaves, then checked exactly."""
    n = t.n
    mask = (1 << 64) - 1
    h = np.random.default_rng(0).integers(0, 1 << 62, n).tolist()
    acc = h + [0] * len(t.children)
    sig = {}
    size = t.sizes()
    for v in t.postorder():
        acc[v] = sum(acc[c] for c in t.children[v - n]) & mask
        sig[(acc[v], size[v])] = v
    sizes, v = set(), t.parent(0)
    while v != -1:
        sizes.add(t.sizes()[v])
        v = t.parent(v)
    cands = set()
    for s in sizes:
        if 2 <= s <= n // 2:
            cands.add(("ways", -(-n // s)))
            cands.add(("blocks", -(-n // s)))
    first = None
    for kind, k in sorted(cands, key=lambda c: -c[1]):
        if kind == "ways":
            parts = [list(range(r, n, k)) for r in range(k)]
        else:
            b = -(-n // k)
            parts = [list(range(s, min(n, s + b))) for s in range(0, n, b)]
        if len(parts) != k or any(len(p) < 2 for p in parts):
            continue
        roots = []
        for p in parts:
            key = (sum(h[i] for i in p) & mask, len(p))
            if key not in sig or sorted(t.leaves(sig[key])) != p:
                break
            roots.append(sig[key])
        else:
            # several splits can hold (pairwise blocks split into pairs too): take the
            # finest whose parts are combined plainly, else the finest
            combine = _describe(t.contract(roots))
            if combine in _PLAIN:
                return _split_words(t, kind, k, parts, roots, combine)
            first = first or (kind, k, parts, roots, combine)
    return _split_words(t, *first) if first else None


_PLAIN = ("sequential", "reversed", "pairwise")


def _split_words(t, kind, k, parts, roots, combine) -> str:
    # describe each distinct part shape once (parts are usually copies of each other)
    shapes: dict = {}
    for r in roots:
        sub = t.subtree(r)
        shapes.setdefault(sub.canonical(), sub)
    inner = {_describe(sub) for sub in shapes.values()}
    each = inner.pop() if len(inner) == 1 else "mixed"
    if combine in _PLAIN:
        comb = f"combined {combine}" if combine != "sequential" else "combined sequentially"
    else:
        comb = f"combined as: {combine}"
    if kind == "ways":
        if each == "sequential":
            return f"{k}-way strided, ways {comb}"
        return f"{k}-way strided (each way {each}), ways {comb}"
    sizes = sorted({len(p) for p in parts})
    size = f"{sizes[-1]}" + (f" (last {len(parts[-1])})" if len(sizes) > 1 else "")
    return f"{k} blocks of {size} (each {each}), blocks {comb}"


# ---------------------------------------------------------------------- fallback
def _generic(t: SumTree) -> str:
    ar = t.arities()
    adds = sum(c for (k, _), c in ar.items() if k == "add")
    bits = [f"{adds} additions"] if adds else []
    for kind in ("fused", "exact"):
        sizes = sorted({a for (k, a), c in ar.items() if k == kind})
        cnt = sum(c for (k, _), c in ar.items() if k == kind)
        if cnt:
            bits.append(f"{cnt} {_WORD[kind]} sums of {'/'.join(map(str, sizes))} terms")
    return f"irregular tree: {', '.join(bits)}, depth {t.depth()}"
