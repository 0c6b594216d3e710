"""Math as the target computes it: target_math.SEQUENCES checked against the PTX Triton
compiles on the CPU for sm_90, and kernels under ``emulate("H100")`` returning the bits of
the gpu_math models of those instructions (the plain interpreter does not)."""
import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import torch_mma_emu.triton as tmt  # noqa: E402
from torch_mma_emu import gpu_math  # noqa: E402
from torch_mma_emu.triton import ptx_of, target_math  # noqa: E402


@triton.jit
def unary(X, Y, Z, OUT, N, OP: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    m = o < N
    x = tl.load(X + o, mask=m)
    y = tl.load(Y + o, mask=m)
    z = tl.load(Z + o, mask=m)
    if OP == "create_exp":
        r = tl.exp(x)
    elif OP == "create_exp2":
        r = tl.exp2(x)
    elif OP == "create_fdiv":
        r = x / y
    elif OP == "create_precise_divf":
        r = tl.math.div_rn(x, y)
    elif OP == "create_sqrt":
        r = tl.sqrt(x)
    elif OP == "create_precise_sqrt":
        r = tl.sqrt_rn(x)
    elif OP == "create_rsqrt":
        r = tl.rsqrt(x)
    elif OP == "create_fma":
        r = tl.fma(x, y, z)
    elif OP == "create_log":
        r = tl.log(x)
    elif OP == "create_log2":
        r = tl.log2(x)
    elif OP == "create_sin":
        r = tl.sin(x)
    elif OP == "create_cos":
        r = tl.cos(x)
    else:
        r = tl.erf(x)
    tl.store(OUT + o, r, mask=m)


SIG = {"X": "*fp32", "Y": "*fp32", "Z": "*fp32", "OUT": "*fp32", "N": "i32",
       "OP": "constexpr", "BLOCK": "constexpr"}
PTX_NAME = {"mul.rn.f32": "mul.f32"}        # PTX writes the default rounding without .rn


MINMAX = {"create_maxnumf", "create_minnumf", "create_maximumf", "create_minimumf"}


@pytest.mark.parametrize("method", sorted(set(target_math.SEQUENCES) - MINMAX))
def test_table_is_the_compiled_ptx(method):          # min / max: their own test below
    ptx = ptx_of.compile_ptx(unary, SIG, {"OP": method, "BLOCK": 32}, num_warps=1)
    ops = ptx_of.float_ops(ptx)
    steps = target_math.SEQUENCES[method][1]["fp32"]
    if steps is None:                        # a libdevice routine: a long inlined body
        assert len(ops) > 6, ops
        assert not any(o.endswith("approx.f32") or o.endswith("approx.ftz.f32")
                       for o in ops[:1]), ops
    else:
        assert ops == [PTX_NAME.get(s[0], s[0]) for s in steps]


def _inputs(n=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * 20
    x[:8] = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-40,
                          -130.0, 88.0])
    y = torch.randn(n, generator=g) * 3
    y[:4] = torch.tensor([3e38, 1e-40, 0.0, -0.0])
    z = torch.randn(n, generator=g)
    return x, y, z


def _run(block, method, x, y, z):
    out = torch.empty_like(x)
    with block as em:
        unary[(1,)](x, y, z, out, x.numel(), OP=method, BLOCK=x.numel())
    return out, em


MODEL = {"create_exp": lambda x, y, z: gpu_math.evaluate(
             "ex2.approx.f32", gpu_math.evaluate("mul.rn.f32", x, target_math.LOG2E)),
         "create_exp2": lambda x, y, z: gpu_math.evaluate("ex2.approx.ftz.f32", x),
         "create_fdiv": lambda x, y, z: gpu_math.evaluate("div.full.f32", x, y),
         "create_precise_divf": lambda x, y, z: gpu_math.evaluate("div.rn.f32", x, y),
         "create_precise_sqrt": lambda x, y, z: gpu_math.evaluate("sqrt.rn.f32", np.abs(x)),
         "create_rsqrt": lambda x, y, z: gpu_math.evaluate("rsqrt.approx.ftz.f32", x),
         "create_fma": lambda x, y, z: gpu_math.evaluate("fma.rn.f32", x, y, z)}


@pytest.mark.parametrize("method", sorted(MODEL))
def test_emulated_kernel_returns_the_model_bits(method):
    x, y, z = _inputs()
    if method == "create_precise_sqrt":
        x = x.abs()
    got, em = _run(tmt.emulate("H100"), method, x, y, z)
    want = MODEL[method](x.numpy(), y.numpy(), z.numpy())
    assert np.array_equal(got.numpy().view(np.uint32), want.view(np.uint32))
    assert "bit-exact" in em.summary() and "APPROXIMATE" not in em.summary()
    plain, _ = _run(tmt.interpret(), method, x, y, z)
    if method in ("create_exp", "create_exp2", "create_fdiv", "create_rsqrt"):
        assert not torch.equal(plain.view(torch.int32), got.view(torch.int32))


def _ulps(got, ref):
    fin = np.isfinite(ref) & (ref != 0)
    sp = np.spacing(np.abs(ref[fin]).astype(np.float32)).astype(np.float64)
    return np.max(np.abs(got[fin].astype(np.float64) - ref[fin]) / sp)


@pytest.mark.parametrize("method,fn,ulp", [("create_log", np.log, 1), ("create_log2", np.log2, 1),
                                           ("create_erf", None, 2)])
def test_libdevice_routines_run_as_their_ptx(method, fn, ulp):
    """__nv_logf / __nv_log2f / __nv_erff cut out of the PTX and run instruction by
    instruction: within CUDA's documented error bounds (logf, log2f: 1 ulp; erff: 2 ulp),
    with libdevice's special values, and named bit-exact (every instruction is)."""
    import math
    x, y, z = _inputs()
    x = torch.cat([x, torch.rand(3584, generator=torch.Generator().manual_seed(3)) * 8])
    got, em = _run(tmt.emulate("H100"), method, x, torch.zeros_like(x), torch.zeros_like(x))
    name = target_math.LIBDEVICE[(method, "fp32")]
    assert f"{name} (its" in em.summary() and "[bit-exact]" in em.summary()
    xs = x.numpy().astype(np.float64)
    with np.errstate(all="ignore"):
        ref = fn(xs) if fn else np.vectorize(math.erf)(xs)
    normal = np.abs(xs) >= 2.0 ** -126          # erf's abs.ftz flushes subnormal inputs
    assert _ulps(got.numpy()[normal], ref[normal]) <= ulp
    g = got.numpy()[:8]                  # 0, -0, inf, -inf, nan, 1e-40, -130, 88
    bits = g.view(np.uint32)
    if method != "create_erf":
        assert g[0] == g[1] == -np.inf and g[2] == np.inf and bits[3] == bits[4] == 0x7FFFFFFF
        assert np.isfinite(g[5]) and g[5] < -90 and bits[6] == 0x7FFFFFFF
    else:
        assert g[2] == 1 and g[3] == -1 and bits[1] == 0x80000000 and bits[4] == 0x7FFFFFFF


@pytest.mark.parametrize("method,fn", [("create_sin", np.sin), ("create_cos", np.cos)])
def test_sin_cos_fast_path_as_ptx_slow_path_named(method, fn):
    """__nv_sinf / __nv_cosf: their fast path runs as PTX (within CUDA's 2 ulp, infinities
    to NaN); lanes that reach the large-argument reduction (local memory, a loop:
    |x| >= 105615) are float64 rounded and named APPROXIMATE."""
    x, y, z = _inputs()
    x[100:104] = torch.tensor([1e6, -3e7, 105616.0, 2e38])
    got, em = _run(tmt.emulate("H100"), method, x, y, z)
    s = em.summary()
    name = target_math.LIBDEVICE[(method, "fp32")]
    assert f"{name} (its" in s and "[bit-exact]" in s
    assert f"{name} slow path, 4 elements" in s and "[APPROXIMATE]" in s
    assert np.all(got.numpy()[2:4].view(np.uint32) == 0x7FFFFFFF)     # sin/cos(+-inf)
    xs = x.numpy().astype(np.float64)
    ok = np.isfinite(xs) & (np.abs(xs) < 105615) & (np.abs(xs) >= 2.0 ** -126)
    assert _ulps(got.numpy()[ok], fn(xs[ok])) <= 2
    big = np.abs(xs) >= 105615
    assert np.allclose(got.numpy()[big & np.isfinite(xs)], fn(xs[big & np.isfinite(xs)]),
                       atol=1e-6)


def test_approximate_functions_are_named():
    x, y, z = _inputs()
    _, em = _run(tmt.emulate("H100"), "create_sqrt", x.abs(), y, z)
    assert "tl.sqrt fp32 = sqrt.approx.ftz.f32 [APPROXIMATE]" in em.summary()
    assert target_math.approximate(em) == ["tl.sqrt fp32 = sqrt.approx.ftz.f32"]


def test_exact_math_false_keeps_numpy_and_says_so():
    x, y, z = _inputs()
    got, em = _run(tmt.emulate("H100", exact_math=False), "create_exp2", x, y, z)
    plain, _ = _run(tmt.interpret(), "create_exp2", x, y, z)
    assert torch.equal(got.view(torch.int32), plain.view(torch.int32))
    assert "NumPy (exact_math=False)" in em.summary()


def test_amd_target_is_named_approximate():
    x, y, z = _inputs()
    _, em = _run(tmt.emulate("MI300X"), "create_exp", x, y, z)
    assert "gfx942: not modelled" in em.summary() and "APPROXIMATE" in em.summary()


@triton.jit
def libdevice_calls(X, Y, OP: tl.constexpr, BLOCK: tl.constexpr):
    from triton.language.extra.cuda import libdevice  # noqa: F401 (the scan finds the names)
    o = tl.arange(0, BLOCK)
    x = tl.load(X + o)
    if OP == "exp":
        r = libdevice.exp(x)
    elif OP == "tanh":
        r = libdevice.tanh(x)
    else:
        r = libdevice.rsqrt(x)
    tl.store(Y + o, r)


@pytest.mark.parametrize("op,fn", [("exp", np.exp), ("tanh", np.tanh),
                                   ("rsqrt", lambda v: 1 / np.sqrt(v))])
def test_libdevice_calls_run_as_their_ptx(op, fn):
    """The interpreter raises on any libdevice call; inside emulate("H100") a unary fp32 one
    runs as the PTX it inlines to (CUDA's bounds: expf, tanhf 2 ulp; rsqrtf 2 ulp)."""
    x = torch.randn(1024, generator=torch.Generator().manual_seed(5)) * 4
    if op == "rsqrt":
        x = x.abs() + 1e-3
    y = torch.empty_like(x)
    with tmt.emulate("H100") as em:
        libdevice_calls[(1,)](x, y, OP=op, BLOCK=1024)
    assert f"libdevice.{op} fp32 = __nv_{op}f (its" in em.summary()
    assert "[bit-exact]" in em.summary()
    assert _ulps(y.numpy(), fn(x.numpy().astype(np.float64))) <= 2
    with pytest.raises(Exception):
        with tmt.interpret():
            libdevice_calls[(1,)](x, y, OP=op, BLOCK=1024)


@triton.jit
def minmax_kernel(X, Y, OUT, OP: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    x = tl.load(X + o)
    y = tl.load(Y + o)
    if OP == 0:
        r = tl.maximum(x, y)
    elif OP == 1:
        r = tl.minimum(x, y)
    elif OP == 2:
        r = tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL)
    else:
        r = tl.minimum(x, y, propagate_nan=tl.PropagateNan.ALL)
    tl.store(OUT + o, r)


@pytest.mark.parametrize("op,ptx", [(0, "max.f32"), (1, "min.f32"), (2, "max.NaN.f32"),
                                    (3, "min.NaN.f32")])
def test_maximum_minimum_nan_as_ptx(op, ptx):
    """tl.maximum / tl.minimum compile to max.f32 / min.f32, which return the non-NaN
    operand (the interpreter's np.maximum returns NaN); propagate_nan=ALL to max.NaN.f32."""
    sig = {"X": "*fp32", "Y": "*fp32", "OUT": "*fp32", "OP": "constexpr", "BLOCK": "constexpr"}
    assert ptx_of.float_ops(ptx_of.compile_ptx(minmax_kernel, sig, {"OP": op, "BLOCK": 32},
                                               num_warps=1)) == [ptx]
    x = torch.tensor([float("nan"), 1.0, float("nan"), -2.0, 3.0, 0.5, -1.0, 7.0])
    y = torch.tensor([2.0, float("nan"), float("nan"), -3.0, 3.0, -0.5, -1.5, 1.0])
    out = torch.empty(8)
    with tmt.emulate("H100") as em:
        minmax_kernel[(1,)](x, y, out, OP=op, BLOCK=8)
    big = op in (0, 2)
    want = torch.maximum(x, y) if big else torch.minimum(x, y)          # NaN-propagating
    if op < 2:
        want = torch.where(x.isnan(), y, torch.where(y.isnan(), x, want))
    assert torch.equal(out.isnan(), want.isnan())
    assert torch.equal(out[~out.isnan()], want[~want.isnan()])
    assert f"= {ptx}" in em.summary()
