"""The project's Triton kernels (triton_kernels/) under torch_mma_emu.triton.emulate(arch):
each gives the bits of the same computation written with emulated_mm (one chain step per
K block, schedules where they apply), for every arch and format it can take, and differs
from Triton's plain interpreter.  The expected instruction per arch is restated here from
docs/triton.md, independently of torch_mma_emu/triton/target_rules.py."""
import math

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

import torch_mma_emu as tme  # noqa: E402
import torch_mma_emu.triton as tmt  # noqa: E402
from torch_mma_emu import gpu_math  # noqa: E402
from helpers import rnd, same  # noqa: E402
from torch_mma_emu.registry import ARCHS  # noqa: E402
from torch_mma_emu.schedule import Schedule  # noqa: E402

ARCH_LIST = list(ARCHS)


def kern():
    from torch_mma_emu import triton_kernels
    return triton_kernels


def padded(x, dim, to):
    n = x.shape[dim]
    if n % to == 0:
        return x
    shape = list(x.shape)
    shape[dim] = to - n % to
    return torch.cat([x, torch.zeros(shape, dtype=x.dtype)], dim)


def chain(A, B, C, bk, step):
    """acc = C; acc = step(a_k, b_k, acc) per K block of bk (the kernel's zero-padded
    tail included)."""
    A, B = padded(A, -1, bk), padded(B, -2, bk)
    acc = C
    for k0 in range(0, A.shape[-1], bk):
        acc = step(A[..., k0:k0 + bk], B[..., k0:k0 + bk, :], acc)
    return acc


# --- the GEMM (2-D dots, 64 x 64 tiles, 4 warps) on every arch and format ------------------

GEMM_FORMATS = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32,
                "fp32": torch.float32, "fp8_e4m3": torch.float8_e4m3fn,
                "fp8_e5m2": torch.float8_e5m2}


def gemm_step(arch, fmt):
    """emulated_mm for one dot of the GEMM kernel, or the exception Triton raises."""
    vendor, cc = ARCHS[arch].vendor, int(arch[2:]) if arch.startswith("sm") else 0
    mm = lambda a, b, c, **kw: tme.emulated_mm(a, b, c, arch=arch, **kw)  # noqa: E731
    up = lambda dt: (lambda a, b, c: mm(a.to(dt), b.to(dt), c))  # noqa: E731
    if fmt == "fp32":
        return lambda a, b, c: mm(a, b, c, in_format="fp32")
    if vendor == "amd":
        if fmt == "tf32":
            return (lambda a, b, c: mm(a, b, c, in_format="xf32")) if arch == "gfx942" \
                else ValueError
        return up(torch.float16) if fmt.startswith("fp8") else mm
    if cc < 80:                                         # Triton's FMA path below sm80
        if fmt == "fp8_e4m3":
            return TypeError
        return lambda a, b, c: mm(a.float(), b.float(), c, in_format="fp32")
    if fmt == "tf32":
        return lambda a, b, c: mm(a, b, c, in_format="tf32")
    if fmt == "fp8_e4m3" and cc < 89:
        return TypeError
    if fmt.startswith("fp8") and cc in (80, 86):
        return up(torch.float16)
    return mm


@pytest.mark.parametrize("arch", ARCH_LIST)
@pytest.mark.parametrize("fmt", list(GEMM_FORMATS))
def test_gemm_every_arch_and_format(arch, fmt):
    dt = GEMM_FORMATS[fmt]
    A, B = rnd(40, 72, dtype=dt, seed=1), rnd(72, 36, dtype=dt, seed=2)
    C = rnd(40, 36, dtype=torch.float32, seed=3)
    step = gemm_step(arch, fmt)
    in_format = fmt if dt == torch.float32 else None
    if isinstance(step, type):
        with pytest.raises(Exception, match="not support|tf32|input_precision"):
            with tmt.emulate(arch):
                kern().matmul(A, B, C, in_format=in_format)
        return
    with tmt.emulate(arch):
        D = kern().matmul(A, B, C, in_format=in_format)
    bk = kern().block_k_for(72, max(kern().FORMATS[fmt][2], 8))
    assert same(D, chain(A, B, C, bk, step))
    with tmt.interpret():
        assert not same(kern().matmul(A, B, C, in_format=in_format), D)


# --- fp8 on Hopper: max_num_imprecise_acc (wgmma partial accumulators) ---------------------

@pytest.mark.parametrize("imprecise", [None, 32, 64, 128])
def test_fp8_gemm_promotion_is_the_schedule(imprecise):
    A = rnd(64, 256, dtype=torch.float8_e4m3fn, seed=4, scale=4)
    B = rnd(256, 64, dtype=torch.float8_e4m3fn, seed=5, scale=4)
    C = rnd(64, 64, dtype=torch.float32, seed=6)
    with tmt.emulate("H100"):
        D = kern().matmul(A, B, C, block_k=128, max_num_imprecise_acc=imprecise)
    sched = None if imprecise is None else Schedule(promote_every=imprecise)
    assert same(D, chain(A, B, C, 128, lambda a, b, c: tme.emulated_mm(
        a, b, c, arch="sm90", schedule=sched)))
    if imprecise is not None:        # the promotion changes the bits
        assert not same(D, tme.emulated_mm(A, B, C, arch="sm90"))
    if imprecise in (32, 128):       # blocks never straddle a dot: the preset over all of K
        assert same(D, tme.emulated_mm(A, B, C, arch="sm90",
                                       schedule=f"triton_fp8_hopper_imprecise_acc_{imprecise}"))
    if imprecise is None:
        assert same(D, tme.emulated_mm(A, B, C, arch="sm90", schedule="triton_fp8_hopper"))


def test_fp8_gemm_below_32_imprecise_leaves_wgmma():
    """max_num_imprecise_acc < 32 rules out MMAv3: mma.sync on fp16 conversions."""
    A = rnd(64, 64, dtype=torch.float8_e5m2, seed=7)
    B = rnd(64, 64, dtype=torch.float8_e5m2, seed=8)
    with tmt.emulate("sm90") as em:
        D = kern().matmul(A, B, block_k=64, max_num_imprecise_acc=16)
    assert same(D, tme.emulated_mm(A.half(), B.half(), arch="sm90"))
    assert list(em.counts) == ["mma.sync fp16->fp32 (operands converted to fp16): instruction "
                               "mma.sync (no sm90 row of its own), model sm90 hgmma.k16 "
                               "standing in"]


@pytest.mark.parametrize("arch", ["sm80", "sm90", "gfx942"])
def test_fp16_accumulator(arch):
    A, B = rnd(48, 96, dtype=torch.float16, seed=9), rnd(96, 40, dtype=torch.float16, seed=10)
    C = rnd(48, 40, dtype=torch.float16, seed=11)
    with tmt.emulate(arch):
        D = kern().matmul(A, B, C, out_dtype=torch.float16, block_k=32)
    if arch == "gfx942":    # no fp16 MFMA accumulator: fp32 per dot, rounded to fp16 after it
        step = lambda a, b, c: tme.emulated_mm(a, b, c.float(), arch=arch).half()  # noqa: E731
    else:
        step = lambda a, b, c: tme.emulated_mm(a, b, c, arch=arch,  # noqa: E731
                                               out_dtype=torch.float16)
    assert D.dtype == torch.float16 and same(D, chain(A, B, C, 32, step))
    assert not same(D, tme.emulated_mm(A, B, C.float(), arch=arch).half())


# --- fp32 splits (Triton 3.6 F32DotTC) -------------------------------------------------

def tf32_rna(x):
    """cvt.rna.tf32.f32 on finite values: nearest, ties away (10 fraction bits kept)."""
    b = x.view(torch.int32)
    return ((b + 0x1000) & ~0x1FFF).view(torch.float32)


def bf16_parts(x, n):
    out = []
    for i in range(n):
        h = x.to(torch.bfloat16)
        out.append(h)
        x = x - h.float()
    return out


def split_ref(arch, prec, a, b, c):
    zero = torch.zeros_like(c)
    nz = lambda t: torch.nan_to_num(t, nan=0.0, posinf=float("inf"),  # noqa: E731
                                    neginf=float("-inf"))
    if prec == "tf32x3":
        dot = lambda x, y, acc: tme.emulated_mm(x, y, acc, arch=arch, in_format="tf32")  # noqa
        ah, bh = tf32_rna(a), tf32_rna(b)
        r = dot(a - ah, bh, zero)
        r = nz(dot(ah, b - bh, r))
        return dot(ah, bh, r) + c
    dot = lambda x, y, acc: tme.emulated_mm(x, y, acc, arch=arch)  # noqa: E731
    n = 2 if prec == "bf16x3" else 3
    A, B = bf16_parts(a, n), bf16_parts(b, n)
    r = zero
    if n == 3:
        r = dot(A[1], B[1], r)
        r = dot(A[2], B[0], r)
        r = dot(A[0], B[2], r)
    r = dot(A[1], B[0], r)
    r = nz(dot(A[0], B[1], r))
    return dot(A[0], B[0], r) + c


@pytest.mark.parametrize("arch,prec", [("sm90", "tf32x3"), ("sm80", "tf32x3"),
                                       ("sm90", "bf16x3"), ("sm90", "bf16x6"),
                                       ("gfx942", "bf16x3")])
def test_fp32_splits(arch, prec):
    A, B = rnd(40, 80, dtype=torch.float32, seed=12), rnd(80, 36, dtype=torch.float32, seed=13)
    C = rnd(40, 36, dtype=torch.float32, seed=14)
    with tmt.emulate(arch):
        D = kern().matmul(A, B, C, in_format=prec, block_k=32)
    assert same(D, chain(A, B, C, 32, lambda a, b, c: split_ref(arch, prec, a, b, c)))
    # the triton_tf32x3 schedule runs the same F32DotTC order per tl.dot of 32
    if prec == "tf32x3":
        assert same(D, tme.emulated_mm(A, B, C, arch=arch,
                                       schedule=Schedule(input_precision="tf32x3", dot_k=32)))


# --- batched GEMM with 3-D dots ---------------------------------------------------------

@pytest.mark.parametrize("arch,dt,conv", [
    ("sm90", torch.float16, None), ("sm90", torch.float8_e4m3fn, torch.float16),
    ("sm89", torch.float8_e4m3fn, None), ("sm100", torch.float8_e5m2, torch.float16),
    ("gfx942", torch.bfloat16, None)])
def test_batched_gemm_3d_dots(arch, dt, conv):
    """A 3-D dot is mma.sync on Hopper / Blackwell: fp8 runs on fp16 conversions there."""
    A, B = rnd(3, 40, 64, dtype=dt, seed=15), rnd(3, 64, 24, dtype=dt, seed=16)
    with tmt.emulate(arch) as em:
        D = kern().bmm(A, B)
    ref = tme.emulated_mm(A.to(conv) if conv else A, B.to(conv) if conv else B, arch=arch)
    assert same(D, ref)
    if conv is not None:
        assert any("converted to fp16" in k for k in em.counts)
    if arch == "sm90" and conv is not None:     # fp16 HMMA, not QGMMA's E8M13 chain
        assert not same(D, tme.emulated_mm(A, B, arch=arch))


# --- fused attention: the reference is emulated_mm calls, on NVIDIA the sm_90 instructions
# of tl.math.exp2 and of the fma the compiler contracts (gpu_math; on AMD neither is
# modelled: exp2 in float64 rounded, two roundings) and the interpreter's NumPy ops ---

def _ex2(x, arch):
    x = np.asarray(x, np.float32)
    if ARCHS[arch].vendor == "nvidia":
        return gpu_math.evaluate("ex2.approx.ftz.f32", x)
    return np.exp2(x.astype(np.float64)).astype(np.float32)


def _fma(a, b, c, arch):
    if ARCHS[arch].vendor == "nvidia":
        return gpu_math.evaluate("fma.rn.f32", *[np.asarray(v, np.float32) for v in (a, b, c)])
    return a * b + c

def attention_ref(q, k, v, scale, causal, arch, bm=64, bn=64):
    Z, Nq, D = q.shape
    Nk = k.shape[1]
    f32 = np.float32
    out = torch.empty_like(q)
    for z in range(Z):
        for m0 in range(0, Nq, bm):
            qb = padded(q[z, m0:m0 + bm], 0, bm)
            rows = np.arange(m0, m0 + bm)
            m_i = np.full(bm, -np.inf, f32)
            l_i = np.zeros(bm, f32)
            acc = np.zeros((bm, D), f32)
            for n0 in range(0, Nk, bn):
                kb, vb = padded(k[z, n0:n0 + bn], 0, bn), padded(v[z, n0:n0 + bn], 0, bn)
                cols = np.arange(n0, n0 + bn)
                s = tme.emulated_mm(qb, kb.t(), arch=arch).numpy() * f32(scale)
                valid = cols[None, :] < Nk
                if causal:
                    valid = valid & (cols[None, :] <= rows[:, None])
                s = np.where(valid, s, f32(-np.inf))
                m_new = np.maximum(m_i, np.nanmax(s, 1))
                p = _ex2(s - m_new[:, None], arch)            # ex2.approx.ftz.f32
                alpha = _ex2(m_i - m_new, arch)
                l_i = _fma(l_i, alpha, np.sum(p, 1), arch)    # contracted in the PTX
                acc = tme.emulated_mm(torch.from_numpy(p).to(q.dtype), vb,
                                      torch.from_numpy(acc * alpha[:, None]),
                                      arch=arch).numpy()
                m_i = m_new
            o = torch.from_numpy(np.divide(acc, l_i[:, None])).to(q.dtype)
            out[z, m0:m0 + bm] = o[:min(bm, Nq - m0)]
    return out


@pytest.mark.parametrize("arch,dt,causal", [("sm90", torch.float16, False),
                                            ("gfx942", torch.float16, True),
                                            ("sm80", torch.bfloat16, False)])
def test_attention_matches_its_emulated_mm_reference(arch, dt, causal):
    q, k, v = (rnd(2, n, 32, dtype=dt, seed=s) for n, s in ((70, 20), (90, 21), (90, 22)))
    scale = math.log2(math.e) / math.sqrt(32)
    with tmt.emulate(arch) as em:
        o = kern().attention(q, k, v, causal=causal)
    assert same(o, attention_ref(q, k, v, scale, causal, arch))
    assert sum(em.counts.values()) == 2 * 2 * 2 * 2        # Z x M blocks x N blocks x 2 dots
    with tmt.interpret():
        plain = kern().attention(q, k, v, causal=causal)
    if arch != "gfx942":      # CDNA3's near-fp32 sums round to the same fp16 outputs here
        assert not same(plain, o)


# --- tl.dot_scaled: MXFP8 / MXFP4 ------------------------------------------------------

def mx_operands(fmt, M=128, N=128, K=256, seed=30):
    g = torch.Generator().manual_seed(seed)
    if fmt == "e2m1":
        a = torch.randint(0, 256, (M, K // 2), generator=g, dtype=torch.uint8)
        b = torch.randint(0, 256, (K // 2, N), generator=g, dtype=torch.uint8)
    else:
        dt = torch.float8_e4m3fn if fmt == "e4m3" else torch.float8_e5m2
        a = torch.randn(M, K, generator=g).to(dt)
        b = torch.randn(K, N, generator=g).to(dt)
    sa = torch.randint(118, 137, (M, K // 32), generator=g, dtype=torch.uint8)
    sb = torch.randint(118, 137, (N, K // 32), generator=g, dtype=torch.uint8)
    sa[5, 1] = 0                                   # the zero scale
    return a, sa, b, sb


def unpack(codes, axis):
    lo, hi = codes & 0xF, codes >> 4
    return torch.stack((lo, hi), dim=axis + 1).flatten(axis, axis + 1)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
def test_scaled_gemm_on_blackwell_is_the_mx_row(fmt):
    a, sa, b, sb = mx_operands(fmt)
    with tmt.emulate("B200") as em:
        D = kern().scaled_matmul(a, sa, b, sb, fmt)
    if fmt == "e2m1":
        A, Bm, inf = unpack(a, 1), unpack(b, 0), "fp4_e2m1"
    else:
        A, Bm, inf = a, b, None
    ref = tme.emulated_mm(A, Bm, arch="sm100", in_format=inf, scale_a=sa, scale_b=sb.t())
    assert same(D, ref)
    kind = "fp4_e2m1,fp4_e2m1" if fmt == "e2m1" else f"fp8_{fmt},fp8_{fmt}"
    assert list(em.counts) == [f"tcgen05 block_scale {kind}"]
    with tmt.interpret(), pytest.raises(Exception, match="no tl.dot_scaled"):
        kern().scaled_matmul(a, sa, b, sb, fmt)


def bf16_dequant(vals, s):
    """Triton's decomposition: bf16(v) * bitcast<bf16>(s << 7), NaN where s = 0xFF."""
    s = s.to(torch.int32).repeat_interleave(32, dim=-1)
    mult = (s << 7).to(torch.int16).view(torch.bfloat16)
    out = (vals.to(torch.bfloat16).float() * mult.float()).to(torch.bfloat16)
    return torch.where(s == 0xFF, torch.tensor(float("nan"), dtype=torch.bfloat16), out)


@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
def test_scaled_gemm_on_hopper_is_the_bf16_decomposition(fmt):
    a, sa, b, sb = mx_operands(fmt, seed=31)
    sa[7, 0] = 0xFF                                  # a NaN scale
    with tmt.emulate("sm90") as em:
        D = kern().scaled_matmul(a, sa, b, sb, fmt)
    from torch_mma_emu.formats import value_table
    if fmt == "e2m1":
        av = value_table("fp4_e2m1")[unpack(a, 1).long()].float()
        bv = value_table("fp4_e2m1")[unpack(b, 0).long()].float()
    else:
        av, bv = a.float(), b.float()
    Ad, Bd = bf16_dequant(av, sa), bf16_dequant(bv.t(), sb).t()
    assert same(D, chain(Ad, Bd, torch.zeros(128, 128), 128,
                         lambda x, y, c: tme.emulated_mm(x, y, c, arch="sm90")))
    assert list(em.counts) == ["wgmma bf16->fp32: instruction HGMMA (wgmma.m64nNk16), model sm90 hgmma.k16"]
    assert torch.isnan(D[7]).all() and not torch.isnan(D[6]).any()
