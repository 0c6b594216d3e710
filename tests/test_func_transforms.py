"""``emulated_mm`` under torch.func (jvp, forward_ad, vmap, grad, jacrev) and a ``Spec`` as
``arch`` under ``torch.compile(fullgraph=True)``."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.func import grad, jacrev, jvp, vmap

import torch_mma_emu as tme
from helpers import rnd, same


ARCH = "gfx90a"      # bf16 with FTZ and its own accumulation: a formula on the wrong arch shows


def mm(a, b, c=None):
    return tme.emulated_mm(a, b, c, arch=ARCH)


def test_jvp_is_the_emulated_product_rule():
    A, B, C = rnd(3, 40), rnd(40, 5, seed=1), rnd(5, seed=2, dtype=torch.float32)
    tA, tB, tC = rnd(3, 40, seed=3), rnd(40, 5, seed=4), rnd(5, seed=5, dtype=torch.float32)
    out, t = jvp(mm, (A, B, C), (tA, tB, tC))
    assert same(out, mm(A, B, C))
    assert same(t, (mm(tA, B) + mm(A, tB)) + tC)
    assert t.abs().sum() > 0                        # was an all-zero tangent
    _, tb = jvp(lambda b: mm(A, b), (B,), (tB,))    # one tangent
    assert same(tb, mm(A, tB))


def test_forward_ad_dual_tensors():
    A, B, tB = rnd(4, 33), rnd(33, 6, seed=1), rnd(33, 6, seed=2)
    with fwAD.dual_level():
        d = mm(A, fwAD.make_dual(B, tB))
        tangent = fwAD.unpack_dual(d).tangent
    assert tangent is not None and same(tangent, mm(A, tB))


@pytest.mark.parametrize("dims", [(0, None, None), (None, 2, None), (1, 0, 0), (None, None, 0)])
def test_vmap_batching_rule_without_fallback(dims):
    A, B, C = rnd(6, 3, 20), rnd(20, 4, seed=1), rnd(4, seed=2, dtype=torch.float32)
    args = [A if dims[0] == 0 else A[0], B, C]
    if dims[0] == 1:
        args[0] = A.movedim(0, 1)
    if dims[1] is not None:
        args[1] = torch.stack([rnd(20, 4, seed=10 + i) for i in range(6)], dims[1])
    if dims[2] is not None:
        args[2] = torch.stack([rnd(4, seed=20 + i, dtype=torch.float32) for i in range(6)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)        # no slow-fallback warning
        out = vmap(mm, in_dims=dims)(*args)
    loop = torch.stack([mm(*(a.select(d, i) if d is not None else a
                             for a, d in zip(args, dims))) for i in range(6)])
    assert same(out, loop)


def test_vmap_with_broadcast_batch_dims():
    A = rnd(5, 2, 3, 16)                 # vmapped over dim 0; logical (2, 3, 16)
    B = rnd(7, 1, 16, 4, seed=1)
    A2 = rnd(2, 3, 16, seed=2)           # unbatched, a batch dimension of its own
    B2 = rnd(5, 16, 4, seed=3)           # vmapped, no batch dimension of its own
    out = vmap(lambda a, b: mm(a, b), in_dims=(None, 0))(A2, B2)
    assert same(out, torch.stack([mm(A2, B2[i]) for i in range(5)]))
    out = vmap(lambda a: mm(a, B[0]), in_dims=0)(A)
    assert same(out, torch.stack([mm(A[i], B[0]) for i in range(5)]))


def test_grad_and_jacrev_use_emulated_backward_products():
    A, B = rnd(3, 24, dtype=torch.float32), rnd(24, 5, seed=1, dtype=torch.float32)
    g = grad(lambda a: mm(a.bfloat16(), B.bfloat16()).sum())(A)
    assert same(g, mm(torch.ones(3, 5, dtype=torch.bfloat16), B.bfloat16().mT)
                .to(torch.bfloat16).float())
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        J = jacrev(lambda b: mm(A.bfloat16(), b))(B.bfloat16())
    assert J.shape == (3, 5, 24, 5)
    # d out[i, j] / d B[k, l] = A[i, k] if j == l
    expect = torch.einsum("ik,jl->ijkl", A.bfloat16().float(), torch.eye(5))
    assert torch.equal(J.float(), expect)


def test_gradcheck_forward_and_batched_on_the_fp64_path():
    A = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    B = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    C = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, c: tme.emulated_mm(a, b, c, arch="sm90"),
                                    (A, B, C), check_forward_ad=True, check_batched_grad=True,
                                    check_batched_forward_grad=True)


def test_spec_as_arch_under_compile_fullgraph():
    s27 = tme.spec("sm90", "bf16").replace(F=27)
    s13 = tme.spec("sm90", "bf16").replace(F=13)
    A, B = rnd(4, 256), rnd(256, 3, seed=1)
    assert not same(mm_s(A, B, s27), mm_s(A, B, s13))     # the two specs differ here
    torch._dynamo.reset()
    f = torch.compile(mm_s, fullgraph=True, backend="eager")
    assert same(f(A, B, s27), mm_s(A, B, s27))
    assert same(f(A, B, s13), mm_s(A, B, s13))             # guarded: no stale constant
    g = torch.compile(lambda a, b: tme.emulated_mm(a, b, arch=s27), fullgraph=True,
                      backend="aot_eager")
    assert same(g(A, B), mm_s(A, B, s27))


def mm_s(a, b, s):
    return tme.emulated_mm(a, b, arch=s)


def test_spec_as_arch_under_emulate_and_convert_compile():
    s = tme.spec("sm90", "bf16").replace(F=20)
    lin = torch.nn.Linear(64, 8).bfloat16()
    x = rnd(3, 64)
    with torch.no_grad():
        with tme.emulate(s):
            ref = lin(x)
        m = tme.convert(torch.nn.Sequential(lin), s)
        torch._dynamo.reset()
        out = torch.compile(m, fullgraph=True, backend="aot_eager")(x)
    assert same(out, ref)


def test_torch_func_through_a_model_under_emulate():
    torch.manual_seed(0)
    lin = torch.nn.Linear(40, 6).bfloat16()
    x, t = rnd(3, 40), rnd(3, 40, seed=1)
    W = lin.weight.detach()
    with tme.emulate(ARCH, record=True) as em:
        _, tangent = jvp(lambda z: lin(z), (x,), (t,))
    # PyTorch's forward-mode formula for addmm issues mm's that the mode emulates (the
    # primal addmm, and one mm per operand tangent, the weight's being zero under jvp)
    assert same(tangent, tme.emulated_mm(t, W.t(), arch=ARCH).to(torch.bfloat16))
    assert em.recorder.native_count == 0 and em.recorder.emulated_count == 3
    with tme.emulate(ARCH, record=True) as em:
        g = grad(lambda z: lin(z).float().sum())(x)
    ones = torch.ones(3, 6, dtype=torch.bfloat16)
    assert same(g, tme.emulated_mm(ones, W, arch=ARCH).to(torch.bfloat16))
    assert [r.phase for r in em.records if r.product] == ["forward", "backward"]
    with tme.emulate(ARCH, record=True) as em:
        v = vmap(lin)(x.unsqueeze(1))
    assert v.shape == (3, 1, 6) and em.recorder.native_count == 0
