"""Floating-point contraction under ``emulate("H100")``: fp32 mul + add fused into
``fma.rn.f32`` exactly where the PTX compiled on the CPU has it (contract.py), with results
that differ from the interpreter's two roundings, and nothing fused with
``enable_fp_fusion=False``."""
import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import torch_mma_emu.triton as tmt  # noqa: E402
from torch_mma_emu import gpu_math  # noqa: E402
from torch_mma_emu.triton import contract, ptx_of  # noqa: E402

F = np.float32


def fma(a, b, c):
    return gpu_math.evaluate("fma.rn.f32", *[np.asarray(v, F) for v in (a, b, c)])


@triton.jit
def affine(S, Y, N, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    m = o < N
    s = tl.load(S + o, mask=m)
    y = s * 0.1 + 1.0
    tl.store(Y + o, y, mask=m)


@triton.jit
def mixed(A, B, C, D, Y, N, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    m = o < N
    a = tl.load(A + o, mask=m)
    b = tl.load(B + o, mask=m)
    c = tl.load(C + o, mask=m)
    d = tl.load(D + o, mask=m)
    p = a * b
    s = p + c
    t = a * b + c * d
    u = c - a * d
    v = p + d
    w = (a * 0.1 + 1.0) * b
    tl.store(Y + o, s + t + u + v + w, mask=m)


@triton.jit
def loop_acc(A, B, Y, K: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k in range(K):
        a = tl.load(A + k * BLOCK + o)
        b = tl.load(B + k * BLOCK + o)
        acc += a * b
    tl.store(Y + o, acc)


@triton.jit
def sub_first(A, B, C, Y, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    a = tl.load(A + o)
    b = tl.load(B + o)
    c = tl.load(C + o)
    tl.store(Y + o, a * b - c)


def _rand(n, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=g) for _ in range(4)]


def test_affine_is_one_fma():
    x = _rand(512, 0)[0]
    y, y_plain, y_off = (torch.empty(512) for _ in range(3))
    with tmt.emulate("H100") as em:
        affine[(1,)](x, y, 512, BLOCK=512)
        affine[(1,)](x, y_off, 512, BLOCK=512, enable_fp_fusion=False)
    with tmt.interpret():
        affine[(1,)](x, y_plain, 512, BLOCK=512)
    want = fma(x.numpy(), F(0.1), F(1.0))
    assert np.array_equal(y.numpy().view(np.uint32), want.view(np.uint32))
    assert (y != y_plain).any()                          # the interpreter rounds twice
    assert torch.equal(y_off, y_plain)                   # fusion off: two roundings
    assert "1 product-additions fused into fma.rn.f32, 1 rounded twice" in em.summary()


def test_the_ptx_decides_which_products_fuse():
    """The PTX of ``mixed`` (read in plan_of): p = a*b stays a mul (CSE merges it with
    line 10's a*b), s = fma(a, b, c), t = fma(c, d, p), u = fma(-a, d, c), v = fma(a, b, d),
    the final sum absorbs w's product: fma(fma(a, .1, 1), b, ((s + t) + u) + v)."""
    a, b, c, d = _rand(256, 1)
    y, y_plain = torch.empty(256), torch.empty(256)
    with tmt.emulate("H100") as em:
        mixed[(1,)](a, b, c, d, y, 256, BLOCK=256)
    with tmt.interpret():
        mixed[(1,)](a, b, c, d, y_plain, 256, BLOCK=256)
    a, b, c, d = (t.numpy() for t in (a, b, c, d))
    p = a * b
    s, t, u, v = fma(a, b, c), fma(c, d, p), fma(-a, d, c), fma(a, b, d)
    want = fma(fma(a, F(0.1), F(1.0)), b, ((s + t) + u) + v)
    assert np.array_equal(y.numpy().view(np.uint32), want.view(np.uint32))
    assert (y.numpy() != y_plain.numpy()).any()
    assert "6 product-additions fused" in em.summary()


def test_plan_read_from_the_ptx():
    sig = ptx_of.signature_of(mixed, [torch.empty(1)] * 5 + [256], {"BLOCK": 256})
    plan = contract.plan_of(ptx_of.compile_ptx(mixed, *sig))
    fused = {loc[1:] for loc, (f, u, _) in plan.items() if f and not u}
    first = mixed.fn.__code__.co_firstlineno           # the @triton.jit line
    # (line, column) of each op's right operand, as Triton locates it
    assert {(first + 9, 12), (first + 10, 16), (first + 11, 12), (first + 12, 12),
            (first + 13, 19), (first + 14, 36)} <= fused
    off = contract.plan_of(ptx_of.compile_ptx(mixed, *sig, enable_fp_fusion=False))
    assert not any(f for f, _, _ in off.values())


def test_accumulation_in_a_loop():
    A, B = torch.randn(8 * 64), torch.randn(8 * 64)
    y, y_plain = torch.empty(64), torch.empty(64)
    with tmt.emulate("H100"):
        loop_acc[(1,)](A, B, y, K=8, BLOCK=64)
    with tmt.interpret():
        loop_acc[(1,)](A, B, y_plain, K=8, BLOCK=64)
    a, b = A.numpy().reshape(8, 64), B.numpy().reshape(8, 64)
    acc = np.zeros(64, F)
    for k in range(8):
        acc = fma(a[k], b[k], acc)
    assert np.array_equal(y.numpy().view(np.uint32), acc.view(np.uint32))
    assert not torch.equal(y, y_plain)


def test_product_minus_addend():
    a, b, c, _ = _rand(256, 3)
    y = torch.empty(256)
    with tmt.emulate("H100"):
        sub_first[(1,)](a, b, c, y, BLOCK=256)
    want = fma(a.numpy(), b.numpy(), -c.numpy())
    assert np.array_equal(y.numpy().view(np.uint32), want.view(np.uint32))


def test_interpret_block_does_not_contract():
    x = _rand(64, 4)[0]
    y = torch.empty(64)
    with tmt.interpret() as em:
        affine[(1,)](x, y, 64, BLOCK=64)
    assert torch.equal(y, x * 0.1 + 1.0) and "contraction" not in em.summary()


@triton.jit
def dot_plus_product(A, B, X, Y, OUT, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(A + r[:, None] * N + r[None, :])
    b = tl.load(B + r[:, None] * N + r[None, :])
    x = tl.load(X + r[:, None] * N + r[None, :])
    y = tl.load(Y + r[:, None] * N + r[None, :])
    tl.store(OUT + r[:, None] * N + r[None, :], tl.dot(a, b) + x * y)


def test_a_dot_takes_the_product_as_its_accumulator_not_an_fma():
    """The TTIR combine pass folds ``tl.dot(a, b) + x * y`` into ``tl.dot(a, b, x * y)``
    before LLVM sees an addition: the product is rounded and is the dot's C."""
    import torch_mma_emu as tme
    g = torch.Generator().manual_seed(6)
    A, B = (torch.randn(32, 32, generator=g).half() for _ in range(2))
    X, Y = (torch.randn(32, 32, generator=g) for _ in range(2))
    out = torch.empty(32, 32)
    with tmt.emulate("H100") as em:
        dot_plus_product[(1,)](A, B, X, Y, out, N=32)
    assert torch.equal(out, tme.emulated_mm(A, B, X * Y, arch="sm90"))
    assert "fused into fma" not in em.summary() or "0 product-additions" in em.summary()
