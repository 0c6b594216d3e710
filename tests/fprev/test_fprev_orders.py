"""Known summation orders, written as plain Python loops, are recovered exactly.

Every algorithm (ours with and without its shortcuts, and the paper's Algorithms 2, 4, 5)
must give the tree that the builders construct independently.  A property test then
reveals random trees - additions, swamped fused sums and exact (non-swamped) sums mixed -
evaluated numerically by :func:`replay`.
"""
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from torch_mma_emu.fprev import (SumTree, VectorTarget, builders as B, exact_sum, replay,
                                 reveal, reveal_target, truncated_sum)

f32 = np.float32


def seq_sum(x):
    xs = x.numpy()
    acc = xs[0]
    for v in xs[1:]:
        acc = f32(acc + v)
    return float(acc)


def rev_sum(x):
    xs = x.numpy()
    acc = xs[-1]
    for v in xs[-2::-1]:
        acc = f32(acc + v)
    return float(acc)


def _pw(xs):
    if len(xs) == 1:
        return xs[0]
    h = (len(xs) + 1) // 2
    return f32(_pw(xs[:h]) + _pw(xs[h:]))


def pw_sum(x):
    return float(_pw(list(x.numpy())))


def strided_sum(k, combine=_pw):
    def f(x):
        xs = x.numpy()
        acc = list(xs[:k])
        for i in range(k, len(xs)):
            acc[i % k] = f32(acc[i % k] + xs[i])
        return float(combine(acc))
    return f


def blocked_sum(b):
    def f(x):
        xs = x.numpy()
        total = None
        for s in range(0, len(xs), b):
            blk = xs[s]
            for v in xs[s + 1:s + b]:
                blk = f32(blk + v)
            total = blk if total is None else f32(total + blk)
        return float(total)
    return f


def permuted_sum(order):
    def f(x):
        xs = x.numpy()
        acc = xs[order[0]]
        for i in order[1:]:
            acc = f32(acc + xs[i])
        return float(acc)
    return f


def seq_combine(vals):
    acc = vals[0]
    for v in vals[1:]:
        acc = f32(acc + v)
    return acc


ORDER = random.Random(7).sample(range(40), 40)
CASES = [
    ("sequential", seq_sum, B.sequential(40)),
    ("reversed", rev_sum, B.reversed_sum(40)),
    ("pairwise", pw_sum, B.pairwise(40)),
    ("8-way strided, pairwise", strided_sum(8), B.strided(48, 8, "pairwise")),
    ("4-way strided, sequential", strided_sum(4, seq_combine), B.strided(40, 4, "sequential")),
    ("blocked 8", blocked_sum(8), B.blocked(40, 8, "sequential", "sequential")),
    ("permuted", permuted_sum(ORDER), B.sequential(40, ORDER)),
]


@pytest.mark.parametrize("algorithm, shortcuts", [("default", True), ("default", False),
                                                  ("fprev", None), ("basic", None),
                                                  ("modified", None)])
@pytest.mark.parametrize("name, fn, expected", CASES, ids=[c[0] for c in CASES])
def test_python_orders_recovered_exactly(name, fn, expected, algorithm, shortcuts):
    opts = {"shortcuts": shortcuts} if algorithm == "default" else {}
    tree = reveal(fn, expected.n, algorithm=algorithm, **opts)
    assert tree == expected, (name, tree.to_text())
    assert tree.meta["probes"] > 0 and tree.meta["algorithm"] == algorithm


def test_default_verifies_its_answer():
    tree = reveal(strided_sum(8), 64, verify=True)
    assert tree == B.strided(64, 8, "pairwise")
    assert tree.meta["verified"] and tree.meta["check_probes"] > 0


def test_default_uses_far_fewer_probes_than_algorithm_4():
    fast = reveal(strided_sum(8), 512, shortcuts=True)
    paper = reveal(strided_sum(8), 512, algorithm="fprev")
    assert fast == paper
    assert fast.meta["calls"] * 3 < paper.meta["calls"]


# ------------------------------------------------------------------ random trees
def random_tree(rng: random.Random, n: int, kinds) -> SumTree:
    """Merge random groups of items (leaves or nodes) until one is left."""
    items = list(range(n))
    rng.shuffle(items)
    nodes = []
    while len(items) > 1:
        kind = rng.choice(kinds)
        k = 2 if kind == "add" else min(len(items), rng.randint(3, 5))
        rng.shuffle(items)
        group, items = items[:k], items[k:]
        nodes.append((kind if k > 2 else "add", group))
        items.append(n + len(nodes) - 1)
    return SumTree(n, nodes)


def tree_target(tree):
    fused, exact = truncated_sum(24), exact_sum("float32")
    return VectorTarget(lambda x: float(replay(tree, x.numpy()[None], fused=fused,
                                               exact=exact)[0]), tree.n)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), n=st.integers(2, 24),
       kinds=st.sampled_from([("add",), ("add", "fused"), ("add", "exact"),
                              ("add", "fused", "exact")]))
def test_random_trees_recovered_exactly(seed, n, kinds):
    tree = random_tree(random.Random(seed), n, kinds)
    got = reveal_target(tree_target(tree))
    assert got == tree, (tree.to_text(), got.to_text())


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), n=st.integers(2, 48))
def test_shortcuts_exact_on_random_swamped_trees(seed, n):
    # the cluster tests behind the shortcuts are sound when every multi-term node swamps
    tree = random_tree(random.Random(seed), n, ("add", "add", "fused"))
    assert reveal_target(tree_target(tree), shortcuts=True) == tree


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), n=st.integers(2, 20))
def test_algorithm_4_recovers_random_swamped_trees(seed, n):
    tree = random_tree(random.Random(seed), n, ("add", "fused"))
    assert reveal_target(tree_target(tree), algorithm="fprev") == tree
