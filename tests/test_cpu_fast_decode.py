"""Every code of every input format of <= 16 bits, and of tf32 / xf32, through the CPU kernel's
fast decoders (csrc/cpu/decode_fast.cpp: a 256-entry table for 1-byte codes, branch-free
fp16 / bf16 / tf32) and the planes built from them (fdpa_engine.cpp plane_run), against the
scalar path (MMA_EMU_SCALAR=1: the generic decode() per code) and against the codes' values.

- A holds all codes (64 per row, in code order) against the identity B: D[i, j] is the value
  of A[i, j], so every code shows in its own output.  The same with B holding all codes (its
  columns: B's decode reads tiles of columns).  The non-finite codes each alone in a row of
  ones against columns of +1 and -1 (+-Inf, NaN).
- Every registry row (FDPA ops) with each of its input formats of <= 16 bits: fast == scalar,
  and the finite codes' outputs equal their values.
- On a few rows: transposed, strided and batched A and B, tiny K blocks
  (MMA_EMU_CPU_BLOCK_BYTES=1), the AVX2 kernels, fp16 / fp32 C in any layout, broadcast C,
  c_mode="epilogue".
"""
import functools

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu.cpp import params
from torch_mma_emu.formats import FORMATS, value_table
from torch_mma_emu.registry import ROWS
from helpers import assert_same_bits, env, fast_path, mm_on_path, row_id

_probe = tme.spec("sm90", "fp16")
ISAS = [i for i in ("avx512", "avx2") if fast_path(_probe, i).startswith(i + ":")]
if not ISAS and fast_path(_probe).startswith("neon:"):
    ISAS = [None]  # aarch64: the default path is NEON
pytestmark = pytest.mark.skipif(not ISAS, reason="no vector kernels on this CPU")

K = 64  # a multiple of every row's L and block size
OUT_DT = {"fp32": torch.float32, "fp16": torch.float16}


def _cases():
    """(spec, format) for every FDPA registry row and input format of <= 16 bits, one per
    distinct parameter vector."""
    seen, out = set(), []
    for r in ROWS:
        for f in r.formats:
            fmt = FORMATS[f]
            if fmt.bits > 16 or fmt.container_bits == 32:
                continue
            for bs in (r.block_sizes or (0,)):
                s = r.make_spec(f, f, bs)
                if s.op in ("fma", "ftz_addmul"):
                    continue
                key = tuple(params(s))
                if key not in seen:
                    seen.add(key)
                    out.append(s)
    return out


CASES = _cases()


def _tensor(idx, fmt):
    """Code indices (int64) -> the tensor emulated_mm takes for fmt."""
    if fmt.bits == 16:
        return idx.to(torch.int16).view(fmt.torch_dtype)
    t = idx.to(torch.uint8)
    return t.view(fmt.torch_dtype) if fmt.torch_dtype is not None and fmt.bits == 8 else t


@functools.lru_cache(maxsize=None)
def _values(name):
    """float64 value of every code (index = code)."""
    fmt = FORMATS[name]
    if fmt.bits <= 8:
        return value_table(name).double()
    return _tensor(torch.arange(1 << 16), fmt).double()


def _code_of(name, v):
    return int((_values(name) == v).nonzero()[0, 0])


def _kw(spec, A, B, C=None):
    fmt = FORMATS[spec.in_format]
    kw = dict(A=A, B=B, C=C, arch=spec, out_dtype=OUT_DT[spec.out_format])
    if fmt.torch_dtype is None or fmt.bits != 16 and fmt.bits != 8:
        kw["in_format"] = spec.in_format
    if spec.scaled:  # unit scales
        unit = 0x38 if spec.scale_format == "ue4m3" else 127
        nb = -(-A.shape[-1] // spec.block_size)
        sa = torch.full((*A.shape[:-1], nb), unit, dtype=torch.uint8)
        sb = torch.full((*B.shape[:-2], nb, B.shape[-1]), unit, dtype=torch.uint8)
        want = torch.float8_e4m3fn if spec.scale_format == "ue4m3" else getattr(torch, "float8_e8m0fnu", None)
        kw["scale_a"] = sa.view(want) if want is not None else sa
        kw["scale_b"] = sb.view(want) if want is not None else sb
    return kw


def _operands(spec):
    """(codes laid out as A (M, K), identity (K, K), specials A, +-1 columns) as code
    indices."""
    name = spec.in_format
    vals = _values(name)
    n = vals.numel()
    allc = torch.arange(n)
    if n % K:
        allc = torch.cat([allc, torch.zeros(K - n % K, dtype=torch.int64)])
    one, zero = _code_of(name, 1.0), _code_of(name, 0.0)
    eye = torch.full((K, K), zero, dtype=torch.int64)
    eye.fill_diagonal_(one)
    special = torch.arange(n)[~torch.isfinite(vals)]
    sp = torch.full((max(1, special.numel()), K), one, dtype=torch.int64)
    sp[torch.arange(special.numel()), torch.arange(special.numel()) % K] = special
    pm = torch.stack([torch.full((K,), one), torch.full((K,), _code_of(name, -1.0))], 1)
    return allc.reshape(-1, K), eye, sp, pm


def _check_values(D, codes, name, what):
    """Outputs of the identity products equal the codes' values (rows / columns without a
    non-finite code; the others are NaN)."""
    v = _values(name)[codes]
    fin = torch.isfinite(v).all(1, keepdim=True)
    assert torch.equal(torch.where(fin, D.double(), 0.0), torch.where(fin, v, 0.0)), what
    assert D[~fin.expand_as(D)].isnan().all(), what


@functools.lru_cache(maxsize=None)
def _scalar(spec, side):
    """The scalar path's outputs of the base products ("A": all codes in A; "B": in B;
    "special")."""
    fmt = FORMATS[spec.in_format]
    codes, eye, sp, pm = _operands(spec)
    if side == "A":
        A, B = codes, eye
    elif side == "B":
        A, B = eye, codes.t().contiguous()
    else:
        A, B = sp, pm
    return mm_on_path(_kw(spec, _tensor(A, fmt), _tensor(B, fmt)), "scalar"), A, B


@pytest.mark.parametrize("spec", CASES, ids=row_id)
def test_every_code_fast_equals_scalar(spec):
    """All codes through A's rows and B's columns, and every non-finite code: the fast path's
    bits are the scalar path's, and the identity products give the codes' values."""
    fmt = FORMATS[spec.in_format]
    for side in ("A", "B", "special"):
        S, A, B = _scalar(spec, side)
        F = mm_on_path(_kw(spec, _tensor(A, fmt), _tensor(B, fmt)), ISAS[0])
        assert_same_bits(F, S, f"fast vs scalar, all codes in {side}, {row_id(spec)}")
    _check_values(_scalar(spec, "A")[0], _operands(spec)[0], spec.in_format, "A's codes")
    _check_values(_scalar(spec, "B")[0].t(), _operands(spec)[0], spec.in_format, "B's codes")
    # the specials: +-Inf times +1 / -1 (beside finite ones) is +-Inf, NaN is NaN
    S = _scalar(spec, "special")[0]
    sp = _operands(spec)[2]
    v = _values(spec.in_format)[sp[torch.arange(sp.shape[0]), torch.arange(sp.shape[0]) % K]]
    if torch.isfinite(v).all():
        return  # a format without non-finite codes (the row is a row of ones)
    want = torch.stack([v, -v], 1)
    assert torch.equal(S.double().isnan(), want.isnan())
    assert torch.equal(S.double()[~want.isnan()], want[~want.isnan()])


def _pick(arch, fmt, out="fp32"):
    for s in CASES:
        if s.arch == arch and s.in_format == fmt and s.out_format == out and not s.scaled:
            return s
    raise LookupError((arch, fmt, out))


LAYOUT_SPECS = [_pick("sm90", "fp16"), _pick("sm90", "bf16"), _pick("sm90", "fp8_e4m3", "fp16"),
                _pick("sm100", "fp4_e2m1"), _pick("gfx942", "fp16"), _pick("gfx942", "fp8_e5m2fnuz"),
                _pick("gfx908", "bf16")]


def _strided(t, dim):
    """t with the elements of dimension dim two apart (a view into a wider tensor)."""
    shape = list(t.shape)
    shape[dim] *= 2
    w = torch.zeros(shape, dtype=t.dtype)
    idx = [slice(None)] * t.dim()
    idx[dim] = slice(None, None, 2)
    w[tuple(idx)] = t
    return w[tuple(idx)]


def _col_major(t):
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


@pytest.mark.parametrize("spec", LAYOUT_SPECS, ids=row_id)
def test_every_code_in_any_layout(spec):
    """The same bits with A and B transposed (column-major), strided along either dimension,
    batched; with K blocks of one instruction; on AVX2."""
    fmt = FORMATS[spec.in_format]
    for side in ("A", "B"):
        S, ai, bi = _scalar(spec, side)
        A, B = _tensor(ai, fmt), _tensor(bi, fmt)
        variants = {"A col-major": (_col_major(A), B), "B col-major": (A, _col_major(B)),
                    "A k-strided": (_strided(A, 1), B), "A row-strided": (_strided(A, 0), B),
                    "B k-strided": (A, _strided(B, 0)), "B col-strided": (A, _strided(B, 1)),
                    "both col-major, strided": (_strided(_col_major(A), 0), _strided(_col_major(B), 1))}
        for what, (a, b) in variants.items():
            assert_same_bits(mm_on_path(_kw(spec, a, b), ISAS[0]), S, f"{what}, codes in {side}")
        # a batch of two: the second element reversed
        ab = _tensor(torch.stack([ai, ai.flip(0)]) if side == "A" else torch.stack([ai, ai]), fmt)
        bb = _tensor(torch.stack([bi, bi]) if side == "A" else torch.stack([bi, bi.flip(1)]), fmt)
        D = mm_on_path(_kw(spec, ab, bb), ISAS[0])
        assert_same_bits(D[0], S, f"batch element 0, codes in {side}")
        assert_same_bits(D[1], S.flip(0) if side == "A" else S.flip(1), f"batch element 1, codes in {side}")
        with env(MMA_EMU_CPU_BLOCK_BYTES=1):
            assert_same_bits(mm_on_path(_kw(spec, A, B), ISAS[0]), S, f"tiny K blocks, codes in {side}")
        for isa in ISAS[1:]:
            assert_same_bits(mm_on_path(_kw(spec, A, B), isa), S, f"{isa}, codes in {side}")


@pytest.mark.parametrize("spec", [_pick("sm90", "fp16"), _pick("sm90", "fp16", "fp16"),
                                  _pick("sm89", "fp8_e5m2", "fp16")], ids=row_id)
def test_c_and_output_layouts(spec):
    """fp32 / fp16 C contiguous, transposed, strided and broadcast, and c_mode="epilogue",
    beside every code of A: fast == scalar."""
    fmt = FORMATS[spec.in_format]
    codes, _, _, _ = _operands(spec)
    g = torch.Generator().manual_seed(41)
    A = _tensor(codes, fmt)
    B = torch.randn(K, 40, generator=g).to(fmt.torch_dtype) if fmt.bits == 16 else \
        _tensor(torch.randint(0, 1 << fmt.bits, (K, 40), generator=g), fmt)
    odt = OUT_DT[spec.out_format]
    M = A.shape[0]
    C = (torch.randn(M, 40, generator=g) * 4).to(odt)
    Cs = {"contiguous": C, "col-major": _col_major(C), "strided": _strided(C, 1),
          "broadcast row": C[0].expand(M, 40), "zero": None}
    for what, c in Cs.items():
        for c_mode in ("chain", "epilogue"):
            kw = dict(_kw(spec, A, B, c))
            S = mm_on_path(kw, "scalar", c_mode)
            for isa in ISAS:
                assert_same_bits(mm_on_path(kw, isa, c_mode), S, f"C {what}, {c_mode}, {isa}")


@pytest.mark.parametrize("arch,fmt", [("sm90", "tf32"), ("gfx942", "xf32")])
def test_every_tf32_code_fast_equals_scalar(arch, fmt):
    """tf32 / xf32 (fp32 words, decode_fast.cpp decode_tf32): every one of the 2^19 codes,
    under random low 13 bits (dropped), in A's rows and in B's columns against the identity:
    the fast path's bits are the scalar path's, and the finite codes give their values
    (the word with the low bits cleared)."""
    spec = tme.spec(arch, fmt)
    g = torch.Generator().manual_seed(19)
    codes = torch.arange(1 << 19, dtype=torch.int64)
    words = (codes << 13) | torch.randint(0, 1 << 13, codes.shape, generator=g)
    A = words.to(torch.int32).view(torch.float32).reshape(-1, K)
    eye = torch.eye(K, dtype=torch.float32)
    clean = (codes << 13).to(torch.int32).view(torch.float32).reshape(-1, K)
    for side, (a, b) in {"A": (A, eye), "B": (eye, A.t())}.items():
        kw = dict(A=a, B=b, C=None, arch=spec, out_dtype=torch.float32)
        S = mm_on_path(kw, "scalar")
        F = mm_on_path(kw, ISAS[0])
        assert_same_bits(F, S, f"fast vs scalar, every {fmt} code in {side}")
        D = S if side == "A" else S.t()
        fin = torch.isfinite(clean).all(1, keepdim=True)
        assert torch.equal(torch.where(fin, D, 0.0), torch.where(fin, clean, 0.0)), side
        assert D[~fin.expand_as(D)].isnan().all(), side


@pytest.mark.parametrize("spec", [_pick("sm90", "fp16", "fp16"),
                                  _pick("sm75", "fp16", "fp16").replace(zero_sign="keep")],
                         ids=lambda s: f"{s.arch}-zero_sign={s.zero_sign}")
def test_every_fp16_code_as_c_and_out(spec):
    """Every fp16 code as C (fast_fdpa.cpp's vectorised fp16 <-> accumulator-word runs, in
    and out), under zero products and under random ones, chain and epilogue: fast == scalar;
    with zero products D is C's value (NaN stays NaN; a zero C gives +0 where zero_sign =
    "plus", else the sum of signed zeros)."""
    codes = torch.arange(1 << 16, dtype=torch.int64)
    C = codes.to(torch.int16).view(torch.float16).reshape(256, 256)
    g = torch.Generator().manual_seed(16)
    for what, A in {"zero products": torch.zeros(256, K, dtype=torch.float16),
                    "random products": (torch.randn(256, K, generator=g) / 64).half()}.items():
        B = torch.randn(K, 256, generator=g).half()
        for c_mode in ("chain", "epilogue"):
            kw = dict(A=A, B=B, C=C, arch=spec, out_dtype=torch.float16)
            S = mm_on_path(kw, "scalar", c_mode)
            for isa in ISAS:
                assert_same_bits(mm_on_path(kw, isa, c_mode), S, f"{what}, {c_mode}, {isa}")
            if what == "zero products":
                num = ~C.isnan() & (C != 0)
                assert torch.equal(S[num].view(torch.int16), C[num].view(torch.int16)), c_mode
                assert S[C.isnan()].isnan().all() and (S[C == 0] == 0).all(), c_mode
                if spec.zero_sign == "plus":
                    assert (S[C == 0].view(torch.int16) == 0).all(), c_mode
