"""The summation-tree type: construction, equality, serialisation, builders, describe, render."""
import json
import shutil

import pytest

from torch_mma_emu.fprev import SumTree, builders as B


def test_parse_and_text_round_trip():
    text = "(((0+1)+[2+3+4])+{5+6+7})"
    t = SumTree.parse(text)
    assert t.n == 8 and t.to_text() == text
    assert t.kind(t.root) == "add"
    assert sorted(t.arities().items()) == [(("add", 2), 3), (("exact", 3), 1), (("fused", 3), 1)]


def test_equality_ignores_child_order_but_not_shape_or_kind():
    a = SumTree.parse("((0+1)+[2+3+4])")
    assert a == SumTree.parse("([4+2+3]+(1+0))")
    assert hash(a) == hash(SumTree.parse("([4+2+3]+(1+0))"))
    assert a != SumTree.parse("((0+2)+[1+3+4])")
    assert a != SumTree.parse("((0+1)+{2+3+4})")
    assert a != SumTree.parse("((0+1)+((2+3)+4))")


def test_two_child_fused_node_is_an_addition():
    # FPRev cannot tell a 2-term fused sum from an IEEE addition
    assert SumTree(2, [("fused", [0, 1])]) == SumTree.parse("(0+1)")


@pytest.mark.parametrize("nodes, msg", [
    ([("add", [0])], "at least 2 children"),
    ([("add", [0, 0])], "two parents"),
    ([("add", [0, 5])], "invalid child"),
    ([("mul", [0, 1])], "kind must be"),
    ([("add", [0, 1])], "not connected"),
])
def test_invalid_trees_raise_value_error(nodes, msg):
    with pytest.raises(ValueError, match=msg):
        SumTree(3, nodes)


def test_parse_rejects_bad_text():
    for bad in ["((0+1)", "(0+1)+2", "(0+2)", "(0+x)"]:
        with pytest.raises(ValueError):
            SumTree.parse(bad)


def test_json_round_trip_keeps_meta_and_handles_deep_chains():
    t = B.sequential(65536)
    t.meta["target"] = "sum"
    s = t.to_json()
    back = SumTree.from_json(s)
    assert back == t and back.meta == {"target": "sum"}
    assert back.depth() == 65535
    with pytest.raises(ValueError, match="not a serialised SumTree"):
        SumTree.from_json(json.dumps({"n": 2}))


def test_builders_match_hand_written_orders():
    assert B.sequential(4) == SumTree.parse("(((0+1)+2)+3)")
    assert B.reversed_sum(4) == SumTree.parse("(((3+2)+1)+0)")
    assert B.pairwise(6) == SumTree.parse("(((0+1)+2)+((3+4)+5))")
    assert B.strided(8, 2, "pairwise") == SumTree.parse("((((0+2)+4)+6)+(((1+3)+5)+7))")
    assert B.blocked(6, 3, "sequential", "pairwise") == SumTree.parse("(((0+1)+2)+((3+4)+5))")
    assert B.fused_chain(10, 4) == SumTree.parse("[[[0+1+2+3]+4+5+6+7]+8+9]")


def test_lca_size_and_relabel():
    t = B.strided(32, 8, "pairwise")
    assert t.lca_size(0, 8) == 2 and t.lca_size(0, 1) == 8 and t.lca_size(0, 7) == 32
    r = t.relabel([(i + 1) % 32 for i in range(32)])
    assert r.lca_size(1, 9) == 2


@pytest.mark.parametrize("tree, words", [
    (B.sequential(10), "sequential"),
    (B.reversed_sum(10), "reversed"),
    (B.pairwise(16), "pairwise"),
    (B.strided(32, 8, "pairwise"), "8-way strided, ways combined pairwise"),
    (B.strided(64, 4, "sequential"), "4-way strided, ways combined sequentially"),
    (B.blocked(64, 8, "pairwise", "sequential"),
     "8 blocks of 8 (each sequential), blocks combined pairwise"),
    (B.fused_chain(32, 4), "chain of (4+1)-term fused sums over consecutive chunks"),
    (B.fused_chain(32, 16), "chain of (16+1)-term fused sums over consecutive chunks"),
    (B.fused_chain(36, 8, kind="exact"),
     "chain of (8+1)-term exact (non-swamped) fused sums over consecutive chunks, the last "
     "adding 4"),
    (SumTree(1), "single summand"),
])
def test_describe_names_known_patterns(tree, words):
    assert tree.describe() == words


def test_describe_nested_strides():
    # torch.sum's CPU order for 128 floats: 32 accumulators (i mod 32), the four vectors of
    # each of the 8 lanes added first, then the lanes
    b = B._Builder(128)
    acc = [b.chain(list(range(r, 128, 32))) for r in range(32)]
    lanes = [b.chain([acc[lane + 8 * v] for v in range(4)]) for lane in range(8)]
    t = b.tree(b.chain(lanes))
    assert t.describe() == ("8-way strided (each way 4-way strided, ways combined "
                            "sequentially), ways combined sequentially")


def test_to_dot_lists_every_node():
    dot = B.fused_chain(8, 4).to_dot()
    assert dot.startswith("digraph") and dot.count("->") == 9
    assert "doublecircle" in dot


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' program not installed")
@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml"),
                                           (".pdf", b"%PDF")])
def test_render_writes_images(tmp_path, suffix, magic):
    out = B.strided(32, 8, "pairwise").render(tmp_path / f"t{suffix}")
    assert open(out, "rb").read(5).startswith(magic)


def test_render_rejects_unknown_format(tmp_path):
    with pytest.raises(ValueError, match="format must be one of"):
        B.sequential(3).render(tmp_path / "t.jpg")
