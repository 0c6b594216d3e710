"""torch_mma_emu.tf32, the one tf32 rounding, against exact rational rounding written here:
ties, just below and just above half, carries into the exponent and to infinity, subnormals,
signed zeros, NaN and Inf, from float32 and from float64 (no double rounding)."""
from fractions import Fraction

import pytest
import torch

from torch_mma_emu.tf32 import tf32_round, tf32_truncate, tf32x3_split

MIN_E = -126            # fp32's (and tf32's) minimum normal exponent


def nearest(v: float, ties_away: bool) -> float:
    """The tf32 value nearest v (10 fraction bits, fp32's exponent range)."""
    if v == 0 or v != v or abs(v) == float("inf"):
        return v
    f = Fraction(abs(v))
    e = f.numerator.bit_length() - f.denominator.bit_length()
    if Fraction(2) ** e > f:
        e -= 1
    ulp = Fraction(2) ** (max(e, MIN_E) - 10)
    q, r = divmod(f, ulp)
    if r > ulp / 2 or (r == ulp / 2 and (ties_away or q % 2 == 1)):
        q += 1
    x = q * ulp
    top = (2 - Fraction(2) ** -10) * Fraction(2) ** 127
    if x > top:
        return float("inf") if v > 0 else float("-inf")
    return float(x) if v > 0 else -float(x)


def words(bits):
    return torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)


def edge_words():
    """Bit patterns at every remainder class that matters, both signs, lsb 0 and 1."""
    out = []
    for hi in (0x3F800000, 0x3F802000, 0x3FFFE000, 0x7F7FE000, 0x00800000, 0x00002000,
               0x00000000, 0x007FE000, 0x4B7FE000):
        for rem in (0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF):
            for sign in (0, 0x80000000):
                out.append((hi | rem) | sign)
    return out


@pytest.mark.parametrize("mode", ["rne", "rna"])
def test_edges_against_exact_rounding(mode):
    x = words(edge_words())
    got = tf32_round(x, mode)
    want = torch.tensor([nearest(v, mode == "rna") for v in x.tolist()], dtype=torch.float32)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_named_cases():
    one = 0x3F800000
    r = lambda b, m="rne": tf32_round(words([b]), m).view(torch.int32).item() & 0xFFFFFFFF  # noqa: E731
    assert r(one | 0x1000) == one                   # tie, lsb 0: stays (even)
    assert r(one | 0x1000, "rna") == one | 0x2000    # ties away
    assert r(one | 0x3000) == one | 0x4000          # tie, lsb 1: up to even
    assert r(one | 0x2FFF) == one | 0x2000          # just below half, lsb 1: down
    assert r(one | 0x0FFF) == one                   # just below half, lsb 0: down
    assert r(one | 0x1001) == one | 0x2000          # just above half: up
    assert r(0x3FFFF000) == 0x40000000              # carry into the exponent: 2.0
    assert r(0x7F7FF000) == 0x7F800000              # carry past the largest value: inf
    assert r(0xFF7FF000) == 0xFF800000
    assert r(0x00001000) == 0x00000000              # the smallest tie among subnormals
    assert r(0x00003000) == 0x00004000
    assert r(0x80000001) == 0x80000000              # -tiny -> -0
    for special in (0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF):
        assert r(special) == special                # NaN (any payload) and Inf kept


@pytest.mark.parametrize("mode", ["rne", "rna"])
def test_random_words_and_float64_values(mode):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-2**31, 2**31, (4000,), generator=g, dtype=torch.int64).to(torch.int32)
    x = x.view(torch.float32)
    x = x[torch.isfinite(x)]
    want = [nearest(v, mode == "rna") for v in x.tolist()]
    assert torch.equal(tf32_round(x, mode).view(torch.int32),
                       torch.tensor(want, dtype=torch.float32).view(torch.int32))
    # float64: a value just above a tf32 tie whose float32 rounding is the tie itself
    v = torch.tensor([1 + 2**-11 + 2**-40, -(1 + 2**-11 + 2**-40), 1 + 3 * 2**-11 - 2**-40,
                      3.4e38, 1e-45, -1e-300, 1e300], dtype=torch.float64)
    want = [nearest(t, mode == "rna") for t in v.tolist()]
    assert torch.equal(tf32_round(v, mode).view(torch.int32),
                       torch.tensor(want, dtype=torch.float32).view(torch.int32))
    d = torch.randn(3000, generator=g, dtype=torch.float64) * torch.exp2(
        torch.randint(-140, 120, (3000,), generator=g).double())
    want = [nearest(t, mode == "rna") for t in d.tolist()]
    assert torch.equal(tf32_round(d, mode).view(torch.int32),
                       torch.tensor(want, dtype=torch.float32).view(torch.int32))


def test_truncate_and_split():
    x = words([0x3F801FFF, 0xBF801FFF, 0x7F800001])
    assert tf32_truncate(x).view(torch.int32).tolist() == [0x3F800000, -0x40800000,
                                                           0x7F800000]
    g = torch.Generator().manual_seed(1)
    y = torch.randn(1000, generator=g)
    hi, lo = tf32x3_split(y)
    assert torch.equal(hi, tf32_round(y, "rna")) and torch.equal(hi.double() + lo.double(),
                                                                 y.double())


def test_bad_input():
    with pytest.raises(ValueError, match="mode must be one of"):
        tf32_round(torch.ones(2), "rz")
    with pytest.raises(TypeError, match="float32 or float64"):
        tf32_round(torch.ones(2, dtype=torch.float16))
    with pytest.raises(TypeError, match="float32"):
        tf32_truncate(torch.ones(2, dtype=torch.float64))
