"""torch_mma_emu.triton.emulate used the way users use Triton, beyond the tutorial GEMM of
test_triton_emulate.py: kernels launched from torch.compile'd code, and the edges a user
meets first (each gives the emulated bits or a clear error)."""
import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import torch_mma_emu as tme  # noqa: E402
import torch_mma_emu.triton as tmt  # noqa: E402
from helpers import rnd, same  # noqa: E402
from torch_mma_emu.triton.inductor import NotEmulatedError  # noqa: E402


@triton.jit
def _block_mm(a, b, acc):
    return tl.dot(a, b, acc)


@triton.jit
def block_ptr_mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                        BK: tl.constexpr):
    """A GEMM with block pointers, zero padding at the edges and the dot in a helper."""
    pm, pn = tl.program_id(0), tl.program_id(1)
    a_bp = tl.make_block_ptr(a_ptr, shape=(M, K), strides=(K, 1), offsets=(pm * BM, 0),
                             block_shape=(BM, BK), order=(1, 0))
    b_bp = tl.make_block_ptr(b_ptr, shape=(K, N), strides=(N, 1), offsets=(0, pn * BN),
                             block_shape=(BK, BN), order=(1, 0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_bp, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_bp, boundary_check=(0, 1), padding_option="zero")
        acc = _block_mm(a, b, acc)
        a_bp = tl.advance(a_bp, (0, BK))
        b_bp = tl.advance(b_bp, (BK, 0))
    c_bp = tl.make_block_ptr(c_ptr, shape=(M, N), strides=(N, 1), offsets=(pm * BM, pn * BN),
                             block_shape=(BM, BN), order=(1, 0))
    tl.store(c_bp, acc, boundary_check=(0, 1))


def block_ptr_mm(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N)
    grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))  # noqa: E731
    block_ptr_mm_kernel[grid](a, b, c, M, N, K, BM=64, BN=64, BK=32)
    return c


def chain_ref(A, B, arch, bk=32, **kw):
    K = A.shape[1]
    acc = torch.zeros(A.shape[0], B.shape[1])
    for k in range(0, K, bk):
        acc = tme.emulated_mm(A[:, k:k + bk], B[k:k + bk], acc, arch=arch, **kw)
    return acc


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_kernel_launched_from_torch_compile_is_emulated(backend):
    """Without a GPU Dynamo does not know Triton kernels; it used to trace into the
    interpreter (NumPy as torch ops) and fail.  The launch runs eagerly instead."""
    torch._dynamo.reset()
    A, B = rnd(128, 64, dtype=torch.float16, seed=1), rnd(64, 96, dtype=torch.float16, seed=2)
    f = torch.compile(lambda a, b: block_ptr_mm(a, b) * 2, backend=backend)
    with tmt.emulate("sm90") as em:
        C = f(A, B)
    assert same(C, chain_ref(A, B, "sm90") * 2)
    assert list(em.counts) == ["wgmma fp16->fp32: instruction HGMMA (wgmma.m64nNk16), model sm90 hgmma.k16"]


@triton.jit
def fp8_dot_kernel(a_ptr, b_ptr, c_ptr, up_ptr, BM: tl.constexpr, BN: tl.constexpr,
                   BK: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], tl.dot(a, b))
    tl.store(up_ptr + rm[:, None] * BK + rk[None, :], a.to(tl.float32))


@pytest.mark.parametrize("dt", [torch.float8_e4m3fnuz, torch.float8_e5m2fnuz])
def test_amd_fnuz_fp8_kernel_runs_on_the_fp8_mfma(dt):
    """MI300X's fp8 (torch.float8_e4m3fnuz / e5m2fnuz, Triton's float8e4b8 / float8e5b16):
    Triton's interpreter could not type them at all; inside a block they load, convert
    (0x80 is NaN) and multiply on the CDNA3 fp8 row."""
    A, B = rnd(32, 64, dtype=dt, seed=1), rnd(64, 32, dtype=dt, seed=2)
    A.view(torch.uint8)[0, 0] = 0x80
    C, up = torch.empty(32, 32), torch.empty(32, 64)
    with tmt.emulate("gfx942") as em:
        fp8_dot_kernel[(1,)](A, B, C, up, BM=32, BN=32, BK=64)
    assert same(C, tme.emulated_mm(A, B, torch.zeros(32, 32), arch="gfx942"))
    assert same(up[1:], A[1:].float()) and up[0, 0].isnan()
    fmt = {torch.float8_e4m3fnuz: "fp8_e4m3fnuz", torch.float8_e5m2fnuz: "fp8_e5m2fnuz"}[dt]
    assert [k.split(":")[0] for k in em.counts] == [f"mfma {fmt}->fp32"]
    with tmt.emulate("gfx90a"):             # no fnuz MFMA on CDNA2: Triton's FMA path
        fp8_dot_kernel[(1,)](A, B, C, up, BM=32, BN=32, BK=64)
    assert same(C, tme.emulated_mm(A.float(), B.float(), torch.zeros(32, 32), arch="gfx90a",
                                   in_format="fp32"))
    with tmt.emulate("sm90"):
        with pytest.raises(Exception, match="fnuz.*no tl.dot on NVIDIA"):
            fp8_dot_kernel[(1,)](A, B, C, up, BM=32, BN=32, BK=64)


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def test_inductor_launch_of_a_dot_kernel_raises_inside_a_block(monkeypatch):
    """On a GPU, torch.compile with Inductor launches a user kernel through its own
    CachingAutotuner (USER_AUTOTUNE), not JITFunction.run: inside a block a kernel with a
    tl.dot (here through a @jit helper) must not run natively.  No GPU here, so the launcher
    is driven directly; kernels without a dot and Inductor's own kernels pass through."""
    th = pytest.importorskip("torch._inductor.runtime.triton_heuristics")
    from torch._inductor.runtime.hints import HeuristicType
    from torch_mma_emu.triton import inductor

    assert inductor.calls_dot(block_ptr_mm_kernel) and not inductor.calls_dot(scale_kernel)
    ran = []
    original = th.CachingAutotuner.run
    monkeypatch.setattr(th.CachingAutotuner, "run", lambda self, *a, **k: ran.append(self.fn))

    def launcher(fn, kind):
        t = th.CachingAutotuner.__new__(th.CachingAutotuner)
        t.fn, t.heuristic_type, t.inductor_meta = fn, kind, {"kernel_name": "k0"}
        return t
    user = HeuristicType.USER_AUTOTUNE
    import threading
    go, errs = threading.Event(), []

    def launch():
        try:
            launcher(block_ptr_mm_kernel, user).run(stream=0)
        except RuntimeError as e:
            errs.append(e)
    before = threading.Thread(target=lambda: go.wait(10) and launch())
    before.start()                # a thread started before the block: untouched
    with tmt.emulate("sm90"):
        with pytest.raises(NotEmulatedError, match="k0 and launches it natively.*NOT be emulated"):
            launcher(block_ptr_mm_kernel, user).run(stream=0)
        launcher(scale_kernel, user).run(stream=0)
        launcher(block_ptr_mm_kernel, HeuristicType.POINTWISE).run(stream=0)
        go.set()
        before.join()
        inside = threading.Thread(target=launch)      # one started inside: covered
        inside.start()
        inside.join()
    assert ran == [scale_kernel, block_ptr_mm_kernel, block_ptr_mm_kernel]
    assert len(errs) == 1 and isinstance(errs[0], NotEmulatedError)
    launcher(block_ptr_mm_kernel, user).run(stream=0)          # after the block: untouched
    assert len(ran) == 4
    monkeypatch.undo()
    assert th.CachingAutotuner.run is original


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2),
                          triton.Config({"BLOCK": 128}, num_warps=4)], key=["n"])
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def tuned_scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        x = tl.load(x_ptr + offs)
    else:
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(y_ptr + offs, x.to(tl.bfloat16), mask=offs < n)


def test_autotune_with_heuristics_records_the_config_it_ran():
    """kernel.best_config is what the run used, as after a GPU run (the tutorial prints it);
    heuristics see the chosen config; the bf16 store rounds to nearest even."""
    x = torch.randn(300) * 3
    y = torch.empty(300, dtype=torch.bfloat16)
    grid = lambda meta: (triton.cdiv(300, meta["BLOCK"]),)  # noqa: E731
    with tmt.emulate("sm90", autotune=lambda cfgs: cfgs[1]):
        tuned_scale_kernel[grid](x, y, 300)
    assert tuned_scale_kernel.best_config.kwargs == {"BLOCK": 128}
    assert same(y, x.to(torch.bfloat16))
