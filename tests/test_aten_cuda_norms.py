"""layer_norm / rms_norm forward as torch 2.13's CUDA ``vectorized_layer_norm_kernel``
computes them (torch_mma_emu/aten_cuda/norms.py) and their routes under ``emulate``."""
import shutil
import subprocess
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import torch_mma_emu as tme
from torch_mma_emu import gpu_math
from torch_mma_emu.aten_cuda import norms

F32 = np.float32


# -- an independent slow reference: one thread at a time, Python scalars --------------------
def _round32(q: Fraction) -> F32:
    """``q`` rounded once to float32 (nearest, ties to even), from exact rationals."""
    c = F32(float(q))
    best = None
    for v in (np.nextafter(c, F32(-np.inf)), c, np.nextafter(c, F32(np.inf))):
        e = abs(Fraction(float(v)) - q)
        if best is None or e < best[0] or (e == best[0] and
                                           int(v.view(np.uint32)) % 2 == 0):
            best = (e, v)
    return best[1]


def fma(a, b, c) -> F32:
    return _round32(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))


def online(x, s, rms):
    mean, m2, n = s
    if rms:
        return (mean, fma(x, x, m2), n)
    delta = F32(x - mean)
    n1 = F32(n + F32(1))
    nm = fma(delta, F32(F32(1) / n1), mean)
    return (nm, fma(delta, F32(x - nm), m2), n1)


def combine(b, a, rms):
    """cuWelfordCombine(dataB = own, dataA = the other thread's)."""
    if rms:
        return (b[0], F32(b[1] + a[1]), b[2])
    delta = F32(b[0] - a[0])
    n = F32(a[2] + b[2])
    if not n > 0:
        return (F32(0), F32(0), n)
    coef = F32(F32(1) / n)
    wa, wb = F32(a[2] * coef), F32(b[2] * coef)
    mean = fma(a[0], wa, F32(b[0] * wb))
    m2 = fma(F32(a[2] * F32(delta * delta)), wb, F32(b[1] + a[1]))
    return (mean, m2, n)


def slow_row(x, gamma, beta, eps, rms):
    n = len(x)
    states = []
    for t in range(128):                         # thrx = lane + 32 * warp
        s = (F32(0), F32(0), F32(0))
        for v in range(t, n // 4, 128):
            for ii in range(4):
                s = online(F32(x[4 * v + ii]), s, rms)
        states.append(s)
    warps = []
    for w in range(4):                           # shfl_down 16, 8, 4, 2, 1
        lanes = states[32 * w:32 * w + 32]
        off = 16
        while off:
            lanes = [combine(lanes[i], lanes[i + off], rms) for i in range(off)]
            off //= 2
        warps.append(lanes[0])
    off = 2
    while off:                                   # the shared-memory halving over warps
        warps = [combine(warps[i], warps[i + off], rms) for i in range(off)]
        off //= 2
    mean, m2, _ = warps[0]
    var = F32(m2 / F32(n))
    rstd = gpu_math.evaluate("rsqrt.approx.f32", np.array([F32(var + F32(eps))]))[0]
    y = []
    for j in range(n):
        xj = F32(x[j])
        if rms:
            p = F32(rstd * xj)
            y.append(p if gamma is None else F32(F32(gamma[j]) * p))
            continue
        d = F32(xj - mean)
        if gamma is not None:
            p = F32(rstd * d)
            y.append(fma(gamma[j], p, beta[j]) if beta is not None else F32(gamma[j] * p))
        elif beta is not None:
            y.append(fma(d, rstd, beta[j]))
        else:
            y.append(F32(rstd * d))
    return np.array(y, F32), mean, rstd


def welford_reduce(s, x):
    """WelfordOps::reduce: n counted exactly, ``mean += delta / n`` (a division)."""
    mean, m2, n = s
    n1 = F32(n + 1)
    delta = F32(x - mean)
    nm = F32(mean + F32(delta / n1))
    return (nm, fma(delta, F32(x - nm), m2), n1)


def welford_combine(a, b):
    if a[2] == 0:
        return b
    if b[2] == 0:
        return a
    delta = F32(b[0] - a[0])
    n = F32(a[2] + b[2])
    w = F32(b[2] / n)
    return (fma(delta, w, a[0]), fma(F32(F32(delta * delta) * a[2]), w, F32(a[1] + b[1])), n)


def slow_rowwise(x, gamma, beta, eps, rms):
    """RowwiseMomentsCUDAKernel (512 threads, BlockReduce) + LayerNormForwardCUDAKernel."""
    n = len(x)
    states = []
    for t in range(512):
        s = (F32(0), F32(0), F32(0))
        for j in range(t, n, 512):
            s = welford_reduce(s, F32(x[j]))
        states.append(s)
    warp_results = []
    for w in range(16):                          # WarpReduce: combine(own, shfl_down)
        lanes = states[32 * w:32 * w + 32]
        for off in (16, 8, 4, 2, 1):
            lanes = [welford_combine(lanes[i], lanes[i + off]) if i + off < 32 else lanes[i]
                     for i in range(32)]
        warp_results.append(lanes[0])
    lanes = warp_results + [(F32(0), F32(0), F32(0))] * 16   # warp 0: identities past 16
    for off in (16, 8, 4, 2, 1):
        lanes = [welford_combine(lanes[i], lanes[i + off]) if i + off < 32 else lanes[i]
                 for i in range(32)]
    mean, m2, cnt = lanes[0]
    var = F32(m2 / cnt)
    arg = F32(fma(mean, mean, var) + F32(eps)) if rms else F32(var + F32(eps))
    rstd = gpu_math.evaluate("rsqrt.approx.f32", np.array([arg]))[0]
    y = []
    for j in range(n):
        g = F32(1) if gamma is None else F32(gamma[j])
        if rms:
            y.append(F32(F32(F32(x[j]) * rstd) * g))
        else:
            b = F32(0) if beta is None else F32(beta[j])
            y.append(fma(F32(F32(F32(x[j]) - mean) * rstd), g, b))
    return np.array(y, F32), mean, rstd


@pytest.mark.parametrize("n", [3, 63, 530, 1030, 5003])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", ["ln_affine", "ln_plain", "rms_weight"])
def test_rowwise_model_equals_slow_reference(n, dtype, case):
    x, w, b = _data(n, dtype, 100 + n)
    X = x.float().numpy()
    if case == "rms_weight":
        y, rstd = norms.rms_norm(x, [n], w, None)
        mean = None
        G, B, eps = w.float().numpy(), None, float(np.finfo(F32).eps)
    else:
        w, b = (w, b) if case == "ln_affine" else (None, None)
        y, mean, rstd = norms.layer_norm(x, [n], w, b, 1e-5)
        G = None if w is None else w.float().numpy()
        B = None if b is None else b.float().numpy()
        eps = 1e-5
    for r in range(X.shape[0]):
        ry, rm, rr = slow_rowwise(X[r], G, B, eps, case == "rms_weight")
        assert rstd[r, 0].item() == rr
        if mean is not None:
            assert mean[r, 0].item() == rm
        assert torch.equal(y[r], torch.from_numpy(ry).to(dtype))


def _data(n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(3, n, generator=g) * 2 + 0.7).to(dtype)
    w = (torch.randn(n, generator=g) * 0.5 + 1).to(dtype)
    b = torch.randn(n, generator=g).to(dtype)
    return x, w, b


@pytest.mark.parametrize("n", [4, 12, 64, 520])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("affine", ["both", "gamma", "beta", "none"])
def test_layer_norm_model_equals_slow_reference(n, dtype, affine):
    x, w, b = _data(n, dtype, n)
    w = w if affine in ("both", "gamma") else None
    b = b if affine in ("both", "beta") else None
    y, mean, rstd = norms.layer_norm(x, [n], w, b, 1e-5)
    X = x.float().numpy()
    G = None if w is None else w.float().numpy()
    B = None if b is None else b.float().numpy()
    for r in range(X.shape[0]):
        ry, rm, rr = slow_row(X[r], G, B, 1e-5, False)
        assert mean[r, 0].item() == rm and rstd[r, 0].item() == rr
        assert torch.equal(y[r], torch.from_numpy(ry).to(dtype))


@pytest.mark.parametrize("n", [8, 516])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("weighted", [True, False])
def test_rms_norm_model_equals_slow_reference(n, dtype, weighted):
    x, w, _ = _data(n, dtype, 7 + n)
    w = w if weighted else None
    y, rstd = norms.rms_norm(x, [n], w, None)
    X = x.float().numpy()
    for r in range(X.shape[0]):
        ry, _, rr = slow_row(X[r], None if w is None else w.float().numpy(), None,
                             float(np.finfo(F32).eps), True)
        assert rstd[r, 0].item() == rr
        assert torch.equal(y[r], torch.from_numpy(ry).to(dtype))


def test_layer_norm_routed_under_emulate_differs_from_cpu():
    x, w, b = _data(768, torch.float32, 1)
    x = torch.cat([x] * 8)
    with tme.emulate("sm90", record=True) as em:
        y = F.layer_norm(x, [768], w, b)
        ln = torch.nn.LayerNorm(768)
        y2 = ln(x)
    assert torch.equal(y, norms.layer_norm(x, [768], w, b)[0])
    assert torch.equal(y2, norms.layer_norm(x, [768], ln.weight.detach(),
                                            ln.bias.detach())[0])
    cpu = F.layer_norm(x, [768], w, b)
    assert not torch.equal(y, cpu)
    assert (y - cpu).abs().max().item() < 1e-4
    recs = [r for r in em.records if "native_layer_norm" in r.op]
    assert recs and all(r.format == "torch 2.13.0 CUDA kernel" for r in recs)


def test_rms_norm_routed_under_emulate_with_grads():
    x, w, _ = _data(1024, torch.float32, 2)
    x = torch.cat([x] * 8).requires_grad_()
    w = w.requires_grad_()
    with tme.emulate("sm90", record=True) as em:
        y = F.rms_norm(x, [1024], w)
        y.square().sum().backward()
    assert torch.equal(y.detach(), norms.rms_norm(x.detach(), [1024], w.detach())[0])
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    cpu = F.rms_norm(x2, [1024], w2)
    assert not torch.equal(y.detach(), cpu.detach())
    cpu.square().sum().backward()       # gradients: PyTorch's, at the modelled y
    assert torch.allclose(x.grad, x2.grad, rtol=1e-4, atol=1e-6)
    fwd = [r for r in em.records if r.op == "aten._fused_rms_norm"]
    bwd = [r for r in em.records if r.op == "aten._fused_rms_norm_backward"]
    assert fwd[0].format == "torch 2.13.0 CUDA kernel" and fwd[0].phase == "forward"
    assert bwd and bwd[0].format == "torch 2.13.0 CUDA kernel"      # dX modelled
    gw = [r for r in em.records if r.op == "aten._fused_rms_norm_backward (dgamma)"]
    assert gw and gw[0].format == "torch 2.13.0 CUDA kernel"      # dgamma modelled


def test_unvectorised_rows_modelled_fp64_native():
    x, w, b = _data(63, torch.float32, 3)
    x = torch.cat([x] * 8)
    with tme.emulate("sm90", record=True) as em:
        y = F.layer_norm(x, [63], w, b)
        z = F.rms_norm(x, [63])
        y64 = F.layer_norm(x.double()[:, :60].contiguous(), [60])
    assert torch.equal(y, norms.layer_norm(x, [63], w, b)[0])
    assert torch.equal(z, norms.rms_norm(x, [63])[0])
    assert not torch.equal(y, F.layer_norm(x, [63], w, b))
    assert torch.equal(y64, F.layer_norm(x.double()[:, :60].contiguous(), [60]))
    notes = [r.note for r in em.records if "norm" in r.op]
    assert any("RowwiseMomentsCUDAKernel" in s for s in notes)
    assert any("float64" in r.note and r.format == "CPU order" for r in em.records)


def test_bad_input():
    with pytest.raises(ValueError, match="weight must have 6 elements"):
        norms.layer_norm(torch.randn(2, 6), [6], torch.ones(5))
    with pytest.raises(TypeError, match="fp32, fp16 or bf16"):
        norms.rms_norm(torch.ones(2, 8, dtype=torch.int32), [8])
    with pytest.raises(ValueError, match="trailing dimensions"):
        norms.layer_norm(torch.randn(2, 8), [4])


_CU = r"""
extern "C" __global__ void online(const float* x, float* s) {
  float val = x[threadIdx.x], mean = s[0], m2 = s[1], count = s[2];
  float delta = val - mean; float nc = count + 1.f;
  float nm = mean + delta * (1.f / nc);
  s[0] = nm; s[1] = m2 + delta * (val - nm); s[2] = nc; }
extern "C" __global__ void out(const float* x, const float* g, const float* b, float m,
                               float v, float eps, float* y) {
  float r = rsqrtf(v + eps); int i = threadIdx.x;
  y[i] = g[i] * (r * (x[i] - m)) + b[i]; }
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_nvcc_contractions(tmp_path):
    """The model's contractions are what nvcc makes of the kernel's expressions."""
    src = tmp_path / "k.cu"
    src.write_text(_CU)
    ptx = tmp_path / "k.ptx"
    subprocess.run(["nvcc", "-arch=sm_90", "-ptx", str(src), "-o", str(ptx)], check=True,
                   capture_output=True, timeout=120)
    ops = [ln.split()[0] for ln in ptx.read_text().splitlines()
           if ln.strip() and ln.split()[0].endswith("f32") and
           ln.split()[0].split(".")[0] in ("add", "sub", "mul", "fma", "rcp", "rsqrt", "div")]
    assert ops[:6] == ["sub.f32", "add.f32", "rcp.rn.f32", "fma.rn.f32", "sub.f32",
                       "fma.rn.f32"]
    assert "rsqrt.approx.f32" in ops and ops[-1] == "fma.rn.f32"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_layer_norm_backward_on_modelled_stats(dtype):
    """The backward reads the forward's statistics (stored as bf16 by the CPU forward for a
    bf16 input): dX is modelled (tests/test_aten_cuda_norms_backward.py), dgamma / dbeta too
    (tests/test_aten_cuda_gamma_beta.py), recorded apart."""
    ln = torch.nn.LayerNorm(64).to(dtype)
    x = _data(64, dtype, 5)[0].requires_grad_()
    with tme.emulate("sm90", record=True) as em:
        ln(x).float().square().sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad.float()).all()
    bwd = {r.op: r for r in em.records if "native_layer_norm_backward" in r.op}
    dx = bwd["aten.native_layer_norm_backward.default"]
    assert dx.format.startswith("torch ") and dx.phase == "backward"
    assert bwd["aten.native_layer_norm_backward.default (dgamma, dbeta)"].format == dx.format
