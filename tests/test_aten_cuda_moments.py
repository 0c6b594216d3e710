"""torch.var / std / var_mean / std_mean as PyTorch 2.13's CUDA reduce_kernel over WelfordOps
computes them (issue 39): the vectorised model (aten_cuda/moments.py on reduce.py's order)
against a per-thread loop written from Reduce.cuh's and SharedReduceOps.h's text, the
contractions against nvcc's PTX of the header, and the route under emulate."""
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import registry
from torch_mma_emu.aten_cuda import moments
from torch_mma_emu.gpu_math.ieee import fma_odd

DATA = Path(__file__).parent / "data" / "aten_moments"
H100 = registry.gpu("H100")
f32 = np.float32


# ---- a slow per-thread reference, written from the kernel text -----------------------------
def _fma(a, b, c):
    return f32(fma_odd(np.array([a], f32), np.array([b], f32), np.array([c], f32))[0])


IDENT = (f32(0), f32(0), 0, f32(0))          # WelfordData: mean, m2, n, nf


def w_reduce(acc, x):
    mean, m2, n, nf = acc
    n = n + 1
    nf = f32(n)
    d = f32(x - mean)
    mean = f32(mean + f32(d / nf))
    return (mean, _fma(d, f32(x - mean), m2), n, nf)


def w_combine(a, b):
    if a[3] == 0:
        return b
    if b[3] == 0:
        return a
    d = f32(b[0] - a[0])
    nf = f32(a[3] + b[3])
    r = f32(b[3] / nf)
    return (_fma(d, r, a[0]), _fma(f32(f32(d * d) * a[3]), r, f32(a[1] + b[1])), -1, nf)


def thread_value(xs, t, lane, first, cfg, shift):
    """``thread_reduce`` of thread ``t`` (input index) with lane ``lane``; ``first``: the
    thread is in warp row 0 of CTA 0 (``should_reduce_tail``)."""
    S, N = cfg.step_input, len(xs)
    if cfg.vectorize_input:
        V = cfg.input_vec_size
        value, end, base = IDENT, N, 0
        if shift > 0:
            end += shift
            if shift <= lane < V and first:
                value = w_reduce(value, xs[lane - shift])
            end -= V
            base = V - shift
        vl = [value] + [IDENT] * (V - 1)
        idx = t
        while idx * V + V - 1 < end:
            for i in range(V):
                vl[i] = w_reduce(vl[i], xs[base + idx * V + i])
            idx += S
        i2 = end - end % V + lane
        if first and i2 < end:
            vl[0] = w_reduce(vl[0], xs[base + i2])
    else:
        vt0 = cfg.vt0
        vl, idx = [IDENT] * vt0, t
        while idx + (vt0 - 1) * S < N:
            for i in range(vt0):
                vl[i] = w_reduce(vl[i], xs[idx + i * S])
            idx += S * vt0
        for i in range(vt0):
            if idx >= N:
                break
            vl[i] = w_reduce(vl[i], xs[idx])
            idx += S
    out = vl[0]
    for v in vl[1:]:
        out = w_combine(out, v)
    return out


def halve(vals):
    """Shared-memory / shuffle-down halving: value[x] = combine(value[x], value[x + h])."""
    vals = list(vals)
    while len(vals) > 1:
        h = len(vals) // 2
        vals = [w_combine(vals[x], vals[x + h]) for x in range(h)]
    return vals[0]


def reference(xs, cfg, shift=0):
    """One output's (mean, m2, n, nf) as reduce_kernel computes it."""
    xs = np.asarray(xs, f32)
    bw, bh, C = cfg.block_width, cfg.block_height, cfg.ctas_per_output
    lanes = bw if cfg.fastest else 1
    warps = bh if cfg.warp_split else 1
    partials = []
    for c in range(C):
        rows = []
        for y in range(warps):
            vals = [thread_value(xs, x + lanes * (y + warps * c), x, y == 0 and c == 0, cfg,
                                 shift) for x in range(lanes)]
            rows.append(halve(vals))                 # block_x_reduce
        partials.append(halve(rows))                 # block_y_reduce
    if C == 1:
        return partials[0]
    nt = lanes * bh
    fold = [IDENT] * nt
    for u in range(nt):                               # the last CTA, thread u = x + y * bw
        for p in range(u, C, nt):
            fold[u] = w_combine(fold[u], partials[p])
    rows = [halve(fold[y * lanes:(y + 1) * lanes]) if cfg.fastest else fold[y]
            for y in range(bh)]
    return halve(rows)


def check(x, dim, outputs):
    """The model's var and mean of ``x`` over ``dim`` equal the reference for ``outputs``
    (pairs of (output index in the flattened result, its elements, its shift))."""
    cfg = moments.config_for(x, dim, H100)
    var, mean = moments.moments(x, dim, op="var_mean", correction=1)
    var, mean = var.float().reshape(-1).numpy(), mean.float().reshape(-1).numpy()
    for o, xs, shift in outputs:
        m, m2, n, nf = reference(xs, cfg, shift)
        want = f32(m2 / f32(nf - 1)) if nf > 1 else f32(m2 / f32(0))
        got_v = torch.tensor(var[o]).to(x.dtype).float().numpy()
        want_v = torch.tensor(want).to(x.dtype).float().numpy()
        want_m = torch.tensor(m).to(x.dtype).float().numpy()
        assert got_v.view(np.int32) == want_v.view(np.int32), (o, cfg.describe())
        assert np.float32(mean[o]).view(np.int32) == want_m.view(np.int32), (o, cfg.describe())
    return cfg


def _data(n, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, generator=g) * 3 + 7).to(dtype)


@pytest.mark.parametrize("n,off", [(1000, 0), (1003, 1), (130, 1), (77, 0)])
def test_all_elements_fp32_against_the_thread_loop(n, off):
    x = _data(n + 2)[off:off + n]
    cfg = check(x, None, [(0, x.numpy(), off % 2 if n >= 128 else 0)])
    assert cfg.vectorize_input == (n >= 128) and cfg.input_vec_size == 2 and cfg.vt0 == 2


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16bit_with_alignment_shift(dtype):
    x = _data(2001, 1, dtype)[1:]                   # 4-byte vectors of 2, one element off
    cfg = check(x, None, [(0, x.float().numpy(), 1)])
    assert cfg.vectorize_input and cfg.input_vec_size == 2


def test_rows_and_columns():
    x = _data(6 * 300, 2).reshape(6, 300)
    check(x, 1, [(r, x[r].numpy(), (r * 300) % 2) for r in range(6)])
    y = _data(300 * 8, 3).reshape(300, 8)            # outputs along lanes, warps split
    cfg = check(y, 0, [(c, y[:, c].numpy(), 0) for c in range(8)])
    assert not cfg.fastest and cfg.output_vec_size == 4


@pytest.mark.slow
@pytest.mark.parametrize("gpu", ["H100", "H100 PCIe"])
def test_multi_cta_fold(gpu):
    global H100
    n = 1 << 18
    x = _data(n, 4)
    saved, H100 = H100, registry.gpu(gpu)
    try:
        cfg = check(x, None, [(0, x.numpy(), 0)])
    finally:
        H100 = saved
    assert cfg.ctas_per_output > 1


# ---- the arithmetic is nvcc's ---------------------------------------------------------------
def test_committed_ptx_has_the_models_contractions():
    """welford_sm90.ptx (nvcc 13.0 of SharedReduceOps.h's WelfordOps): reduce divides
    (div.rn) and fuses m2's product; combine fuses the mean and m2 updates; project divides
    and takes sqrt.rn."""
    ptx = (DATA / "welford_sm90.ptx").read_text()
    ops = {}
    for k in ("wreduce", "wcombine", "wproject"):
        body = ptx[ptx.index(f".entry {k}("):]
        body = body[:body.index("ret;")]
        ops[k] = re.findall(r"^\s+((?:add|sub|mul|fma|div|sqrt)\.[\w.]*f32)\s", body,
                            re.M)
    assert ops["wreduce"] == ["sub.f32", "div.rn.f32", "add.f32", "sub.f32", "fma.rn.f32"]
    assert ops["wcombine"] == ["sub.f32", "add.f32", "div.rn.f32", "mul.f32", "mul.f32",
                               "add.f32", "fma.rn.f32", "fma.rn.f32"]
    assert ops["wproject"] == ["sub.f32", "div.rn.f32", "sqrt.rn.f32"]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_ptx_is_what_nvcc_makes_of_the_header(tmp_path):
    import torch.utils.cpp_extension as ext
    out = tmp_path / "w.ptx"
    flags = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
             "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
             "--expt-relaxed-constexpr", "--expt-extended-lambda", "-std=c++17"]
    subprocess.run(["nvcc", "-arch=sm_90", "-ptx", *flags,
                    *[f"-I{p}" for p in ext.include_paths()], str(DATA / "welford.cu"),
                    "-o", str(out)], check=True, capture_output=True)
    # nvcc names internal symbols with a hash of the source's path: equal in any checkout
    strip = lambda s: [re.sub(r"(?<=_)[0-9a-f]{8}(?=_)", "#", l)
                       for l in s.splitlines() if l.strip() and not l.startswith("//")]
    assert strip(out.read_text()) == strip((DATA / "welford_sm90.ptx").read_text())


# ---- the API and the route ------------------------------------------------------------------
def test_options_and_close_to_fp64():
    x = _data(40 * 50, 5).reshape(40, 50)
    for op in moments.OPS:
        for kw in ({}, {"correction": 0}, {"correction": 2.5}):
            got = moments.moments(x, (0, 1), op=op, keepdim=True, **kw)
            want = getattr(torch, op)(x.double(), (0, 1), keepdim=True, **kw)
            got, want = (got, want) if op.endswith("mean") else ((got,), (want,))
            for g, w in zip(got, want):
                assert g.shape == w.shape and g.dtype == torch.float32
                torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=0)
    assert torch.isinf(moments.moments(torch.ones(1), op="var")).all() or \
        torch.isnan(moments.moments(torch.ones(1), op="var")).all()


def test_differs_from_the_cpu_and_between_gpus():
    x = torch.randn(64, 1024, generator=torch.Generator().manual_seed(0)) + 100
    assert (moments.moments(x, 1, op="var") != torch.var(x, 1)).sum() > 10
    big = torch.empty(1 << 24)
    assert [moments.config_for(big, None, registry.gpu(g)).ctas_per_output
            for g in ("H100", "H100 PCIe")] == [528, 456]


def test_emulate_routes_var_std_and_records():
    x = _data(64 * 300, 7).reshape(64, 300)
    with tme.emulate("sm90", record=True) as em:
        a = torch.var(x, 1)
        b, m = torch.std_mean(x.half(), 0, keepdim=True)
        c = x.double().var()
    assert torch.equal(a, moments.moments(x, 1, op="var"))
    b2, m2 = moments.moments(x.half(), 0, op="std_mean", keepdim=True)
    assert torch.equal(b, b2) and torch.equal(m, m2)
    ops = {(r.op, r.format) for r in em.records}
    assert ("aten.var.correction", "torch 2.13.0 CUDA kernel") in ops
    assert ("aten.std_mean.correction", "torch 2.13.0 CUDA kernel") in ops
    assert ("aten.var.correction", "CPU order") in ops          # fp64: no model
    assert c.dtype == torch.float64
    with tme.emulate("MI300X", record=True) as em:
        torch.var(x)
    assert [r.format for r in em.records if "var" in r.op] == ["CPU order"]


def test_bad_input():
    with pytest.raises(TypeError):
        moments.moments(torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError):
        moments.moments(torch.ones(3), op="kurtosis")
    with pytest.raises(ValueError):
        moments.moments(torch.ones(0))
    with pytest.raises(IndexError):
        moments.moments(torch.ones(3), 4)
