"""The interpreter gaps zoo_gaps.py fills, each with a minimal kernel (no third-party
package): float scalar arguments, libdevice functions, bf16 arithmetic, autotuners that
time configs themselves."""
import warnings

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
from triton.language.extra import libdevice  # noqa: E402
from triton.language.extra.libdevice import rsqrt  # noqa: E402
from triton.runtime.autotuner import Autotuner  # noqa: E402

import torch_mma_emu.triton as tmt  # noqa: E402

BLOCKS = [("emulate", lambda: tmt.emulate("H100")), ("interpret", tmt.interpret)]


@triton.jit
def scaled_rsqrt(X, Y, eps, N: tl.constexpr):
    o = tl.arange(0, N)
    e = eps.to(tl.float32)                       # a compiled kernel's float is an fp32 scalar
    x = tl.load(X + o)
    tl.store(Y + o, rsqrt(x + e) + libdevice.tanh(x) + libdevice.div_rn(x, 3.0))


@triton.jit
def bf16_ops(A, B, Y, N: tl.constexpr):
    o = tl.arange(0, N)
    a, b = tl.load(A + o), tl.load(B + o)
    tl.store(Y + o, a * b)
    tl.store(Y + N + o, a + b)
    tl.store(Y + 2 * N + o, a - b)
    tl.store(Y + 3 * N + o, tl.maximum(a, b))
    tl.store(Y + 4 * N + o, tl.where(a < b, a, b))


@pytest.mark.parametrize("name,block", BLOCKS)
def test_float_argument_and_libdevice(name, block):
    x = torch.rand(16) + 0.5
    y = torch.empty(16)
    with block() as em:
        scaled_rsqrt[(1,)](x, y, 1e-6, N=16)
    xd = x.double()
    ref = 1 / torch.sqrt(xd + torch.tensor(1e-6, dtype=torch.float32).double()) \
        + torch.tanh(xd) + xd / 3
    assert torch.allclose(y.double(), ref, rtol=1e-6, atol=1e-6)
    if name == "emulate":          # rsqrt / tanh: the sm_90 routines; div_rn: float64, exact
        s = em.summary()
        assert "libdevice.rsqrt fp32 = __nv_rsqrtf" in s and "libdevice.tanh fp32" in s
        assert "libdevice.div_rn fp32 = libdevice div_rn (float64, rounded once) [bit-exact]" in s


@pytest.mark.parametrize("name,block", BLOCKS)
def test_bf16_arithmetic_is_correctly_rounded(name, block):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, generator=g).bfloat16()
    b = torch.randn(64, generator=g).bfloat16()
    a[0], b[0] = -0.0, 0.0                       # signed zeros
    a[1], b[1] = 3.0e38, 3.0e38                  # overflow to inf
    a[2], b[2] = -1.5, -2.5                      # negatives: compared as numbers, not bits
    y = torch.empty(5 * 64, dtype=torch.bfloat16)
    with block():
        bf16_ops[(1,)](a, b, y, N=64)
    af, bf = a.float(), b.float()
    ref = [(af * bf), (af + bf), (af - bf), torch.maximum(af, bf), torch.where(af < bf, af, bf)]
    for i, r in enumerate(ref):          # fp32 then one RNE rounding: the correctly rounded
        got = y[i * 64:(i + 1) * 64]
        assert torch.equal(got.view(torch.int16), r.bfloat16().view(torch.int16)), i


class TimingTuner(Autotuner):
    """Like FlagGems' LibTuner: run() picks by timing each config with _bench itself."""

    def run(self, *args, **kwargs):
        timings = {c: self._bench(*args, config=c, **kwargs)[0] for c in self.configs}
        best = min(timings, key=timings.get)
        self.best_config = best
        return self.fn.run(*args, **kwargs, **best.all_kwargs())


@triton.jit
def fill(Y, V: tl.constexpr):
    tl.store(Y + tl.arange(0, 4), tl.full([4], V, tl.float32))


def test_autotuner_timing_itself_gets_the_blocks_choice():
    configs = [triton.Config({"V": 1}), triton.Config({"V": 2}), triton.Config({"V": 3})]
    tuner = TimingTuner(fill, fill.arg_names, configs, key=[], reset_to_zero=None,
                        restore_value=None)
    y = torch.zeros(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with tmt.emulate("H100"):
            tuner.run(y, grid=(1,), warmup=False)
        assert y.tolist() == [1.0] * 4                          # the first config
        with tmt.emulate("H100", autotune=lambda cs: cs[2]):
            tuner.run(y, grid=(1,), warmup=False)
        assert y.tolist() == [3.0] * 4 and tuner.best_config is configs[2]


@triton.jit
def flagged(X, Y, flip, N: tl.constexpr):
    o = tl.arange(0, N)
    x = tl.load(X + o)
    if flip:                                     # a bool argument, not constexpr: an i1
        x = -x
    tl.store(Y + o, x)


@pytest.mark.parametrize("name,block", BLOCKS)
def test_bool_argument_is_an_int1_scalar(name, block):
    x = torch.arange(8, dtype=torch.float32)
    for flip in (True, False):
        y = torch.empty_like(x)
        with block():
            flagged[(1,)](x, y, flip, N=8)
        assert torch.equal(y, -x if flip else x)
