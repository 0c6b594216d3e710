"""The PTX checker (ptx_check) on kernels the straight-line evaluator refused (loops,
branches): their PTX, run by the SIMT interpreter torch_mma_emu.ptx, equals the emulation bit
for bit: a K-loop matmul with tl.dot on sm_80 (ldmatrix + mma.sync, the product from the
registry's model of the instruction), a masked loop reduction, a while-loop scan."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = triton.language

from torch_mma_emu import ptx  # noqa: E402
from torch_mma_emu.triton import ptx_check  # noqa: E402


def _refused_by_straight_line(src: str) -> bool:
    try:
        ptx_check.parse(src)
    except ptx_check.Unsupported as e:
        return "branch or loop" in str(e)
    return False


@triton.jit
def kloop_mm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
             BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        rk = k + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :],
                    mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :],
                    mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def masked_loop_sum(x_ptr, o_ptr, n, B: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((B,), tl.float32)
    for s in range(0, n, B):
        offs = s + tl.arange(0, B)
        v = tl.load(x_ptr + row * n + offs, mask=offs < n, other=0.0)
        acc += tl.where(v > 0, v, v * 0.5)
    tl.store(o_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def while_scan(x_ptr, o_ptr, n, B: tl.constexpr):
    carry = tl.zeros((1,), tl.float32)
    s = 0
    while s < n:
        offs = s + tl.arange(0, B)
        v = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        c = tl.cumsum(v, axis=0) + carry
        tl.store(o_ptr + offs, c, mask=offs < n)
        carry = tl.sum(tl.where(tl.arange(0, B) == B - 1, c, 0.0), axis=0)[None] + 0.0
        s += B


def _wide(shape, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) * torch.exp2(
        torch.randint(-8, 8, shape, generator=g).float())
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_kloop_tl_dot_on_sm80_equals_emulation(dtype):
    M, N, K = 40, 24, 80                               # masks on every edge, 3 K steps
    a, b = _wide((M, K), 1, dtype), _wide((K, N), 2, dtype)
    c = torch.zeros(M, N)
    r = ptx_check.check(kloop_mm, (a, b, c, M, N, K),
                        {"BM": 32, "BN": 16, "BK": 32, "num_warps": 4},
                        grid=(2, 2), arch="A100")
    assert "mma.sync.aligned.m16n8k" in r["ptx"]   # k16 (f16, bf16), k8 (tf32)
    assert dtype == torch.float32 or "ldmatrix" in r["ptx"]
    assert _refused_by_straight_line(r["ptx"])
    assert r["equal"], r["mismatches"]


def test_mma_sync_reads_the_arch_model():
    """The mma's product is the registry's model of A100's HMMA.16816 (which differs from
    the exactly rounded sum on these inputs), run here straight through ptx.Module, and
    refused without an arch."""
    M = N = 16
    K = 32
    a, b = _wide((M, K), 11, torch.float16), _wide((K, N), 12, torch.float16)
    from torch_mma_emu import emulated_mm
    want = emulated_mm(a, b, arch="A100")
    exact = (a.double() @ b.double()).float()
    assert not torch.equal(want, exact)             # the model is not exact rounding here
    src = ptx_check.check(kloop_mm, (a, b, torch.zeros(M, N), M, N, K),
                          {"BM": 16, "BN": 16, "BK": 32, "num_warps": 1}, grid=(1, 1),
                          arch="A100")["ptx"]
    mod = ptx.Module(src)
    (name, kern), = mod.kernels.items()

    def args(cn):
        given = [a.numpy().view(np.uint8).copy(), b.numpy().view(np.uint8).copy(), cn,
                 np.int32(M), np.int32(N), np.int32(K)]
        return given + [np.zeros(16, np.uint8)] * (len(kern.params) - len(given))
    with pytest.raises(ptx.Unsupported, match="needs the arch"):
        mod.launch(name, (1, 1), 32, args(np.zeros((M, N), np.float32)), dynamic_smem=16384)
    cn = np.zeros((M, N), np.float32)
    mod.launch(name, (1, 1), 32, args(cn), dynamic_smem=16384, arch="A100")
    assert np.array_equal(cn.view(np.uint32), want.numpy().view(np.uint32))


@pytest.mark.parametrize("n,block,warps", [(300, 64, 2), (129, 128, 4)])
def test_masked_loop_reduction_equals_emulation(n, block, warps):
    x = _wide((3, n), n)
    r = ptx_check.check(masked_loop_sum, (x, torch.zeros(3), n),
                        {"B": block, "num_warps": warps}, grid=3, arch="H100")
    assert _refused_by_straight_line(r["ptx"])
    assert r["equal"], r["mismatches"]


@pytest.mark.parametrize("n", [100, 256])
def test_while_loop_scan_equals_emulation(n):
    x = _wide((n,), 7 + n)
    r = ptx_check.check(while_scan, (x, torch.zeros(n), n), {"B": 64, "num_warps": 2},
                        grid=1, arch="H100")
    assert _refused_by_straight_line(r["ptx"])
    assert r["equal"], r["mismatches"]


CARRY = """
.version 8.0
.target sm_80
.address_size 64
.visible .entry chain(.param .u64 p)
{
  .reg .b32 %r<16>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [p];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd2, %r1, 32;
  add.s64 %rd3, %rd1, %rd2;
  ld.global.v4.u32 {%r2, %r3, %r4, %r5}, [%rd3];
  ld.global.v4.u32 {%r6, %r7, %r8, %r9}, [%rd3+16];
  add.cc.u32 %r10, %r2, %r4;
  addc.cc.u32 %r11, %r3, %r5;
  addc.u32 %r12, 0, 0;
  mad.lo.cc.u32 %r13, %r6, %r7, %r8;
  madc.hi.u32 %r14, %r6, %r7, %r9;
  sub.cc.u32 %r15, %r2, %r4;
  subc.u32 %r2, %r3, %r5;
  st.global.v4.u32 [%rd3], {%r10, %r11, %r12, %r13};
  st.global.v4.u32 [%rd3+16], {%r14, %r15, %r2, %r2};
  ret;
}
"""


def test_carry_chains_equal_big_integer_arithmetic():
    """add.cc / addc / mad.lo.cc / madc.hi / sub.cc / subc (libdevice's sin / cos argument
    reduction uses them) against Python integers."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 2**32, (64, 8), dtype=np.uint64).astype(np.uint32)
    x[:8, :4] = 0xFFFFFFFF                              # carries all the way
    buf = x.copy()
    ptx.Module(CARRY).launch("chain", 1, 64, [buf])
    for row, out in zip(x.astype(object), buf.astype(object)):
        a = row[0] + (row[1] << 32)
        b = row[2] + (row[3] << 32)
        s = a + b
        assert (out[0], out[1], out[2]) == (s & 0xFFFFFFFF, (s >> 32) & 0xFFFFFFFF, s >> 64)
        lo = (row[4] * row[5] & 0xFFFFFFFF) + row[6]      # the carry out of the low word
        assert out[3] == lo & 0xFFFFFFFF
        assert out[4] == (((row[4] * row[5]) >> 32) + row[7] + (lo >> 32)) & 0xFFFFFFFF
        d = (a - b) % 2**64
        assert (out[5], out[6]) == (d & 0xFFFFFFFF, d >> 32)


@triton.jit
def sin_k(x_ptr, o_ptr, n, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(o_ptr + offs, tl.sin(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


def test_sin_with_payne_hanek_reduction():
    """tl.sin's libdevice code: below 1e5 the checker equals the emulation; beyond, its
    Payne-Hanek branch (the module's .global table __cudart_i2opi_f, mad.lo.cc / madc carry
    chains) runs in the interpreter and lands within 2 ulp of the true sine."""
    g = torch.Generator().manual_seed(3)
    small = (torch.rand(200, generator=g) - 0.5) * 2e4
    r = ptx_check.check(sin_k, (small, torch.zeros(200), 200), {"B": 128}, grid=2,
                        arch="H100")
    assert r["equal"], r["mismatches"]
    assert "__cudart_i2opi_f" in r["ptx"] and "madc.hi" in r["ptx"]
    big = torch.cat([torch.tensor([1e5 + 17, 3.0e6, -7.5e8, 1.0e30, 3.4e38]),
                     torch.exp2(torch.rand(123, generator=g) * 100 + 17)])
    out = ptx_check.run_ptx(r["ptx"], [big, torch.zeros(128), 128], 1, 4)[1]
    true = np.sin(big.double().numpy())
    ulp = np.spacing(np.abs(true).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(out.double().numpy() - true) <= 2 * ulp)
