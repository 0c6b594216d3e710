"""Schedules (split-K, fp8 promotion, epilogues, input precision) against two independent
checks that share no code with torch_mma_emu/schedule.py or csrc/core/schedule.h:

* a composition of plain ``emulated_mm`` calls (slices / blocks from zero C) and torch
  fp32 additions, written here from the documented semantics;
* the exact pure-Python reference (torch_mma_emu.reference): ``dot`` per slice, exact IEEE
  additions / fma / multiplications with one rounding each.

Over the three input families (normal, cancellation, random bit streams with NaN, Inf,
subnormals) and with fp32 and fp16 outputs.  Zero mismatches allowed."""
import math
import zlib
from fractions import Fraction

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import cpp
from torch_mma_emu import reference as ref
from torch_mma_emu.inputs import FAMILIES, operands
from torch_mma_emu.reference import ieee as rieee
from torch_mma_emu.reference.gemm import tensor_to_codes
from torch_mma_emu.reference.rounding import encode, round_xval
from torch_mma_emu.reference.values import decode, x_fin, x_of
from torch_mma_emu.registry import ROWS
from torch_mma_emu.schedule import Schedule
from helpers import bits


def same_bits_or_both_nan(x, y):
    return (bits(x) == bits(y)) | (torch.isnan(x.float()) & torch.isnan(y.float()))


def k_ranges(K, L, parts):
    """Slices at multiples of L: ceil(ceil(K / L) / parts) chunks each (docs/schedules.md)."""
    chunks = (K + L - 1) // L
    per = (chunks + parts - 1) // parts
    return [(min(K, s * per * L), min(K, (s + 1) * per * L)) for s in range(parts)]


# ------------------------------------------------------------------------------------
# independent check 1: plain emulated_mm + torch fp32 additions
# ------------------------------------------------------------------------------------

def composition(sched, spec, A, B, C, out_dtype, scales=None):
    """alpha = beta = 1 or epilogue='mul_add' (torch has no fp32 fma).  scales: (scale_a,
    scale_b) of a block-scaled product, whose slices start on scale blocks."""
    L = math.lcm(spec.L, spec.block_size) if scales else spec.L
    blk = spec.block_size

    def mm(k0, k1, c=None):
        sc = {}
        if scales:
            b0, b1 = k0 // blk, -(-k1 // blk)
            sc = dict(scale_a=scales[0][:, b0:b1], scale_b=scales[1][b0:b1])
        if k1 == k0:  # an empty slice: its chain is C or +0
            return c.float() if c is not None else torch.zeros(A.shape[0], B.shape[1])
        return tme.emulated_mm(A[:, k0:k1], B[k0:k1], c, arch=spec, out_dtype=out_dtype,
                               **sc).float()
    c_chain = sched.c_mode == "chain" and C is not None
    slices = []
    for k0, k1 in k_ranges(A.shape[-1], L, sched.split_k):
        if sched.promote_every is None:
            slices.append(mm(k0, k1, C if c_chain else None))
            continue
        main = C.float() if c_chain else torch.zeros(A.shape[0], B.shape[1])
        for b0 in range(k0, k1, sched.promote_every):
            main = main + mm(b0, min(k1, b0 + sched.promote_every))
        slices.append(main)
    if sched.reduce == "sequential":
        acc = slices[0]
        for s in slices[1:]:
            acc = acc + s
    else:
        level = slices
        while len(level) > 1:
            nxt = [level[i] + level[i + 1] for i in range(0, len(level) - 1, 2)]
            if len(level) % 2:
                nxt.append(level[-1])
            level = nxt
        acc = level[0]
    if C is not None and sched.c_mode == "epilogue" and sched.beta != 0:
        if sched.alpha == 1 and sched.beta == 1:
            acc = acc + C.float()
        else:
            assert sched.epilogue == "mul_add"
            acc = (torch.tensor(sched.alpha) * acc) + (torch.tensor(sched.beta) * C.float())
    elif sched.alpha != 1:
        acc = torch.tensor(sched.alpha) * acc
    return acc.to(out_dtype)


# ------------------------------------------------------------------------------------
# independent check 2: the exact reference
# ------------------------------------------------------------------------------------

def reference(sched, spec, A, B, C):
    fo = spec.out_format
    ws = sched.workspace
    a, bT = tensor_to_codes(A), tensor_to_codes(B.t())
    Cc = C if C is not None else torch.zeros(A.shape[0], B.shape[1])
    c = tensor_to_codes(Cc.to({"fp32": torch.float32, "fp16": torch.float16}[fo]))
    alpha, beta = x_fin(Fraction(sched.alpha)), x_fin(Fraction(sched.beta))
    c_chain = sched.c_mode == "chain" and C is not None
    K, L = A.shape[1], spec.L

    def val(code):
        return x_of(decode(fo, code))

    out = []
    for i in range(A.shape[0]):
        row = []
        for j in range(B.shape[1]):
            parts = []
            for k0, k1 in k_ranges(K, L, sched.split_k):
                if sched.promote_every is None:
                    parts.append(val(ref.dot(spec, a[i][k0:k1], bT[j][k0:k1],
                                             c[i][j] if c_chain else 0)))
                    continue
                main = val(c[i][j]) if c_chain else x_fin(Fraction(0))
                for b0 in range(k0, k1, sched.promote_every):
                    b1 = min(k1, b0 + sched.promote_every)
                    blk = val(ref.dot(spec, a[i][b0:b1], bT[j][b0:b1], 0))
                    main = rieee.add(ws, main, round_xval(ws, blk))
                parts.append(main)
            parts = [round_xval(ws, p) for p in parts]
            if sched.reduce == "sequential":
                acc = parts[0]
                for p in parts[1:]:
                    acc = rieee.add(ws, acc, p)
            else:
                level = parts
                while len(level) > 1:
                    nxt = [rieee.add(ws, level[t], level[t + 1])
                           for t in range(0, len(level) - 1, 2)]
                    if len(level) % 2:
                        nxt.append(level[-1])
                    level = nxt
                acc = level[0]
            if C is not None and sched.c_mode == "epilogue" and sched.beta != 0:
                bc = rieee.mul(ws, beta, round_xval(ws, val(c[i][j])))
                if sched.epilogue == "fma":
                    acc = rieee.fma(ws, alpha, acc, bc)
                else:
                    acc = rieee.add(ws, rieee.mul(ws, alpha, acc), bc)
            elif sched.alpha != 1:
                acc = rieee.mul(ws, alpha, acc)
            row.append(encode(fo, round_xval(fo, acc), nan_code=spec.nan_encoding))
        out.append(row)
    return ref.codes_to_tensor(out, fo).reshape(A.shape[0], B.shape[1])


CASES = [  # (arch, in_format, out_format)
    ("sm90", "fp16", "fp32"),
    ("sm90", "fp8_e4m3", "fp32"),
    ("sm80", "fp16", "fp16"),
    ("gfx942", "bf16", "fp32"),
    ("gfx90a", "fp16", "fp32"),
]
SCHEDULES = [
    Schedule(split_k=2),
    Schedule(split_k=3, reduce="pairwise"),
    Schedule(split_k=5),
    Schedule(promote_every=2),          # in units of L, scaled below
    Schedule(promote_every=2, c_mode="epilogue"),
    Schedule(split_k=2, promote_every=1),
    Schedule(c_mode="epilogue", alpha=0.5, beta=3.0, epilogue="mul_add"),
    Schedule(c_mode="epilogue", alpha=1.25, beta=-2.0),               # fma
    Schedule(split_k=4, reduce="pairwise", alpha=2.0, beta=0.0),
    Schedule(alpha=-0.75),                                             # C in the chain
]


def _scaled(s, L):
    return s.replace(promote_every=s.promote_every * L) if s.promote_every else s


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c))
def test_schedules_match_composition_and_reference(case, family):
    arch, fin, fout = case
    spec = tme.spec(arch, fin, fout)
    L = spec.L
    K = 6 * L + L // 2 + 1
    g = torch.Generator().manual_seed(zlib.crc32(f"{case}{family}".encode()))
    kw = operands(spec, 3, 2, K, family, g)
    A, B, C = kw["A"], kw["B"], kw["C"]
    for s0 in SCHEDULES:
        s = _scaled(s0, L)
        D = tme.emulated_mm(A, B, C, arch=spec, out_dtype=kw["out_dtype"], schedule=s)
        R = reference(s, spec, A, B, C)
        assert torch.equal(bits(D), bits(R)), (s, D, R)
        if s.epilogue == "mul_add" or (s.alpha == 1 and s.beta == 1) or \
                (s.beta == 0 or s.c_mode == "chain"):
            P = composition(s, spec, A, B, C, kw["out_dtype"])
            assert bool(same_bits_or_both_nan(D, P).all()), (s, D, P)


SCALED = [("sm100", "fp8_e4m3", 32), ("sm100", "fp4_e2m1", 16), ("sm120", "fp4_e2m1", 32)]


def _scaled_spec(arch, fin, blk):
    """The first block-scaled registry row of arch taking fin at block size blk."""
    row = next(r for r in ROWS if r.arch == arch and r.scale_format and fin in r.formats
               and blk in r.block_sizes)
    return row.make_spec(fin, fin, blk)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("case", SCALED, ids=lambda c: f"{c[0]}-{c[1]}-b{c[2]}")
def test_block_scaled_schedules_match_composition(case, family):
    """MX / NVFP4 products: slices and promotion blocks start on scale blocks and carry their
    scales; against plain emulated_mm calls on the slices plus torch fp32 additions."""
    arch, fin, blk = case
    spec = _scaled_spec(arch, fin, blk)
    unit = math.lcm(spec.L, blk)
    K = 5 * unit + 7
    g = torch.Generator().manual_seed(zlib.crc32(f"{case}{family}".encode()))
    kw = operands(spec, 5, 4, K, family, g)
    A, B, C = kw["A"], kw["B"], kw["C"]
    sc = (kw["scale_a"], kw["scale_b"])
    for s in [Schedule(split_k=3), Schedule(split_k=2, reduce="pairwise", promote_every=unit),
              Schedule(promote_every=2 * unit, c_mode="chain"), Schedule(split_k=9),
              Schedule(c_mode="epilogue", alpha=0.5, beta=3.0, epilogue="mul_add")]:
        D = tme.emulated_mm(A, B, C, arch=spec, schedule=s, scale_a=sc[0], scale_b=sc[1])
        P = composition(s, spec, A, B, C, torch.float32, sc)
        assert bool(same_bits_or_both_nan(D, P).all()), (s, D, P)
    # a promotion block on the instruction's K but off the scale blocks (where one exists)
    off = next((m * spec.L for m in range(1, blk + 1) if m * spec.L % blk), None)
    if off is not None:
        with pytest.raises(ValueError, match="scale block"):
            tme.emulated_mm(A, B, C, arch=spec, scale_a=sc[0], scale_b=sc[1],
                            schedule=Schedule(promote_every=off))
    with pytest.raises(ValueError, match=r"scales must have shapes \(\.\.\., 5, nblk\)"):
        tme.emulated_mm(A, B, C, arch=spec, scale_a=sc[0].mT, scale_b=sc[1],
                        schedule=Schedule(split_k=2))   # (nblk, M) given for (M, nblk)
    tree = "0"
    for k in range(1, K):
        tree = f"({tree}+{k})"
    with pytest.raises(ValueError, match="tree schedule cannot run a block-scaled"):
        tme.emulated_mm(A, B, arch=spec, scale_a=sc[0], scale_b=sc[1],
                        schedule=Schedule.from_tree(tree))
    with pytest.raises(ValueError, match="residue_tile cannot run block-scaled"):
        tme.emulated_mm(A, B, arch=spec, scale_a=sc[0], scale_b=sc[1],
                        schedule=Schedule(residue_tile=unit))
    with pytest.raises(ValueError, match="does not start the slices on scale blocks"):
        tme.emulated_mm(A, B, arch=spec, scale_a=sc[0], scale_b=sc[1],
                        schedule=Schedule(split_k=2, split_grain=blk + 1))
    # cuBLAS's grain (128 for 8-bit and narrower inputs) against slices of whole blocks
    s = Schedule(split_k=3, split_grain="cublas")
    G = math.lcm(128 if spec.fmt_a.bits <= 8 else 64, blk)
    chunk = -(-(-(-K // G)) // 3) * G
    want = None
    for k0 in range(0, K, chunk):
        k1, b0 = min(K, k0 + chunk), k0 // blk
        p = tme.emulated_mm(A[:, k0:k1], B[k0:k1], arch=spec, scale_a=sc[0][:, b0:-(-k1 // blk)],
                            scale_b=sc[1][b0:-(-k1 // blk)]).float()
        want = p if want is None else want + p
    D = tme.emulated_mm(A, B, C, arch=spec, schedule=s, scale_a=sc[0], scale_b=sc[1])
    assert bool(same_bits_or_both_nan(D, (want + C.float()).to(D.dtype)).all())


def test_schedule_without_c_and_batched():
    spec = tme.spec("sm90", "fp16")
    g = torch.Generator().manual_seed(3)
    A = torch.randn(2, 3, 100, generator=g).half()
    B = torch.randn(100, 4, generator=g).half()
    s = Schedule(split_k=3, reduce="pairwise")
    D = tme.emulated_mm(A, B, arch="sm90", schedule=s)
    for b in range(2):
        assert torch.equal(D[b], composition(s, spec, A[b], B, None, torch.float32))


@pytest.mark.parametrize("shape", [(2, 0, 3), (0, 5, 3), (2, 5, 0)])
def test_empty_shapes(shape):
    M, K, N = shape
    C = torch.randn(M, N)
    for s, dt in [(Schedule(split_k=3), torch.float16), (Schedule(promote_every=32), torch.float16),
                  (Schedule(input_precision="tf32x3"), torch.float32)]:
        D = tme.emulated_mm(torch.ones(M, K, dtype=dt), torch.ones(K, N, dtype=dt), C,
                            arch="sm90", schedule=s)
        assert D.shape == (M, N) and torch.equal(D, C)   # K = 0: C (+0 sums)


def test_plain_schedule_is_the_chain():
    g = torch.Generator().manual_seed(1)
    A, B, C = torch.randn(4, 70, generator=g).half(), torch.randn(70, 3, generator=g).half(), \
        torch.randn(4, 3, generator=g)
    assert torch.equal(tme.emulated_mm(A, B, C, arch="sm90", schedule=Schedule()),
                       tme.emulated_mm(A, B, C, arch="sm90"))
    # split_k = 1 with C in the epilogue is the chain from +0 plus one fp32 addition
    D = tme.emulated_mm(A, B, C, arch="sm90", schedule=Schedule(c_mode="epilogue"))
    assert torch.equal(D, tme.emulated_mm(A, B, arch="sm90") + C)


def test_split_k_changes_bits_and_k_smaller_than_split():
    g = torch.Generator().manual_seed(5)
    A, B = torch.randn(16, 512, generator=g).half(), torch.randn(512, 16, generator=g).half()
    outs = [tme.emulated_mm(A, B, arch="sm90", schedule=Schedule(split_k=s)) for s in (1, 2, 4, 8)]
    assert any(not torch.equal(outs[0], o) for o in outs[1:])
    # more slices than chunks: the empty slices add +0
    A2, B2 = A[:, :20], B[:20]
    D = tme.emulated_mm(A2, B2, arch="sm90", schedule=Schedule(split_k=8))
    assert torch.equal(D, composition(Schedule(split_k=8), tme.spec("sm90", "fp16"), A2, B2,
                                      None, torch.float32))


# ------------------------------------------------------------------------------------
# input precision
# ------------------------------------------------------------------------------------

def _tf32_nearest(x: torch.Tensor, ties_away: bool) -> torch.Tensor:
    """Independent of torch_mma_emu.tf32: exact rational rounding per element."""
    out = []
    for v in x.flatten().tolist():
        if v == 0 or v != v or abs(v) == float("inf"):
            out.append(v)
            continue
        f = Fraction(abs(v))
        e = f.numerator.bit_length() - f.denominator.bit_length()
        if Fraction(2) ** e > f:
            e -= 1
        e = max(e, -126)
        ulp = Fraction(2) ** (e - 10)
        q, r = divmod(f, ulp)
        half = ulp / 2
        if r > half or (r == half and (ties_away or q % 2 == 1)):
            q += 1
        out.append(float(q * ulp) * (1 if v > 0 else -1))
    return torch.tensor(out, dtype=torch.float32).reshape(x.shape)


@pytest.mark.parametrize("dot_k", [None, 16])
def test_tf32x3_is_tritons_f32dottc_order(dot_k):
    """Per tl.dot tile, as Triton 3.6's F32DotTC emits it (test_triton_choice.py reads it off
    the TTGIR): r = lo*hi from +0, r = hi*lo from r, NaN -> +0, r = hi*hi from r, acc += r."""
    g = torch.Generator().manual_seed(7)
    A = torch.randn(3, 40, generator=g) * torch.exp2(torch.randint(-20, 20, (3, 40), generator=g))
    B = torch.randn(40, 2, generator=g)
    C = torch.randn(3, 2, generator=g)
    A[0, 5], B[7, 1] = float("inf"), float("-inf")     # inf - inf = NaN in the lo parts
    ah, bh = _tf32_nearest(A, True), _tf32_nearest(B, True)
    al, bl = A - ah, B - bh
    acc, step = C, dot_k or 40
    mm = lambda x, y, c=None: tme.emulated_mm(x, y, c, arch="sm90", in_format="tf32")  # noqa: E731
    for t0 in range(0, 40, step):
        s = slice(t0, t0 + step)
        r = mm(al[:, s], bh[s], torch.zeros(3, 2))
        r = mm(ah[:, s], bl[s], r)
        r = torch.nan_to_num(r, nan=0.0, posinf=float("inf"), neginf=float("-inf"))
        acc = acc + mm(ah[:, s], bh[s], r)
    D = tme.emulated_mm(A, B, C, arch="sm90",
                        schedule=Schedule(input_precision="tf32x3", dot_k=dot_k))
    assert torch.equal(bits(D), bits(acc))
    # the older chained order (the small products from C) differs
    A, C = A[1:], C[1:]
    chained = C
    for x, y in ((al[1:], bh), (ah[1:], bl), (ah[1:], bh)):
        chained = mm(x, y, chained)
    D = tme.emulated_mm(A, B, C, arch="sm90", schedule=Schedule(input_precision="tf32x3"))
    assert not torch.equal(bits(D), bits(chained))
    exact = (A.double() @ B.double() + C.double())[:, 0]     # column 1 holds B's -inf
    plain = tme.emulated_mm(A, B, C, arch="sm90", in_format="tf32")[:, 0]
    assert (D[:, 0].double() - exact).abs().max() < (plain.double() - exact).abs().max()


def test_tf32_rn_tf32_and_ieee():
    g = torch.Generator().manual_seed(8)
    A, B = torch.randn(3, 33, generator=g), torch.randn(33, 4, generator=g)
    D = tme.emulated_mm(A, B, arch="sm80", schedule=Schedule(input_precision="tf32_rn"))
    R = tme.emulated_mm(_tf32_nearest(A, False), _tf32_nearest(B, False), arch="sm80",
                        in_format="tf32")
    assert torch.equal(D, R)
    assert torch.equal(tme.emulated_mm(A, B, arch="sm80", schedule="triton_tf32"),
                       tme.emulated_mm(A, B, arch="sm80", in_format="tf32"))
    assert torch.equal(tme.emulated_mm(A, B, arch="sm80", schedule="triton_ieee"),
                       tme.emulated_mm(A, B, arch="sm80"))
    with pytest.raises(TypeError, match="float32"):
        tme.emulated_mm(A.half(), B.half(), arch="sm80", schedule="triton_tf32x3")


# ------------------------------------------------------------------------------------
# the Schedule object
# ------------------------------------------------------------------------------------

def test_round_trip_and_hash():
    for s in [Schedule(), Schedule(split_k=4, reduce="pairwise", workspace="fp64"),
              Schedule(promote_every=128, c_mode="epilogue", alpha=0.1, beta=-3.5,
                       epilogue="mul_add"),
              Schedule(input_precision="tf32x3", dot_k=32),
              Schedule.from_tree("([0+1+2]+(3+4))")]:
        assert Schedule.from_string(s.to_string()) == s
        assert hash(Schedule.from_string(s.to_string())) == hash(s)
        assert Schedule.from_dict(s.to_dict()) == s
    assert Schedule(split_k=2).c_mode == "epilogue"
    assert Schedule().is_plain and not Schedule(split_k=2).is_plain
    assert set(tme.schedule.presets()) >= {"deepseek_v3_promote_128", "cublas_split_k_4",
                                           "scaled_mm_fast_accum", "scaled_mm_precise",
                                           "triton_fp8_hopper", "triton_tf32x3"}
    # none confirmed on a GPU by us yet; some measured by others (docs/schedules.md)
    assert all(p.verified in ("", "measured by others on GB200 (sm_100), not yet by us")
               for p in tme.schedule.PRESETS.values())


@pytest.mark.parametrize("kw, msg", [
    (dict(split_k=0), "split_k must be >= 1"),
    (dict(split_k=-3), "split_k must be >= 1"),
    (dict(split_k=2.0), "split_k must be an int"),
    (dict(reduce="tree"), "reduce must be one of"),
    (dict(workspace="fp16"), "workspace must be one of"),
    (dict(epilogue="fused"), "epilogue must be one of"),
    (dict(input_precision="bf16x3"), "input_precision must be one of"),
    (dict(alpha=float("nan")), "alpha must be a finite number"),
    (dict(split_k=2, c_mode="chain"), "split_k > 1"),
    (dict(beta=2.0), "beta must be 1"),
    (dict(promote_every=0), "promote_every must be >= 1"),
    (dict(tree="((0+1)"), "not a valid SumTree"),
    (dict(tree="((0+1)+2)", split_k=2), "a tree schedule"),
])
def test_bad_schedules(kw, msg):
    with pytest.raises(ValueError, match=msg):
        Schedule(**kw)


def test_bad_calls():
    A, B = torch.randn(2, 64).half(), torch.randn(64, 2).half()
    with pytest.raises(ValueError, match="not a multiple of the instruction's K"):
        tme.emulated_mm(A, B, arch="sm90", schedule=Schedule(promote_every=24))
    with pytest.raises(ValueError, match="K leaves"):
        tme.emulated_mm(A, B, arch="sm90", schedule=Schedule.from_tree("((0+1)+2)"))
    with pytest.raises(ValueError, match="neither a serialised schedule nor a preset"):
        tme.emulated_mm(A, B, arch="sm90", schedule="fastest")
    with pytest.raises(ValueError, match="unknown schedule field"):
        Schedule.from_string("schedule:splitk=2")
    with pytest.raises(TypeError, match="schedule must be"):
        tme.emulated_mm(A, B, arch="sm90", schedule=3)
    # a 16-product fused node cannot run on sm70 (4-element operations) nor as an FMA
    t = "[" + "+".join(str(k) for k in range(16)) + "]"
    with pytest.raises(ValueError, match="cannot run this tree"):
        tme.emulated_mm(A[:, :16], B[:16], arch="sm70", schedule=Schedule.from_tree(t))
    with pytest.raises(ValueError, match="cannot run this tree"):
        tme.emulated_mm(A[:, :16].float(), B[:16].float(), arch="sm90",
                        schedule=Schedule.from_tree(t))
    # two sums under one fused node: an operation takes at most one accumulator
    with pytest.raises(ValueError, match="at most one accumulator"):
        tme.emulated_mm(A[:, :6], B[:6], arch="sm90",
                        schedule=Schedule.from_tree("[(0+1)+(2+3)+4+5]"))


def test_torch_compile_fullgraph():
    g = torch.Generator().manual_seed(2)
    A, B, C = torch.randn(4, 96, generator=g).half(), torch.randn(96, 3, generator=g).half(), \
        torch.randn(4, 3, generator=g)
    s = Schedule(split_k=3, alpha=0.5, beta=2.0, epilogue="mul_add")

    def f(a, b, c):
        return tme.emulated_mm(a, b, c, arch="sm90", schedule=s)

    torch._dynamo.reset()
    out = torch.compile(f, fullgraph=True, backend="eager")(A, B, C)
    assert torch.equal(out, f(A, B, C))

    # a Schedule built inside the compiled function (its string form is traced too)
    def g(a, b, c):
        return tme.emulated_mm(a, b, c, arch="sm90", schedule=Schedule(
            split_k=3, alpha=0.5, beta=2.0, epilogue="mul_add", reduce="pairwise"))

    def h(a, b):
        return tme.emulated_mm(a, b, arch="sm90",
                               schedule=Schedule.from_string("schedule:promote_every=32"))
    torch._dynamo.reset()
    assert torch.equal(torch.compile(g, fullgraph=True, backend="eager")(A, B, C), g(A, B, C))
    assert torch.equal(torch.compile(h, fullgraph=True, backend="eager")(A, B), h(A, B))


def test_serialised_form_escapes_separators_only():
    s = Schedule.from_tree("((0+1)+2)", alpha=3.0)
    assert s.to_string() == "schedule:c_mode=chain,alpha=0x1.8000000000000p+1,tree=((0+1)+2)"
    # what older versions wrote (every non-alphanumeric character escaped) still reads
    assert Schedule.from_string("schedule:tree=%28%280%2B1%29%2B2%29,alpha=0x1.8p%2B1") == s
    with pytest.raises(ValueError, match="bad escape"):
        Schedule.from_string("schedule:split_k=%zz")


def _expanded_reduce(items, how):
    """Every slice past K as its own +0 item (the semantics as documented)."""
    if how == "sequential" or len(items) <= 2:
        out = list(items[0])
        for it in items[1:]:
            out += it + [3]
        return out
    level = items
    while len(level) > 1:
        nxt = [level[i] + level[i + 1] + [3] for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def _eval_fp32(prog, vals):
    st, pc = [], 0
    while pc < len(prog):
        if prog[pc] == 0:                      # PARTIAL s
            st.append(vals[prog[pc + 1]])
            pc += 2
        elif prog[pc] == 2:                    # ZERO
            st.append(torch.zeros((), dtype=torch.float32))
            pc += 1
        else:                                  # ADD (fp32, round to nearest)
            y = st.pop()
            st.append(st.pop() + y)
            pc += 1
    return st[0]


def test_slices_past_k_cost_nothing_and_change_nothing():
    """split_k far beyond the chunks: the empty slices collapse (x + 0 + 0 = x + 0, also for
    x = -0) into at most one +0 per addition with a real value; same bits as adding each."""
    from torch_mma_emu.schedule_run import _reduce_program
    g = torch.Generator().manual_seed(8)
    pool = torch.tensor([-0.0, 0.0, 1.5, -1e30, float("inf"), float("nan"), -3.25e-40, 1e30])
    for n in range(1, 8):
        for empties in range(0, 34):
            for how in ("sequential", "pairwise"):
                vals = pool[torch.randint(0, len(pool), (n,), generator=g)]
                items = [[0, i] for i in range(n)]
                full = _eval_fp32(_expanded_reduce(items + [[2]] * empties, how), vals)
                short = _eval_fp32(_reduce_program(items, how, empties), vals)
                assert torch.equal(bits(full), bits(short)) or (full.isnan() and short.isnan())
    A, B, C = torch.randn(4, 40, generator=g).half(), torch.randn(40, 3, generator=g).half(), \
        torch.randn(4, 3, generator=g)
    want = tme.emulated_mm(A, B, C, arch="sm90", schedule=Schedule(split_k=4))  # 3 chunks
    for big in (10 ** 7, 1 << 24):     # 2^24: MMA_EMU_MAX_SPLIT_K's default
        assert torch.equal(tme.emulated_mm(A, B, C, arch="sm90", schedule=Schedule(split_k=big)),
                           want)
    for sk in (5, 9, 37):
        s = Schedule(split_k=sk, reduce="pairwise")
        assert torch.equal(tme.emulated_mm(A, B, C, arch="sm90", schedule=s),
                           composition(s, tme.spec("sm90", "fp16"), A, B, C, torch.float32))


def test_gradients_through_a_schedule():
    g = torch.Generator().manual_seed(4)
    A = torch.randn(3, 64, generator=g, dtype=torch.float32).half().requires_grad_()
    B = torch.randn(64, 2, generator=g).half().requires_grad_()
    s = Schedule(split_k=2)
    D = tme.emulated_mm(A, B, arch="sm90", schedule=s)
    G = torch.randn(D.shape, generator=g)
    D.backward(G)
    gA = tme.emulated_mm(G.half(), B.detach().mT, arch="sm90", schedule=s).half()
    assert torch.equal(A.grad, gA)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    g = torch.Generator().manual_seed(9)
    spec = tme.spec("sm90", "fp16")
    kw = operands(spec, 8, 8, 200, "bitstream", g)
    for s in [Schedule(split_k=4, reduce="pairwise"), Schedule(promote_every=64),
              Schedule(c_mode="epilogue", alpha=0.5, beta=2.0)]:
        cpu = tme.emulated_mm(kw["A"], kw["B"], kw["C"], arch="sm90", schedule=s)
        gpu = tme.emulated_mm(kw["A"].cuda(), kw["B"].cuda(), kw["C"].cuda(), arch="sm90",
                              schedule=s)
        assert torch.equal(bits(cpu), bits(gpu.cpu()))


# ------------------------------------------------------------------------------------
# the preview passes schedules through (emulate, convert, Policy)
# ------------------------------------------------------------------------------------

def test_emulate_and_convert_pass_the_schedule_through():
    g = torch.Generator().manual_seed(11)
    x = torch.randn(8, 256, generator=g)
    w = torch.randn(256, 5, generator=g)
    s = Schedule(split_k=3)
    kw = dict(arch="sm90", in_format="tf32")
    want = tme.emulated_mm(x, w, **kw, schedule=s)
    assert not torch.equal(want, tme.emulated_mm(x, w, **kw))  # the schedule shows here
    with tme.emulate("sm90", fp32_format="tf32", schedule=s):
        got = x @ w
    assert torch.equal(got, want)
    with tme.emulate("sm90", fp32_format="tf32",
                     schedule={"mm": "cublas_split_k_4", "default": None}):
        got = x @ w
    assert torch.equal(got, tme.emulated_mm(x, w, **kw, schedule="cublas_split_k_4"))
    lin = torch.nn.Linear(256, 5, bias=False)
    with torch.no_grad():
        lin.weight.copy_(w.t())
    conv = tme.convert(lin, "sm90", fp32_format="tf32", schedule=s)
    with torch.no_grad():
        assert torch.equal(conv(x), want)
    # fp32 products take the input precision, fp16 ones ignore it
    with tme.emulate("sm80", schedule="triton_tf32x3"):
        assert torch.equal(x @ w, tme.emulated_mm(x, w, arch="sm80",
                                                  schedule="triton_tf32x3"))
        assert torch.equal(x.half() @ w.half(),
                           tme.emulated_mm(x.half(), w.half(), arch="sm80").half())
    with pytest.raises(ValueError, match="unknown op kind"):
        tme.emulate("sm90", schedule={"matmul": s})


def test_the_op_rejects_malformed_programs():
    """The C++ op checks its program before running it (a bad one is a ValueError, never a
    crash): unknown op, stack underflow, out-of-range indices, leftover values."""
    spec = tme.spec("sm90", "fp16")
    a = torch.zeros(1, 2, 4, dtype=torch.int16)
    b = torch.zeros(1, 4, 3, dtype=torch.int16)
    c = torch.zeros(1, 2, 3)
    parts = torch.zeros(2, 2, 3)
    params = list(cpp.params(spec))
    consts = [0.0, 1.0, 1.0]
    run = lambda prog: torch.ops.mma_emu._sched(a, b, c, parts, params, prog, consts)
    assert torch.equal(run([0, 0, 0, 1, 3]), torch.zeros(1, 2, 3))
    for prog, msg in [([10], "unknown program op"), ([3], "ADD needs two values"),
                      ([9, 0, 4, 16], "CHAINS needs a value"),
                      ([2, 9, 0, 4, 0], "CHAINS .* step 0 must lie"),
                      ([2, 9, 0, 4, 8], "multiples of 16"), ([2, 9, 0, 4], "truncated"),
                      ([0, 5], "partial index"), ([0, 0, 0, 1], "leaves 2 values"),
                      ([4, 1, 0, 16, 7, 0], "product index out of range"),
                      ([4, 1, 0, 16, 1, 20], "slot out of range"),
                      ([4, 1, 1, 16, 1, 0], "accumulator missing"), ([], "leaves 0 values"),
                      ([4, 2, 0, 16, 1], "program truncated"), ([2] * 65, "stack entries")]:
        with pytest.raises(ValueError, match=msg):
            run(prog)
