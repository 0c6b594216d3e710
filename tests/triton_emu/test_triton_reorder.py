"""Reductions behind a reordering reshape (issue 37 item 1): ``tl.sum(x)`` without an axis
compiles to ``tt.reshape x allow_reorder`` into a layout that names other elements than the
registers hold (the lowering passes registers through), so the tree is read from the
source layout (layout.py ``_traced_bases``).  Checked against the compiled PTX evaluated on
the CPU (ptx_check)."""
import os
import tempfile

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from torch_mma_emu.triton import ptx_check  # noqa: E402
from torch_mma_emu.triton.layout import bases_of, compile_launch, target_of  # noqa: E402


@triton.jit
def sum_all(x_ptr, out_ptr, N: tl.constexpr, MAX: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    if MAX:
        tl.store(out_ptr, tl.max(x))
    else:
        tl.store(out_ptr, tl.sum(x))


@triton.jit
def sum_all_2d(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, KEEP: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :])
    if KEEP:
        tl.store(out_ptr + tl.arange(0, 1)[:, None], tl.sum(x, keep_dims=True))
    else:
        tl.store(out_ptr, tl.sum(x))


@triton.jit
def join_sum(x_ptr, y_ptr, out_ptr, N: tl.constexpr):
    x = tl.join(tl.load(x_ptr + tl.arange(0, N)), tl.load(y_ptr + tl.arange(0, N)))
    tl.store(out_ptr + tl.arange(0, N), tl.sum(x, axis=1))
    tl.store(out_ptr + N, tl.sum(x))


def _data(n, seed, kind):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g)
    if kind == "spread":
        x = x * torch.exp(torch.randn(n, generator=g) * 6)
    elif kind == "cancel":
        x[::2] = 1e8 * torch.sign(x[::2])
        x[1::2] = -x[::2] + x[1::2] * 1e-3
    elif kind == "specials":
        x = x * torch.exp(torch.randn(n, generator=g) * 3)
        x[7], x[100], x[300] = 0.0, -0.0, float("inf")
    return x


def test_reorder_reshape_traced_to_the_source_layout():
    x, o = torch.randn(1024), torch.empty(1)
    comp = compile_launch(sum_all.fn, (x, o), {"N": 1024, "MAX": False}, target_of("H100"))
    assert "allow_reorder" in comp.ttgir
    site, = comp.reduces
    # the reduction's own layout is sizePerThread=[1]; the registers are the load's [4]
    assert "sizePerThread = [1]" in site.encoding
    assert site.bases.reg[:2] == ((1,), (2,))


@pytest.mark.parametrize("num_warps", [4, 8])
def test_axis_less_sum_1024_matches_ptx_on_20_seeds(num_warps):
    o = torch.empty(1)
    bad = []
    for seed in range(20):
        x = _data(1024, seed, "spread")
        r = ptx_check.check(sum_all, (x, o), {"N": 1024, "MAX": False, "num_warps": num_warps})
        if not r["equal"]:
            bad.append(seed)
    assert bad == [], f"seeds {bad} differ from the PTX"


@pytest.mark.parametrize("kind", ["random", "cancel", "specials"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_axis_less_sum_and_max_adversarial(kind, dtype):
    o = torch.empty(1, dtype=dtype)
    for seed in range(3):
        x = _data(2048, seed, kind).to(dtype)
        for is_max in (False, True):
            r = ptx_check.check(sum_all, (x, o), {"N": 2048, "MAX": is_max, "num_warps": 4})
            assert r["equal"], (kind, dtype, seed, is_max)


@pytest.mark.parametrize("shape,warps,keep", [((32, 64), 4, False), ((32, 64), 8, True),
                                              ((16, 128), 1, False)])
def test_axis_less_sum_2d_matches_ptx(shape, warps, keep):
    M, N = shape
    o = torch.empty(1)
    for seed in range(4):
        x = _data(M * N, seed, "spread")
        r = ptx_check.check(sum_all_2d, (x, o), {"M": M, "N": N, "KEEP": keep,
                                                 "num_warps": warps})
        assert r["equal"], seed


def test_sum_of_a_join_matches_ptx():
    o = torch.empty(257)
    for seed in range(4):
        x, y = _data(256, seed, "spread"), _data(256, seed + 50, "spread")
        assert ptx_check.check(join_sum, (x, y, o), {"N": 256})["equal"], seed


def test_linear_layout_text_is_read_as_its_bases():
    lin = ("#ttg.linear<{register = [[0, 1], [1, 0]], lane = [[2, 0], [4, 0], [8, 0], "
           "[16, 0], [32, 0]], warp = [[64, 0], [128, 0]], block = []}>")
    blk = ("#ttg.blocked<{sizePerThread = [2, 2], threadsPerWarp = [32, 1], warpsPerCTA = "
           "[4, 1], order = [1, 0]}>")
    assert bases_of(lin, (256, 2), {}) == bases_of(blk, (256, 2), {})
    with pytest.raises(NotImplementedError, match="multi-CTA"):
        bases_of(lin.replace("block = []", "block = [[0, 1]]"), (256, 2), {})


def _flaggems():
    os.environ.setdefault("GEMS_VENDOR", "nvidia")
    os.environ.setdefault("FLAGGEMS_CACHE_DIR", tempfile.mkdtemp(prefix="flaggems-"))
    from torch_mma_emu.triton import device_queries
    try:
        with device_queries("H100"):
            import importlib
            fsum = importlib.import_module("flag_gems.ops.sum")
            mean = importlib.import_module("flag_gems.ops.mean")
    except Exception as e:      # noqa: BLE001 - not installed, or fails here
        pytest.skip(f"flag_gems not importable: {type(e).__name__}: {e}")
    return fsum, mean


@pytest.mark.parametrize("which", ["sum_kernel_1", "mean_kernel_1"])
def test_flaggems_block_1024_kernels_match_ptx(which):
    fsum, mean = _flaggems()
    mod = fsum if which == "sum_kernel_1" else mean
    kernel = ptx_check.innermost(getattr(mod, which))   # LibEntry caches its launches
    M = 4096
    mid = torch.empty(M // 1024)
    for seed in range(3):
        x = _data(M, seed, "spread")
        args = (x, mid, M) if which == "sum_kernel_1" else (x, mid, M)
        from torch_mma_emu.triton import device_queries
        with device_queries("H100"):          # FlagGems' LibEntry asks the device at launch
            r = ptx_check.check(kernel, args, {"BLOCK_SIZE": 1024}, grid=M // 1024)
        assert r["equal"], (which, seed)
