"""csrc/cuda/gemm_cuda.cu's sm_80 PTX (tests/data/cuda_ptx/) at the shapes and layouts its
host code takes beyond one tile (tests/test_ptx_cuda_gemm.py runs every registry row at one
small shape): several CTAs per batch element (M, N over the 32 x 32 tile), M / N / K not
multiples of the tiles (K not of the 32-deep K tile), batches, and operands read through
View3 strides as the host passes them: A and B transposed and batch-strided, C transposed
or broadcast over the batch (stride 0), block scales transposed.  Each kernel family the
registry reaches runs (fast t_fdpa with a fixed and a runtime output conversion, the generic
one-thread-per-output kernel, block-scaled, fp32 and fp64 IEEE values); the bits equal the
CPU kernel's (``cpp.gemm`` on the same strided tensors).  The slow run covers one row per
kernel instantiation at every layout."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_mma_emu import cpp, ptx, registry  # noqa: E402
from torch_mma_emu.formats import storage_dtype, value_table  # noqa: E402

import cuda_gemm_ptx as R  # noqa: E402

ALL = registry.all_specs()
SHAPES = {"multi_cta": (2, 33, 34, 40),       # 2 x 2 tiles per batch element, K = a tile + 8
          "strided": (2, 20, 9, 45),          # A, B transposed + batch-strided, C transposed
          "broadcast_c": (3, 7, 20, 40)}      # C one (M, N) matrix for the batch (stride 0)


def _kernel(s):
    vdt = np.float64 if s.out_format == "fp64" else np.float32
    return R.kernel_for(cpp.params(s), vdt)


def _pick():
    """One registry row per kernel family (first match in registry order)."""
    want = {"fast, fixed rz_fp32": lambda k, s: k.startswith("fast") and k.endswith("ELi0EE"),
            "fast, runtime conversion": lambda k, s: k.startswith("fast") and "Lin1E" in k,
            "generic": lambda k, s: k.startswith("generic") and not s.scaled,
            "generic, block-scaled": lambda k, s: k.startswith("generic") and s.scaled,
            "values fp32": lambda k, s: k == "values_kernelIfEE",
            "values fp64": lambda k, s: k == "values_kernelIdEE"}
    out = {}
    for s in ALL:
        k = _kernel(s)
        for name, ok in want.items():
            if name not in out and ok(k, s):
                out[name] = s
    assert len(out) == len(want), set(want) - set(out)
    return out


PICKED = _pick()


def _one_per_kernel():
    seen, out = set(), []
    for s in ALL:
        key = (_kernel(s), s.op, s.scaled)
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def _layout(t, how):
    """``t`` (B, R, C) with the same values, stored transposed and batch-strided ("t"), or
    as given ("c")."""
    if how == "c":
        return t
    B, r, c = t.shape
    big = torch.zeros((2 * B, c + 3, r), dtype=t.dtype)
    big[::2, :c] = t.transpose(1, 2)
    return big[::2, :c].transpose(1, 2)          # strides (2 (c + 3) r, 1, r)


def operands(spec, shape, layout, seed=1):
    Bt, M, N, K = shape
    g = torch.Generator().manual_seed(seed)
    odt = {"fp32": torch.float32, "fp16": torch.float16, "fp64": torch.float64}[spec.out_format]
    if layout == "broadcast_c":
        c3 = torch.randn(1, M, N, generator=g).to(odt).expand(Bt, M, N)
    else:
        c3 = torch.randn(Bt, M, N, generator=g).to(odt)
    sa3 = sb3 = None
    if spec.elementary.operands == "values":
        vdt = torch.float64 if spec.out_format == "fp64" else torch.float32
        a3 = torch.randn(Bt, M, K, generator=g).to(storage_dtype(spec.fmt_a)).to(vdt)
        b3 = torch.randn(Bt, K, N, generator=g).to(storage_dtype(spec.fmt_b)).to(vdt)
        a3[0, 1, 3], b3[-1, 2, 5] = float("inf"), float("nan")
    else:
        a3 = R.codes(spec.fmt_a.name, (Bt, M, K), g, "inf")
        b3 = R.codes(spec.fmt_b.name, (Bt, K, N), g, "nan")
        if spec.scaled:
            nblk = -(-K // spec.block_size)
            table = value_table(spec.scale_format)
            ok = torch.nonzero(torch.isfinite(table) & (table > 2.0 ** -4)
                               & (table < 2.0 ** 4)).flatten()
            sa3 = ok[torch.randint(len(ok), (Bt, M, nblk), generator=g)].to(torch.uint8)
            sb3 = ok[torch.randint(len(ok), (Bt, nblk, N), generator=g)].to(torch.uint8)
    if layout == "strided":
        a3, b3, c3 = _layout(a3, "t"), _layout(b3, "t"), _layout(c3, "t")
        if sa3 is not None:
            sa3, sb3 = _layout(sa3, "t"), _layout(sb3, "t")
    return a3, b3, c3, sa3, sb3


def _check(mod, spec, layout):
    a3, b3, c3, sa3, sb3 = operands(spec, SHAPES[layout], layout)
    if layout == "strided":
        assert not a3.is_contiguous() and not b3.is_contiguous() and not c3.is_contiguous()
    ref = cpp.gemm(spec, a3, b3, c3, sa3, sb3).numpy()
    try:
        out, suffix, stats = R.run_gemm(mod, a3, b3, c3, cpp.params(spec), sa3, sb3)
    except ptx.Unsupported as e:
        pytest.xfail(f"{spec.instruction}: {e}")
    w = {2: np.uint16, 4: np.uint32, 8: np.uint64}[ref.itemsize]
    bad = int((out.view(w) != ref.view(w)).sum())
    assert bad == 0, f"{spec.instruction} ({suffix}) {layout}: {bad} of {ref.size} differ"
    return suffix, stats


@pytest.fixture(scope="module")
def mod():
    # only the kernels launched (parsing all 25 of the 7 MB file takes ~10 s)
    keep = {_kernel(s) for s in PICKED.values()}
    return R.load_module(keep=["decode_kernelE", "decode_scales_kernelE", *keep])


@pytest.fixture(scope="module")
def mod_all():
    return R.load_module()


# the fast run: every family strided, the tiled kernel over several CTAs, C broadcast on
# the tiled and the values kernels; the rest (same code paths, slower here) in the slow run
FAST = {("fast, fixed rz_fp32", "multi_cta"), ("fast, fixed rz_fp32", "broadcast_c"),
        ("values fp32", "multi_cta"), ("values fp32", "broadcast_c")} | \
    {(f, "strided") for f in PICKED}
CASES = [pytest.param(f, lay, marks=() if (f, lay) in FAST else pytest.mark.slow)
         for f in PICKED for lay in SHAPES]


@pytest.mark.parametrize("family,layout", CASES)
def test_gemm_ptx_shapes_and_layouts(mod, family, layout):
    suffix, stats = _check(mod, PICKED[family], layout)
    if layout == "multi_cta" and suffix.startswith("fast"):
        assert stats[-1].ctas == 2 * 2 * 2          # batch x row tiles x column tiles


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(SHAPES))
@pytest.mark.parametrize("spec", _one_per_kernel(),
                         ids=lambda s: f"{s.arch}-{s.instruction}-{s.fmt_a.name}-{s.out_format}")
def test_gemm_ptx_every_kernel_every_layout(mod_all, spec, layout):
    _check(mod_all, spec, layout)
