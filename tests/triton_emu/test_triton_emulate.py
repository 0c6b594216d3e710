"""torch_mma_emu.triton.emulate on a Triton GEMM nobody in the project wrote
(tests/triton_user_matmul.py, after Triton's tutorial): its bits are emulated_mm's for the
instruction Triton picks, they differ from the plain interpreter's, and the seam (patched
while a block is open) behaves: restored on exit, per thread, nested helpers, autotuning,
kernels decorated under TRITON_INTERPRET, clear errors, ``tme.emulate`` covering Triton."""
import threading
import warnings

import pytest
import torch

triton = pytest.importorskip("triton")

import torch_mma_emu as tme  # noqa: E402
import torch_mma_emu.triton as tmt  # noqa: E402
from helpers import rnd, same  # noqa: E402
from torch_mma_emu.triton import hook  # noqa: E402


def user_mm(*args, **kw):
    import triton_user_matmul
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch_mma_emu.triton: matmul_kernel is autotuned")
        return triton_user_matmul.matmul(*args, **kw)


def operands(dt, M=150, K=200, N=130, seed=0):
    return rnd(M, K, dtype=dt, seed=seed), rnd(K, N, dtype=dt, seed=seed + 1)


CASES = [(torch.float16, "sm80"), (torch.float16, "sm90"), (torch.float16, "gfx942"),
         (torch.bfloat16, "sm80"), (torch.bfloat16, "sm90"), (torch.bfloat16, "gfx942")]


@pytest.mark.parametrize("dt,arch", CASES, ids=[f"{d}-{a}".replace("torch.", "")
                                                for d, a in CASES])
def test_user_gemm_is_emulated_mm_bit_for_bit(dt, arch):
    A, B = operands(dt)
    with tmt.emulate(arch) as em:
        C32 = user_mm(A, B, out_dtype=torch.float32)
        C16 = user_mm(A, B)
    ref = tme.emulated_mm(A, B, arch=arch)
    assert same(C32, ref)
    assert same(C16, ref.to(dt))
    path = {"sm80": "mma.sync", "sm90": "wgmma", "gfx942": "mfma"}[arch]
    fmt = {torch.float16: "fp16", torch.bfloat16: "bf16"}[dt]
    (plan,) = em.counts               # the family and types, the instruction, its model
    assert plan.startswith(f"{path} {fmt}->fp32: instruction ")
    assert plan.endswith(f", model {arch} {tme.registry.row(arch, fmt).instruction}")
    with tmt.interpret():                       # Triton's own interpreter: NumPy's dot
        plain = user_mm(A, B, out_dtype=torch.float32)
    assert not same(plain, ref)


def test_user_gemm_fp32_inputs_follow_the_backend_default_precision():
    """tl.dot(a, b) on fp32 takes tf32 where the backend allows it: NVIDIA, and CDNA3 (its
    xf32 MFMA: Triton 3.6 core.dot prefers "tf32" when allowed, whatever the backend's
    default_dot_input_precision says)."""
    A, B = operands(torch.float32, M=70, K=100, N=64)
    with tmt.emulate("sm80"):
        C = user_mm(A, B)
    assert same(C, tme.emulated_mm(A, B, arch="sm80", in_format="tf32"))
    assert not same(C, tme.emulated_mm(A, B, arch="sm80", in_format="fp32"))
    with tmt.interpret():
        assert not same(user_mm(A, B), C)
    with tmt.emulate("gfx942"):
        C = user_mm(A, B)
    assert same(C, tme.emulated_mm(A, B, arch="gfx942", in_format="xf32"))  # "tf32" is allowed


def test_the_bits_come_from_the_hook(monkeypatch):
    """With the dot hook off (the interpreter's NumPy dot) the bit test above fails."""
    A, B = operands(torch.float16, M=64, K=96, N=64)
    ref = tme.emulated_mm(A, B, arch="sm90")
    monkeypatch.setattr(tmt.TritonEmulation, "prepare", lambda self, *a: None)
    with tmt.emulate("sm90"):
        C = user_mm(A, B, out_dtype=torch.float32)
    assert not same(C, ref)
    assert torch.allclose(C, ref, rtol=1e-3, atol=1e-3)    # the same product otherwise


def test_autotuned_kernel_runs_the_first_config_or_the_chosen_one():
    import triton_user_matmul as um
    A, B = operands(torch.float16, M=64, K=64, N=64)
    with pytest.warns(UserWarning, match="autotuned over 3 configs"), \
            tmt.emulate("sm90") as em:
        um.matmul(A, B, out_dtype=torch.float32)
    assert list(em.counts) == ["wgmma fp16->fp32: instruction HGMMA (wgmma.m64nNk16), model sm90 hgmma.k16"]    # 64x64 tiles, 4 warps
    with tmt.emulate("sm90", autotune=lambda cfgs: cfgs[2]) as em:
        C = um.matmul(A, B, out_dtype=torch.float32)       # 32x64 tiles, 2 warps
    assert list(em.counts) == ["mma.sync fp16->fp32: instruction mma.sync (no sm90 row of its "
                               "own), model sm90 hgmma.k16 standing in"]
    assert same(C, tme.emulated_mm(A, B, arch="sm90"))     # same arithmetic (docs/triton.md)


def test_activation_helper_and_strided_operands():
    import triton.language as tl
    A, B = operands(torch.float16, M=64, K=64, N=96)
    At = A.t().contiguous().t()                              # column-major A
    with tmt.emulate("sm90"):
        C = user_mm(At, B[:, ::1], activation="leaky_relu", out_dtype=torch.float32)
    ref = tme.emulated_mm(A, B, arch="sm90")
    assert same(C, torch.where(ref >= 0, ref, torch.tensor(0.01, dtype=torch.float32) * ref))
    # the helper's interpretation left triton.language as it was (compiling still works)
    assert tl.core.is_builtin(tl.core.where) and tl.core.is_builtin(tl.where)


def test_seam_is_restored_on_exit_and_on_error():
    from triton.runtime import autotuner, interpreter as ti, jit
    # create_dot_scaled: absent from Triton 3.6's interpreter (the block adds it), present in 3.8
    before = (jit.JITFunction.run, jit.JITFunction.__call__, ti.InterpretedFunction.run,
              autotuner.Autotuner.run, ti.InterpreterBuilder.create_dot, ti._patch_lang_tensor,
              ti.interpreter_builder.options, getattr(ti.InterpreterBuilder, "create_dot_scaled", None))
    with pytest.raises(RuntimeError, match="boom"):
        with tmt.emulate("sm90"):
            with tmt.emulate("gfx942"):
                assert hook.current().arch == "gfx942"
            assert hook.current().arch == "sm90"
            raise RuntimeError("boom")
    after = (jit.JITFunction.run, jit.JITFunction.__call__, ti.InterpretedFunction.run,
             autotuner.Autotuner.run, ti.InterpreterBuilder.create_dot, ti._patch_lang_tensor,
             ti.interpreter_builder.options, getattr(ti.InterpreterBuilder, "create_dot_scaled", None))
    assert before == after
    assert hook.current() is None and not tmt.active()


def test_blocks_are_per_thread():
    """A thread's block does not reach another thread; both run at the same time."""
    A, B = operands(torch.float16, M=64, K=64, N=64)
    out, errs = {}, []
    start = threading.Barrier(2)

    def run(name, block):
        try:
            start.wait()
            with block:
                for _ in range(3):
                    out[name] = user_mm(A, B, out_dtype=torch.float32)
        except Exception as e:            # pragma: no cover - reported below
            errs.append(e)
    ts = [threading.Thread(target=run, args=("emu", tmt.emulate("sm80"))),
          threading.Thread(target=run, args=("plain", tmt.interpret()))]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errs, errs
    assert same(out["emu"], tme.emulated_mm(A, B, arch="sm80"))
    assert not same(out["plain"], out["emu"])
    seen = []
    with tmt.emulate("sm90"):       # a thread started inside the block adopts it
        t = threading.Thread(target=lambda: seen.append(tmt.active()))
        t.start()
        t.join()
    t = threading.Thread(target=lambda: seen.append(tmt.active()))     # and after: not
    t.start()
    t.join()
    assert seen == [True, False]


def test_kernel_decorated_under_triton_interpret_is_emulated_too():
    from triton.runtime.interpreter import InterpretedFunction
    import triton_user_matmul as um
    kern = InterpretedFunction(um.matmul_kernel.fn.fn)   # what TRITON_INTERPRET=1 makes
    A, B = operands(torch.float16, M=64, K=64, N=64)
    C = torch.empty(64, 64)
    with tmt.emulate("sm90"):
        kern[(1,)](A, B, C, 64, 64, 64, *A.stride(), *B.stride(), *C.stride(),
                   BLOCK_SIZE_M=64, BLOCK_SIZE_N=64, BLOCK_SIZE_K=32, GROUP_SIZE_M=8,
                   ACTIVATION="", num_warps=4)
    assert same(C, tme.emulated_mm(A, B, arch="sm90"))


def test_tme_emulate_covers_triton_kernels():
    A, B = operands(torch.float16, M=64, K=64, N=64)
    with tme.emulate("MI300X"):
        C = user_mm(A, B, out_dtype=torch.float32)
        assert tmt.emulating()
    assert not tmt.active()
    assert same(C, tme.emulated_mm(A, B, arch="gfx942"))


def test_errors_say_what_is_allowed(monkeypatch):
    with pytest.raises(ValueError, match="give an arch"):
        tmt.emulate(None)
    with pytest.raises(ValueError, match="unknown arch"):
        tmt.emulate("sm99")
    with pytest.raises(ValueError, match="autotune"):
        tmt.emulate("sm90", autotune="fastest")
    with pytest.raises(TypeError, match="instruction"):
        tmt.emulate("sm90", instruction=3)
    A, B = operands(torch.float16, M=64, K=64, N=64)
    with tmt.emulate("sm80", instruction="wgmma"):
        with pytest.raises(Exception, match="wgmma does not exist on sm80"):
            user_mm(A, B)
    from triton.runtime import interpreter as ti
    monkeypatch.delattr(ti.InterpretedFunction, "rewrite")
    with pytest.raises(RuntimeError, match="layout.*InterpretedFunction.rewrite"):
        with tmt.emulate("sm90"):
            pass
    assert hook.current() is None


def test_instruction_override_forces_a_path_or_a_registry_variant():
    A = rnd(64, 64, dtype=torch.float8_e4m3fn, seed=3)
    B = rnd(64, 64, dtype=torch.float8_e4m3fn, seed=4)
    from torch_mma_emu.triton_kernels import matmul
    with tmt.emulate("sm90") as em:
        wg = matmul(A, B, block_k=64)
    with tmt.emulate("sm90", instruction="mma.sync") as em2:
        ms = matmul(A, B, block_k=64)
    with tmt.emulate("sm90", instruction="mma.sync.m16n8k32 (fp8)") as em3:
        ptx = matmul(A, B, block_k=64)
    assert same(wg, tme.emulated_mm(A, B, arch="sm90"))
    assert same(ms, tme.emulated_mm(A.half(), B.half(), arch="sm90"))
    assert same(ptx, tme.emulated_mm(A, B, arch="sm90", instruction="mma.sync.m16n8k32 (fp8)"))
    assert not same(wg, ms)
    assert [k.split(":")[0] for k in em.counts] == ["wgmma fp8_e4m3->fp32"]
    assert "operands converted to fp16" in list(em2.counts)[0]
    assert list(em3.counts)[0].endswith(": instruction mma.sync.m16n8k32 (fp8)")


def _casts(x, block):
    import triton_cast_kernel as ck
    outs = [torch.empty(x.shape, dtype=d) for d in (torch.bfloat16, torch.float8_e4m3fn,
                                                      torch.float8_e5m2, torch.bfloat16)]
    with block:
        ck.cast_kernel[(triton_cdiv(x.numel(), 256),)](x, *outs, x.numel(), BLOCK=256)
    return outs


def triton_cdiv(a, b):
    return -(-a // b)


def test_conversions_round_as_the_gpu():
    """bf16: nearest even (the interpreter truncates); fp8: nearest even, saturating
    (cvt.rn.satfinite); rtz: toward zero."""
    g = torch.Generator().manual_seed(5)
    x = torch.cat([torch.randn(1000, generator=g) * 3,
                   torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, 500., -1e6, float("inf"),
                                 float("nan"), 2**-140, -0.0, 448., 464., 57344., 61440.])])
    bf, e4, e5, bz = _casts(x, tmt.emulate("sm90"))
    assert same(bf, x.to(torch.bfloat16))
    big4, big5 = torch.finfo(torch.float8_e4m3fn).max, torch.finfo(torch.float8_e5m2).max
    assert same(e4, x.clamp(-big4, big4).to(torch.float8_e4m3fn))
    assert same(e5, x.clamp(-big5, big5).to(torch.float8_e5m2))
    assert e4[-8].float() == 448 and e5[-9].float() == -big5       # saturated, not NaN / inf
    trunc = (x.view(torch.int32) & ~0xFFFF).view(torch.float32).to(torch.bfloat16)
    fin = torch.isfinite(x)
    assert same(bz[fin], trunc[fin])
    pbf, *_ = _casts(x, tmt.interpret())                  # Triton's interpreter truncates
    assert not same(pbf, bf)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_native_gpu_run_is_the_emulation():
    """On a GPU: the user's GEMM natively and under emulate(this GPU's arch), same config."""
    import triton_user_matmul as um
    from torch_mma_emu.native import device_arch
    A, B = operands(torch.float16, M=192, K=256, N=160)
    native = um.matmul(A.cuda(), B.cuda(), out_dtype=torch.float32).cpu()
    best = um.matmul_kernel.best_config
    with tmt.emulate(device_arch(), autotune=lambda cfgs: next(
            c for c in cfgs if c.all_kwargs() == best.all_kwargs())):
        emulated = um.matmul(A, B, out_dtype=torch.float32)
    assert same(native, emulated)


def test_a_coarse_spec_reaches_every_dot():
    """A Spec as arch (here sm90's with F = 3): every dot takes it, none escapes."""
    A, B = operands(torch.float16, M=64, K=96, N=64)
    coarse = tme.spec("sm90", "fp16").replace(F=3)
    with tmt.emulate(coarse) as em:
        C = user_mm(A, B, out_dtype=torch.float32)
    assert same(C, tme.emulated_mm(A, B, arch=coarse))
    assert not torch.allclose(C, tme.emulated_mm(A, B, arch="sm90"), rtol=1e-2, atol=1e-2)
    assert sum(em.counts.values()) == 3 and all(k.startswith("spec ") for k in em.counts)


def _in_thread(fn):
    out, errs = [], []

    def run():
        try:
            out.append(fn())
        except Exception as e:            # pragma: no cover - reported below
            errs.append(e)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert not errs, errs
    return out[0]


def test_threads_started_inside_tmt_emulate_are_covered():
    """A thread started inside a triton.emulate block runs its kernels emulated (not
    natively, not in the plain interpreter); a pool started inside one too."""
    from concurrent.futures import ThreadPoolExecutor
    A, B = operands(torch.float16, M=64, K=64, N=64)
    ref = tme.emulated_mm(A, B, arch="sm80")
    with tmt.emulate("sm80") as em:
        C = _in_thread(lambda: user_mm(A, B, out_dtype=torch.float32))
        with ThreadPoolExecutor(2) as pool:
            D = pool.submit(user_mm, A, B, out_dtype=torch.float32).result()
    assert same(C, ref) and same(D, ref) and sum(em.counts.values()) == 4
    with tmt.interpret():
        assert not same(_in_thread(lambda: user_mm(A, B, out_dtype=torch.float32)), ref)
    assert not tmt.active() and threading.getprofile() is None


def _mm_counts(em):
    return em.recorder.emulated_count


def test_threads_adopt_the_innermost_mode_and_triton_block_apart():
    """tmt.emulate nested in tme.emulate: a thread's torch ops run under the mode, its
    Triton kernels under the inner Triton block; the other nesting: the mode's own Triton
    block is the innermost one.  The calling thread sees the same."""
    A, B = operands(torch.float16, M=64, K=64, N=64)
    X, Y = torch.randn(8, 16), torch.randn(16, 8)
    kern = lambda: (user_mm(A, B, out_dtype=torch.float32), tmt.emulating())  # noqa: E731
    with tme.emulate("sm90") as em:
        with tmt.emulate("gfx942"):
            n = _mm_counts(em)
            C, emu = _in_thread(kern)
            _in_thread(lambda: X @ Y)
            assert _mm_counts(em) == n + 1          # the thread's torch matmul: emulated
            assert same(C, tme.emulated_mm(A, B, arch="gfx942")) and emu
            assert same(kern()[0], C)               # as in the calling thread
        C, _ = _in_thread(kern)                     # the inner block closed: the mode's
    assert same(C, tme.emulated_mm(A, B, arch="sm90"))
    with tmt.emulate("gfx942"):
        with tme.emulate("sm80") as em:
            n = _mm_counts(em)
            C, _ = _in_thread(kern)
            _in_thread(lambda: X @ Y)
            assert _mm_counts(em) == n + 1
            assert same(C, tme.emulated_mm(A, B, arch="sm80"))
            assert same(kern()[0], C)
        C, _ = _in_thread(kern)                     # the mode closed: gfx942's block
        assert same(C, tme.emulated_mm(A, B, arch="gfx942"))
        with tmt.interpret():                       # an inner interpret() block
            assert not _in_thread(kern)[1]
    assert not tmt.active() and threading.getprofile() is None


def test_threads_started_inside_tme_emulate_are_covered():
    A, B = operands(torch.float16, M=64, K=64, N=64)
    out = []
    with tme.emulate("sm80"):
        t = threading.Thread(target=lambda: out.append(user_mm(A, B, out_dtype=torch.float32)))
        t.start()
        t.join()
    assert same(out[0], tme.emulated_mm(A, B, arch="sm80"))
    assert not tmt.active()


def test_another_triton_version_is_named_when_its_rules_decide(monkeypatch):
    """The instruction choice and rewrites are Triton 3.6's: under another version the first
    dot whose instruction Triton's rules pick warns, once per block (opening a block, e.g.
    every torch_mma_emu.emulate, says nothing; a forced instruction says nothing)."""
    assert hook.version_warning("3.6.0") is None and hook.version_warning("3.7.1") is None
    msg = hook.version_warning("3.8.0")
    assert "Triton 3.8.0" in msg and "3.6" in msg and "N = 8" in msg
    assert "seen with" not in hook.version_warning("3.9.1")
    assert hook.version_warning("weird") is not None
    monkeypatch.setattr(triton, "__version__", "3.8.0")
    A, B = torch.zeros(64, 16), torch.zeros(16, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tmt.emulate("sm90", instruction="mma.sync") as forced:
            forced.plan(A, B, "fp16", "fp16", "fp32", "tf32", 0)
        with tmt.emulate("sm90") as block:
            pass
    with tmt.emulate("sm90") as block:
        with pytest.warns(UserWarning, match="Triton 3.8.0 is installed"):
            block.plan(A, B, "fp16", "fp16", "fp32", "tf32", 0)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            block.plan(A, B, "fp16", "fp16", "fp32", "tf32", 0)
