"""layer_norm's dgamma / dbeta as torch 2.13's CUDA ``GammaBetaBackwardCUDAKernelTemplate``
computes them (torch_mma_emu/aten_cuda/gamma_beta.py) and their route under ``emulate``
(preview/aten_norms.py)."""
import copy
import math

import numpy as np
import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import registry
from torch_mma_emu.aten_cuda import gamma_beta, norms, sums

F32 = np.float32
H100_SMS = registry.gpu("sm90").sms


# -- an independent slow reference: the kernel's threads one at a time, Python scalars --------
def fma(a, b, c) -> F32:
    """fma rounded once to float32: the exact product (48 bits fit a double), the sum rounded
    to odd in double, then to float32 (53 >= 24 + 2 bits, so no double rounding)."""
    p, c = float(a) * float(b), float(c)
    s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    if err != 0 and math.isfinite(s) and np.float64(s).view(np.uint64) % 2 == 0:
        s = math.nextafter(s, math.inf if err > 0 else -math.inf)
    return F32(s)


def slow_column(dy, x, mean, rstd, j, block_y, rows_per_block, rms=False):
    """Column j of one CTA: threads (j % 32, y), 8 rows per tile and thread, then the
    shared-memory transpose and ``reg += shfl_xor(reg, delta)`` over 32 lanes (lanes past
    block_dim_y hold garbage: NaN here, lane 0 must not see it)."""
    M = len(dy)
    regs_g, regs_b = [], []
    for y in range(block_y):
        g, b = F32(0), F32(0)
        for start in range(0, M, rows_per_block):
            for i in range(rows_per_block // block_y):
                row = start + y * (rows_per_block // block_y) + i
                if row < M:
                    d, xv, r = dy[row][j], x[row][j], rstd[row]
                    mv = F32(0) if rms else mean[row]
                else:                                   # inactive: zeros loaded
                    d = xv = mv = r = F32(0)
                g = fma(F32(d * (xv if rms else F32(xv - mv))), r, g)
                b = F32(b + d)
        regs_g.append(g)
        regs_b.append(b)
    if block_y == 1:
        return regs_g[0], regs_b[0]
    lanes_g = regs_g + [F32(np.nan)] * (32 - block_y)
    lanes_b = regs_b + [F32(np.nan)] * (32 - block_y)
    delta = block_y // 2
    while delta >= 1:
        lanes_g = [F32(lanes_g[l] + lanes_g[l ^ delta]) for l in range(32)]
        lanes_b = [F32(lanes_b[l] + lanes_b[l ^ delta]) for l in range(32)]
        delta //= 2
    return lanes_g[0], lanes_b[0]


def _case(m, n, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    dy = torch.randn(m, n, generator=g).to(dtype)
    x = (torch.randn(m, n, generator=g) * 2 + 0.5).to(dtype)
    mean = (torch.randn(m, generator=g) * 0.1 + 0.5).float()
    rstd = (torch.rand(m, generator=g) + 0.5).float()
    return dy, x, mean, rstd


# (M, N): every tiling, M and N off and on the tile multiples
CASES = [(8, 32), (37, 45), (63, 7), (64, 32), (100, 33), (128, 64), (201, 40), (256, 32),
         (300, 35), (517, 9)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n", CASES)
def test_slow_reference_equals_model(m, n, dtype):
    dy, x, mean, rstd = _case(m, n, dtype, seed=m * 1000 + n)
    by, rows, partial = gamma_beta.tiling(m, n, H100_SMS)
    assert not partial
    dg, db = gamma_beta.gamma_beta_grads(dy, x, n, mean, rstd, H100_SMS)
    assert dg.dtype == db.dtype == dtype and dg.shape == db.shape == (n,)
    D, X = dy.float().numpy(), x.float().numpy()
    M_, R_ = mean.numpy(), rstd.numpy()
    ref = [slow_column(D, X, M_, R_, j, by, rows) for j in range(n)]
    rg = torch.from_numpy(np.array([r[0] for r in ref], F32)).to(dtype)
    rb = torch.from_numpy(np.array([r[1] for r in ref], F32)).to(dtype)
    assert torch.equal(dg.view(torch.int16 if dtype != torch.float32 else torch.int32),
                       rg.view(torch.int16 if dtype != torch.float32 else torch.int32))
    assert torch.equal(db, rb)


@pytest.mark.parametrize("m,n", [(40, 12), (150, 33), (260, 8)])
def test_slow_reference_equals_model_rms(m, n):
    dy, x, _, rstd = _case(m, n, torch.float32, seed=7)
    by, rows, _ = gamma_beta.tiling(m, n, H100_SMS)
    dg, db = gamma_beta.gamma_beta_grads(dy, x, n, None, rstd, H100_SMS, rms=True)
    assert db is None
    D, X, R_ = dy.numpy(), x.numpy(), rstd.numpy()
    ref = [slow_column(D, X, None, R_, j, by, rows, rms=True)[0] for j in range(n)]
    assert np.array_equal(dg.numpy().view(np.uint32), np.array(ref, F32).view(np.uint32))


def test_order_matters():
    """The model is not a float64 sum, and the tilings' orders give other bits."""
    dy, x, mean, rstd = _case(300, 64, torch.float32, seed=3)
    D, X = dy.numpy(), x.numpy()
    dg, db = gamma_beta.column_sums(D, X, mean.numpy(), rstd.numpy(), block_y=32,
                                    rows_per_block=256)
    exact = (D.astype(np.float64) * (X - mean.numpy()[:, None]).astype(np.float64)
             * rstd.numpy()[:, None]).sum(0).astype(F32)
    assert (dg != exact).any()
    assert (db != D.astype(np.float64).sum(0).astype(F32)).any()
    dg1, db1 = gamma_beta.column_sums(D, X, mean.numpy(), rstd.numpy(), block_y=1,
                                      rows_per_block=8)
    assert (dg1 != dg).any() and (db1 != db).any()


def test_tiling_choice():
    t = gamma_beta.tiling
    assert t(8, 768, 132) == t(63, 768, 132) == (1, 8, False)
    assert t(64, 768, 132) == t(127, 768, 132) == (8, 64, False)
    assert t(128, 768, 132) == t(255, 768, 132) == (16, 128, False)
    assert t(256, 768, 132) == t(65536, 64, 132) == (32, 256, False)
    # M > 65536: the 2-pass path when N / 32 < SMs / 2 (H100 SXM 132 SMs, A100 108)
    assert t(65537, 2048, 132) == (1, 32, True)          # 64 < 66
    assert t(65537, 2048, 108) == (32, 256, False)       # 64 >= 54
    assert t(65537, 4096, 132) == (32, 256, False)
    # the names carry the template arguments the cu130 wheel instantiates
    assert gamma_beta.kernel_name(41, 64, torch.float16, 132).startswith(
        "GammaBetaBackwardCUDAKernelTemplate<c10::Half, float, 32, 1, 8, true, false, false>")
    assert gamma_beta.kernel_name(512, 64, torch.float32, 132).startswith(
        "GammaBetaBackwardCUDAKernelTemplate<float, float, 32, 32, 256, false, true, false>")
    name = gamma_beta.kernel_name(70000, 64, torch.bfloat16, 132)
    assert "<c10::BFloat16, float, 32, 1, 32, true, false, false>" in name
    assert "on 2188 row blocks, then .sum(0)" in name      # min(32768 // 2, ceil(70000/32))


def test_bad_input():
    dy, x, mean, rstd = _case(16, 8, torch.float32)
    with pytest.raises(TypeError, match="fp32, fp16 or bf16"):
        gamma_beta.gamma_beta_grads(dy.double(), x.double(), 8, mean, rstd, 132)
    with pytest.raises(ValueError, match="rows of 5"):
        gamma_beta.gamma_beta_grads(dy, x, 5, mean, rstd, 132)
    with pytest.raises(ValueError, match="mean must have 16"):
        gamma_beta.gamma_beta_grads(dy, x, 8, mean[:3], rstd, 132)
    with pytest.raises(ValueError, match="M > 0"):
        gamma_beta.tiling(0, 8, 132)
    with pytest.raises(ValueError, match="no such tiling"):
        gamma_beta.column_sums(dy.numpy(), x.numpy(), mean.numpy(), rstd.numpy(), block_y=8,
                               rows_per_block=32)
    big = torch.zeros(65537, 32)
    with pytest.raises(ValueError, match="needs the GPU row"):
        gamma_beta.gamma_beta_grads(big, big, 32, torch.zeros(65537), torch.ones(65537), 132)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_step_weight_and_bias_grads_are_the_model(dtype):
    torch.manual_seed(0)
    n, shape = 96, (4, 50)                               # M = 200: <32, 16, 128>
    ln = torch.nn.LayerNorm(n).to(dtype)
    with torch.no_grad():
        ln.weight.copy_(torch.rand(n) + 0.5)
        ln.bias.copy_(torch.randn(n) * 0.1)
    x = (torch.randn(*shape, n) * 3 + 1).to(dtype).requires_grad_()
    w = torch.randn(*shape, n).to(dtype)                 # dy = w exactly
    ref = copy.deepcopy(ln)
    opt = torch.optim.SGD(ln.parameters(), lr=0.1)
    with tme.emulate("sm90", record=True) as em:
        (ln(x) * w).sum().backward()
    gw, gb = ln.weight.grad.clone(), ln.bias.grad.clone()
    opt.step()
    _, mean, rstd = norms.layer_norm(x.detach(), (n,), None, None, ln.eps)
    ew, eb = gamma_beta.gamma_beta_grads(w, x.detach(), n, mean, rstd, H100_SMS)
    assert torch.equal(gw, ew) and torch.equal(gb, eb)
    rec = [r for r in em.records if r.op.endswith("(dgamma, dbeta)")]
    assert len(rec) == 1 and rec[0].format == f"torch {torch.__version__.split('+')[0]} " \
        "CUDA kernel" and "32, 16, 128, false, false" in rec[0].note
    # the step used the modelled grads; CPU torch sums them in another order
    stepped = copy.deepcopy(ref)
    stepped.weight.grad, stepped.bias.grad = gw, gb
    torch.optim.SGD(stepped.parameters(), lr=0.1).step()
    assert torch.equal(ln.weight, stepped.weight) and torch.equal(ln.bias, stepped.bias)
    x2 = x.detach().clone().requires_grad_()
    (ref(x2) * w).sum().backward()
    assert not torch.equal(ref.weight.grad, gw) and not torch.equal(ref.bias.grad, gb)


def test_weight_grad_only_skips_dx():
    """mask [False, True, True] (x needs no gradient): dgamma / dbeta still modelled."""
    dy, x, mean, rstd = _case(70, 40, torch.float32, seed=5)
    w, b = torch.ones(40), torch.zeros(40)
    with tme.emulate("sm90", record=True) as em:
        dx, dg, db = torch.ops.aten.native_layer_norm_backward(
            dy, x, [40], mean.view(70, 1), rstd.view(70, 1), w, b, [False, True, True])
    assert dx is None
    ew, eb = gamma_beta.gamma_beta_grads(dy, x, 40, mean, rstd, H100_SMS)
    assert torch.equal(dg, ew) and torch.equal(db, eb)
    assert [r.op for r in em.records] == ["aten.native_layer_norm_backward.default "
                                          "(dgamma, dbeta)"]
    cpu = torch.ops.aten.native_layer_norm_backward(
        dy, x, [40], mean.view(70, 1), rstd.view(70, 1), w, b, [False, True, True])
    assert not torch.equal(cpu[1], dg) or not torch.equal(cpu[2], db)


def slow_partial_column(dy, x, mean, rstd, j, grid):
    """Column j of the 2-pass tiling's first kernel: one thread per row block b, the 32-row
    tiles b, b + grid, ... in order."""
    M = len(dy)
    out = []
    for blk in range(grid):
        g, b = F32(0), F32(0)
        for start in range(blk * 32, M, 32 * grid):
            for row in range(start, start + 32):
                if row < M:
                    d, xv, mv, r = dy[row][j], x[row][j], mean[row], rstd[row]
                else:
                    d = xv = mv = r = F32(0)
                g = fma(F32(d * F32(xv - mv)), r, g)
                b = F32(b + d)
        out.append((g, b))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_two_pass_tiling(dtype):
    """M > 65536 with N / 32 < SMs / 2: the partial kernel (checked against the per-thread
    reference on two columns), partials stored in T, then ``.sum(0)`` as CUDA's
    reduce_kernel; routed under emulate with the tiling named."""
    m, n = 65600, 3
    gpu = registry.gpu("sm90")
    dy, x, mean, rstd = _case(m, n, dtype, seed=11)
    G = gamma_beta.partial_grid(m, n)
    assert G == 2050 and gamma_beta.tiling(m, n, gpu.sms) == (1, 32, True)
    D, X = dy.float().numpy(), x.float().numpy()
    pg, pb = gamma_beta.partial_sums(D, X, mean.numpy(), rstd.numpy(), G)
    for j in (0, 2):
        ref = slow_partial_column(D, X, mean.numpy(), rstd.numpy(), j, G)
        assert np.array_equal(pg[:, j].view(np.uint32), np.array([r[0] for r in ref], F32)
                              .view(np.uint32))
        assert np.array_equal(pb[:, j], np.array([r[1] for r in ref], F32))
    dg, db = gamma_beta.gamma_beta_grads(dy, x, n, mean, rstd, gpu)
    want = sums.reduce(torch.from_numpy(pg).to(dtype), 0, gpu=gpu)
    assert torch.equal(dg, want) and dg.dtype == dtype
    assert torch.equal(db, sums.reduce(torch.from_numpy(pb).to(dtype), 0, gpu=gpu))
    w, b = torch.ones(n, dtype=dtype), torch.zeros(n, dtype=dtype)
    with tme.emulate("sm90", record=True) as em:
        _, eg, eb = torch.ops.aten.native_layer_norm_backward(
            dy, x, [n], mean.view(m, 1), rstd.view(m, 1), w, b, [False, True, True])
    assert torch.equal(eg, dg) and torch.equal(eb, db)
    rec = [r for r in em.records if r.op.endswith("(dgamma, dbeta)")]
    assert len(rec) == 1 and rec[0].format.endswith("CUDA kernel")
    assert "32, 1, 32, true, false, false>" in rec[0].note
    assert "on 2050 row blocks, then .sum(0)" in rec[0].note


def test_rms_norm_step_weight_grad_is_the_model():
    torch.manual_seed(2)
    n = 64
    x = (torch.randn(3, 70, n) * 2).requires_grad_()     # M = 210: <32, 16, 128, ..., true>
    w = (torch.rand(n) + 0.5).requires_grad_()
    g = torch.randn(3, 70, n)
    with tme.emulate("sm90", record=True) as em:
        torch.nn.functional.rms_norm(x, (n,), w).backward(g)
    _, rstd = norms.rms_norm(x.detach(), (n,), w.detach())
    want = gamma_beta.gamma_beta_grads(g, x.detach(), n, None, rstd, H100_SMS, rms=True)[0]
    assert torch.equal(w.grad, want)
    rec = {r.op: r for r in em.records}["aten._fused_rms_norm_backward (dgamma)"]
    assert rec.format.endswith("CUDA kernel") and "32, 16, 128, false, false, true" in rec.note
    wc = w.detach().clone().requires_grad_()
    torch.nn.functional.rms_norm(x.detach(), (n,), wc).backward(g)
    assert not torch.equal(wc.grad, w.grad)
