"""fp8 hops (through half and back), the exact node of NVLS / CollNet and the symmetric
kernels' float32-accumulated chains (order/nccl.py, order/nccl_extra.py): hand-derived
cases."""
import os

import numpy as np
import pytest
import torch

from torch_mma_emu.order import nccl, nccl_extra
from torch_mma_emu.order.tree import SumTree

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2


def fold(ranges, rows, dtype, **kw):
    return nccl.reduce_values(ranges, torch.tensor(rows).to(dtype), dtype, **kw)


def test_fp8_hops_round_at_every_hop():
    # e4m3 has 3 fraction bits: 1 + 1/16 is a tie, to even 1.0; 1/16 + 1/16 = 1/8 exact.
    # 3-rank ring, 2 elements in one chunk (alignUp(1, 16 / 1) = 16): x1 + x2, then + x0
    ring = nccl.ring_allreduce(3, 2, E4)
    assert ring.tree_at(0) == SumTree.parse("((1+2)+0)")
    # element 0: the two sixteenths first (1/8), then 1: 1.125; element 1: 1 first, each
    # sixteenth ties back to 1.0
    got = fold(ring, [[1.0, 0.0625], [0.0625, 1.0], [0.0625, 0.0625]], E4)
    assert got.tolist() == [1.125, 1.0]


def test_fp8_saturates_instead_of_overflowing():
    two = nccl.ring_allreduce(2, 1, E4)
    assert fold(two, [[448.0], [448.0]], E4).tolist() == [448.0]       # e4m3 max
    assert fold(two, [[-448.0], [-448.0]], E4).tolist() == [-448.0]
    # e5m2: 57344 + 57344 overflows half to inf, saturated back to 57344
    assert fold(nccl.ring_allreduce(2, 1, E5), [[57344.0], [57344.0]], E5).tolist() \
        == [57344.0]
    # e5m2 has 2 fraction bits: (x1 + x2) + x0 with x1 = 1: 1 + 1/8 ties to 1.0, twice;
    # the eighths first: 1/4 + 1 = 1.25 exactly
    three = nccl.ring_allreduce(3, 1, E5)
    assert fold(three, [[0.125], [1.0], [0.125]], E5).tolist() == [1.0]
    assert fold(three, [[1.0], [0.125], [0.125]], E5).tolist() == [1.25]


def test_fp8_premul_sum_scalar_in_fp8_and_half():
    # AVG: 1/n as float -> e4m3, x * s in half, to e4m3, then the hops.  2 ranks: 0.5 + 1
    two = nccl.ring_allreduce(2, 1, E4)
    assert fold(two, [[1.0], [2.0]], E4, op="avg").tolist() == [1.5]
    # 3 ranks: 1/3 -> 0.34375 (e4m3), 3 * 0.34375 = 1.03125 -> 1.0 each, sum 3.0
    got = nccl.reduce_values(nccl.ring_allreduce(3, 1, E4), torch.tensor([[3.0], [3.0], [3.0]])
                             .to(E4), E4, "avg")
    third = float(torch.tensor(1 / 3).to(E4).float())
    assert third == 0.34375 and got.tolist() == [3.0]


FP8_TABLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                         "nccl", "fp8_hops.npz")


@pytest.mark.parametrize("name,dt", [("e4m3", E4), ("e5m2", E5)])
def test_fp8_hops_equal_cudas_own_code_for_every_pair(name, dt):
    """Every pair of fp8 codes (NaN, infinities, subnormals, saturation) and AVG's pre-op
    for 2-16 ranks, against cuda_fp16.h / cuda_fp8.h compiled on the host
    (scripts/regen_nccl_fp8.py)."""
    t = np.load(FP8_TABLE)
    codes = torch.arange(256, dtype=torch.uint8).view(dt).to(torch.float64).numpy()

    def enc(v):
        return torch.from_numpy(np.ascontiguousarray(v)).to(dt).view(torch.uint8).numpy()
    got = enc(nccl.fp8_add(np.repeat(codes, 256), np.tile(codes, 256), name))
    assert np.array_equal(got.reshape(256, 256), t["add_" + name])
    for k, n in enumerate(t["ranks"]):
        assert np.array_equal(enc(nccl.fp8_premul(codes, 1.0 / n, name)), t["avg_" + name][k])


def test_exact_node_rounds_once():
    r = nccl_extra.exact_node(3, 2)
    assert r.tree_at(0).kinds == ["exact"]
    # fp16: 2^-11 + 1 + 2^-11 = 1 + 2^-10 exactly; 2^-11 + 1 + 2^-12 is 3/4 of an ulp
    # above 1, rounded once up; the ring's chain (x1 + x2) + x0 starts from the 1 and
    # rounds back to 1.0 at both hops
    x = [[2.0 ** -11, 2.0 ** -11], [1.0, 1.0], [2.0 ** -11, 2.0 ** -12]]
    assert fold(r, x, torch.float16).tolist() == [1.0 + 2.0 ** -10] * 2
    assert fold(nccl.ring_allreduce(3, 2, torch.float16), x, torch.float16).tolist() \
        == [1.0, 1.0]
    # bf16: 1 + 2^-9 + 2^-9 = 1 + 2^-8 is a tie, to even 1.0 (one rounding)
    assert fold(nccl_extra.exact_node(3, 1), [[1.0], [2.0 ** -9], [2.0 ** -9]],
                torch.bfloat16).tolist() == [1.0]
    # fp32 with cancellation: exact, not float64-then-float32 (1e30 - 1e30 + 1 = 1)
    got = fold(nccl_extra.exact_node(3, 1), [[1e30], [1.0], [-1e30]], torch.float32)
    assert got.tolist() == [1.0]
    got = fold(nccl_extra.exact_node(3, 1), [[2.0 ** 100], [2.0 ** -40], [-2.0 ** 100]],
               torch.bfloat16)
    assert got.tolist() == [2.0 ** -40]
    assert nccl_extra.exact_node(2, 3).tree_at(0) == SumTree.parse("(0+1)")


def test_symmetric_chain_and_float32_accumulator():
    r = nccl_extra.symmetric_allreduce(3, 3, torch.float16, owner=[0, 1, 2])
    assert [r.tree_at(p) for p in range(3)] == [SumTree.parse(t) for t in
                                                ("((0+1)+2)", "((1+2)+0)", "((2+0)+1)")]
    # fp16 in a float32 accumulator: 1 + 2^-11 + 2^-11 stays 1 + 2^-10, rounded once;
    # every hop in fp16 (acc=None) would tie back to 1.0 twice
    x = [[1.0, 1.0, 1.0], [2.0 ** -11] * 3, [2.0 ** -11] * 3]
    owner0 = nccl_extra.symmetric_allreduce(3, 3, torch.float16, owner=[0, 0, 0])
    acc = nccl_extra.accumulator("symmetric", torch.float16)
    assert acc == "f32" and nccl_extra.accumulator("ring", torch.float16) is None
    assert fold(owner0, x, torch.float16, acc=acc).tolist() == [1.0 + 2.0 ** -10] * 3
    assert fold(owner0, x, torch.float16).tolist() == [1.0] * 3
    # fp8 too: e4m3 1 + 1/16 + 1/16 = 1.125 in float32, exact in e4m3
    x8 = [[1.0], [0.0625], [0.0625]]
    one = nccl_extra.symmetric_allreduce(3, 1, E4, owner=[0])
    assert fold(one, x8, E4, acc=nccl_extra.accumulator("symmetric", E4)).tolist() == [1.125]
    assert fold(one, x8, E4).tolist() == [1.0]
    # default owners, fp16 on 3 ranks, 1 block: 8192-byte chunks of 4 warp tiles of 2048
    # bytes (1024 halves), a multiple of 3 chunks (12288 halves) round-robin; then 2048-
    # byte chunks of 4 tiles of 512 bytes (256 halves), a multiple of 3; then 32 per rank
    n = 12288 + 3 * 1024 + 100
    own = nccl_extra.symmetric_owners(3, n, 2)
    assert own[:1024].tolist() == [0] * 1024 and own[1024] == 1 and own[12287] == 2
    assert own[12288:12288 + 256].tolist() == [0] * 256 and own[12288 + 256] == 1
    assert own[15360:15392].tolist() == [0] * 32 and own[15392] == 1 and own[15424] == 2
    assert own[15456] == 0 and len(own) == 15460
    d = nccl_extra.symmetric_allreduce(3, n, torch.float16)
    assert d.tree_at(1024) == SumTree.parse("((1+2)+0)")
    # two blocks: chunk counts round down to multiples of 6: no deep part (3 chunks), 12
    # chunks of 4-byte packs (12288 halves, tiles of 256), then the tail in 32s
    two = nccl_extra.symmetric_owners(3, n, 2, nblocks=2)
    assert two[512] == 2 and own[512] == 0
    assert two[12287] == 47 % 3 and two[12288 + 256] == 8 % 3
    with pytest.raises(ValueError, match="owner"):
        nccl_extra.symmetric_allreduce(3, 2, owner=[0, 3])


def test_acc_refused_when_unknown():
    with pytest.raises(ValueError, match="acc"):
        nccl.reduce_values(nccl.ring_allreduce(2, 1), np.ones((2, 1)), np.float32, acc="f16")


@pytest.mark.slow
def test_regen_fp8_script_reproduces_the_table(tmp_path):
    """Needs the CUDA headers (cuda_fp8.h) and g++."""
    import importlib.util
    import shutil
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location(
        "regen_nccl_fp8", os.path.join(root, "scripts", "regen_nccl_fp8.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if not mod.cuda_include() or not shutil.which("g++"):
        pytest.skip("no CUDA headers / g++ here")
    out = tmp_path / "fp8.npz"
    assert mod.main(["--out", str(out)]) == 0
    new, old = np.load(out), np.load(FP8_TABLE)
    for k in ("add_e4m3", "add_e5m2", "avg_e4m3", "avg_e5m2", "ranks"):
        assert np.array_equal(new[k], old[k])
