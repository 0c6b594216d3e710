"""Reductions in the compiled order (torch_mma_emu/triton/{layout,reduce,compiled}.py),
checked against the PTX Triton compiles for sm_90, evaluated on the CPU (ptx_check.py)."""
import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import torch_mma_emu.triton as tmt  # noqa: E402
from torch_mma_emu.triton import ptx_check  # noqa: E402


@triton.jit
def sum1d(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr, tl.sum(x, axis=0))


@triton.jit
def max1d(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr, tl.max(x, axis=0))


@triton.jit
def red2d(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr,
          MAX: tl.constexpr):
    r = tl.arange(0, M)[:, None]
    c = tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + r * N + c)
    if MAX:
        y = tl.max(x, axis=AXIS)
    else:
        y = tl.sum(x, axis=AXIS)
    if AXIS == 0:
        tl.store(out_ptr + tl.arange(0, N), y)
    else:
        tl.store(out_ptr + tl.arange(0, M), y)


def _adversarial(n, kind, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n + 8, generator=g)
    if kind == "spread":            # huge exponent spreads: order decides the bits
        x = x * torch.exp(torch.randn(n + 8, generator=g) * 6)
    elif kind == "cancel":          # catastrophic cancellation
        x[::2] = 1e8 * torch.sign(x[::2])
        x[1::2] = -x[::2][: x[1::2].numel()] + x[1::2] * 1e-3
    elif kind == "specials":        # NaN, Inf, signed zeros
        x[torch.randperm(n + 8, generator=g)[:3]] = float("nan")
        x[5], x[9], x[12] = 0.0, -0.0, float("inf")
    elif kind == "zeros":
        x = torch.where(torch.rand(n + 8, generator=g) < 0.5, torch.tensor(0.0),
                        torch.tensor(-0.0))
    return x


def _slice(base, n, aligned, dtype):
    b = base.to(dtype)
    return b[:n] if aligned else b[1:n + 1]


KINDS = ["random", "spread", "cancel", "zeros"]


@pytest.mark.parametrize("num_warps", [1, 2, 4, 8])
@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_sum1d_matches_ptx(num_warps, aligned, dtype):
    for seed, kind in enumerate(KINDS):
        x = _slice(_adversarial(256, kind, seed), 256, aligned, dtype)
        out = torch.zeros(1, dtype=dtype)
        r = ptx_check.check(sum1d, (x, out), dict(N=256, num_warps=num_warps))
        assert r["equal"], (kind, r["summary"])
        assert f"{num_warps} warps x 32 lanes" in r["summary"]


@pytest.mark.parametrize("num_warps", [1, 4, 8])
@pytest.mark.parametrize("kind", ["random", "specials", "zeros"])
def test_max1d_matches_ptx_nan_and_signed_zero(num_warps, kind):
    for aligned in (True, False):
        x = _slice(_adversarial(512, kind, 7), 512, aligned, torch.float32)
        out = torch.zeros(1)
        r = ptx_check.check(max1d, (x, out), dict(N=512, num_warps=num_warps))
        assert r["equal"], r["summary"]


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("num_warps", [1, 2, 4, 8])
@pytest.mark.parametrize("dtype,is_max", [(torch.float32, False), (torch.float16, False),
                                          (torch.float32, True)])
def test_2d_matches_ptx(axis, num_warps, dtype, is_max):
    M, N = 32, 64
    for seed, kind in enumerate(["spread", "cancel"]):
        x = _adversarial(M * N, kind, seed)[: M * N].to(dtype).reshape(M, N)
        out = torch.zeros(N if axis == 0 else M, dtype=dtype)
        r = ptx_check.check(red2d, (x, out), dict(M=M, N=N, AXIS=axis, MAX=is_max,
                                                  num_warps=num_warps))
        assert r["equal"], (kind, r["summary"])


def test_aligned_and_unaligned_give_the_compiled_bits():
    """256 fp32 over 4 warps: aligned -> sizePerThread [2] (thread t holds 2t, 2t+1),
    unaligned -> [1] (t, t + 128); the two compiled orders give different bits."""
    base = torch.tensor([1e8, 1.0, -1e8, 1.0] * 64 + [0.0] * 8)
    found = 0
    for seed in range(40):
        g = torch.Generator().manual_seed(seed)
        vals = torch.randn(264, generator=g) * torch.exp(torch.randn(264, generator=g) * 6)
        vals = vals if seed else base
        res = {}
        for aligned in (True, False):
            x = _slice(vals, 256, aligned, torch.float32)
            out = torch.zeros(1)
            r = ptx_check.check(sum1d, (x, out), dict(N=256, num_warps=4))
            assert r["equal"]
            assert ("folds 0,1)" if aligned else "folds 0,128)") in r["summary"]
            with tmt.emulate("H100"):
                o = torch.zeros(1)
                sum1d[(1,)](ptx_check._same_alignment(x), o, N=256, num_warps=4)
            res[aligned] = o.view(torch.int32).item()
        # same values in both? only the first 255 overlap; compare same data instead
        found += res[True] != res[False]
    assert found > 0


def test_same_data_two_alignments_two_results():
    """The same 256 values, once at an aligned and once at an unaligned address."""
    diffs = 0
    for seed in range(30):
        g = torch.Generator().manual_seed(seed)
        v = torch.randn(256, generator=g) * torch.exp(torch.randn(256, generator=g) * 6)
        buf = torch.zeros(264)
        al, un = buf[:256], buf[4 + 1:4 + 1 + 256]
        outs = []
        for x in (al, un):
            x.copy_(v)
            o = torch.zeros(1)
            r = ptx_check.check(sum1d, (x, o), dict(N=256, num_warps=4))
            assert r["equal"]
            with tmt.emulate("H100"):
                sum1d[(1,)](x, o, N=256, num_warps=4)
            outs.append(o.view(torch.int32).item())
        diffs += outs[0] != outs[1]
    assert diffs > 0


def test_interpreter_order_differs_on_some_inputs():
    """NumPy's pairwise sum is not the GPU's tree: the emulation must differ from the plain
    interpreter on some inputs (else this test could not fail)."""
    diffs = 0
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(256, generator=g) * torch.exp(torch.randn(256, generator=g) * 6)
        o1, o2 = torch.zeros(1), torch.zeros(1)
        with tmt.interpret():
            sum1d[(1,)](x, o1, N=256, num_warps=4)
        with tmt.emulate("H100"):
            sum1d[(1,)](x, o2, N=256, num_warps=4)
        diffs += o1.view(torch.int32).item() != o2.view(torch.int32).item()
    assert diffs > 0


def test_summary_names_the_tree():
    x, o = torch.randn(256), torch.zeros(1)
    with tmt.emulate("H100") as em:
        sum1d[(1,)](x, o, N=256, num_warps=4)
    assert "4 warps x 32 lanes x 2 registers" in em.summary()


def test_argmax_and_not_modelled_combines_fall_back_loudly():
    @triton.jit
    def am(x_ptr, out_ptr, N: tl.constexpr):
        x = tl.load(x_ptr + tl.arange(0, N))
        tl.store(out_ptr, tl.argmax(x, axis=0))

    x = torch.randn(128)
    x[[3, 77]] = 5.0
    o = torch.zeros(1, dtype=torch.int32)
    with tmt.emulate("H100") as em:
        am[(1,)](x, o, N=128, num_warps=4)
    assert o.item() == 3
    assert "fp32/int32" in em.summary()


@triton.jit
def dot_then_sum(a_ptr, b_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                 AXIS: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    s = tl.sum(tl.dot(a, b), axis=AXIS)
    if AXIS == 1:
        tl.store(out_ptr + rm, s)
    else:
        tl.store(out_ptr + rn, s)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("N", [64, 128])
@pytest.mark.parametrize("arch", ["H100", "A100"])
def test_sum_of_a_dot_result_matches_ptx(axis, N, arch):
    """A row / column sum of a dot's result reduces over the wgmma (H100, #nvidia_mma v3)
    or mma.sync (A100, v2) accumulator layout.  The dot is made exact (one-hot rows of a
    scaled by powers of two), so its result X is known: the checker fills the wgmma
    registers with it, and computes mma.sync from its fragments."""
    M, K = 64, 16
    g = torch.Generator().manual_seed(N + axis)
    a = torch.zeros(M, K)
    a[torch.arange(M), torch.arange(M) % K] = 2.0 ** torch.randint(-12, 12, (M,), generator=g)
    b = (torch.rand(K, N, generator=g) + 0.5) * torch.sign(torch.randn(K, N, generator=g))
    b = b * 2.0 ** torch.randint(-10, 10, (K, N), generator=g)
    a, b = a.half(), b.half()
    X = (a.float() @ b.float()).numpy()
    out = torch.zeros(N if axis == 0 else M)
    r = ptx_check.check(dot_then_sum, (a, b, out), dict(M=M, N=N, K=K, AXIS=axis,
                                                          num_warps=4), wgmma=X, arch=arch)
    assert r["equal"], r["summary"]
    assert "#nvidia_mma" in r["summary"]
    assert ("wgmma" if arch == "H100" else "mma.sync") in r["ptx"]
    # and the order matters here: NumPy's order gives other bits for some rows
    np_sum = torch.from_numpy(X.sum(axis=axis, dtype="float32"))
    with tmt.emulate(arch):
        dot_then_sum[(1,)](a, b, out, M=M, N=N, K=K, AXIS=axis, num_warps=4)
    assert not torch.equal(out.view(torch.int32), np_sum.view(torch.int32))


@triton.jit
def sum3d(x_ptr, out_ptr, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr,
          AXIS: tl.constexpr):
    i = tl.arange(0, A)[:, None, None]
    j = tl.arange(0, B)[None, :, None]
    k = tl.arange(0, C)[None, None, :]
    x = tl.load(x_ptr + i * B * C + j * C + k)
    s = tl.sum(x, axis=AXIS)
    if AXIS == 0:
        tl.store(out_ptr + tl.arange(0, B)[:, None] * C + tl.arange(0, C)[None, :], s)
    elif AXIS == 1:
        tl.store(out_ptr + tl.arange(0, A)[:, None] * C + tl.arange(0, C)[None, :], s)
    else:
        tl.store(out_ptr + tl.arange(0, A)[:, None] * B + tl.arange(0, B)[None, :], s)


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("num_warps", [2, 4])
def test_3d_matches_ptx(axis, num_warps):
    A, B, C = 8, 16, 32
    x = _adversarial(A * B * C, "spread", axis)[: A * B * C].reshape(A, B, C)
    shape = [s for d, s in enumerate((A, B, C)) if d != axis]
    out = torch.zeros(shape)
    r = ptx_check.check(sum3d, (x, out), dict(A=A, B=B, C=C, AXIS=axis, num_warps=num_warps))
    assert r["equal"], r["summary"]
    assert "warps x" in r["summary"]


@triton.jit
def _prod(a, b):
    return a * b


@triton.jit
def _sum_and_squares(a1, a2, b1, b2):
    return a1 + b1, a2 + b2


@triton.jit
def user_reduce(x_ptr, out_ptr, out2_ptr, N: tl.constexpr, TWO: tl.constexpr,
                SQUARE: tl.constexpr = False):
    x = tl.load(x_ptr + tl.arange(0, N))
    if TWO:
        if SQUARE:      # x * x feeds the reduction: LLVM contracts it into the fold
            y = x * x
        else:
            y = tl.load(x_ptr + N + tl.arange(0, N))
        s, q = tl.reduce((x, y), 0, _sum_and_squares)
        tl.store(out_ptr, s)
        tl.store(out2_ptr, q)
    else:
        tl.store(out_ptr, tl.reduce(x, 0, _prod))


@pytest.mark.parametrize("two", [False, True])
@pytest.mark.parametrize("aligned", [True, False])
def test_user_combine_matches_ptx(two, aligned):
    """tl.reduce with a user combine (a product; a two-operand sum and sum of squares) runs
    the combine on whole tree levels, in the compiled order."""
    g = torch.Generator().manual_seed(3)
    v = torch.exp(torch.randn(1040, generator=g) * (0.05 if not two else 4))
    x = v[:1024] if aligned else v[1:1025]
    o1, o2 = torch.zeros(1), torch.zeros(1)
    r = ptx_check.check(user_reduce, (x, o1, o2), dict(N=512, TWO=two, num_warps=4))
    assert r["equal"], r["summary"]
    assert "NumPy" not in r["summary"]


@pytest.mark.parametrize("warps", [1, 4])
def test_square_contracted_into_the_fold(warps):
    """LLVM contracts ``x * x`` feeding the reduction into the in-thread fold
    (``fma.rn.f32 acc, x, x, acc``); the emulation reads that from the PTX and fuses too."""
    for seed in range(10):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(1024, generator=g)
        o1, o2 = torch.zeros(1), torch.zeros(1)
        r = ptx_check.check(user_reduce, (x, o1, o2), dict(N=512, TWO=True, SQUARE=True,
                                                            num_warps=warps))
        assert "fma.rn.f32" in r["ptx"]
        assert r["equal"], seed
        assert "product fused into the fold" in r["summary"]


@triton.jit
def dot_sum(x_ptr, y_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr,
            SQUARE: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    y = x if SQUARE else tl.load(y_ptr + offs)
    if AXIS == 0:
        tl.store(out_ptr + tl.arange(0, N), tl.sum(x * y, axis=0))
    else:
        tl.store(out_ptr + tl.arange(0, M), tl.sum(x * y, axis=1))


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("warps", [1, 2, 8])
@pytest.mark.parametrize("square", [True, False])
def test_product_fused_into_tl_sum_fold(axis, warps, square):
    """``tl.sum(x * y)`` over a 2-D block: the fold's fma matches the PTX bit for bit on
    random and cancelling inputs, and differs from rounding each product first."""
    g = torch.Generator().manual_seed(11 + warps)
    x = torch.randn(64, 128, generator=g)
    y = torch.randn(64, 128, generator=g)
    y[::3] = -x[::3] * (1 + 2.0 ** -20)             # near-cancelling products
    out = torch.zeros(128)
    r = ptx_check.check(dot_sum, (x, y, out), dict(M=64, N=128, AXIS=axis, SQUARE=square,
                                                     num_warps=warps))
    assert r["equal"], r["summary"]
    assert "fma.rn.f32" in r["ptx"]


def test_product_not_fused_without_fp_fusion():
    """enable_fp_fusion=False: mul.rn + add.rn in the PTX, nothing fused, still equal."""
    x = torch.randn(64, 128, generator=torch.Generator().manual_seed(2))
    out = torch.zeros(128)
    r = ptx_check.check(dot_sum, (x, x, out), dict(M=64, N=128, AXIS=1, SQUARE=True,
                                                     num_warps=4, enable_fp_fusion=False))
    assert r["equal"] and "fma.rn.f32" not in r["ptx"]
    assert "fused into the fold" not in r["summary"]


def test_fold_fusion_changes_bits():
    """The fused fold gives other bits than squares rounded first on some inputs (so the
    tests above can fail)."""
    from torch_mma_emu.triton import reduce
    from torch_mma_emu.triton.layout import Bases
    diff = 0
    for seed in range(10):
        x = np.random.default_rng(seed).standard_normal(512).astype(np.float32)
        tree = reduce.Tree(np.arange(512).reshape(1, 32, 16), (1, 2, 4, 8, 16), ())
        add = reduce.known_combine(("arith.addf",), "f32")
        plain = reduce.run(tree, [x * x], 0, add)[0]
        fused = reduce.run(tree, [x * x], 0, add, {0: (x, x)})[0]
        diff += plain.tobytes() != fused.tobytes()
    assert diff > 0


@triton.jit
def arg_reduce(x_ptr, out_ptr, N: tl.constexpr, MAX: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    if MAX:
        tl.store(out_ptr, tl.argmax(x, axis=0))
    else:
        tl.store(out_ptr, tl.argmin(x, axis=0))


@pytest.mark.parametrize("is_max", [True, False])
@pytest.mark.parametrize("kind", ["ties", "specials"])
def test_argmax_argmin_match_ptx(is_max, kind):
    g = torch.Generator().manual_seed(5)
    x = torch.randint(-3, 4, (256,), generator=g).float()      # many ties
    if kind == "specials":
        x[[17, 200]] = float("nan")
        x[[3, 90]] = -0.0
    o = torch.zeros(1, dtype=torch.int32)
    for nw in (1, 4, 8):
        r = ptx_check.check(arg_reduce, (x, o), dict(N=256, MAX=is_max, num_warps=nw))
        assert r["equal"], r["summary"]


@triton.jit
def cumsum1d(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr + tl.arange(0, N), tl.cumsum(x, axis=0))


@pytest.mark.parametrize("N,num_warps", [(256, 1), (256, 4), (1024, 4), (1024, 8), (64, 4)])
@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_cumsum_matches_ptx(N, num_warps, aligned, dtype):
    for seed, kind in enumerate(["spread", "cancel", "specials"]):
        x = _slice(_adversarial(N, kind, seed), N, aligned, dtype)
        out = torch.zeros(N, dtype=dtype)
        r = ptx_check.check(cumsum1d, (x, out), dict(N=N, num_warps=num_warps))
        assert r["equal"], (kind, r["summary"])
        assert "scan:" in r["summary"]


@pytest.mark.parametrize("N,num_warps", [pytest.param(256, 4, marks=pytest.mark.slow),
                                         (128, 2)])
def test_fprev_reveals_the_same_tree_from_emulation_and_ptx(N, num_warps):
    """FPRev (torch_mma_emu.fprev) reveals the summation tree of the emulated kernel and of
    its PTX evaluated on the CPU: the trees are equal, for an aligned and an unaligned
    pointer, and those two trees differ from each other and from NumPy's."""
    from torch_mma_emu import fprev
    from torch_mma_emu.triton import layout
    buf = torch.zeros(N + 8)
    trees = []
    for off in (0, 1):
        x, o = buf[off:off + N], torch.zeros(1)
        comp = layout.compile_launch(sum1d.fn, (x, o), dict(N=N, num_warps=num_warps),
                                     layout.target_of("H100"), ptx=True)

        def emulated(v, x=x):
            x.copy_(v)
            out = torch.zeros(1)
            with tmt.emulate("H100"):
                sum1d[(1,)](x, out, N=N, num_warps=num_warps)
            return out[0]

        def compiled(v, x=x, ptx=comp.ptx):
            x.copy_(v)
            return ptx_check.run_ptx(ptx, [x, torch.zeros(1)], 1, num_warps)[1][0]
        a, b = fprev.reveal(emulated, N), fprev.reveal(compiled, N)
        assert a == b, (a.describe(), b.describe())
        trees.append(a)
    assert trees[0] != trees[1]

    def plain(v):
        out = torch.zeros(1)
        with tmt.interpret():
            sum1d[(1,)](v.clone(), out, N=N, num_warps=num_warps)
        return out[0]
    assert fprev.reveal(plain, N) not in trees


@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def variants(x_ptr, i_ptr, o_ptr, M: tl.constexpr, N: tl.constexpr):
    r = tl.arange(0, M)[:, None]
    c = tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + r * N + c)
    tl.store(o_ptr, tl.sum(x))                                   # axis=None over 2-D
    k = tl.sum(x, axis=1, keep_dims=True)                         # (M, 1)
    tl.store(o_ptr + 1 + r, k)
    tl.store(o_ptr + 1 + M + tl.arange(0, N), tl.reduce(x, 0, _max_nan))
    i = tl.load(i_ptr + r * N + c)
    tl.store(i_ptr + tl.arange(0, M), tl.sum(i, axis=1))          # integers: exact


@pytest.mark.parametrize("num_warps", [1, 4])
def test_axis_none_keep_dims_nan_propagating_max_and_integers(num_warps):
    M, N = 16, 64
    x = _adversarial(M * N, "spread", 11)[: M * N].reshape(M, N).contiguous()
    x[3, 5] = float("nan")
    i = torch.randint(-2**20, 2**20, (M, N), dtype=torch.int32)
    o = torch.zeros(1 + M + N)
    r = ptx_check.check(variants, (x, i, o), dict(M=M, N=N, num_warps=num_warps))
    assert r["equal"], r["summary"]
    assert "NumPy" not in r["summary"]


def test_where_the_order_is_not_modelled_the_summary_says_so():
    x, o = torch.randn(256), torch.zeros(1)
    with tmt.emulate("MI100") as em:
        sum1d[(1,)](x, o, N=256, num_warps=4)
    assert "NumPy's order" in em.summary() and "gfx908" in em.summary()
    with tmt.interpret() as plain:
        sum1d[(1,)](x, o, N=256, num_warps=4)
    assert not plain.reductions


@triton.jit
def cumsum2d(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr):
    off = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(out_ptr + off, tl.cumsum(tl.load(x_ptr + off), axis=AXIS))


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_cumsum_2d_matches_ptx(axis, num_warps):
    M, N = 32, 64
    x = _adversarial(M * N, "spread", axis + 10 * num_warps)[: M * N].reshape(M, N)
    out = torch.zeros(M, N)
    r = ptx_check.check(cumsum2d, (x.contiguous(), out), dict(M=M, N=N, AXIS=axis,
                                                               num_warps=num_warps))
    assert r["equal"], r["summary"]
    assert "scan:" in r["summary"]


@triton.jit(do_not_specialize_on_alignment=["x_ptr"])
def sum1d_any_alignment(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr, tl.sum(x, axis=0))


def test_the_kernels_own_specialisation_options_are_used():
    """do_not_specialize_on_alignment: an aligned pointer compiles as an unaligned one."""
    x, o = torch.randn(256), torch.zeros(1)
    with tmt.emulate("H100") as em:
        sum1d_any_alignment[(1,)](x, o, N=256, num_warps=4)
    assert "folds 0,128)" in em.summary()
    r = ptx_check.check(sum1d_any_alignment, (x, o), dict(N=256, num_warps=4))
    assert r["equal"]


@triton.jit
def rcumsum1d(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr + tl.arange(0, N), tl.cumsum(x, axis=0, reverse=True))


@pytest.mark.parametrize("N,num_warps", [(256, 1), (256, 4), (1024, 8)])
@pytest.mark.parametrize("aligned", [True, False])
def test_reverse_cumsum_matches_ptx(N, num_warps, aligned):
    x = _slice(_adversarial(N, "spread", N + num_warps), N, aligned, torch.float32)
    out = torch.zeros(N)
    r = ptx_check.check(rcumsum1d, (x, out), dict(N=N, num_warps=num_warps))
    assert r["equal"], r["summary"]
    assert "scan:" in r["summary"]


@triton.jit
def _welford(m_a, s_a, n_a, m_b, s_b, n_b):
    n = n_a + n_b
    w = tl.math.div_rn(n_b, tl.maximum(n, 1.0))
    d = m_b - m_a
    return m_a + d * w, s_a + s_b + d * d * n_a * w, n


@triton.jit
def welford(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    m, s, n = tl.reduce((x, tl.zeros_like(x), tl.full(x.shape, 1.0, tl.float32)), 0,
                        _welford)
    tl.store(out_ptr, m)
    tl.store(out_ptr + 1, s)
    tl.store(out_ptr + 2, n)


@pytest.mark.parametrize("num_warps", [1, 4])
def test_welford_three_operand_reduce_matches_ptx(num_warps):
    """A Welford mean / M2 reduction (three operands, a user combine), compiled with
    enable_fp_fusion=False so that the PTX rounds as the combine's source says."""
    g = torch.Generator().manual_seed(8)
    x = torch.randn(512, generator=g) * 3 + 100
    out = torch.zeros(3)
    r = ptx_check.check(welford, (x, out), dict(N=512, num_warps=num_warps,
                                                enable_fp_fusion=False))
    assert "fma" not in r["ptx"]
    assert r["equal"], r["summary"]
    assert "NumPy" not in r["summary"]


@pytest.mark.parametrize("dt", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("unaligned", [False, True])
def test_rowwise_row_sum_matches_ptx(dt, unaligned):
    """triton_kernels/rowwise.py's row sum (masked loads, runtime length and stride, one
    program per row, strided rows): the emulation equals the evaluated PTX.  Launched with
    enable_fp_fusion=False: the tail ``s * scale + shift`` is otherwise one fma on the GPU
    (contraction, modelled elsewhere)."""
    rowwise = pytest.importorskip("triton_kernels.rowwise")
    g = torch.Generator().manual_seed(2)
    buf = (torch.randn(3, 301, generator=g) * torch.exp(torch.randn(3, 301, generator=g) * 4))
    buf = buf.to(dt)
    x = buf[:, 1:] if unaligned else buf[:, :300].contiguous()
    y = torch.zeros(3)
    r = ptx_check.check(rowwise._row_sum_kernel, (x, y, 300, x.stride(0), 0.1, 1.0),
                        dict(BLOCK=512, num_warps=4, enable_fp_fusion=False), grid=3)
    assert r["equal"], r["summary"]
    assert "warps x 32 lanes" in r["summary"]


@pytest.mark.parametrize("shape,axis", [((2, 16), 0), ((2, 16), 1), ((4, 8), 0), ((8, 4), 1),
                                        ((1, 64), 1), ((64, 1), 0)])
@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_tensors_smaller_than_the_layout_match_ptx(shape, axis, num_warps):
    """Fewer elements than threads: broadcast lanes and warps hold copies and take no part
    in the tree."""
    M, N = shape
    x = _adversarial(M * N, "spread", M + N + axis)[: M * N].reshape(M, N).contiguous()
    out = torch.zeros(N if axis == 0 else M)
    r = ptx_check.check(red2d, (x, out), dict(M=M, N=N, AXIS=axis, MAX=False,
                                              num_warps=num_warps))
    assert r["equal"], r["summary"]


@pytest.mark.parametrize("num_warps", [4, 8])
def test_1d_smaller_than_the_layout_matches_ptx(num_warps):
    for n in (32, 64):
        x = _adversarial(n, "spread", n)[:n]
        r = ptx_check.check(sum1d, (x, torch.zeros(1)), dict(N=n, num_warps=num_warps))
        assert r["equal"], r["summary"]


@pytest.mark.parametrize("num_warps", [16, 32])
def test_many_warps_match_ptx(num_warps):
    x = _adversarial(2048, "spread", num_warps)[:2048]
    assert ptx_check.check(sum1d, (x, torch.zeros(1)), dict(N=2048, num_warps=num_warps))[
        "equal"]
    assert ptx_check.check(cumsum1d, (x, torch.zeros(2048)),
                           dict(N=2048, num_warps=num_warps))["equal"]


@pytest.mark.parametrize("arch", ["B200", "sm120", "A100", "sm89", "sm75"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_other_nvidia_archs_match_ptx(arch, dtype):
    """Every NVIDIA target compiles the same tree (sm80 / sm89 add bf16 as
    fma.rn.bf16x2 a, 1.0, b; sm75 through fp32)."""
    x = _adversarial(1024, "spread", 3)[:1024].to(dtype)
    r = ptx_check.check(sum1d, (x, torch.zeros(1, dtype=dtype)), dict(N=1024, num_warps=4),
                        arch=arch)
    assert r["equal"], r["summary"]


def test_fma_rounding_is_exact():
    """The checker's fma rounds once: against exact rationals, ties to even, subnormals."""
    from fractions import Fraction

    import numpy as np

    from torch_mma_emu.triton.ptx_eval import _round_f32
    rng = np.random.default_rng(0)
    for _ in range(3000):
        a, b, c = (np.float32(rng.standard_normal() * 2.0 ** int(rng.integers(-30, 30)))
                   for _ in range(3))
        ex = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
        r = _round_f32(ex)
        for nb in (np.nextafter(r, np.float32(-np.inf)), np.nextafter(r, np.float32(np.inf))):
            assert abs(Fraction(float(r)) - ex) <= abs(Fraction(float(nb)) - ex)
    assert _round_f32(Fraction(1, 2 ** 150)) == 0                     # tie to even: 0
    assert _round_f32(Fraction(3, 2 ** 150)) == np.float32(2.0 ** -148)
    assert _round_f32(Fraction(2 ** 24 + 1)) == 2 ** 24
    assert _round_f32(Fraction(2 ** 24 + 3)) == 2 ** 24 + 4
    assert _round_f32(Fraction(2 ** 8 + 1), bits=8) == 2 ** 8          # bf16 precision


def test_checker_refuses_bad_input_with_a_message():
    x, o = torch.randn(256), torch.zeros(1)
    with pytest.raises(ValueError, match="NVIDIA arch"):
        ptx_check.check(sum1d, (x, o), dict(N=256), arch="MI300X")
    with pytest.raises(TypeError, match="@triton.jit kernel"):
        ptx_check.check(lambda a, b: None, (x, o), {})
    with pytest.raises(ValueError, match="positive int"):
        ptx_check.check(sum1d, (x, o), dict(N=256), grid=0)
    # ex2.approx: refused by the straight-line evaluator, run by the SIMT interpreter
    # through gpu_math's bit model of MUFU.EX2
    assert ptx_check.check(exp_sum, (x, o), dict(N=256))["equal"]


@triton.jit
def exp_sum(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr, tl.sum(tl.exp(x), axis=0))
