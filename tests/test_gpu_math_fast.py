"""The C++ fast path of the CUDA float32 math and of the norm kernels' per-thread loops
(csrc/core/gpu_math.h, csrc/cpu/gpu_math_cpu.cpp, torch_mma_emu/gpu_math/fast.py) against the
NumPy models it replaces, bit for bit: every function on random bit patterns, NaN payloads,
infinities, subnormals, signed zeros and the models' branch thresholds; fma on random bit
patterns and broadcast shapes; every softmax kernel (persistent warp, Reg, Smem, block with an
alignment shift, spatial), layer_norm (vectorised and fallback) and rms_norm run with the fast
path and under ``fast.reference()`` on rows with NaN, Inf, huge, tiny and zero values."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import torch_mma_emu as tme
from torch_mma_emu.aten_cuda import elementwise as ew
from torch_mma_emu.aten_cuda import host_softmax as hs
from torch_mma_emu.aten_cuda import norms
from torch_mma_emu.gpu_math import fast, ieee, mufu

F32 = np.float32
REFERENCE = {"ex2_ftz": mufu.ex2, "rcp_ftz": mufu.rcp, "rsqrt_ftz": mufu.rsqrt,
             **{name: op.fn for name, op in ew.OPS.items()}}


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(a, F32).view(np.uint32)


def _same(a, b) -> int:
    """The number of elements whose float32 bits differ."""
    return int((_bits(a) != _bits(b)).sum())


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(39)
    raw = rng.integers(0, 2 ** 32, 1 << 17, dtype=np.uint64).astype(np.uint32).view(F32)
    special = np.array([0, 0x80000000, 1, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000,
                        0x80800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000,
                        0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF, 0x7FFFFFFF,
                        0x3F800000, 0xBF800000], np.uint32).view(F32)
    # the models' thresholds and their neighbours: tanh 0.6 / 9.01, erf 1.00295, ex2's
    # +-126 / +-128, expf's overflow and underflow, rsqrt's 2^-126
    edges = np.array([0.6, 9.01, 1.00295, 126, 128, 88.72, 103.9, 87.3, 2.0 ** -126,
                      1.0, 0.5, 2.0], F32)
    near = (edges.view(np.int32)[:, None] + np.arange(-3, 4, dtype=np.int32)).view(F32)
    near = np.concatenate([near.ravel(), -near.ravel()])
    normal = np.concatenate([rng.standard_normal(1 << 15) * s for s in (1e-3, 1, 10, 100)])
    return np.concatenate([raw, special, near, normal.astype(F32),
                           np.linspace(-130, 130, 20001, dtype=F32)])


X = _inputs()


def test_kernels_built():
    assert fast.available(), "the extension lacks _gpu_math / _fma_f32 / _welford_f32: " \
                             "rebuild it (scripts/build_ext.sh)"
    with fast.reference():
        assert not fast.available()
    assert fast.available()


@pytest.mark.parametrize("name", fast.FUNCTIONS)
def test_function_equals_numpy_model(name):
    with np.errstate(all="ignore"):
        want = np.asarray(REFERENCE[name](X), F32)
    got = fast.run(name, X)
    assert got.dtype == F32 and got.shape == X.shape
    assert _same(got, want) == 0
    assert set(_bits(got[np.isnan(got)]).tolist()) <= {0x7FFFFFFF, 0xFFFFFFFF}


@pytest.mark.parametrize("name", sorted(ew.OPS))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_16_bit_input(name, dtype):
    codes = np.arange(1 << 16, dtype=np.uint16)
    x = codes if dtype == "bfloat16" else codes.view(np.float16)
    got = ew.evaluate(name, x, dtype)
    with fast.reference():
        want = ew.evaluate(name, x, dtype)
    assert got.dtype == want.dtype
    assert (got.view(np.uint16) != want.view(np.uint16)).sum() == 0


def test_fma_equals_ieee_fma():
    rng = np.random.default_rng(6)
    a, b, c = (rng.integers(0, 2 ** 32, 1 << 18, dtype=np.uint64).astype(np.uint32).view(F32)
               for _ in range(3))
    with np.errstate(all="ignore"):
        want = ieee.fma(a, b, c)
        # products near c in magnitude (cancellation, midpoints of the double rounding)
        b2 = (c / np.where(a == 0, F32(1), a)).astype(F32)
        want2 = ieee.fma(a, -b2, c)
    assert _same(fast.fma(a, b, c), want) == 0
    assert _same(fast.fma(a, -b2, c), want2) == 0


@pytest.mark.parametrize("shapes", [((64, 40), (40,), (64, 1)), ((3, 50, 8), (1, 50, 8), ()),
                                    ((2048,), (), (2048,)), ((8, 1, 300), (300,), (4, 300))])
def test_fma_broadcasts_like_numpy(shapes):
    rng = np.random.default_rng(7)
    a, b, c = (rng.standard_normal(s).astype(F32) * F32(1e3) for s in shapes)
    got = fast.fma(a, b, c)
    assert got.shape == np.broadcast_shapes(*shapes)
    assert _same(got, ieee.fma(*np.broadcast_arrays(a, b, c))) == 0
    t = rng.standard_normal((300, 64)).astype(F32).T           # a non-contiguous operand
    assert _same(fast.fma(t, t, F32(1)), ieee.fma(t, t, F32(1))) == 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown function"):
        fast.run("cosh", X[:8])
    with pytest.raises(ValueError, match="unknown function"):
        torch.ops.mma_emu._gpu_math(torch.zeros(4), "cosh", torch.zeros(963, dtype=torch.long))
    with pytest.raises(ValueError, match="963 words"):
        torch.ops.mma_emu._gpu_math(torch.zeros(4), "exp", torch.zeros(9, dtype=torch.long))
    with pytest.raises(ValueError, match="float32"):
        torch.ops.mma_emu._gpu_math(torch.zeros(4, dtype=torch.float64), "exp",
                                    torch.zeros(963, dtype=torch.long))
    with pytest.raises(ValueError, match="one shape"):
        torch.ops.mma_emu._fma_f32(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="divide the row"):
        torch.ops.mma_emu._welford_f32(torch.zeros(2, 6), 128, 4, False)


# ---- the kernels that use the fast path, against themselves under fast.reference() -------
def _rows(R: int, n: int, seed: int) -> np.ndarray:
    """Random rows at several scales, and rows with NaN, +-Inf, huge, tiny (subnormal), -0
    and constant values."""
    rng = np.random.default_rng(seed)
    X = (rng.standard_normal((R, n)) * rng.choice([1e-3, 1.0, 30.0], (R, 1))).astype(F32)
    specials = [np.nan, np.inf, -np.inf, 3e38, -3e38, 1e-45, -0.0, 0.0]
    for i, v in enumerate(specials):
        if i + 1 < R:
            X[i + 1, rng.integers(0, n, 3)] = v
    if R > 10:
        X[10] = F32(1e-40)                      # subnormal row
        X[9] = F32(-0.0)
        X[8, :] = F32(2.5)                      # constant row
    return X


def _both(fn):
    got = fn()
    with fast.reference():
        want = fn()
    return got, want


def _assert_same_tensors(got, want):
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        if isinstance(g, torch.Tensor):
            assert g.dtype == w.dtype and g.shape == w.shape
            g, w = g.float().numpy(), w.float().numpy()
        assert _same(g, w) == 0


@pytest.mark.parametrize("n,kernel", [(700, "persistent"), (2048, "persistent"),
                                      (3000, "Reg"), (10240, "Smem"), (10241, "Forward"),
                                      (12289, "Forward")])
@pytest.mark.parametrize("log_softmax", [False, True])
def test_softmax_kernels(n, kernel, log_softmax):
    X = torch.from_numpy(_rows(12, n + 1, n))
    x = X[:, 1:] if kernel == "Forward" else X[:, :n].contiguous()   # shifted rows
    L = hs.launch(x.shape, -1, x.dtype, offset=x.storage_offset() if x.is_contiguous() else 0)
    assert L.kernel == kernel
    got, want = _both(lambda: hs.softmax(x, -1, log_softmax=log_softmax)[0])
    _assert_same_tensors(got, want)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_softmax_16_bit_and_spatial(dtype):
    x = torch.from_numpy(_rows(12, 3000, 5)).to(dtype)
    got, want = _both(lambda: hs.softmax(x, -1)[0])
    _assert_same_tensors(got, want)
    s = torch.from_numpy(_rows(12, 4 * 100 * 8, 6)).reshape(-1)[:4 * 100 * 8].reshape(4, 100, 8)
    assert hs.launch(s.shape, 1, s.dtype).kernel == "Spatial"
    got, want = _both(lambda: hs.softmax(s.to(dtype), 1, log_softmax=True)[0])
    _assert_same_tensors(got, want)


@pytest.mark.parametrize("n", [1024, 4096, 1030])          # vectorised; 1030: the fallback
@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
def test_layer_norm(n, affine):
    x = torch.from_numpy(_rows(12, n, n))
    rng = np.random.default_rng(1)
    w = torch.from_numpy(rng.standard_normal(n).astype(F32)) if affine in ("both", "weight") \
        else None
    b = torch.from_numpy(rng.standard_normal(n).astype(F32)) if affine in ("both", "bias") \
        else None
    assert norms.vectorized(n, x.dtype, x, w, b) == (n % 4 == 0)
    got, want = _both(lambda: norms.layer_norm(x, (n,), w, b))
    _assert_same_tensors(got, want)


@pytest.mark.parametrize("n", [2048, 1030])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm(n, dtype):
    x = torch.from_numpy(_rows(12, n, 2 * n)).to(dtype)
    w = torch.from_numpy(np.random.default_rng(2).standard_normal(n).astype(F32)).to(dtype)
    for weight in (w, None):
        got, want = _both(lambda: norms.rms_norm(x, (n,), weight))
        _assert_same_tensors(got, want)


def test_under_emulate():
    x = torch.from_numpy(_rows(16, 3000, 9))
    w = torch.randn(3000, generator=torch.Generator().manual_seed(0))

    def run():
        with tme.emulate("H100"):
            return (torch.softmax(x, -1), F.layer_norm(x, (3000,), w, w), torch.exp(x),
                    F.gelu(x), torch.tanh(x))
    got, want = _both(run)
    _assert_same_tensors(got, want)


@pytest.mark.parametrize("n", [5, 33, 100, 1000, 2048])
def test_persistent_padding_with_zeros(n):
    """The persistent model pads the lanes after exp with +0 where the kernel reads -inf
    before it: the same bits, also for rows of -inf, +inf and NaN (the kernel's form here,
    written with softmax.lanes / row_sum)."""
    from torch_mma_emu.aten_cuda import softmax as sm
    X = _rows(12, n, n + 1)
    X[1, :] = -np.inf
    X[2, :] = np.inf
    X[3, :] = np.nan
    X[4, 0] = np.inf
    R = X.shape[0]
    with np.errstate(all="ignore"):
        E = sm.lanes(X, -np.inf)
        d = (E - X.max(axis=1)[:, None, None]).astype(F32)
        e = ew.exp(d)
        s = sm.row_sum(e)[:, None, None]
        want = np.where(s == 0, F32(np.nan), (e / s).astype(F32)).reshape(R, -1)[:, :n]
        want_log = (d - ew.log(s)).astype(F32).reshape(R, -1)[:, :n]
    assert _same(sm.evaluate(X, ew.exp, ew.log), want) == 0
    assert _same(sm.evaluate(X, ew.exp, ew.log, log_softmax=True), want_log) == 0
    exp, log = sm.device_math()
    assert _same(sm.evaluate(X, exp, log), want) == 0


def test_scalar_clones_give_the_same_bits(tmp_path):
    """MMA_EMU_SCALAR=1 runs the baseline (non-FMA, non-AVX2) clones of the loops: the same
    bits as the NumPy models (a fresh process: the clone is chosen once)."""
    import subprocess
    import sys
    np.save(tmp_path / "x.npy", X[::7])
    code = f"""
import numpy as np
from torch_mma_emu.gpu_math import fast, mufu, ieee
from torch_mma_emu.aten_cuda import elementwise as ew, norms
x = np.load({str(tmp_path / "x.npy")!r})
ref = {{"ex2_ftz": mufu.ex2, "rcp_ftz": mufu.rcp, "rsqrt_ftz": mufu.rsqrt,
       **{{n: o.fn for n, o in ew.OPS.items()}}}}
bad = 0
with np.errstate(all="ignore"):
    for name in fast.FUNCTIONS:
        bad += int((fast.run(name, x).view(np.uint32) != np.asarray(ref[name](x), np.float32)
                    .view(np.uint32)).sum())
    a, b = x[:-(x.size % 3) or None].reshape(3, -1)[:2]
    bad += int((fast.fma(a, b, a).view(np.uint32) != ieee.fma(a, b, a).view(np.uint32)).sum())
    rows = np.random.default_rng(0).standard_normal((8, 1024)).astype(np.float32)
    got = norms.evaluate(rows)
    with fast.reference():
        want = norms.evaluate(rows)
    bad += sum(int((g.view(np.uint32) != w.view(np.uint32)).sum()) for g, w in zip(got, want))
print("BAD", bad)
"""
    env = {**__import__("os").environ, "MMA_EMU_SCALAR": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    assert "BAD 0" in out.stdout


def test_read_only_and_odd_shapes():
    ro = np.broadcast_to(F32(0.75), (40, 64))              # read-only, stride 0
    with np.errstate(all="ignore"):
        assert _same(fast.run("exp", ro), ew.exp(np.ascontiguousarray(ro))) == 0
    assert fast.run("log", np.zeros((0, 3), F32)).shape == (0, 3)
    assert _same(fast.run("tanh", F32(0.3)), ew.tanh(np.float32([0.3]))[0]) == 0
    st = fast.welford(np.broadcast_to(F32(2), (3, 16)), 4, 4)
    assert st[0].shape == (3, 4) and np.all(st[0] == 2) and np.all(st[2] == 4)
