"""layer_norm's input gradient as torch 2.13's CUDA ``layer_norm_grad_input_kernel
[_vectorized]`` computes it (torch_mma_emu/aten_cuda/norms_backward.py) and its route under
``emulate`` (preview/aten_norms.py)."""
import re
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu.aten_cuda import norms, norms_backward

F32 = np.float32
DATA = Path(__file__).parent / "data" / "aten_math"


# -- an independent slow reference: the kernel's threads one at a time, Python scalars --------
def _round32(q: Fraction) -> F32:
    c = F32(float(q))
    best = None
    for v in (np.nextafter(c, F32(-np.inf)), c, np.nextafter(c, F32(np.inf))):
        e = abs(Fraction(float(v)) - q)
        if best is None or e < best[0] or (e == best[0] and int(v.view(np.uint32)) % 2 == 0):
            best = (e, v)
    return best[1]


def fma(a, b, c) -> F32:
    return _round32(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))


def _warp_reduce_sum(vals):
    """WarpReduceSum: ``val += shfl_down(val, o)`` for o = 16 .. 1 (out-of-range lanes read
    their own value)."""
    vals = list(vals)
    o = 16
    while o:
        vals = [F32(vals[i] + (vals[i + o] if i + o < 32 else vals[i])) for i in range(32)]
        o //= 2
    return vals


def _block_reduce_sum(per_thread):
    """cuda_utils::BlockReduceSum over 128 threads; thread 0's value."""
    shared = [_warp_reduce_sum(per_thread[w * 32:(w + 1) * 32])[0] for w in range(4)]
    warp0 = [shared[lane] if lane < 4 else F32(0) for lane in range(32)]
    return _warp_reduce_sum(warp0)[0]


def slow_row(dy, x, mean, rstd, gamma, rms=False):
    """One CTA of ``layer_norm_grad_input_kernel[_vectorized]<T, float, rms>`` (float32
    scalars in)."""
    N = len(x)
    g = (lambda j: F32(1)) if gamma is None else (lambda j: gamma[j])
    s1 = [F32(0)] * 128
    s2 = [F32(0)] * 128
    for t in range(128):
        a, b = F32(0), F32(0)
        l = 4 * t
        elems = []
        while l + 3 < N:                 # the groups of 4
            elems += [l, l + 1, l + 2, l + 3]
            l += 128 * 4
        while l < N:                     # the tail loop
            elems.append(l)
            l += 1
        for j in elems:
            p = F32(dy[j] * g(j))
            if rms:
                b = fma(F32(p * x[j]), rstd, b)
            else:
                a = F32(a + p)
                b = fma(F32(p * F32(x[j] - mean)), rstd, b)
        s1[t], s2[t] = a, b
    S1, S2 = _block_reduce_sum(s1), _block_reduce_sum(s2)
    fH = F32(N)
    term1 = F32(F32(F32(1) / fH) * rstd)
    out = []
    for j in range(N):
        xh = x[j] if rms else F32(x[j] - mean)
        f = fma(F32(fH * g(j)), dy[j], -F32(F32(xh * rstd) * S2))
        if not rms:
            f = F32(f - S1)
        out.append(F32(term1 * f))
    return np.array(out, F32)


def _case(rows, n, dtype, seed, affine=True):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, n, generator=gen) * 3 + 0.5).to(dtype)
    dy = torch.randn(rows, n, generator=gen).to(dtype)
    w = torch.randn(n, generator=gen).to(dtype) if affine else None
    b = torch.randn(n, generator=gen).to(dtype) if affine else None
    _, mean, rstd = norms.layer_norm(x, (n,), w, b, 1e-5)
    return dy, x, w, mean.reshape(rows), rstd.reshape(rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n,affine", [(8, True), (7, True), (64, False), (516, True),
                                      (1030, True), (2052, False), (1536, True)])
def test_model_equals_slow_reference(dtype, n, affine):
    """N divisible by 4 and not, rows of less and more than 128 x 4 elements."""
    dy, x, w, mean, rstd = _case(2, n, dtype, n)
    model = norms_backward.layer_norm_grad_input(dy, x, n, mean, rstd, w)
    f = lambda t: t.float().numpy()                                          # noqa: E731
    for r in range(2):
        ref = slow_row(f(dy[r]), f(x[r]), F32(mean[r]), F32(rstd[r]),
                       None if w is None else f(w))
        ref = torch.from_numpy(ref).to(dtype)
        assert torch.equal(model[r].view(torch.int16 if dtype != torch.float32 else
                                         torch.int32),
                           ref.view(torch.int16 if dtype != torch.float32 else torch.int32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n,weighted", [(12, True), (1030, True), (2048, False)])
def test_rms_model_equals_slow_reference(dtype, n, weighted):
    """``_fused_rms_norm_backward``'s dX: the ``rms_norm = true`` instances."""
    gen = torch.Generator().manual_seed(n)
    x = (torch.randn(2, n, generator=gen) * 3).to(dtype)
    dy = torch.randn(2, n, generator=gen).to(dtype)
    w = torch.randn(n, generator=gen).to(dtype) if weighted else None
    _, rstd = norms.rms_norm(x, (n,), w, None)
    rstd = rstd.reshape(2)
    model = norms_backward.layer_norm_grad_input(dy, x, n, None, rstd, w, rms=True)
    f = lambda t: t.float().numpy()                                          # noqa: E731
    iv = torch.int32 if dtype == torch.float32 else torch.int16
    for r in range(2):
        ref = slow_row(f(dy[r]), f(x[r]), None, F32(rstd[r]), None if w is None else f(w),
                       rms=True)
        assert torch.equal(model[r].view(iv), torch.from_numpy(ref).to(dtype).view(iv))


def test_rms_norm_training_step_x_grad_is_the_model():
    """Under emulate ``F.rms_norm``'s x.grad is the model's (from the modelled rstd) and
    differs from CPU torch's; the weight's gradient is recorded apart
    (tests/test_aten_cuda_gamma_beta.py)."""
    torch.manual_seed(1)
    D = 1024
    x = (torch.randn(8, D) * 2).requires_grad_()
    w = torch.randn(D, requires_grad=True)
    g = torch.randn(8, D)
    with tme.emulate("sm90", record=True) as em:
        torch.nn.functional.rms_norm(x, (D,), w).backward(g)
    _, rstd = norms.rms_norm(x.detach(), (D,), w.detach())
    want = norms_backward.layer_norm_grad_input(g, x.detach(), D, None, rstd, w.detach(),
                                                rms=True)
    assert torch.equal(x.grad, want)
    xc, wc = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    torch.nn.functional.rms_norm(xc, (D,), wc).backward(g)
    assert (x.grad != xc.grad).any()
    assert torch.allclose(w.grad, wc.grad, rtol=1e-3, atol=1e-3)
    fmt = {r.op: r.format for r in em.records}
    assert fmt["aten._fused_rms_norm_backward"] == "torch 2.13.0 CUDA kernel"
    assert fmt["aten._fused_rms_norm_backward (dgamma)"] == "torch 2.13.0 CUDA kernel"


def test_order_matters():
    """The model's order is visible: it differs from a float64 evaluation rounded once."""
    dy, x, w, mean, rstd = _case(8, 4096, torch.float32, 3)
    model = norms_backward.layer_norm_grad_input(dy, x, 4096, mean, rstd, w)
    d, xx, g = dy.double(), x.double(), w.double()
    xh = (xx - mean.double()[:, None]) * rstd.double()[:, None]
    s1 = (d * g).sum(1, keepdim=True)
    s2 = (d * g * xh).sum(1, keepdim=True)
    exact = (rstd.double()[:, None] / 4096 * (4096 * g * d - xh * s2 - s1)).float()
    assert (model != exact).any()


def test_kernel_choice():
    x = torch.randn(3, 12)
    assert norms_backward.kernel_name(12, x.dtype, x).startswith(
        "layer_norm_grad_input_kernel_vectorized")
    assert norms_backward.kernel_name(11, x.dtype, x).startswith(
        "layer_norm_grad_input_kernel<rms_norm = false>")
    v = torch.randn(3 * 12 + 1)[1:].reshape(3, 12)             # storage offset 1
    assert not norms_backward.vectorized(12, v.dtype, v)
    assert not norms_backward.vectorized(12, torch.float64, x)


def test_bad_input():
    x = torch.randn(2, 8)
    m = torch.zeros(2)
    with pytest.raises(TypeError, match="fp32, fp16 or bf16"):
        norms_backward.layer_norm_grad_input(x.double(), x.double(), 8, m, m)
    with pytest.raises(ValueError, match="rows of 8"):
        norms_backward.layer_norm_grad_input(x[:, :4], x, 8, m, m)
    with pytest.raises(ValueError, match="gamma must have 8"):
        norms_backward.layer_norm_grad_input(x, x, 8, m, m, torch.ones(7))


# -- under emulate -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_step_x_grad_is_the_model(dtype):
    """A LayerNorm training step under emulate: x.grad is the model's dX from the forward's
    float statistics (also for bf16, whose CPU forward rounds them), and differs from CPU
    torch's; dgamma / dbeta run natively and are recorded apart."""
    D = 768
    torch.manual_seed(0)
    ln = torch.nn.LayerNorm(D).to(dtype)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    x = (torch.randn(16, D) * 2).to(dtype).requires_grad_()
    g = torch.randn(16, D).to(dtype)
    opt = torch.optim.SGD(ln.parameters(), lr=0.1)
    w0 = ln.weight.detach().clone()
    with tme.emulate("sm90", record=True) as em:
        ln(x).backward(g)
        opt.step()
    _, mean, rstd = norms.layer_norm(x.detach(), (D,), ln.weight.detach() if False else w0,
                                     ln.bias.detach(), ln.eps)
    want = norms_backward.layer_norm_grad_input(g, x.detach(), D, mean, rstd, w0)
    assert torch.equal(x.grad, want)
    xc = x.detach().clone().requires_grad_()
    lnc = torch.nn.LayerNorm(D).to(dtype)
    with torch.no_grad():
        lnc.weight.copy_(w0)
    lnc(xc).backward(g)
    assert (x.grad != xc.grad).any()
    if dtype == torch.bfloat16:     # the float statistics matter: rounded ones give other bits
        rounded = norms_backward.layer_norm_grad_input(
            g, x.detach(), D, mean.to(dtype).float(), rstd.to(dtype).float(), w0)
        assert not torch.equal(rounded, want)
    assert ln.weight.grad is not None and not torch.equal(ln.weight.detach(), w0)
    recs = {(r.op, r.format): r for r in em.records if "native_layer_norm_backward" in r.op}
    dx = recs[("aten.native_layer_norm_backward.default", "torch 2.13.0 CUDA kernel")]
    assert dx.phase == "backward" and "layer_norm_grad_input_kernel_vectorized" in dx.note
    gb = recs[("aten.native_layer_norm_backward.default (dgamma, dbeta)",
               "torch 2.13.0 CUDA kernel")]
    assert "dgamma / dbeta: GammaBetaBackwardCUDAKernelTemplate" in gb.note
    assert "(dgamma, dbeta)" in em.summary()


def test_no_weight_and_fp64_native():
    x = torch.randn(4, 10, requires_grad=True)
    with tme.emulate("sm90", record=True) as em:
        torch.nn.functional.layer_norm(x, (10,)).sum().backward()
    _, mean, rstd = norms.layer_norm(x.detach(), (10,), None, None, 1e-5)
    want = norms_backward.layer_norm_grad_input(torch.ones(4, 10), x.detach(), 10, mean, rstd)
    assert torch.equal(x.grad, want)
    assert not any("dgamma" in r.op for r in em.records)
    xd = torch.randn(4, 10, dtype=torch.float64, requires_grad=True)
    with tme.emulate("sm90", record=True) as em:
        torch.nn.functional.layer_norm(xd, (10,)).sum().backward()
    bw = [r for r in em.records if "native_layer_norm_backward" in r.op]
    assert bw and bw[0].format == "CPU order" and "float64" in bw[0].note


# -- evidence: nvcc's contractions ----------------------------------------------------------
def _f32_ops(ptx: str, entry: str) -> list:
    body = ptx.split(f".entry {entry}(")[1].split(".entry")[0]
    return [ln.split()[0] for ln in body.splitlines() if ln.strip() and
            re.match(r"(add|sub|mul|fma|rcp|div)\.", ln.split()[0]) and
            ln.split()[0].endswith("f32")]


_STATS = ["mul.f32", "add.f32", "sub.f32", "mul.f32", "fma.rn.f32"]
_DX = ["rcp.rn.f32", "mul.f32", "mul.f32", "mul.f32", "sub.f32", "mul.f32", "mul.f32",
       "sub.f32", "sub.f32", "mul.f32"]


def _check_ptx(ptx: str):
    for s in ("f32", "f16", "bf16"):
        assert _f32_ops(ptx, f"ln_bw_stats_{s}") == _STATS
        assert _f32_ops(ptx, f"ln_bw_dx_{s}") == _DX


def test_committed_ptx_contractions():
    """The committed PTX of the kernel's expressions (nvcc 13.0, PyTorch's flags): the
    accumulation's only FMA is s2's; dX's ``(fH g) dy - a`` is left to ptxas, which fuses it
    (the wheel's SASS: FFMA with a negated addend; see norms_backward's docstring)."""
    _check_ptx((DATA / "layer_norm_backward_sm90.ptx").read_text())


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_nvcc_recompiles_the_same(tmp_path):
    import torch.utils.cpp_extension as ext
    out = tmp_path / "k.ptx"
    flags = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
             "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
             "--expt-relaxed-constexpr", "-std=c++17"]
    subprocess.run(["nvcc", "-arch=sm_90", "-ptx", *flags,
                    *(f"-I{p}" for p in ext.include_paths()),
                    str(DATA / "layer_norm_backward.cu"), "-o", str(out)],
                   check=True, capture_output=True, timeout=300)
    _check_ptx(out.read_text())


# -- evidence: the wheel's SASS (aten_cuda/sass_facts.json, scripts/regen_aten_cuda_facts.py) -
_TABLE = __import__("json").loads(
    (Path(norms.__file__).parent / "sass_facts.json").read_text())


@pytest.mark.parametrize("dt,cname", [("float32", "float"), ("float16", "c10::Half"),
                                      ("bfloat16", "c10::BFloat16")])
@pytest.mark.parametrize("kern", norms_backward.KERNELS)
@pytest.mark.parametrize("rms", [False, True])
def test_sass_facts_of_the_dx_kernels(dt, cname, kern, rms):
    """The cu130 wheel holds both dX kernels with ``<T, float, rms_norm>``; their
    reductions shuffle down only (BlockReduceSum), 1 / N is MUFU.RCP (rcp.rn's fast path),
    and dX's ``(fH gamma) dy - a`` is an FFMA with a negated addend, one per element of the
    vectorised kernel's 4-vector."""
    facts = _TABLE["sass"].get("layer_norm_grad_input")
    if facts is None:
        pytest.skip("sass_facts.json predates the layer_norm backward rows (regenerate)")
    f = facts.get(f"{kern}/{dt}" + ("/rms" if rms else ""))
    if f is None:
        pytest.skip("sass_facts.json predates the rms_norm rows (regenerate)")
    assert f["kernel"].endswith(f"{kern}<{cname}, float, {str(rms).lower()}>")
    assert set(f["shfl"]) == {"DOWN"}
    assert f["mufu_rcp"] >= 1
    assert f["ffma_negated_addend"] >= (norms_backward.VEC if "vectorized" in kern else 1)


def test_sass_parser():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "regen", Path(__file__).parent.parent / "scripts" / "regen_aten_cuda_facts.py")
    regen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(regen)
    sass = ("FFMA R5, R14, R5, -R9 ;\nFFMA R7, R3, R2, -1 ;\nFFMA R3, R11, UR12, R10 ;\n"
            "SHFL.DOWN PT, R2, R17, 0x10, 0x1f ;\nMUFU.RCP R2, R3 ;\nFADD R1, R2, R3 ;")
    ops = regen.grad_input_ops(sass)
    assert ops["ffma_negated_addend"] == 1 and ops["ffma"] == 3 and ops["mufu_rcp"] == 1
    assert ops["shfl"] == {"DOWN": 1} and ops["fadd"] == 1
