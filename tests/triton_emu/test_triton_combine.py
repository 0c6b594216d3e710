"""Triton's compiler rewrites dots before choosing instructions (its TTIR combine pass), and
the interpreter never sees that: ``acc += tl.dot(a, b)`` compiles to ``tl.dot(a, b, acc)``
(the accumulator is the chain's C), and ``tl.sum(x[:, :, None] * y[None, :, :], 1)`` on fp32
compiles to a tf32 dot.  Checked here against the TTGIR the installed Triton compiles on the
CPU, and the emulation against emulated_mm (torch_mma_emu/triton/combine.py)."""
import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import torch_mma_emu as tme  # noqa: E402
import torch_mma_emu.triton as tmt  # noqa: E402
from helpers import rnd, same, triton_as_modelled  # noqa: E402

tt = pytest.importorskip("triton_ttgir")


@triton.jit
def plus_eq_kernel(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr,
                   BK: tl.constexpr, STYLE: tl.constexpr):
    """C += A @ B over K blocks, the accumulator written three ways."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.load(c_ptr + rm[:, None] * BN + rn[None, :])
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        if STYLE == "chain":
            acc = tl.dot(a, b, acc)
        elif STYLE == "plus_eq":
            acc += tl.dot(a, b)
        else:                                  # "dot_plus": the dot on the left
            acc = tl.dot(a, b) + acc
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


@triton.jit
def two_dots_kernel(a_ptr, b_ptr, c_ptr, d_ptr, BM: tl.constexpr, BN: tl.constexpr,
                    BK: tl.constexpr, TWO_USES: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    if TWO_USES:         # the first dot's result is also stored: the GPU adds it apart
        x = tl.dot(a, b)
        tl.store(d_ptr + rm[:, None] * BN + rn[None, :], x)
        tl.store(c_ptr + rm[:, None] * BN + rn[None, :], x + x)
    else:                # the right-hand dot absorbs the left-hand one as its C
        tl.store(c_ptr + rm[:, None] * BN + rn[None, :], tl.dot(a, b) + tl.dot(b, a))


@triton.jit
def sum_of_products_kernel(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr,
                           BK: tl.constexpr, ADD: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    c = tl.sum(a[:, :, None] * b[None, :, :], axis=1)
    if ADD:
        c += tl.load(c_ptr + rm[:, None] * BN + rn[None, :])
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], c)


@triton.jit
def reused_dot_kernel(a_ptr, b_ptr, e_ptr, c_ptr, d_ptr, BM: tl.constexpr, BN: tl.constexpr,
                      BK: tl.constexpr, MODE: tl.constexpr):
    """A dot result with another use besides an addition: the compiler does not fold."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    e = tl.load(e_ptr + rm[:, None] * BN + rn[None, :])
    out = rm[:, None] * BN + rn[None, :]
    x = tl.dot(a, b)
    if MODE == "self_add":
        tl.store(c_ptr + out, x + x)
    elif MODE == "store_then_add":
        tl.store(d_ptr + out, x)
        tl.store(c_ptr + out, x + e)
    elif MODE == "add_then_store":
        tl.store(c_ptr + out, x + e)
        tl.store(d_ptr + out, x)
    else:                                      # "add_twice"
        tl.store(c_ptr + out, x + e)
        tl.store(d_ptr + out, e + x)


@triton.jit
def sum_axis_kernel(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                    AX: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    c = tl.sum(a[:, :, None] * b[None, :, :], axis=AX)
    if AX == 0:
        tl.store(c_ptr + rk[:, None] * BN + rn[None, :], c)
    elif AX == 2:
        tl.store(c_ptr + rm[:, None] * BK + rk[None, :], c)
    else:
        tl.store(c_ptr + rm[:, None] * BN + rn[None, :], c)


def _ptrs(ty, out="fp32", n=3):
    return {name: "*" + (ty if i < 2 else out) for i, name in
            enumerate(["a_ptr", "b_ptr", "c_ptr", "d_ptr"][:n])}


# --- what the compiler makes of them (TTGIR on the CPU) -------------------------------

@pytest.mark.parametrize("arch,ty,fused", [("sm90", "fp16", True), ("sm80", "bf16", True),
                                           ("gfx942", "fp16", True),
                                           ("sm90", "fp8e4nv", False)])
def test_compiler_folds_the_addition_into_the_dot(arch, ty, fused):
    """fp8 on sm90 carries max_num_imprecise_acc = 2**30 by default: not folded."""
    for style in ("plus_eq", "dot_plus"):
        sig = {**_ptrs(ty), "K": "i32", "BM": "constexpr", "BN": "constexpr",
               "BK": "constexpr", "STYLE": "constexpr"}
        text = tt.ttgir(plus_eq_kernel, sig, dict(BM=64, BN=64, BK=64, STYLE=style), arch)
        assert len(tt.dots(text)) == 1
        assert ("arith.addf" not in text) == fused, (arch, ty, style)


def test_compiler_keeps_a_dot_with_two_uses_apart():
    sig = {**_ptrs("fp16", n=4), "BM": "constexpr", "BN": "constexpr", "BK": "constexpr",
           "TWO_USES": "constexpr"}
    const = dict(BM=64, BN=64, BK=64)
    assert "arith.addf" in tt.ttgir(two_dots_kernel, sig, {**const, "TWO_USES": True}, "sm90")
    assert "arith.addf" not in tt.ttgir(two_dots_kernel, sig, {**const, "TWO_USES": False},
                                        "sm90")


@pytest.mark.parametrize("arch,shape,dot", [("sm90", (64, 64, 32), "wgmma"),
                                            ("sm80", (16, 16, 8), "mma.sync"),
                                            ("gfx90a", (32, 32, 16), "mfma"),
                                            ("sm90", (8, 64, 16), None)])
def test_compiler_makes_a_dot_of_a_broadcast_multiply_and_sum(arch, shape, dot):
    sig = {**_ptrs("fp32"), "BM": "constexpr", "BN": "constexpr", "BK": "constexpr",
           "ADD": "constexpr"}
    text = tt.ttgir(sum_of_products_kernel, sig,
                    dict(zip(("BM", "BN", "BK"), shape), ADD=True), arch)
    triton_as_modelled([d[0] for d in tt.dots(text)] == ([dot] if dot else []),
                       f"a broadcast multiply + sum ({arch}, {shape})")
    if dot:
        triton_as_modelled("inputPrecision = tf32" in text or "inputPrecision = 0" in text,
                           f"the input precision of the dot ({arch})")
        assert "arith.addf" not in text.split("tt.func private")[0]   # the += folded too


# --- the emulation does the same --------------------------------------------------------

def _plus_eq(arch, A, B, C, style, bk=32):
    K = A.shape[1]
    D = C.clone()
    with tmt.emulate(arch) as em:
        plus_eq_kernel[(1,)](A, B, D, K, BM=A.shape[0], BN=B.shape[1], BK=bk, STYLE=style)
    return D, em


@pytest.mark.parametrize("arch,dt", [("sm80", torch.float16), ("sm90", torch.bfloat16),
                                     ("gfx942", torch.float16)])
def test_plus_eq_dot_is_the_chain_with_acc_as_c(arch, dt):
    A, B = rnd(64, 96, dtype=dt, seed=1), rnd(96, 64, dtype=dt, seed=2)
    C = rnd(64, 64, dtype=torch.float32, seed=3)
    chain, em = _plus_eq(arch, A, B, C, "chain")
    ref = C
    for k in range(0, 96, 32):
        ref = tme.emulated_mm(A[:, k:k + 32], B[k:k + 32], ref, arch=arch)
    assert same(chain, ref)
    apart = C
    for k in range(0, 96, 32):     # what the interpreter did: from 0, then one addition
        apart = apart + tme.emulated_mm(A[:, k:k + 32], B[k:k + 32], torch.zeros_like(C),
                                        arch=arch)
    assert not same(apart, ref)
    for style in ("plus_eq", "dot_plus"):
        D, em2 = _plus_eq(arch, A, B, C, style)
        assert same(D, ref), style
        assert em2.counts == em.counts          # each dot counted once


def test_fp8_on_hopper_keeps_the_addition_apart():
    A = rnd(64, 64, dtype=torch.float8_e4m3fn, seed=1)
    B = rnd(64, 64, dtype=torch.float8_e4m3fn, seed=2)
    C = rnd(64, 64, dtype=torch.float32, seed=3)
    D, _ = _plus_eq("sm90", A, B, C, "plus_eq", bk=64)
    assert same(D, C + tme.emulated_mm(A, B, torch.zeros_like(C), arch="sm90"))
    D, _ = _plus_eq("sm89", A, B, C, "plus_eq", bk=64)      # default 0 on sm89: folded
    assert same(D, tme.emulated_mm(A, B, C, arch="sm89"))


def test_two_dots_fold_the_left_one_into_the_right_one():
    A, B = rnd(64, 64, dtype=torch.float16, seed=1), rnd(64, 64, dtype=torch.float16, seed=2)
    C, D = torch.empty(64, 64), torch.empty(64, 64)
    with tmt.emulate("sm90") as em:
        two_dots_kernel[(1,)](A, B, C, D, BM=64, BN=64, BK=64, TWO_USES=False)
    first = tme.emulated_mm(A, B, torch.zeros(64, 64), arch="sm90")
    assert same(C, tme.emulated_mm(B, A, first, arch="sm90"))
    assert sum(em.counts.values()) == 2


@pytest.mark.parametrize("arch,fmt", [("sm90", "tf32"), ("sm80", "tf32"), ("gfx942", "xf32"),
                                      ("gfx90a", "fp32"), ("sm75", "fp32")])
def test_broadcast_multiply_and_sum_is_a_tf32_dot(arch, fmt):
    A, B = rnd(32, 16, dtype=torch.float32, seed=1), rnd(16, 32, dtype=torch.float32, seed=2)
    C0 = rnd(32, 32, dtype=torch.float32, seed=3)
    for add in (False, True):
        C = C0.clone()
        with tmt.emulate(arch) as em:
            sum_of_products_kernel[(1,)](A, B, C, BM=32, BN=32, BK=16, ADD=add)
        ref = tme.emulated_mm(A, B, C0 if add else torch.zeros(32, 32), arch=arch,
                              in_format=fmt)
        assert same(C, ref), add
        assert sum(em.counts.values()) == 1
    with tmt.interpret():                   # NumPy: exact products, an fp32 sum
        sum_of_products_kernel[(1,)](A, B, C, BM=32, BN=32, BK=16, ADD=False)
    assert not same(C, ref) or fmt == "fp32"


def test_small_broadcast_multiply_and_sum_stays_a_sum():
    A, B = rnd(8, 16, dtype=torch.float32, seed=1), rnd(16, 32, dtype=torch.float32, seed=2)
    C, P = torch.empty(8, 32), torch.empty(8, 32)
    with tmt.emulate("sm90") as em:
        sum_of_products_kernel[(1,)](A, B, C, BM=8, BN=32, BK=16, ADD=False)
    with tmt.interpret():
        sum_of_products_kernel[(1,)](A, B, P, BM=8, BN=32, BK=16, ADD=False)
    # no dot: a sum, run in the compiled order (compiled.py), so close to NumPy's, not equal
    assert torch.allclose(C, P, rtol=1e-5, atol=1e-5)
    assert not em.counts and all("warps x" in k for k in em.reductions)


def test_the_rewrites_are_undone_after_the_block():
    """Plain Triton afterwards: the semantic, the builder and the reduction are Triton's own
    again, and the compiler still compiles the kernels (it goes through TritonSemantic.dot)."""
    from triton.language.semantic import TritonSemantic
    from triton.runtime import interpreter as ti
    before = (TritonSemantic.dot, ti.InterpreterBuilder.create_fadd, ti.ReduceOps.sum,
              ti.InterpreterBuilder.create_broadcast, ti._patch_lang_core)
    A, B = rnd(64, 64, dtype=torch.float16, seed=1), rnd(64, 64, dtype=torch.float16, seed=2)
    with pytest.raises(Exception, match="boom"):
        with tmt.emulate("sm90"):
            _plus_eq("sm90", A, B, torch.zeros(64, 64), "plus_eq")
            raise RuntimeError("boom")
    assert before == (TritonSemantic.dot, ti.InterpreterBuilder.create_fadd, ti.ReduceOps.sum,
                      ti.InterpreterBuilder.create_broadcast, ti._patch_lang_core)
    sig = {**_ptrs("fp16"), "K": "i32", "BM": "constexpr", "BN": "constexpr",
           "BK": "constexpr", "STYLE": "constexpr"}
    text = tt.ttgir(plus_eq_kernel, sig, dict(BM=64, BN=64, BK=64, STYLE="plus_eq"), "sm90")
    assert [d[0] for d in tt.dots(text)] == ["wgmma"]


@pytest.mark.parametrize("arch,tile,dot", [("sm90", 32, "mma.sync"), ("sm90", 64, "wgmma"),
                                           ("gfx942", 32, "mfma")])
def test_project_kernels_compile_to_the_folded_dots(arch, tile, dot):
    """What the GPU step (scripts/gpu/triton_emulate.py) expects of triton_kernels: the
    sum-of-products GEMM's K loop is one tf32 dot with acc as C, and matmul's
    ``dot_form="plus_eq"`` loop has no addition left (fp8 on sm90: the addition stays)."""
    from torch_mma_emu.triton_kernels import gemm, sum_gemm
    A, B, D = torch.zeros(100, 70), torch.zeros(70, 90), torch.zeros(100, 90)
    args = (A, B, D, D, 100, 90, 70, *A.stride(), *B.stride(), *D.stride(), *D.stride())
    sig, const = tt.signature_of(sum_gemm._sum_gemm_kernel, args,
                                 dict(HAS_C=True, BLOCK_M=tile, BLOCK_N=tile, BLOCK_K=16))
    text = tt.ttgir(sum_gemm._sum_gemm_kernel, sig, const, arch)
    loop = text.split("scf.for")[1].split("scf.yield")[0]
    triton_as_modelled({d[0] for d in tt.dots(text)} == {dot} and "arith.addf" not in loop,
                       f"sum_gemm's K loop ({arch}, tile {tile})")
    triton_as_modelled("inputPrecision = tf32" in text or "inputPrecision = 0" in text,
                       f"the input precision of the dot ({arch})")
    for dt, fused in ((torch.float16, True), (torch.float8_e4m3fn, False)):
        if dt != torch.float16 and arch != "sm90":
            continue
        A8, B8 = A.to(dt), B.to(dt)
        args = (A8, B8, D, D, 100, 90, 70) + (0, *A.stride(), 0, *B.stride(), 0, *D.stride(),
                                              0, *D.stride())
        sig, const = tt.signature_of(gemm._gemm_kernel, args, dict(
            HAS_C=True, C_IN_ACC=True, ACC_FP16=False, PRECISION=None, BLOCK_M=64,
            BLOCK_N=64, BLOCK_K=64, INTERP_UPCAST=False, PLUS_EQ=True))
        text = tt.ttgir(gemm._gemm_kernel, sig, const, arch)
        loop = text.split("scf.for")[1].split("scf.yield")[0]
        assert ("arith.addf" not in loop) == fused, (arch, dt)


def test_a_folded_dot_is_computed_once(monkeypatch):
    """The dot an addition folds into runs once, with the addend as C (not first from 0 and
    then again): the arithmetic runs once per dot; a result read and also folded (two uses)
    runs twice.  The bits are the chain's (test above)."""
    from torch_mma_emu.triton import context
    calls = []
    orig = context.run_plan
    monkeypatch.setattr(context, "run_plan", lambda *a: calls.append(1) or orig(*a))
    A, B = rnd(64, 96, dtype=torch.float16, seed=1), rnd(96, 64, dtype=torch.float16, seed=2)
    C = rnd(64, 64, dtype=torch.float32, seed=3)
    for style in ("chain", "plus_eq", "dot_plus"):
        calls.clear()
        _plus_eq("sm90", A, B, C, style)
        assert len(calls) == 3, style
    A32, B32 = rnd(32, 16, dtype=torch.float32, seed=1), rnd(16, 32, dtype=torch.float32, seed=2)
    for add in (False, True):
        calls.clear()
        with tmt.emulate("sm90"):
            sum_of_products_kernel[(1,)](A32, B32, torch.zeros(32, 32), BM=32, BN=32, BK=16,
                                         ADD=add)
        assert len(calls) == 1, add
    A, B = A[:, :64], B[:64]
    for two, n in ((False, 2), (True, 1)):
        calls.clear()
        with tmt.emulate("sm90"):
            two_dots_kernel[(1,)](A, B, torch.empty(64, 64), torch.empty(64, 64), BM=64,
                                  BN=64, BK=64, TWO_USES=two)
        assert len(calls) == n, two


# --- a dot result with other uses; sums the compiler cannot make a dot of ----------------

REUSE = ["self_add", "store_then_add", "add_then_store", "add_twice"]


@pytest.mark.parametrize("mode", REUSE)
def test_compiler_does_not_fold_a_dot_with_other_uses(mode):
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "e_ptr": "*fp32", "c_ptr": "*fp32",
           "d_ptr": "*fp32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr",
           "MODE": "constexpr"}
    text = tt.ttgir(reused_dot_kernel, sig, dict(BM=64, BN=64, BK=64, MODE=mode), "sm90")
    assert "arith.addf" in text and len(tt.dots(text)) == 1


def _reused(mode):
    A, B = rnd(64, 64, dtype=torch.float16, seed=1), rnd(64, 64, dtype=torch.float16, seed=2)
    E = rnd(64, 64, dtype=torch.float32, seed=3)
    C, D = torch.zeros(64, 64), torch.zeros(64, 64)
    with tmt.emulate("sm90"):
        reused_dot_kernel[(1,)](A, B, E, C, D, BM=64, BN=64, BK=64, MODE=mode)
    x = tme.emulated_mm(A, B, torch.zeros(64, 64), arch="sm90")
    return C, D, x, E, tme.emulated_mm(A, B, E, arch="sm90")


@pytest.mark.parametrize("mode", ["self_add", "store_then_add", "add_twice"])
def test_a_dot_with_an_earlier_use_is_not_folded(mode):
    """``x + x``, and ``x + e`` after x was stored or folded once: the GPU adds apart."""
    C, D, x, E, folded = _reused(mode)
    if mode == "self_add":
        assert same(C, x + x)
    elif mode == "store_then_add":
        assert same(D, x) and same(C, x + E) and not same(C, folded)
    else:               # the first addition is folded (a use after it is not seen) ...
        assert same(C, folded) and same(D, E + x)     # ... the second one is not


@pytest.mark.xfail(strict=True, reason="a use of the dot result after the addition is not "
                   "seen when the addition comes: folded here, apart on the GPU (documented)")
def test_a_dot_used_after_the_addition_is_not_folded():
    C, D, x, E, folded = _reused("add_then_store")
    assert same(D, x) and same(C, x + E)


@pytest.mark.parametrize("ty", ["fp16", "bf16"])
def test_compiler_cannot_compile_a_half_precision_sum_of_products(ty):
    """Triton 3.6's combine pass matches the pattern for fp16 / bf16 and then fails (an
    fp32 zero for a 16-bit accumulator): the kernel does not compile for any target; the
    emulation says so instead of summing with NumPy."""
    sig = {**_ptrs(ty, out=ty), "BM": "constexpr", "BN": "constexpr", "BK": "constexpr",
           "ADD": "constexpr"}
    with pytest.raises(RuntimeError, match="PassManager::run failed"):
        tt.ttgir(sum_of_products_kernel, sig, dict(BM=32, BN=32, BK=16, ADD=False), "sm90")
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[ty]
    A, B = rnd(32, 16, dtype=dt, seed=1), rnd(16, 32, dtype=dt, seed=2)
    with pytest.raises(Exception, match="does not compile for a GPU"):
        with tmt.emulate("sm90"):
            sum_of_products_kernel[(1,)](A, B, torch.zeros(32, 32, dtype=dt), BM=32, BN=32,
                                         BK=16, ADD=False)
    small = torch.zeros(8, 32, dtype=dt)             # M < 16: no pattern, a sum (no dot)
    with tmt.emulate("sm90") as em:
        sum_of_products_kernel[(1,)](A[:8], B, small, BM=8, BN=32, BK=16, ADD=False)
    assert not em.counts and em.reductions and (small != 0).any()


def test_sum_of_products_over_another_axis():
    """The pattern ignores the axis: axis=-2 is axis 1 (a dot); axes 0 and 2 fail to compile
    (shapes differ) or silently compute x @ y (shapes agree): the emulation raises."""
    sig = {"a_ptr": "*fp32", "b_ptr": "*fp32", "c_ptr": "*fp32", "BM": "constexpr",
           "BN": "constexpr", "BK": "constexpr", "AX": "constexpr"}
    for ax, shape, dots in ((0, (32, 32, 16), None), (0, (16, 16, 16), ["mma.sync"]),
                            (2, (16, 16, 16), ["mma.sync"]), (-2, (32, 32, 16), ["mma.sync"])):
        const = dict(zip(("BM", "BN", "BK"), shape), AX=ax)
        if dots is None:
            try:
                tt.ttgir(sum_axis_kernel, sig, const, "sm90")
                failed = False
            except RuntimeError as e:
                failed = "PassManager::run failed" in str(e)
            triton_as_modelled(failed, f"tl.sum over axis {ax} of {shape} (3.6: fails)")
        else:
            triton_as_modelled(
                [d[0] for d in tt.dots(tt.ttgir(sum_axis_kernel, sig, const, "sm90"))] == dots,
                f"tl.sum over axis {ax} of {shape}")
    A, B = rnd(32, 16, dtype=torch.float32, seed=1), rnd(16, 32, dtype=torch.float32, seed=2)
    C = torch.zeros(32, 32)
    with tmt.emulate("sm90") as em:
        sum_axis_kernel[(1,)](A, B, C, BM=32, BN=32, BK=16, AX=-2)
    assert same(C, tme.emulated_mm(A, B, torch.zeros(32, 32), arch="sm90", in_format="tf32"))
    assert sum(em.counts.values()) == 1
    for ax in (0, 2):
        with pytest.raises(Exception, match="whatever the axis"):
            with tmt.emulate("sm90"):
                sum_axis_kernel[(1,)](A[:16], B[:, :16].contiguous(), torch.zeros(16, 16),
                                      BM=16, BN=16, BK=16, AX=ax)
