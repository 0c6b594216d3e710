"""Regression tests for the FPRev review findings.

1. Calibration put +-big only on leaf 0, and the modelled-unit check compared big with one
   unit: units summed among themselves before they meet big (a whole chunk, or a whole
   chain before a mask on the last summand) survived next to big, and fp8 e4m3 on
   sm89/sm90 and fp16 on gfx90a gave wrong trees (or InconsistentError only with verify).
   Now: the right tree where the range allows it, a ProbeRangeError otherwise.
2. The paper's algorithms (basic / fprev / modified) never checked their tree against the
   answers they were built from: a random-order sum gave a plausible tree, and Algorithm 2
   called a fused chain "sequential".  Now they raise InconsistentError.
3. check_replay could not model "accumulate in fp32, round the result to fp16".
"""
import numpy as np
import pytest
import torch

from torch_mma_emu import fprev
from torch_mma_emu.fprev import (InconsistentError, ProbeRangeError, ProbeValues, VectorTarget,
                                 builders as B, reveal_target)
from torch_mma_emu.fprev.targets.matmul import MatmulTarget, _fit_to_spec

E4M3 = torch.float8_e4m3fn
PAPER = ("fprev", "basic", "modified")


# ---------------------------------------------------------------- 1. probe range

def _late_big_chain(x):
    """fp16 summands added left to right in fp32 (no rounding of the units)."""
    acc = torch.zeros((), dtype=torch.float32)
    for v in x.to(torch.float32):
        acc = acc + v
    return acc


def test_calibration_puts_big_on_the_last_summand_too():
    # one unit (2**-24) vanishes next to big = 2**4 in fp32, 63 of them summed first do not:
    # +big on leaf 0 alone would pass (every unit meets big one at a time)
    vals = ProbeValues(big=2.0 ** 4, unit=2.0 ** -24, capacity=2 ** 11)
    target = VectorTarget(_late_big_chain, 64, torch.float16, values=vals)
    with pytest.raises(ProbeRangeError, match="on summand (32|63) plus 63 units"):
        target.calibrate()
    for algorithm in ("default",) + PAPER:
        target = VectorTarget(_late_big_chain, 64, torch.float16, values=vals)
        with pytest.raises(ProbeRangeError, match="not swamped"):
            reveal_target(target, algorithm=algorithm)
    # with a big that swamps the whole sum, the same chain is revealed
    ok = VectorTarget(_late_big_chain, 64, torch.float16,
                      values=ProbeValues(big=2.0 ** 15, unit=2.0 ** -24, capacity=2 ** 11))
    assert reveal_target(ok, verify=True) == B.sequential(64)


@pytest.mark.parametrize("arch", ["sm89", "sm90"])
@pytest.mark.parametrize("algorithm", ("default",) + PAPER)
@pytest.mark.parametrize("with_c", [False, True])
def test_e4m3_chains_are_refused_when_the_units_add_up(arch, algorithm, with_c):
    with pytest.raises(ProbeRangeError, match="range is too narrow"):
        fprev.reveal_matmul(8, 8, 64, mm="emulated", arch=arch, dtype=E4M3,
                            algorithm=algorithm, with_c=with_c)


@pytest.mark.parametrize("arch, L", [("sm89", 16), ("sm90", 32)])
@pytest.mark.parametrize("algorithm", ["default", "fprev", "modified"])
def test_e4m3_small_k_gives_the_right_tree(arch, L, algorithm):
    K = 16  # 16 units of 2**-9 stay below big's last kept bit (2**(8-13))
    tree = fprev.reveal_matmul(8, 4, K, mm="emulated", arch=arch, dtype=E4M3,
                               algorithm=algorithm, verify=True)
    assert tree == B.fused_chain(K, L)


@pytest.mark.parametrize("algorithm", ["default", "fprev"])
def test_calibration_alone_catches_e4m3(algorithm):
    # values given explicitly: _fit_to_spec is skipped, calibration must refuse
    vals = ProbeValues.for_dtype(E4M3, torch.float32)
    target = MatmulTarget(8, 4, 64, backend="emulated", arch="sm89", dtype=E4M3, values=vals)
    with pytest.raises(ProbeRangeError, match="not swamped"):
        reveal_target(target, algorithm=algorithm)


@pytest.mark.parametrize("algorithm", ("default",) + PAPER)
@pytest.mark.parametrize("with_c", [False, True])
def test_gfx90a_fp16_refused_for_long_k(algorithm, with_c):
    with pytest.raises(ProbeRangeError, match="range is too narrow"):
        fprev.reveal_matmul(8, 8, 64, mm="emulated", arch="gfx90a", dtype=torch.float16,
                            algorithm=algorithm, with_c=with_c)


@pytest.mark.parametrize("algorithm", ("default",) + PAPER)
def test_gfx90a_fp16_small_k_gives_the_right_tree(algorithm):
    tree = fprev.reveal_matmul(8, 4, 16, mm="emulated", arch="gfx90a", dtype=torch.float16,
                               algorithm=algorithm, verify=True)
    assert tree == B.blocked(16, 4, combine="sequential", inner="pairwise")
    assert tree.describe() == "4 blocks of 4 (each pairwise), blocks combined sequentially"


def test_calibration_alone_catches_gfx90a_fp16():
    vals = ProbeValues(big=2.0 ** 15, unit=2.0 ** -14, capacity=2 ** 24)
    target = MatmulTarget(8, 4, 64, backend="emulated", arch="gfx90a",
                          dtype=torch.float16, values=vals)
    with pytest.raises(ProbeRangeError, match="not swamped"):
        reveal_target(target)


def test_fit_to_spec_counts_the_summands():
    e4m3 = ProbeValues(big=2.0 ** 8, unit=2.0 ** -9, capacity=8)
    _fit_to_spec(e4m3, "sm89", E4M3, None, "fp8_e4m3", None, False, n=16)
    with pytest.raises(ProbeRangeError, match="at most 16 summands"):
        _fit_to_spec(e4m3, "sm89", E4M3, None, "fp8_e4m3", None, False,
                     n=17)
    fp16 = ProbeValues.for_dtype(torch.float16, torch.float32)
    v = _fit_to_spec(fp16, "gfx90a", torch.float16, None, None, None, False, n=16)
    assert v.unit == 2.0 ** -14  # flushed subnormal inputs: a normal unit
    with pytest.raises(ProbeRangeError, match="24 significant bits"):
        _fit_to_spec(fp16, "gfx90a", torch.float16, None, None, None, False, n=17)
    # wide ranges are unaffected
    _fit_to_spec(fp16, "sm80", torch.float16, None, None, None, False, n=4096)


def test_wide_enough_fp8_is_still_revealed():
    # e5m2 on sm100 (F = 25): 48 units of 2**-16 stay below 2**(15-25)
    tree = fprev.reveal_matmul(8, 4, 48, mm="emulated", arch="sm100", dtype=torch.float8_e5m2,
                               verify=True)
    assert tree == B.fused_chain(48, 32)


# ------------------------------------------------ 2. paper algorithms check themselves

def _random_order(seed):
    rng = np.random.default_rng(seed)

    def fn(x):
        acc = torch.zeros((), dtype=x.dtype)
        for k in rng.permutation(len(x)):
            acc = acc + x[k]
        return acc
    return fn


@pytest.mark.parametrize("algorithm", PAPER)
@pytest.mark.parametrize("seed", range(3))
def test_paper_algorithms_refuse_a_random_order(algorithm, seed):
    with pytest.raises(InconsistentError, match="does not sum in one fixed order"):
        fprev.reveal(_random_order(seed), 16, algorithm=algorithm)


def test_basic_refuses_fused_chains():
    with pytest.raises(InconsistentError, match="cannot represent"):
        fprev.reveal_matmul(8, 8, 64, mm="emulated", arch="sm80", dtype=torch.float16,
                            algorithm="basic")
    tree = fprev.reveal_matmul(8, 8, 64, mm="emulated", arch="sm80", dtype=torch.float16,
                               algorithm="fprev")
    assert tree == B.fused_chain(64, 8)


@pytest.mark.parametrize("algorithm", PAPER)
def test_paper_algorithms_still_reveal_fixed_orders(algorithm):
    for tree in (B.sequential(12), B.pairwise(16), B.strided(16, 4)):
        def fn(x, tree=tree):
            return torch.tensor(fprev.replay(tree, x[None].to(torch.float64),
                                             dtype="float32")[0])
        got = fprev.reveal(fn, tree.n, algorithm=algorithm)
        assert got == tree


# ------------------------------------------------------------ 3. replay rounding mode

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_check_replay_accepts_torch_sum_of_narrow_dtypes(dtype):
    tree = fprev.reveal_sum(16, dtype=dtype)
    fprev.check_replay(torch.sum, tree, dtype=dtype)
    fprev.check_replay(torch.sum, fprev.reveal_sum(64, dtype=dtype), dtype=dtype)


def test_check_replay_explicit_accumulate_then_round():
    tree = fprev.reveal_sum(16, dtype=torch.float16)
    fprev.check_replay(torch.sum, tree, dtype=torch.float16, acc_dtype=torch.float32,
                       out_dtype=torch.float16)
    # adding in fp16 (what torch.sum does not do) is still told apart
    with pytest.raises(InconsistentError, match="does not add in this fixed order"):
        fprev.check_replay(torch.sum, tree, dtype=torch.float16, acc_dtype="float16")


def test_check_replay_still_catches_a_wrong_order():
    def fp16_chain(x):  # left to right, every addition rounded to fp16
        acc = torch.zeros((), dtype=torch.float16)
        for v in x:
            acc = acc + v
        return acc
    with pytest.raises(InconsistentError):
        fprev.check_replay(fp16_chain, B.pairwise(64), dtype=torch.float16)
    fprev.check_replay(fp16_chain, B.sequential(64), dtype=torch.float16)
