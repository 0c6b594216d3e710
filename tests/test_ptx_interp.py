"""The SIMT PTX interpreter (torch_mma_emu.ptx) against NumPy / rational references, on
kernels of tests/data/ptx_kernels/kernels.cu compiled by nvcc 13.0 for sm_80 (regen.sh)."""
from __future__ import annotations

import struct
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from torch_mma_emu import ptx
from torch_mma_emu.gpu_math import ieee

DATA = Path(__file__).parent / "data" / "ptx_kernels"


@pytest.fixture(scope="module")
def mod():
    return ptx.Module((DATA / "kernels_sm80.ptx").read_text())


def test_vadd_tail_branch(mod):
    n = 1000                                # 8 CTAs of 128: the last 24 threads skip
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    c = np.zeros(n, np.float32)
    st = mod.launch("vadd", 8, 128, [a, b, c, np.int32(n)])
    assert np.array_equal(c, a + b)
    assert st.ctas == 8 and st.thread_instructions > 8 * 128 * 10


def test_out_of_bounds_names_kernel_thread_address(mod):
    a = np.ones(130, np.float32)
    c = np.zeros(100, np.float32)           # too short: thread 100 stores past it
    with pytest.raises(ptx.MemoryFault, match=r"vadd.*tid \(100, 0, 0\) of CTA \(0, 0, 0\)"
                       r".*past the end of argument vadd_param_2"):
        mod.launch("vadd", 2, 128, [a, a, c, np.int32(130)])


def _warp_tree(v):
    """shfl.down 16, 8, 4, 2, 1 sums of each warp's values (lane 0's result), in fp32."""
    v = v.reshape(-1, 32).copy()
    for off in (16, 8, 4, 2, 1):
        src = np.concatenate([v[:, off:], v[:, 32 - off:]], axis=1)   # out of range: own
        src[:, 32 - off:] = v[:, 32 - off:]
        v = v + src
    return v[:, 0]


@pytest.mark.parametrize("order", ["thread", "reverse", 7])
def test_block_sum_shared_barrier_shfl_atomics(mod, order):
    n, block, grid = 1000, 256, 4
    x = np.random.default_rng(2).standard_normal(n, np.float32)
    part = np.zeros(grid, np.float32)
    count = np.zeros(1, np.int32)
    mod.launch("block_sum", grid, block, [x, part, count, np.int32(n)], order=order)
    xp = np.concatenate([x, np.zeros(grid * block - n, np.float32)])
    warps = _warp_tree(xp).reshape(grid, block // 32)
    second = np.concatenate([warps, np.zeros((grid, 32 - block // 32), np.float32)], axis=1)
    assert np.array_equal(part, _warp_tree(second.reshape(-1)))
    assert count[0] == (x > 0).sum()


def test_loop_2d_struct_param_local_vector_loads(mod):
    n = 301
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    x[:, 2] = rng.integers(-20, 20, n)
    y = np.full(n, np.nan, np.float32)
    scale, bias = np.float32(1.5), np.array([0.25, -1.0, 2.0], np.float32)
    p = struct.pack("<fi3f", scale, n, *bias)
    st = mod.launch("loop2d", (2, 3), (8, 4), [x, y, p])   # 192 threads, 2 iterations
    s = ((x[:, 1] + x[:, 0]) + x[:, 2]) + x[:, 3]
    t = ieee.fma(s, np.full(n, scale), bias[np.arange(n) % 3])
    j = x[:, 2].astype(np.int32) & 7
    loc = ieee.fma(x[:, 0], j.astype(np.float32), x[:, 1])
    assert np.array_equal(y, t + loc)
    assert st.ctas == 6


def test_warp_ops_shfl_modes_vote_bits(mod):
    rng = np.random.default_rng(4)
    v = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    out = np.zeros(64 * 8, np.uint32)
    mod.launch("warp_ops", 2, 32, [v, out])
    o = out.reshape(64, 8).astype(np.uint64)
    t = np.arange(64)
    lane, base = t % 32, t - t % 32
    vv = v.astype(np.uint64)
    assert np.array_equal(o[:, 0], vv[base + (lane ^ 5)])
    assert np.array_equal(o[:, 1], vv[base + ((vv >> 3) & 31).astype(int)])
    assert np.array_equal(o[:, 2], vv[np.where(lane >= 3, t - 3, t)])
    assert np.array_equal(o[:, 3], vv[np.where(lane % 8 + 2 < 8, t + 2, t)])
    ballot = [sum(int(vv[w * 32 + i] & 1) << i for i in range(32)) for w in range(2)]
    assert list(o[:, 4]) == [ballot[w] for w in t // 32]
    for k in range(64):
        x = int(v[k])
        popc, clz = bin(x).count("1"), 32 - x.bit_length()
        brev = int(f"{x:032b}"[::-1], 2)
        assert o[k, 5] == (popc + clz * 64 + (brev & 0xFF) * 4096) & 0xFFFFFFFF
        xb, yb = x.to_bytes(4, "little"), k.to_bytes(4, "little")
        perm = int.from_bytes(bytes([xb[0], yb[0], xb[1], yb[1]]), "little")
        assert o[k, 6] == ((x * 0x9E3779B9) >> 32) ^ perm
        sx = x - (1 << 32) if x >> 31 else x
        q = abs(sx) // 3 * (-1 if sx > 0 else 1)
        assert o[k, 7] == (x % 7 if x & 1 else q & 0xFFFFFFFF)


def _round(v: Fraction, p, emin, emax, mode):
    """Independent reference: a rational to p significant bits, nearest-even or directed."""
    if v == 0:
        return 0.0
    neg, m = v < 0, abs(v)
    e = m.numerator.bit_length() - m.denominator.bit_length()
    e = e - 1 if Fraction(2) ** e > m else e
    q = Fraction(2) ** (max(e, emin) - p + 1)
    n, r = divmod(m / q, 1)
    n = int(n)
    if mode == "rn":
        n += r > Fraction(1, 2) or (r == Fraction(1, 2) and n % 2)
    elif (mode == "rp" and not neg or mode == "rm" and neg) and r:
        n += 1
    out = n * q
    if out >= Fraction(2) ** (emax + 1):
        away = mode == "rn" or (mode == "rp" and not neg) or (mode == "rm" and neg)
        out = np.inf if away else (2 - Fraction(2) ** (1 - p)) * Fraction(2) ** emax
    return -float(out) if neg else float(out)


F32 = (24, -126, 127)


def test_rounding_modes_bit_exact(mod):
    n = 256
    rng = np.random.default_rng(5)
    a = (rng.standard_normal(n) * np.exp2(rng.integers(-30, 30, n))).astype(np.float32)
    b = (rng.standard_normal(n) * np.exp2(rng.integers(-30, 30, n))).astype(np.float32)
    a[:4] = [2.5, -3.5, 1e-40, 70000.5]            # ties, a subnormal, an fp16 overflow
    f = np.zeros(12 * n, np.float32)
    i = np.zeros(4 * n, np.int32)
    h = np.zeros(3 * n, np.uint16)
    mod.launch("rounding", 2, 128, [a, b, f, i, h, np.int32(n)])
    f, i, h = f.reshape(n, 12), i.reshape(n, 4), h.reshape(n, 3)
    for k in range(n):
        x, y = Fraction(float(a[k])), Fraction(float(b[k]))
        want = [_round(x + y, *F32, m) for m in ("rz", "rm", "rp")]
        want += [_round(x * y, *F32, m) for m in ("rz", "rm", "rp")]
        want += [_round(x * y + 1, *F32, "rz"), _round(x * y - x, *F32, "rm"),
                 _round(x * x + y, *F32, "rp"), _round(x / y, *F32, "rn"),
                 float(np.sqrt(np.float64(abs(a[k]))).astype(np.float32)),
                 min(max(_round(x * y, *F32, "rn"), 0.0), 1.0)]
        assert [float(z) for z in f[k]] == want, k
        ints = [round(x), int(x), int(np.floor(float(x))), int(np.ceil(float(x)))]
        assert list(i[k]) == [max(min(z, 2**31 - 1), -2**31) for z in ints], k
        halves = [_round(x, 11, -14, 15, m) for m in ("rn", "rz", "rm")]
        assert list(h[k]) == [int(np.float16(z).view(np.uint16)) for z in halves], k


BAD = """
.version 9.0
.target sm_80
.address_size 64
.visible .entry spin(.param .u32 n)
{
  .reg .b32 %r<3>;
  .reg .pred %p<2>;
  ld.param.u32 %r1, [n];
$L_top:
  add.s32 %r1, %r1, 1;
  setp.ne.s32 %p1, %r1, 0;
  @%p1 bra $L_top;
  stmatrix.sync.aligned.m8n8.x1.shared.b16 [%r1], {%r1};
  ret;
}
"""


def test_step_budget_and_unsupported_instruction():
    m = ptx.Module(BAD)
    with pytest.raises(ptx.StepBudget, match="spin"):
        m.launch("spin", 1, 32, [np.uint32(0)], max_steps=1000)
    with pytest.raises(ptx.Unsupported, match=r"spin line \d+ .*stmatrix\.sync.*not modelled"):
        m.launch("spin", 1, 32, [np.uint32(0xFFFFFFF0)])
    with pytest.raises(ptx.PTXError, match="takes 1 arguments"):
        m.launch("spin", 1, 32, [])


def test_static_coverage_names_missing_opcodes(mod):
    from torch_mma_emu.ptx import coverage
    assert coverage.missing(mod) == {}
    miss = coverage.missing(ptx.Module(BAD))
    assert list(miss) == ["spin"] and any(op.startswith("stmatrix") for op in miss["spin"])


@pytest.mark.parametrize("fmt,spec", [("f32", (24, -126, 127)), ("f16", (11, -14, 15)),
                                      ("bf16", (8, -126, 127))])
@pytest.mark.parametrize("mode", ["rn", "rz", "rm", "rp"])
def test_round_to_matches_rationals(fmt, spec, mode):
    """fround.round_to (float64 + exact error) against the rational reference: sums of two
    float64s of far apart magnitudes, ties, subnormals and overflow of the target."""
    from torch_mma_emu.ptx import fround
    rng = np.random.default_rng(6)
    n = 400
    e = rng.integers(spec[1] - spec[0] - 4, spec[2] + 2, n)
    s = rng.standard_normal(n) * np.exp2(e.astype(float))
    s[:40] = np.round(s[:40] * 2.0 ** 4) / 2.0 ** 4          # exact / tie-prone values
    err = np.where(rng.random(n) < 0.5, 0.0, s * 2.0 ** -60 * rng.standard_normal(n))
    s, err = fround.two_sum(s, err)
    got = fround.round_to(s, err, fmt, mode)
    for k in range(n):
        want = _round(Fraction(float(s[k])) + Fraction(float(err[k])), *spec, mode)
        assert got[k] == want or (want == 0 and got[k] == 0), (k, s[k], err[k])


def test_divergent_loops_generic_pointers_dynamic_shared(mod):
    bx, by, grid = 16, 4, 3                       # 64 threads a CTA, 2 warps
    n = bx * by
    rng = np.random.default_rng(7)
    trips = rng.integers(0, 20, grid * n).astype(np.int32)
    gin = rng.standard_normal(grid * n).astype(np.float32)
    out = np.zeros(grid * n, np.float32)
    mask = np.zeros(grid * n, np.uint32)
    st = mod.launch("diverge", grid, (bx, by), [trips, gin, out, mask], dynamic_smem=4 * n)
    acc = np.zeros(grid * n, np.float32)
    for g in range(grid * n):
        for k in range(trips[g]):
            acc[g] = np.float32(acc[g] + np.float32(k) * np.float32(0.5))
            if acc[g] > 40:
                break
    t = np.arange(grid * n) % n
    cta = np.arange(grid * n) // n
    other = acc[cta * n + (t + 1) % n]
    assert np.array_equal(out, np.where(t & 1, other, gin) + acc)
    bits = (acc > 10).reshape(-1, 32)
    ballot = (bits * (1 << np.arange(32, dtype=np.uint64))).sum(axis=1).astype(np.uint32)
    assert np.array_equal(mask, np.repeat(ballot, 32))
    assert st.steps > 20                          # the loop ran in divergent passes


F64 = (53, -1022, 1023)


def _halves(word, p, emin, emax, kind):
    return [float(np.uint16(word >> s & 0xFFFF).view(np.float16)) if kind == "f16" else
            float(np.uint32((word >> s & 0xFFFF) << 16).view(np.float32)) for s in (0, 16)]


def test_wide_f64_modes_half2_bf16x2_int64_funnel_atomics(mod):
    n, blk = 64, 32
    rng = np.random.default_rng(8)
    x = rng.standard_normal(2 * n) * np.exp2(rng.integers(-40, 40, 2 * n))
    u = rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, n, dtype=np.uint64)
    hv = rng.standard_normal(2 * n).astype(np.float16).view(np.uint16).astype(np.uint32)
    h = hv[0::2] | (hv[1::2] << 16)
    d = np.zeros(6 * n)
    q = np.zeros(4 * n, np.uint64)
    r = np.zeros(4 * n, np.uint32)
    at = np.array([-5, 3, -1], np.int32)
    fat = np.zeros(n // blk, np.float32)
    mod.launch("wide", n // blk, blk, [x, u, h, d, q, r, at, fat])
    d, q, r = d.reshape(n, 6), q.reshape(n, 4), r.reshape(n, 4)
    for t in range(n):
        a, b = Fraction(float(x[2 * t])), Fraction(float(x[2 * t + 1]))
        want = [_round(a + b, *F64, "rz"), _round(a * b, *F64, "rp"),
                _round(a * b + a, *F64, "rm"), _round(a / b, *F64, "rn"),
                float(np.sqrt(abs(x[2 * t]))), _round(a, *F32, "rz")]
        assert list(d[t]) == want, t
        v, w = int(u[t]), int(u[t ^ 1])
        assert int(q[t, 0]) == (v * w) >> 64 and int(q[t, 1]) == v // (w | 1)
        assert int(q[t, 2]) == bin(v).count("1") + 100 * (64 - w.bit_length())
        ll = int(min(max(np.rint(x[2 * t] * 1e6), -2.0 ** 63), 2.0 ** 63 - 1))
        assert int(q[t, 3]) == ll & (2**64 - 1)          # saturating, nearest even
        hw, ww = int(h[t]), int(h[t ^ 1])
        fa, fb = _halves(hw, 0, 0, 0, "f16"), _halves(ww, 0, 0, 0, "f16")
        want_h = [_round(Fraction(fa[i]) * Fraction(fb[i]) + Fraction(fa[i]), 11, -14, 15, "rn")
                  for i in range(2)]
        got_h = _halves(int(r[t, 0]), 0, 0, 0, "f16")
        assert got_h == want_h, t
        ba, bb = _halves(hw, 0, 0, 0, "bf16"), _halves(ww, 0, 0, 0, "bf16")
        want_b = [_round(Fraction(ba[i]) * Fraction(bb[i]), 8, -126, 127, "rn") for i in range(2)]
        assert _halves(int(r[t, 1]), 0, 0, 0, "bf16") == want_b, t
        funnel = (((ww << 32) | hw) << (t & 31)) >> 32 & 0xFFFFFFFF
        funnel ^= (((ww << 32) | hw) >> min(t + 20, 32)) & 0xFFFFFFFF
        assert int(r[t, 2]) == funnel, t
        lo, hi = hw & 0xFFFF, hw >> 16
        m24 = (hw & 0xFFFFFF) - ((hw & 0x800000) << 1)
        assert int(r[t, 3]) == (abs(lo - hi) + 7 + 3 * m24) & 0xFFFFFFFF, t
    assert at[0] == max(-5, int(h.astype(np.int64).astype(np.int32).max()))
    assert at[1] == n and at[2] == n - 1   # cas chains 3 -> 4 -> ... -> n in thread order
    for c in range(n // blk):                         # shared float atomics in thread order
        s = np.float32(0)
        for t in range(c * blk, (c + 1) * blk):
            s = np.float32(s + np.float32(x[2 * t]))
        assert fat[c] == s


MUFU = """
.version 9.0
.target sm_90
.address_size 64
.visible .entry mufu(.param .u64 x, .param .u64 y)
{
  .reg .b32 %r<3>;
  .reg .f32 %f<9>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [x];
  ld.param.u64 %rd2, [y];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd1, %rd1, %rd3;
  mul.wide.u32 %rd3, %r1, 16;
  add.s64 %rd2, %rd2, %rd3;
  ld.global.f32 %f1, [%rd1];
  ex2.approx.f32 %f2, %f1;
  div.full.f32 %f3, %f2, %f1;
  rcp.approx.ftz.f32 %f4, %f1;
  sin.approx.f32 %f5, %f1;
  st.global.v4.f32 [%rd2], {%f2, %f3, %f4, %f5};
  ret;
}
"""


def test_mufu_instructions_use_gpu_math_models():
    from torch_mma_emu import gpu_math
    x = np.random.default_rng(9).standard_normal(64).astype(np.float32) * 8
    y = np.zeros((64, 4), np.float32)
    st = ptx.Module(MUFU).launch("mufu", 1, 64, [x, y])
    e = gpu_math.evaluate("ex2.approx.f32", x)
    want = [e, gpu_math.evaluate("div.full.f32", e, x),
            gpu_math.evaluate("rcp.approx.ftz.f32", x), gpu_math.evaluate("sin.approx.f32", x)]
    assert np.array_equal(y.view(np.uint32), np.stack(want, 1).view(np.uint32))
    assert st.approximate == ("sin.approx.f32",)      # named: its model is not bit-exact


def test_split_top_level_commas():
    """The one comma splitter (text_table.split_top) the PTX parser, ptx_eval and the TTGIR
    layout reader share: brackets of the given set nest, others do not."""
    from torch_mma_emu.text_table import split_top
    assert split_top("{%r1, %r2}, [%rd3+8], %f4") == ["{%r1, %r2}", "[%rd3+8]", "%f4"]
    assert split_top("tensor<64x64xf16, #a>, !tt.ptr<f32>", "<>()[]{}") == \
        ["tensor<64x64xf16, #a>", "!tt.ptr<f32>"]
    assert split_top("a<b, c>", "{}[]") == ["a<b", "c>"]
    assert split_top("") == [] and split_top("x, ") == ["x"]
    with pytest.raises(ValueError, match="pairs"):
        split_top("x", "{}[")


def test_param_declarations_with_ptr_attributes():
    """nvcc 13 for sm_100a / sm_120a writes ``.param .u64 .ptr .align 1 name``; the state
    space after ``.ptr`` is optional and ``.align`` there is the alignment of the data pointed
    to, not of the parameter (PTX ISA, "Kernel Function Parameter Attributes")."""
    from torch_mma_emu.ptx import parse
    text = """
.version 9.0
.target sm_100a
.address_size 64
.visible .entry k(
  .param .u64 .ptr .align 1 k_param_0,
  .param .u64 .ptr .global .align 16 k_param_1,
  .param .u32 k_param_2
)
{
  ret;
}
"""
    k = parse(text)["k"]
    assert [(p.name, p.offset, p.align) for p in k.params] == \
        [("k_param_0", 0, 8), ("k_param_1", 8, 8), ("k_param_2", 16, 4)]
