"""Library split-K (torch_mma_emu/schedule_split.py): cuBLAS's slicing grain, the three merge
schemes, the start from partial 0 and CUTLASS's leading residue tile, each against a
reference written here from the published description (bitequiv, docs/schedules.md) out of
plain ``emulated_mm`` calls on slices and element-wise numpy float32 / float16 arithmetic.
Zero mismatches allowed."""
import numpy as np
import pytest
import torch

import torch_mma_emu as tme
import torch_mma_emu.schedule_run as sched_mod
from torch_mma_emu.schedule import PRESETS, Schedule
from torch_mma_emu.schedule_split import k_slices
from helpers import bits

F8 = torch.float8_e4m3fn


def cublas_slices(K, splits, G):
    """bitequiv's partition: chunk = ceil(ceil(K/G)/splits)*G, ceil(K/chunk) slices."""
    total = (K + G - 1) // G
    chunk = ((total + splits - 1) // splits) * G
    n = max(1, (K + chunk - 1) // chunk)
    return [(i * chunk, min(K, (i + 1) * chunk)) for i in range(n)]


def residue_bounds(klen, kpd, ktile):
    """Where a CUTLASS chain over klen elements rounds: 0, kpd, ..., the end of the leading
    residue tile (klen % ktile, a whole tile when 0), then every kpd."""
    res = klen % ktile or ktile
    res = min(res, klen)
    b = [0]
    while b[-1] + kpd < res:
        b.append(b[-1] + kpd)
    b.append(res)
    while b[-1] < klen:
        b.append(b[-1] + kpd)
    return sorted(set(b))


def emm(A, B, C=None, **kw):
    return tme.emulated_mm(A, B, C, out_dtype=torch.float32, **kw)


def slice_value(A, B, k0, k1, spec_kw, tile=None):
    """One slice's fp32 partial: a chain from +0 (emulated_mm on the slice), or with a
    residue tile one emulated_mm instruction group at a time, chained through C."""
    if tile is None:
        if k1 == k0:
            return torch.zeros(A.shape[0], B.shape[1])
        return emm(A[:, k0:k1], B[k0:k1], **spec_kw)
    b = [k0 + x for x in residue_bounds(k1 - k0, tme.spec(**spec_kw).L, tile)]
    acc = None
    for g0, g1 in zip(b, b[1:]):
        acc = emm(A[:, g0:g1], B[g0:g1], acc, **spec_kw)
    return acc if acc is not None else torch.zeros(A.shape[0], B.shape[1])


def merged(parts, how):
    """Element-wise in numpy: forward from partial 0."""
    ps = [p.numpy().astype(np.float32) for p in parts]
    out = np.empty_like(ps[0])
    with np.errstate(over="ignore", invalid="ignore"):   # inf and NaN are meant
        for idx in np.ndindex(out.shape):
            out[idx] = _merge_one([p[idx] for p in ps], how)
    return torch.from_numpy(out)


def _merge_one(ps, how):
    """One output element's partials merged forward from partial 0."""
    if how == "workspace":
        acc = ps[0]
        for p in ps[1:]:
            acc = np.float32(acc + p)
    elif how == "fp16_partials":
        acc = np.float32(np.float16(ps[0]))
        for p in ps[1:]:
            acc = np.float32(acc + np.float32(np.float16(p)))
    else:
        acc = np.float16(ps[0])
        for p in ps[1:]:
            acc = np.float16(np.float32(np.float32(acc) + p))
    return np.float32(acc)


def operands(dtype, M, K, N, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(M, K, generator=g).to(dtype), torch.randn(K, N, generator=g).to(dtype),
            torch.randn(M, N, generator=g))


@pytest.fixture(params=[True, False], ids=["cpu-chain-ops", "gemm-partials"])
def route(request):
    old = sched_mod._CPU_CHAINS
    sched_mod._CPU_CHAINS = request.param
    yield
    sched_mod._CPU_CHAINS = old


# ------------------------------------------------------------------------ slicing

@pytest.mark.parametrize("dtype, G", [(torch.float16, 64), (torch.bfloat16, 64), (F8, 128),
                                      (torch.float8_e5m2, 128)])
def test_cublas_grain_slices_for_many_K_and_splits(dtype, G, route):
    for K in (1, 63, 64, 65, 130, 300, 1100, 1537):
        for splits in (2, 3, 4, 7, 16):
            want_slices = cublas_slices(K, splits, G)
            assert k_slices(K, G, splits, True) == (want_slices, 0)
            A, B, C = operands(dtype, 3, K, 2, K * 31 + splits)
            s = Schedule(split_k=splits, split_grain="cublas")
            got = emm(A, B, C, arch="sm90", schedule=s)
            parts = [slice_value(A, B, k0, k1, dict(arch="sm90")) for k0, k1 in want_slices]
            want = (merged(parts, "workspace") + C).float()
            assert torch.equal(bits(got), bits(want)), (dtype, K, splits)


def test_K_1100_in_4_splits_is_320_per_slice_not_288():
    assert k_slices(1100, 64, 4, True)[0] == [(0, 320), (320, 640), (640, 960), (960, 1100)]
    assert k_slices(1100, 16, 4, False)[0][0] == (0, 288)    # the instruction-aligned cut
    A, B, _ = operands(torch.float16, 8, 1100, 8, 0)
    new = emm(A, B, arch="sm90", schedule="cublas_split_k_4")
    old = emm(A, B, arch="sm90", schedule=Schedule(split_k=4))
    assert not torch.equal(bits(new), bits(old))
    # fp8: G = 128 -> 384, 384, 332
    assert k_slices(1100, 128, 4, True)[0] == [(0, 384), (384, 768), (768, 1100)]


def test_the_merge_starts_from_partial_0_and_keeps_a_minus_zero(route):
    """Each fp32 FMA partial of products that underflow is -0: forward from partial 0 keeps
    it (from a zero accumulator, or with the empty slices of the instruction-aligned cut,
    it would be +0)."""
    A, B = torch.full((2, 200), -1e-30), torch.full((200, 3), 1e-30)
    kw = dict(arch="sm80", in_format="fp32")
    for merge in ("workspace", "fp16_partials", "fp16_serial"):
        s = Schedule(split_k=4, split_grain="cublas", merge=merge)
        D = emm(A, B, **kw, schedule=s)
        assert torch.signbit(D).all() and (D == 0).all(), merge
    # split_k beyond the grain's chunks: no empty slice is run, the -0 stays
    D = emm(A[:, :70], B[:70], **kw, schedule=Schedule(split_k=8, split_grain=64))
    assert torch.signbit(D).all()
    # the instruction-aligned cut adds its empty slices' +0: +0
    D = emm(A[:, :70], B[:70], **kw, schedule=Schedule(split_k=100))
    assert not torch.signbit(D).any()


# ------------------------------------------------------------------------ merge schemes

@pytest.mark.parametrize("merge", ["workspace", "fp16_partials", "fp16_serial"])
@pytest.mark.parametrize("dtype, arch", [(torch.float16, "sm90"), (torch.bfloat16, "sm80"),
                                         (F8, "sm90"), (F8, "sm100")])
def test_each_merge_scheme_against_slices_merged_in_numpy(merge, dtype, arch, route):
    for K, splits, seed in ((1100, 4, 1), (517, 3, 2), (2048, 8, 3)):
        A, B, C = operands(dtype, 6, K, 5, seed)
        A = A * 40 if dtype != F8 else A    # partials beyond fp16's precision
        s = Schedule(split_k=splits, split_grain="cublas", merge=merge)
        G = 128 if dtype == F8 else 64
        parts = [slice_value(A, B, k0, k1, dict(arch=arch))
                 for k0, k1 in cublas_slices(K, splits, G)]
        want = merged(parts, merge)
        got = emm(A, B, arch=arch, schedule=s)
        assert torch.equal(bits(got), bits(want)), (K, splits)
        # C and alpha in the epilogue after the merge (fp32 fma; alpha 0.5 is exact)
        got_c = emm(A, B, C, arch=arch, schedule=s.replace(alpha=0.5, epilogue="mul_add"))
        assert torch.equal(bits(got_c), bits(torch.tensor(0.5) * want + C)), (K, splits)
    # the schemes differ from each other here
    outs = {m: emm(A, B, arch=arch, schedule=Schedule(split_k=8, split_grain="cublas",
                                                      merge=m))
            for m in ("workspace", "fp16_partials", "fp16_serial")}
    assert len({bits(o).numpy().tobytes() for o in outs.values()}) == 3


def test_fp16_merges_with_nan_inf_and_overflow():
    A, B, _ = operands(torch.float16, 4, 256, 4, 9)
    A[0, 3], A[1, 200], A[2, :] = float("nan"), float("inf"), 300.0
    B[:, 3] = 300.0                          # partials past fp16's max: inf when rounded
    for merge in ("fp16_partials", "fp16_serial"):
        s = Schedule(split_k=4, split_grain="cublas", merge=merge)
        parts = [slice_value(A, B, k0, k1, dict(arch="sm90"))
                 for k0, k1 in cublas_slices(256, 4, 64)]
        want, got = merged(parts, merge), emm(A, B, arch="sm90", schedule=s)
        same = (bits(got) == bits(want)) | (torch.isnan(got) & torch.isnan(want))
        assert same.all(), merge
        assert torch.isinf(got[2, 3]) and torch.isnan(got[0]).any()


# ------------------------------------------------------------------------ residue tile

@pytest.mark.parametrize("tile", [32, 64, 128])
@pytest.mark.parametrize("arch, dtype", [("sm80", torch.float16), ("sm90", torch.bfloat16)])
def test_residue_tile_chain_against_one_instruction_at_a_time(tile, arch, dtype):
    for K in (1, 8, 24, 37, 100, 129, 200):
        A, B, C = operands(dtype, 4, K, 3, K)
        got = emm(A, B, C, arch=arch, schedule=Schedule(residue_tile=tile))
        L = tme.spec(arch, {torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]).L
        b = residue_bounds(K, L, tile)
        acc = C
        for g0, g1 in zip(b, b[1:]):
            acc = emm(A[:, g0:g1], B[g0:g1], acc, arch=arch)
        assert torch.equal(bits(got), bits(acc)), (K, tile)


@pytest.mark.parametrize("name", ["cublas_cutlass_split_k_4_fp32",
                                  "cublas_cutlass_split_k_4_fp16_partials",
                                  "cublas_cutlass_split_k_4_fp16_serial"])
def test_cutlass_presets_against_slices_with_their_residue_tiles(name):
    s = PRESETS[name].schedule
    for K in (100, 333, 1100):
        A, B, _ = operands(torch.float16, 5, K, 4, K)
        parts = [slice_value(A, B, k0, k1, dict(arch="sm80"), tile=32)
                 for k0, k1 in cublas_slices(K, 4, 8)]
        want = merged(parts, s.merge)
        assert torch.equal(bits(emm(A, B, arch="sm80", schedule=name)), bits(want)), K


def test_residue_groups_put_the_short_group_at_the_end_of_the_leading_tile():
    # bitequiv's example of the rounding points: 0, KPD, ..., RES, RES + KPD, ..., K
    assert residue_bounds(100, 16, 32) == [0, 4, 20, 36, 52, 68, 84, 100]
    assert residue_bounds(100, 8, 64) == [0, 8, 16, 24, 32, 36, 44, 52, 60, 68, 76, 84,
                                          92, 100]
    from torch_mma_emu.schedule_split import residue_groups
    for n in range(0, 300, 7):
        for L, tile in ((8, 32), (16, 64), (16, 128)):
            g = residue_groups(10, 10 + n, L, tile)
            want = residue_bounds(n, L, tile) if n else [0]
            assert [x[0] - 10 for x in g] + [n] == want or (n == 0 and g == [])


# ------------------------------------------------------------------------ presets, errors

def test_presets_cite_their_source_and_who_measured_them():
    for name in ("cublas_split_k_4", "cublas_cutlass_residue_32",
                 "cublas_cutlass_split_k_4_fp32", "cublas_cutlass_split_k_4_fp16_partials",
                 "cublas_cutlass_split_k_4_fp16_serial"):
        p = PRESETS[name]
        assert "bitequiv" in p.source
        assert p.verified == "measured by others on GB200 (sm_100), not yet by us"
        assert Schedule.from_string(p.schedule.to_string()) == p.schedule
    assert PRESETS["cublas_split_k_4"].schedule.split_grain == "cublas"
    assert PRESETS["cublas_split_k_4_pairwise"].verified == ""
    assert Schedule(split_k=2, split_grain=64) == Schedule(split_k=2, split_grain="64")


@pytest.mark.parametrize("kw, msg", [
    (dict(split_k=2, split_grain=0), "split_grain must be >= 1"),
    (dict(split_k=2, split_grain="fast"), "split_grain must be a positive int"),
    (dict(split_k=2, split_grain=2.5), "split_grain must be a positive int"),
    (dict(split_k=2, merge="fp8"), "merge must be one of"),
    (dict(merge="fp16_serial"), "needs split_k > 1"),
    (dict(split_k=2, merge="fp16_serial", reduce="pairwise"), "sums forward in fp32"),
    (dict(split_k=2, merge="fp16_partials", workspace="fp64"), "sums forward in fp32"),
    (dict(residue_tile=0), "residue_tile must be >= 1"),
    (dict(residue_tile=32, promote_every=64), "does not combine"),
    (dict(residue_tile=32, input_precision="tf32x3"), "does not combine"),
])
def test_bad_fields_raise(kw, msg):
    with pytest.raises(ValueError, match=msg):
        Schedule(**kw)


def test_runs_it_cannot_model_raise():
    A, B, _ = operands(torch.float16, 2, 64, 2, 0)
    s = Schedule(split_k=2, split_grain="cublas", merge="fp16_serial")
    with pytest.raises(ValueError, match="needs an instruction with fp32 output"):
        tme.emulated_mm(A, B, arch="sm80", out_dtype=torch.float16, schedule=s)
    with pytest.raises(ValueError, match="not a multiple of the instruction's K"):
        emm(A, B, arch="sm80", schedule=Schedule(residue_tile=12))


def test_compare_marks_rows_a_library_schedule_cannot_run(capsys):
    from torch_mma_emu.cli import main
    rc = main(["compare", "--random", "--size", "32", "--arch", "sm80", "--schedule",
               "cublas_cutlass_split_k_4_fp16_serial", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0
    rows = {tuple(ln.split()[:3]): ln for ln in out.splitlines() if ln.startswith("sm80 ")}
    assert "cannot run the schedule" in rows[("sm80", "fp64", "fp64")]
    assert "cannot run the schedule" in rows[("sm80", "fp16", "fp16")]
    assert "cannot run" not in rows[("sm80", "fp16", "fp32")]
    # no row can: the reason, exit 2
    rc = main(["compare", "--random", "--size", "32", "--arch", "sm80", "--format", "fp64",
               "--schedule", "cublas_cutlass_split_k_4_fp16_serial", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "needs an instruction with fp32 output" in err
