"""The order home (torch_mma_emu.order): one evaluator, per-format arithmetic, per-range trees.

The references here are independent of the module: a recursive node-by-node sum with
torch's own scalar arithmetic in the format (torch CPU rounds fp16 / bf16 additions once),
and hand-derived values."""
import random

import numpy as np
import pytest
import torch

from torch_mma_emu import order
from torch_mma_emu.order import Ranges, SumTree, arith, builders as B
from torch_mma_emu.triton import reduce

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


def random_tree(n, rng):
    """A random binary tree over 0..n-1 (random pairs of pending subtrees, random order)."""
    pend = list(range(n))
    nodes = []
    while len(pend) > 1:
        i, j = rng.sample(range(len(pend)), 2)
        a, b = pend[i], pend[j]
        nodes.append(("add", [a, b]))
        pend = [p for k, p in enumerate(pend) if k not in (i, j)] + [n + len(nodes) - 1]
    return SumTree(n, nodes)


def torch_reference(tree, x, dtype):
    """Node by node, recursively, with torch scalars in ``dtype`` (x: (n,) float64)."""
    def val(v):
        if v < tree.n:
            return torch.tensor(float(x[v]), dtype=torch.float64).to(dtype)
        a, b = (val(c) for c in tree.child_list(v))
        return a + b
    return float(val(tree.root))


@pytest.mark.parametrize("dtype", DTYPES)
def test_evaluate_equals_a_node_by_node_torch_sum_on_random_trees(dtype):
    rng = random.Random(7)
    g = torch.Generator().manual_seed(3)
    for n in (2, 3, 5, 17, 64):
        tree = random_tree(n, rng)
        xs = (torch.randn(6, n, generator=g, dtype=torch.float64)
              * torch.logspace(-3, 3, n, dtype=torch.float64)).to(dtype)
        got = order.evaluate(tree, xs)
        for row, want_x in enumerate(xs.to(torch.float64).numpy()):
            assert got[row] == torch_reference(tree, want_x, dtype), (n, dtype, row)


def test_fp16_and_bf16_round_at_every_node():
    chain = B.sequential(3)                       # (x0 + x1) + x2
    # fp16: 2048 + 1 = 2048 (tie to even), twice; the exact sum 2050 is representable
    assert order.evaluate(chain, torch.tensor([2048.0, 1.0, 1.0], dtype=torch.float16)) == 2048
    assert order.evaluate(SumTree.parse("(0+(1+2))"),
                          torch.tensor([2048.0, 1.0, 1.0], dtype=torch.float16)) == 2050
    # bf16: 256 + 1 = 256, twice
    assert order.evaluate(chain, torch.tensor([256.0, 1.0, 1.0], dtype=torch.bfloat16)) == 256
    assert order.evaluate(chain, torch.tensor([256.0, 1.0, 1.0]), dtype="float32") == 258


def test_arith_nan_inf_and_signed_zero():
    f32 = np.float32
    z = arith.fadd(np.array([-0.0], f32), np.array([-0.0], f32), "f32")
    assert np.signbit(z[0])
    assert not np.signbit(arith.fadd(np.array([-0.0], f32), np.array([0.0], f32), "f32")[0])
    nan = arith.fadd(np.array([np.inf], f32), np.array([-np.inf], f32), "f32")
    assert nan.view(np.uint32)[0] == 0x7FFFFFFF                  # canonical
    h = arith.fadd(np.array([np.inf], np.float16), np.array([-np.inf], np.float16), "f16")
    assert h.view(np.uint16)[0] == 0x7FFF
    bf_inf, bf_ninf = arith.f32_to_bf16(np.array([np.inf, -np.inf], f32))
    assert arith.fadd(np.array([bf_inf]), np.array([bf_ninf]), "bf16")[0] == 0x7FFF
    # max.f32: the non-NaN operand, -0 < +0; maximum propagates NaN
    a, b = np.array([np.nan, -0.0, 1.0], f32), np.array([2.0, 0.0, np.nan], f32)
    assert arith.fmax(a, b, "f32").tolist() == [2.0, 0.0, 1.0]
    assert not np.signbit(arith.fmax(a, b, "f32")[1])
    assert np.signbit(arith.fmax(a, b, "f32", is_max=False)[1])
    m = arith.fmaximum(a, b, "f32")
    assert np.isnan(m[0]) and np.isnan(m[2]) and m.view(np.uint32)[0] == 0x7FFFFFFF
    # overflow rounds to infinity in the format, at the node
    assert order.evaluate(B.sequential(2), torch.tensor([65504.0, 32.0], dtype=torch.float16)) \
        == np.inf
    assert np.isnan(order.evaluate(B.sequential(2), torch.tensor([np.inf, -np.inf])))


def test_arith_names_and_bad_formats():
    assert arith.fmt_of(torch.bfloat16) == "bf16" and arith.fmt_of(np.float16) == "f16"
    assert arith.fmt_of("float32") == "f32" and arith.fmt_of("f64") == "f64"
    with pytest.raises(ValueError, match="accumulation format"):
        arith.fmt_of("int8")
    with pytest.raises(ValueError, match="operation is one of"):
        arith.op("mul", "f32")
    x = np.array([1.5, -2.25, 3e38], np.float64)
    for f in arith.FORMATS:
        assert np.array_equal(arith.widen(arith.narrow(x, f), f),
                              torch.tensor(x).to(getattr(torch, {"f64": "float64", "f32":
                              "float32", "f16": "float16", "bf16": "bfloat16"}[f])).double().numpy())


def test_fold_runs_any_combine_level_by_level():
    tree = SumTree.parse("((0+1)+(2+3))")
    assert [len(nodes) for nodes, _ in tree.levels()] == [2, 1]
    x = np.array([[3.0, 9.0, 4.0, 1.0]])
    mx, = order.fold(tree, (x,), lambda a, b: (np.maximum(a[0], b[0]),))
    assert mx.tolist() == [9.0]
    # the first child is the left operand
    first, = order.fold(B.sequential(3), (np.array([1.0, 2.0, 3.0]),),
                        lambda a, b: (a[0] * 10 + b[0],))
    assert first == 123.0
    with pytest.raises(ValueError, match="multi-term"):
        order.fold(SumTree.parse("[0+1+2]"), (np.zeros(3),), lambda a, b: a)
    with pytest.raises(ValueError, match="leaves"):
        order.fold(tree, (np.zeros(3),), lambda a, b: a)


def test_fused_nodes_go_to_the_fused_model():
    t = SumTree.parse("[0+1+2]")
    x = torch.tensor([1.0, 2.0 ** -30, -1.0])
    assert order.evaluate(t, x) == 2.0 ** -30                    # exact, rounded once
    assert order.evaluate(t, x, fused=order.truncated_sum(23)) == 0.0


def test_triton_layout_tree_is_a_sum_tree_run_by_the_evaluator():
    # 1 warp x 4 lanes x 2 registers: each thread folds (r0 + r1), then the butterfly
    # (offsets 2, then 1: lane l + lane l+2, then the pair sums)
    t = reduce.Tree(np.arange(8).reshape(1, 4, 2), (1, 2), ())
    st, first, later = reduce.sum_tree(t)
    assert st == SumTree.parse("(((0+1)+(4+5))+((2+3)+(6+7)))")
    assert len(first) == 4 and not later
    g = np.random.default_rng(1)
    for elem, dt in (("f32", np.float32), ("f16", np.float16)):
        x = (g.standard_normal((50, 8)) * 1e3).astype(dt)
        add = reduce.known_combine(("arith.addf",), elem)
        got = reduce.run(t, [x], 1, add)[0]
        want = order.evaluate(st, torch.from_numpy(x))
        assert np.array_equal(got.astype(np.float64), want)


def test_ranges_merge_look_up_serialise_and_evaluate():
    a, b = B.sequential(3), B.sequential(3, [2, 0, 1])
    r = Ranges.of_positions([a, a, b, b, b, a])
    assert [(s, e) for s, e, _ in r] == [(0, 2), (2, 5), (5, 6)]
    assert r.trees() == [a, b] and r.tree_at(3) == b and r.numel == 6
    with pytest.raises(IndexError):
        r.tree_at(6)
    assert Ranges.from_list(r.to_list()) == r
    with pytest.raises(ValueError, match="cover"):
        Ranges.from_list([[0, 2, a.to_dict()], [3, 4, a.to_dict()]])
    x = torch.tensor([[1e8, 1.0, -1e8]] * 6)
    got = r.evaluate(x, dtype=torch.float32)
    assert got.tolist() == [0.0, 0.0, 1.0, 1.0, 1.0, 0.0]   # (-1e8 + 1e8) + 1 in b's order


def test_fprev_names_are_the_order_homes():
    from torch_mma_emu import fprev, schedule_tree
    assert fprev.SumTree is order.SumTree and fprev.replay is order.evaluate
    assert fprev.builders is order.builders
    assert schedule_tree.tree_text(B.pairwise(4)) == "((0+1)+(2+3))"
