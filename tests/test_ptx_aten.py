"""ATen's own CUDA kernels (torch 2.13's headers compiled by nvcc 13.0 to sm_90 PTX:
tests/data/aten_kernels/, scripts/regen_aten_kernel_ptx.py) run in the PTX interpreter and
compared bit for bit with the NumPy models of torch_mma_emu.aten_cuda (issue 43 item 2);
and the interpreter features those kernels need (device asserts, ``WARP_SZ``)."""
from __future__ import annotations

import numpy as np
import pytest

from torch_mma_emu import ptx

_ASSERT_PTX = """
.version 8.0
.target sm_90
.address_size 64
.extern .func __assertfail
(
        .param .b64 __assertfail_param_0,
        .param .b64 __assertfail_param_1
)
;
.visible .entry guarded(
        .param .u64 guarded_param_0,
        .param .u32 guarded_param_1
)
{
        .reg .pred      %p<2>;
        .reg .b32       %r<5>;
        .reg .b64       %rd<4>;

        ld.param.u64    %rd1, [guarded_param_0];
        ld.param.u32    %r1, [guarded_param_1];
        mov.u32         %r2, %tid.x;
        setp.ge.u32     %p1, %r2, %r1;
        @%p1 bra        $L__fail;
        mov.u32         %r3, WARP_SZ;
        mad.lo.s32      %r4, %r3, 1000, %r2;
        cvta.to.global.u64      %rd2, %rd1;
        mul.wide.u32    %rd3, %r2, 4;
        add.s64         %rd2, %rd2, %rd3;
        st.global.u32   [%rd2], %r4;
        ret;
$L__fail:
        { // callseq 0, 0
        .param .b64 param0;
        st.param.b64    [param0+0], %rd1;
        .param .b64 param1;
        st.param.b64    [param1+0], 7;
        call.uni
        __assertfail,
        (
        param0,
        param1
        );
        } // callseq 0
        ret;
}
"""


def test_call_sequence_parses_and_assert_fires_naming_the_thread():
    mod = ptx.Module(_ASSERT_PTX)
    out = np.zeros(8, np.uint32)
    mod.launch("guarded", 1, 8, [out, np.uint32(8)])     # no thread reaches the call
    assert out.tolist() == [32000 + t for t in range(8)]  # WARP_SZ is 32
    with pytest.raises(ptx.PTXError, match=r"guarded: device assertion failed "
                       r"\(__assertfail called\) in thread tid \(5, 0, 0\)"):
        mod.launch("guarded", 1, 8, [out, np.uint32(5)])


# -- ATen's kernels ------------------------------------------------------------------------
torch = pytest.importorskip("torch")
import aten_kernels_ptx as ak  # noqa: E402  (tests/ helper)
from torch_mma_emu.aten_cuda import host_softmax, norms  # noqa: E402
from torch_mma_emu.aten_cuda import softmax as persistent  # noqa: E402
from torch_mma_emu.aten_cuda import sums  # noqa: E402
from torch_mma_emu.registry import gpu as find_gpu  # noqa: E402

H100 = find_gpu("H100")                      # 132 SMs x 2048 threads
FEW_SMS = find_gpu("T4")                     # 40 SMs x 1024 threads: another CTA split


def wide(n, seed, dtype=torch.float32):
    """Finite values over a wide exponent range (every order of summation differs)."""
    r = np.random.default_rng(seed)
    v = r.standard_normal(n) * np.exp2(r.integers(-14, 12, n))
    return torch.from_numpy(v.astype(np.float32)).to(dtype)


def special_rows(n, dtype=torch.float32):
    """Rows of ``n`` with NaN, infinities, signed zeros, subnormals, overflow."""
    tiny = float(torch.finfo(dtype).tiny)
    big = float(torch.finfo(dtype).max)
    rows = wide(10 * n, 7, dtype).reshape(10, n).clone()
    rows[0, n // 2] = float("nan")
    rows[1, 1] = float("inf")
    rows[2, 0], rows[2, -1] = float("inf"), float("-inf")
    rows[3] = -0.0
    rows[4] = torch.from_numpy(np.random.default_rng(3).uniform(-1, 1, n)).to(dtype) * tiny
    rows[5, ::3] = tiny / 4                  # subnormals among normal values
    rows[6] = big / 2                        # the sum overflows
    rows[7] = float("-inf")
    rows[8, ::2] = -0.0
    return rows


def same_bits(got, want):
    """Bit-equal, NaNs of any payload agreeing; returns the count of differing elements."""
    g, w = got.float().reshape(-1).numpy(), want.float().reshape(-1).numpy()
    ok = (g.view(np.uint32) == w.view(np.uint32)) | (np.isnan(g) & np.isnan(w))
    if got.dtype != torch.float32:           # compare the 16-bit patterns themselves
        gi = got.reshape(-1).view(torch.int16).numpy()
        wi = want.reshape(-1).to(got.dtype).view(torch.int16).numpy()
        ok = (gi == wi) | (np.isnan(g) & np.isnan(w))
    return int((~ok).sum())


def check_reduce(x, dim, op="sum", gpu=H100, expect=None):
    got, cfg, st, kept = ak.launch_reduce(x, dim, op, gpu)
    with np.errstate(all="ignore"):      # the model's overflow / inf - inf in special rows
        want = sums.reduce(x, dim, op=op, gpu=gpu)
    assert st.ctas == cfg.grid[0] * cfg.grid[1]
    if expect is not None:
        assert expect in cfg.describe(), cfg.describe()
    assert same_bits(got, want) == 0, cfg.describe()
    return cfg


BASE = wide(600_000, 0)


def _v(offset, shape, dtype=torch.float32, base=None):
    b = (BASE if base is None else base).to(dtype)
    n = int(np.prod(shape))
    return b[offset:offset + n].reshape(shape)


# (case, tensor builder, dim, a fragment of the launch's description)
REDUCE_CASES = [
    ("vec_1d_shift0", lambda d: _v(0, (1000,), d), None, "vectorised"),
    ("vec_1d_shift1", lambda d: _v(1, (1000,), d), None, "block 128x1, vectorised"),
    ("vec_1d_shift2", lambda d: _v(2, (999,), d), None, "vectorised"),
    ("vec_1d_shift3", lambda d: _v(3, (1001,), d), None, "vectorised"),
    ("vec_rows_all_shifts", lambda d: _v(0, (8, 301), d), 1, "block 64x8, vectorised"),
    ("plain_contiguous", lambda d: _v(5, (5, 100), d), 1, "not vectorised, lanes"),
    ("plain_strided", lambda d: _v(0, (5, 200), d)[:, ::2], 1, "not vectorised, lanes"),
    ("plain_two_dims", lambda d: _v(0, (4, 6, 50), d).permute(1, 0, 2), (1, 2),
     "not vectorised, lanes"),
    ("block_x_256_rows", lambda d: _v(0, (2, 4000), d), 1, "block 256x2"),
    ("warps_split_input", lambda d: _v(0, (4, 9000), d), 1, "warps too"),
    ("output_vec4", lambda d: _v(0, (300, 8), d), 0, "output vec 4"),
    ("output_vec2", lambda d: _v(0, (300, 6), d), 0, "output vec 2"),
    ("outputs_not_vectorised", lambda d: _v(0, (300, 5), d), 0, "not vectorised, warps"),
    ("outputs_strided", lambda d: _v(0, (300, 10), d)[:, ::2], 0, "not vectorised, warps"),
    ("outputs_two_dims", lambda d: _v(0, (4, 300, 6), d), 1, "output vec 2"),
    ("inputs_three_dims_permuted", lambda d: _v(0, (3, 5, 7, 11), d).permute(3, 1, 0, 2),
     (0, 2), "not vectorised, lanes"),
    ("sliced_rows", lambda d: _v(0, (8, 512), d)[:, 3:303], 1, "vectorised"),
    ("many_output_rows", lambda d: _v(0, (200, 130), d), 1, "vectorised"),
    ("outputs_vec4_two_ctas_x", lambda d: _v(0, (1000, 100), d), 0, "output vec 4"),
    ("one_element", lambda d: _v(7, (1,), d), None, "block 1x1"),
    ("ctas_fold_lanes", lambda d: _v(3, (131_077,), d), None, "grid 1x17"),
    ("ctas_fold_warps", lambda d: _v(0, (32_768, 4), d), 0, "grid 1x16"),
]
FAST = {"vec_1d_shift1", "vec_rows_all_shifts", "plain_strided", "outputs_two_dims",
        "inputs_three_dims_permuted",
        "warps_split_input", "output_vec4", "output_vec2", "outputs_not_vectorised",
        "ctas_fold_lanes", "ctas_fold_warps"}


def _cases(fast):
    return [pytest.param(build, dim, frag, id=name) for name, build, dim, frag in REDUCE_CASES
            if (name in FAST) == fast]


@pytest.mark.parametrize("build,dim,frag", list(_cases(True)))
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_reduce_kernel_fp32_equals_model(build, dim, frag, op):
    check_reduce(build(torch.float32), dim, op, expect=frag)


@pytest.mark.slow
@pytest.mark.parametrize("build,dim,frag", list(_cases(False)))
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_reduce_kernel_fp32_more_shapes(build, dim, frag, op):
    check_reduce(build(torch.float32), dim, op, expect=frag)


@pytest.mark.slow
@pytest.mark.parametrize("build,dim,frag", [pytest.param(b, d, None, id=n)
                                            for n, b, d, _ in REDUCE_CASES])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reduce_kernel_16bit_every_case(build, dim, frag, dtype):
    check_reduce(build(dtype), dim, "sum")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_reduce_kernel_16bit_vectors_of_8_every_shift(dtype, op):
    """Rows of 301 halves: the 16-byte alignment shift runs through 0..7 row by row."""
    x = (_v(0, (8, 301)) * 1e-2).to(dtype)
    check_reduce(x, 1, op, expect="vectorised x8")
    check_reduce(_v(0, (300, 8)).to(dtype), 0, op, expect="output vec 4")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_reduce_kernel_special_values(dtype):
    rows = special_rows(301, dtype)
    check_reduce(rows, 1, "sum", expect="vectorised")          # one row per output
    check_reduce(rows.t(), 0, "sum", expect="lanes")          # the same, strided input
    check_reduce(rows[:, :100], 1, "mean", expect="not vectorised")


def test_reduce_kernel_another_device_splits_otherwise():
    """The CTA split depends on the device (SMs x threads per SM): the same sum on a 40-SM
    part with 1024 threads per SM, grid 2 x CTAs with one semaphore per output."""
    x = _v(0, (1024, 256))
    cfg = check_reduce(x, 0, "sum", gpu=FEW_SMS, expect="output vec 4")
    assert cfg.ctas_per_output > 1 and cfg.grid[0] == 2


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_reduce_kernel_multi_cta_16bit_and_fp32_more(dtype):
    check_reduce(_v(5, (2, 131_072 + 9), dtype), 1, "sum", expect="warps too")
    check_reduce(_v(0, (1024, 256), dtype), 0, "mean", expect="output vec 4")
    check_reduce(_v(0, (1024, 256), dtype), 0, "sum", gpu=FEW_SMS)


# -- the persistent warp softmax --------------------------------------------------------------
SOFTMAX_N = [1, 2, 3, 5, 17, 33, 100, 129, 700, 1000, 1500, 2048]


def check_softmax(x, log_softmax=False):
    got, st = ak.launch_softmax(x, log_softmax)
    with np.errstate(all="ignore"):      # the model's inf - inf on rows of -inf
        want = persistent.softmax(x, log_softmax=log_softmax)
    assert same_bits(got, want) == 0
    return st


@pytest.mark.parametrize("n", [3, 33, 100, 700, 2048])
def test_softmax_warp_forward_fp32(n):
    """7 rows (an odd count: the last warp holds one row where a warp takes two)."""
    check_softmax(wide(7 * n, n).reshape(7, n) * 1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("n", [n for n in SOFTMAX_N if n not in (3, 33, 100, 700, 2048)])
def test_softmax_warp_forward_fp32_more_lengths(n):
    check_softmax(wide(5 * n, n).reshape(5, n) * 1e-3)


@pytest.mark.parametrize("n,log", [(5, True), (100, True), (1000, True)])
def test_log_softmax_warp_forward_fp32(n, log):
    check_softmax(wide(3 * n, n).reshape(3, n) * 1e-3, log)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [6, 100, 1000])
def test_softmax_warp_forward_16bit(dtype, n):
    check_softmax((wide(3 * n, n) * 1e-3).to(dtype).reshape(3, n))


@pytest.mark.parametrize("n,log", [(20, False), (700, True)])
def test_softmax_warp_forward_half_to_float(n, log):
    """fp16 in, float out (``_softmax(x, dim, half_to_float=True)``): host_softmax's model."""
    x = (wide(3 * n, n) * 1e-3).half().reshape(3, n)
    x[1, 0] = float("-inf")
    got, _ = ak.launch_softmax(x, log, half_to_float=True)
    with np.errstate(all="ignore"):
        want, launch = host_softmax.softmax(x, log_softmax=log, half_to_float=True)
    assert launch.kernel == "persistent" and got.dtype == want.dtype == torch.float32
    assert same_bits(got, want) == 0


def test_log_softmax_warp_forward_fp16():
    check_softmax((wide(3 * 60, 1) * 1e-3).half().reshape(3, 60), True)


@pytest.mark.parametrize("dtype,n,log", [(torch.float32, 8, False), (torch.float32, 100, True),
                                         (torch.float16, 100, False),
                                         (torch.bfloat16, 1000, False)])
def test_softmax_warp_forward_special_values(dtype, n, log):
    check_softmax(special_rows(n, dtype), log)


# -- WelfordOps + BlockReduce (the header pieces of layer_norm's RowwiseMoments kernel) -----
@pytest.mark.parametrize("n", [5, 100, 513, 3000])
def test_welford_block_reduce_equals_norms_moments(n):
    x = (wide(6 * n, n) + 3).reshape(6, n)
    x[1, 3], x[2, 0], x[3] = float("nan"), float("inf"), -0.0
    mean, var, _ = ak.launch_welford(x)
    want_mean, want_var = norms.moments(x.numpy())
    assert same_bits(torch.from_numpy(mean), torch.from_numpy(want_mean)) == 0
    assert same_bits(torch.from_numpy(var), torch.from_numpy(want_var)) == 0


def test_welford_fp16_rows():
    x = (wide(4 * 700, 4) * 1e-2 + 1).half().reshape(4, 700)
    mean, var, _ = ak.launch_welford(x)
    want_mean, want_var = norms.moments(x.float().numpy())
    assert np.array_equal(mean.view(np.uint32), want_mean.view(np.uint32))
    assert np.array_equal(var.view(np.uint32), want_var.view(np.uint32))


@pytest.mark.parametrize("threads", [32, 128, 512, 1024])
def test_block_reduce_equals_host_softmax_block_reduce(threads):
    s = wide(4 * threads, threads).reshape(4, threads).numpy().copy()
    s[1] = -0.0
    got, _ = ak.launch_block_reduce(s)
    assert same_bits(torch.from_numpy(got), torch.from_numpy(host_softmax.block_reduce(s))) == 0


# -- coverage ---------------------------------------------------------------------------------
def test_aten_module_has_no_missing_instruction():
    from torch_mma_emu.ptx import coverage
    assert coverage.missing(ak.module()) == {}


def test_aten_kernels_execute_the_instructions_that_matter():
    """The launches reach the semaphore, the fences, both shuffles, the vector loads, the
    correctly rounded division, expf's ex2 and the 16-bit conversions."""
    ran = {}
    for st in (ak.launch_reduce(_v(3, (131_077,)), None, "sum", H100)[2],
               ak.launch_reduce(_v(0, (8, 301)).half(), 1, "mean", H100)[2],
               ak.launch_softmax((wide(300, 1) * 1e-3).half().reshape(3, 100))[1],
               ak.launch_welford(wide(2 * 600, 2).reshape(2, 600))[2]):
        for op, n in st.executed.items():
            ran[op] = ran.get(op, 0) + n
    for op in ("atom.global.add.u32", "membar.gl", "bar.sync", "shfl.sync.down.b32",
               "shfl.sync.bfly.b32", "ld.global.v4.f32", "ld.global.v4.u32", "div.rn.f32",
               "ex2.approx.ftz.f32", "fma.rn.f32", "cvt.rn.f16.f32", "cvt.f32.f16",
               "st.shared.f32", "ld.shared.f32"):
        assert ran.get(op, 0) > 0, op


def test_the_comparison_tells_orders_apart():
    """The data separates summation orders: the same rows summed as if aligned, or left to
    right, differ from the kernel's bits, so the equalities above are not vacuous."""
    from torch_mma_emu.aten_cuda import evaluate
    x = _v(0, (8, 301))
    got, cfg, _, _ = ak.launch_reduce(x, 1, "sum", H100)
    aligned = evaluate(x.numpy(), cfg, np.zeros(8, np.int64))
    assert same_bits(got, torch.from_numpy(aligned)) >= 4
    serial = np.add.accumulate(x.numpy(), axis=1)[:, -1]
    assert same_bits(got, torch.from_numpy(serial)) >= 4


_TICKET_PTX = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry ticket(
        .param .u64 ticket_param_0,
        .param .u64 ticket_param_1
)
{
        .reg .b32       %r<3>;
        .reg .b64       %rd<6>;

        ld.param.u64    %rd1, [ticket_param_0];
        ld.param.u64    %rd2, [ticket_param_1];
        cvta.to.global.u64      %rd3, %rd1;
        cvta.to.global.u64      %rd4, %rd2;
        atom.global.add.u32     %r1, [%rd4], 1;
        mov.u32         %r2, %ctaid.x;
        mul.wide.u32    %rd5, %r2, 4;
        add.s64         %rd3, %rd3, %rd5;
        st.global.u32   [%rd3], %r1;
        ret;
}
"""


def test_cta_order_decides_who_arrives_first():
    mod = ptx.Module(_TICKET_PTX)
    seen = {}
    for order in ("index", "reverse", 3):
        out, ctr = np.zeros(6, np.uint32), np.zeros(1, np.uint32)
        mod.launch("ticket", 6, 1, [out, ctr], cta_order=order)
        seen[order] = out.tolist()
    assert seen["index"] == [0, 1, 2, 3, 4, 5] and seen["reverse"] == [5, 4, 3, 2, 1, 0]
    assert sorted(seen[3]) == list(range(6)) and seen[3] not in (seen["index"], seen["reverse"])
    with pytest.raises(ptx.PTXError, match="cta_order"):
        mod.launch("ticket", 6, 1, [out, ctr], cta_order="random")


@pytest.mark.parametrize("cta_order,case", [
    ("reverse", "lanes"),
    pytest.param(5, "lanes", marks=pytest.mark.slow),
    pytest.param("reverse", "warps", marks=pytest.mark.slow),
    pytest.param(5, "warps", marks=pytest.mark.slow)])
def test_reduce_fold_does_not_depend_on_which_cta_is_last(cta_order, case):
    """The semaphore picks whichever CTA finishes last to fold the partials; the fold reads
    them by index, so another CTA order gives the same bits (the model's)."""
    x, dim = (_v(3, (131_077,)), None) if case == "lanes" else (_v(0, (32_768, 4)), 0)
    got, cfg, _, _ = ak.launch_reduce(x, dim, "sum", H100, cta_order=cta_order)
    assert cfg.ctas_per_output > 1
    assert same_bits(got, sums.reduce(x, dim, op="sum", gpu=H100)) == 0
