"""PyTorch's CUDA pointwise arithmetic under ``emulate`` (aten_cuda/pointwise.py,
preview/aten_pointwise.py): each rule against a reference written separately from the
kernels' semantics (exact ``Fraction`` arithmetic, or float64 where one rounding to float32
after it is provably exact), and each shown to differ from what the CPU computes where the
CUDA kernel does something else (an FMA for ``alpha``, a Python number in float32, division
by a number as a reciprocal multiply, ``arange`` in float32)."""
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu.aten_cuda import pointwise as pw


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _bits(t: torch.Tensor) -> np.ndarray:
    t = t.detach().contiguous()
    if t.dtype == torch.float32:
        return t.view(torch.int32).numpy()
    if t.dtype == torch.float64:
        return t.view(torch.int64).numpy()
    return t.view(torch.int16).numpy()


def _same(a: torch.Tensor, b: torch.Tensor):
    assert a.dtype == b.dtype and a.shape == b.shape
    bad = np.flatnonzero(_bits(a).ravel() != _bits(b).ravel())
    assert bad.size == 0, f"{bad.size} of {a.numel()} differ, first at {bad[:5]}"


def _rn32(v: Fraction) -> np.float32:
    """``v`` rounded to the nearest float32, ties to even (finite, normal range)."""
    if v == 0:
        return np.float32(0)
    lo = np.float32(float(v))
    cands = {lo, np.nextafter(lo, np.float32(np.inf)), np.nextafter(lo, np.float32(-np.inf))}
    return min(cands, key=lambda r: (abs(Fraction(float(r)) - v),
                                     int(np.asarray(r).view(np.uint32)) & 1))


def _emulated(fn, arch="sm90"):
    with tme.emulate(arch, record=True) as em:
        out = fn()
    return out, em


def _data(n, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    e = 6 if dtype == torch.float16 else 20                 # float16 stays finite
    x = torch.randn(n, generator=g) * torch.exp2(torch.randint(-e, e, (n,), generator=g))
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_division_by_a_number_multiplies_by_its_float32_reciprocal(dtype):
    x = _data(4000, 1, dtype)
    got, em = _emulated(lambda: x / 3.0)
    inv = np.float32(1) / np.float32(3)                    # RN32(1 / RN32(3))
    want = (x.double() * float(inv)).float().to(dtype)     # exact product, one RN32
    _same(got, want)
    assert (_bits(got) != _bits(x / 3.0)).any() or dtype != torch.float32
    assert "div" in em.summary() and "torch 2.13.0 CUDA kernel" in em.summary()


def test_division_between_tensors_is_the_quotient():
    x, y = _data(3000, 2), _data(3000, 3)
    got, _ = _emulated(lambda: x / y)
    _same(got, (x.double() / y.double()).float())


def test_add_with_alpha_is_one_fma():
    rng = np.random.default_rng(5)
    a = rng.standard_normal(1500).astype(np.float32)
    b = rng.standard_normal(1500).astype(np.float32)
    # b chosen so that 0.3 * b is inexact and lands near a's rounding boundary often
    a = (a * np.float32(2.0 ** 10)).astype(np.float32)
    x, y = torch.from_numpy(a), torch.from_numpy(b)
    got, _ = _emulated(lambda: torch.add(x, y, alpha=0.3))
    al = Fraction(float(np.float32(0.3)))
    want = torch.tensor([float(_rn32(Fraction(float(p)) + al * Fraction(float(q))))
                         for p, q in zip(a, b)], dtype=torch.float32)
    _same(got, want)
    two_roundings = x + (y * float(np.float32(0.3)))
    assert (_bits(got) != _bits(two_roundings)).any()      # the FMA is visible


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_sub_and_rsub_use_minus_alpha(dtype):
    x, y = _data(2000, 6, dtype), _data(2000, 7, dtype)
    got, _ = _emulated(lambda: (torch.sub(x, y, alpha=2.5), torch.rsub(x, y, alpha=0.75),
                                2 - x))
    al = float(np.float32(2.5))
    ref = [pw.add(x.float().numpy(), y.float().numpy(), -al),
           pw.add(y.float().numpy(), x.float().numpy(), -float(np.float32(0.75))),
           pw.add(np.float32(2), x.float().numpy(), -1.0)]
    for g, r in zip(got, ref):
        _same(g, torch.from_numpy(np.asarray(r, np.float32)).to(dtype))
    # alpha = 2.5 is exact, so the FMA equals one rounding of the exact x - 2.5 y
    exact = torch.tensor([float(_rn32(Fraction(float(p)) - Fraction(5, 2) * Fraction(float(q))))
                          for p, q in zip(x.float()[:300], y.float()[:300])])
    _same(got[0][:300], exact.to(dtype))


def test_a_python_number_enters_as_float32_not_the_tensor_dtype():
    x = _data(3000, 8, torch.bfloat16)
    got, _ = _emulated(lambda: (x + 0.1, x * 0.1))
    f = float(np.float32(0.1))
    _same(got[0], (x.double() + f).float().bfloat16())    # one RN32 is exact here, then RN16
    _same(got[1], (x.double() * f).float().bfloat16())
    rounded_first = (x.float() + float(torch.tensor(0.1).bfloat16())).bfloat16()
    assert (_bits(got[0]) != _bits(rounded_first)).any()


def test_a_zero_dim_tensor_is_a_device_tensor_cast_to_the_op_dtype():
    x = _data(2000, 9, torch.bfloat16)
    s = torch.tensor(0.1)
    got, _ = _emulated(lambda: x * s)
    _same(got, (x.float() * s.bfloat16().float()).bfloat16())


def test_float_arange_is_one_float32_fma_per_element():
    got, em = _emulated(lambda: torch.arange(0.25, 1.0, 0.001))
    n = got.numel()
    st, sp = Fraction(0.25), Fraction(float(np.float32(0.001)))
    want = torch.tensor([float(_rn32(st + sp * i)) for i in range(n)], dtype=torch.float32)
    _same(got, want)
    assert n == torch.arange(0.25, 1.0, 0.001).numel()
    assert (_bits(got) != _bits(torch.arange(0.25, 1.0, 0.001))).any()   # CPU: float64
    assert "aten.arange" in em.summary()
    half, _ = _emulated(lambda: torch.arange(0, 3, 0.01, dtype=torch.float16))
    _same(half, torch.from_numpy(pw.arange(0, 0.01, half.numel())).half())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_special_values(dtype):
    sp = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1.0, -1.0,
                       2.0 ** -149, -(2.0 ** -140), 2.0 ** -126, 3.4e38, 65504.0, 1e-5])
    a, b = (t.ravel() for t in torch.meshgrid(sp, sp, indexing="ij"))
    a, b = a.to(dtype), b.to(dtype)
    got, _ = _emulated(lambda: (a + b, a - b, a * b, a / b, torch.sqrt(a), 1 / a, -a))
    af, bf = a.double(), b.double()
    refs = (af + bf, af - bf, af * bf, af / bf, torch.sqrt(af), 1 / af, -af)
    for g, r in zip(got, refs):
        r = r.float().to(dtype)
        nan = torch.isnan(r)
        assert torch.equal(torch.isnan(g), nan)
        _same(g[~nan], r[~nan])                  # signed zeros, infinities, subnormals kept
        canon = {torch.float32: -1 & 0x7FFFFFFF}.get(dtype, 0x7FFF)
        assert (_bits(g[nan]) == np.array(canon).astype(_bits(g).dtype)).all()


def test_out_inplace_broadcast_and_mixed_dtypes():
    x = _data(64, 10, torch.bfloat16).reshape(8, 8)
    y = _data(8, 11)                                         # float32, broadcast
    out = torch.empty(8, 8)
    z = x.clone()

    def run():
        torch.add(x, y, alpha=0.5, out=out)
        z.add_(y, alpha=0.5)                                 # computed in float32, stored bf16
        return x.div(y), torch.mul(y, x)
    (q, m), _ = _emulated(run)
    want = torch.from_numpy(pw.add(x.float().numpy(), y.numpy(), 0.5))
    _same(out, want)
    _same(z, want.bfloat16())
    _same(q, (x.double() / y.double()).float())
    _same(m, (x.double() * y.double()).float())


def test_what_stays_native_is_named_and_integers_are_exact():
    i = torch.arange(10)
    d = torch.randn(10, dtype=torch.float64)
    x = torch.randn(10)

    def run():
        return (i + 3, i * 2, -i, d + d, d.add(d, alpha=0.5), torch.div(x, 2.0, rounding_mode="floor"),
                d / 3.0)
    got, em = _emulated(run)
    s = em.summary()
    native = s.split("ran natively", 1)[1] if "ran natively" in s else ""
    assert "aten.add" in native and "x1" in native.split("aten.add")[1][:4]  # the float64 FMA
    assert "aten.div" in native                                 # rounding_mode
    assert "aten.mul" not in native and "aten.neg" not in native  # integers: exact
    exact = [r for r in em.records if "two's complement" in r.note]
    assert {r.op for r in exact} == {"aten.add.Tensor", "aten.mul.Tensor", "aten.neg.default"}
    _same(got[6], d * (1.0 / 3.0))                              # float64: the reciprocal too
    _, amd = _emulated(lambda: x / 3.0, arch="gfx942")
    assert "aten.div" in amd.summary().split("ran natively", 1)[1]


def test_training_step_routes_backward_arithmetic():
    lin = torch.nn.Linear(16, 16)
    x = torch.randn(4, 16)
    with tme.emulate("sm90", record=True) as em:
        y = (lin(x) / 4.0 - 0.5) * 3.0
        y.sum().backward()
    assert lin.weight.grad is not None
    ops = {r.op for r in em.records if r.format.startswith("torch 2.13.0")}
    assert {"aten.div.Tensor", "aten.sub.Tensor", "aten.mul.Tensor"} <= ops


def test_bad_dtype_is_rejected_by_the_model():
    with pytest.raises(ValueError, match="modelled"):
        pw.store(np.zeros(2, np.float32), "float64")


def test_zero_dim_results_stay_zero_dim():
    a = torch.tensor(3.5)
    got, _ = _emulated(lambda: (a / 448.0, a * 2, a + 1, torch.sqrt(a), a.bfloat16() / 3.0,
                                torch.tensor(2.0) / a, -a))
    assert all(t.shape == () for t in got)
    assert got[1].item() == 7.0 and got[2].item() == 4.5 and got[6].item() == -3.5


def test_sparse_tensors_stay_native_and_are_named():
    x = torch.randn(4, 4).to_sparse()
    got, em = _emulated(lambda: (x * 2.0, x + x))
    assert torch.equal(got[0].to_dense(), (x * 2.0).to_dense())
    assert "aten.mul" in em.summary().split("ran natively", 1)[1]


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="needs nvcc")
def test_nvcc_contracts_the_expressions_the_model_fuses(tmp_path):
    """The FMAs of the model are nvcc's: ATen's ufunc add (``self + alpha * other`` in
    opmath) and arange's ``xstart + xstep * float(ind)`` (RangeFactories.cu) compile to one
    ``fma.rn.f32`` with PyTorch's device flags; the scalar division's multiply stays a
    multiply."""
    import subprocess
    src = tmp_path / "pw.cu"
    src.write_text(
        "__global__ void add(float* o, const float* s, const float* t, float alpha) {\n"
        "  int i = threadIdx.x; o[i] = s[i] + alpha * t[i]; }\n"
        "__global__ void ar(float* o, float xstart, float xstep) {\n"
        "  long long ind = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
        "  float inc = xstep * static_cast<float>(ind); float val = xstart + inc;\n"
        "  o[ind] = val; }\n"
        "__global__ void mulinv(float* o, const float* s, float inv_b) {\n"
        "  int i = threadIdx.x; o[i] = s[i] * inv_b; }\n")
    ptx = tmp_path / "pw.ptx"
    subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "-O3", str(src), "-o", str(ptx)],
                   check=True)
    bodies = ptx.read_text().split(".entry")[1:]
    kern = {b.split("(")[0].strip(): b for b in bodies}
    add, ar, mul = (next(v for k, v in kern.items() if n in k) for n in ("3add", "2ar", "mulinv"))
    assert "fma.rn.f32" in add and "mul.f32" not in add
    assert "fma.rn.f32" in ar and "cvt.rn.f32.s64" in ar
    assert "mul.rn.f32" in mul or "mul.f32" in mul
    assert "fma" not in mul and "div" not in mul
