"""Targets that are not one fixed summation tree must raise, and bad input must be refused
with a clear TypeError / ValueError."""
import math
import random

import numpy as np
import pytest
import torch

from torch_mma_emu import fprev
from torch_mma_emu.fprev import (FPRevError, InconsistentError, NondeterministicError,
                                 ProbeRangeError, builders as B)

f32 = np.float32


def _chain(xs):
    acc = xs[0]
    for v in xs[1:]:
        acc = f32(acc + v)
    return float(acc)


def random_order_sum():
    rng = random.Random(0)

    def f(x):
        xs = list(x.numpy())
        rng.shuffle(xs)
        return _chain(xs)
    return f


def value_dependent_sum(x):
    """Sequential when the first summand is positive, reversed otherwise."""
    xs = list(x.numpy())
    return _chain(xs if xs[0] > 0 else xs[::-1])


def kahan_sum(x):
    s = c = f32(0)
    for v in x.numpy():
        y = f32(v - c)
        t = f32(s + y)
        c = f32(f32(t - s) - y)
        s = t
    return float(s)


def sorted_sum(x):
    return _chain(sorted(x.numpy(), key=abs))


@pytest.mark.parametrize("verify", [False, True])
def test_random_order_raises(verify):
    with pytest.raises(InconsistentError):
        fprev.reveal(random_order_sum(), 24, verify=verify)


def test_repeated_probes_expose_nondeterminism():
    calls = iter(range(10 ** 9))

    def flaky(x):  # every other call sums in reverse: each answer looks fine on its own
        xs = list(x.numpy())
        return _chain(xs if next(calls) % 2 else xs[::-1])
    with pytest.raises(NondeterministicError):
        fprev.reveal(flaky, 16, verify=True)


def test_value_dependent_order_raises_with_verify():
    with pytest.raises(InconsistentError):
        fprev.reveal(value_dependent_sum, 16, verify=True)


@pytest.mark.parametrize("fn", [kahan_sum, sorted_sum])
def test_check_replay_exposes_what_probes_cannot_see(fn):
    # compensated and sorted sums behave like a tree at probe values; random inputs differ
    tree = fprev.reveal(fn, 32)
    with pytest.raises(InconsistentError, match="random input"):
        fprev.check_replay(fn, tree)


def test_check_replay_accepts_the_real_order():
    tree = fprev.reveal_sum(1000)
    fprev.check_replay(torch.sum, tree)


def test_exact_sum_is_one_non_swamped_node():
    def fsum(x):
        return float(f32(math.fsum(x.numpy().astype(np.float64))))
    tree = fprev.reveal(fsum, 20, verify=True)
    assert tree == fprev.SumTree(20, [("exact", list(range(20)))])
    fprev.check_replay(fsum, tree)


def test_unswamped_units_raise():
    # big = 2**10 cannot swamp 63 float32 units: the calibration must refuse to probe
    with pytest.raises(ProbeRangeError, match="not swamped|not a count"):
        fprev.reveal(torch.sum, 64, dtype=torch.float32, big=2.0 ** 10, unit=1.0)


def test_flushed_unit_raises():
    def ftz_sum(x):  # flushes subnormal float16 inputs to zero before adding
        x = torch.where(x.abs() < 2 ** -14, torch.zeros_like(x), x)
        return x.float().sum()
    with pytest.raises(ProbeRangeError, match="single unit"):
        fprev.reveal(ftz_sum, 16, dtype=torch.float16)
    assert fprev.reveal(ftz_sum, 16, dtype=torch.float16, unit=2.0 ** -14).n == 16


@pytest.mark.parametrize("call, exc, match", [
    (lambda: fprev.reveal(torch.sum, 0), ValueError, "positive int"),
    (lambda: fprev.reveal(torch.sum, 8.0), ValueError, "positive int"),
    (lambda: fprev.reveal("sum", 8), TypeError, "callable"),
    (lambda: fprev.reveal(torch.sum, 8, dtype=torch.int32), TypeError, "dtype must be one of"),
    (lambda: fprev.reveal(torch.sum, 8, algorithm="magic"), ValueError, "algorithm must be"),
    (lambda: fprev.reveal(torch.sum, 8, big=3.0), ValueError, "power of two"),
    (lambda: fprev.reveal_sum(8, library="jax"), ValueError, "library must be"),
    (lambda: fprev.reveal_sum(shape=(4, 8)), ValueError, "give dim"),
    (lambda: fprev.reveal_sum(shape=(4, 8), dim=2), ValueError, "is not a dimension of shape"),
    (lambda: fprev.reveal_matmul(4, 4, 4, mm="blas"), ValueError, "backend must be one of"),
    (lambda: fprev.reveal_matmul(4, 4, 0), ValueError, "k must be"),
    (lambda: fprev.reveal_allreduce(1), ValueError, "world_size"),
    (lambda: fprev.reveal_allreduce(2, op="max"), ValueError, "op must be"),
    (lambda: fprev.reveal_allreduce(3, op="reduce_scatter", numel=8), ValueError, "divisible"),
    (lambda: fprev.SumTree(0), ValueError, "n >= 1"),
])
def test_bad_input_is_refused(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without CUDA")
@pytest.mark.parametrize("call", [
    lambda: fprev.reveal_sum(8, device="cuda"),
    lambda: fprev.reveal_matmul(4, 4, 4, mm="cublas"),
    lambda: fprev.reveal_matmul(4, 4, 4, mm="triton"),
])
def test_cuda_targets_fail_clearly_without_cuda(call):
    with pytest.raises((RuntimeError, FPRevError), match="CUDA|cuda|native_mm"):
        call()


def test_gpu_sum_when_available():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    tree = fprev.reveal_sum(4096, device="cuda", verify=True)
    x = torch.randn(4, 4096, device="cuda")
    want = torch.stack([r.sum() for r in x]).cpu()
    assert np.array_equal(fprev.replay(tree, x.cpu()), want.double().numpy())


def test_baselines_agree_on_a_fused_chain():
    def chain(x):  # (4+1)-term fused chain emulated in exact arithmetic
        acc = 0.0
        xs = x.numpy().astype(np.float64)
        for s in range(0, len(xs), 4):
            terms = [acc] + list(xs[s:s + 4])
            acc = fprev.truncated_sum(23)(terms)
        return acc
    want = B.fused_chain(16, 4)
    for alg in ("default", "fprev", "modified"):
        assert fprev.reveal(chain, 16, algorithm=alg) == want, alg
