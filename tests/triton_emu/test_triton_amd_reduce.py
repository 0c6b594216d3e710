"""AMD (gfx90a / gfx942, wave64) reductions in the compiled order: the emulation's tree
against the LLVM IR Triton 3.6 compiles for the target on the CPU, whose cross-lane dataflow
(DPP row shifts and broadcasts, readlane, the cross-warp shuffles) is evaluated by
dpp_eval.py on the same per-lane partials.  The in-thread fold (register order, a left fold)
is the common lowering's, checked against PTX in test_triton_reduce.py."""
import re

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import torch_mma_emu.triton as tmt  # noqa: E402
from torch_mma_emu.triton import dpp_eval, layout, reduce  # noqa: E402


@triton.jit
def sum1d(x_ptr, out_ptr, N: tl.constexpr, MAX: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    if MAX:
        tl.store(out_ptr, tl.max(x, axis=0))
    else:
        tl.store(out_ptr, tl.sum(x, axis=0))


@triton.jit
def sum2d(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    if AXIS == 0:
        tl.store(out_ptr + tl.arange(0, N), tl.sum(x, axis=0))
    else:
        tl.store(out_ptr + tl.arange(0, M), tl.sum(x, axis=1))


def _defs(llir):
    return {m.group(1): m.group(2) for m in
            (re.match(r"^\s*(%[\w.]+) = (?:tail )?(.*)$", ln) for ln in llir.splitlines()) if m}


def _root(defs, name):
    """Through bit casts and extensions back to the value they carry."""
    while name in defs and defs[name].split()[0] in ("bitcast", "sext", "zext",
                                                      "extractelement"):
        name = re.search(r"(%[\w.]+)", defs[name].split(None, 1)[1]).group(1)
    return name


def _dpp_srcs(llir, bound_ctrl):
    out = []
    for line in llir.splitlines():
        m = re.search(r"update\.dpp\.\w+\(\w+ (?:%[\w.]+|poison), \w+ (%[\w.]+), i32 (\d+)"
                      r".*i1 (true|false)\)", line)
        if m and (m.group(3) == ("true" if bound_ctrl else "false")):
            out.append((m.group(1), int(m.group(2))))
    return out


def _last(env, llir, ops=("fadd", "fmul", "llvm.maxnum")):
    names = [n for n, rhs in _defs(llir).items() if n in env and any(o in rhs for o in ops)]
    return env[names[-1]]


def _compile(kernel, args, kwargs, arch):
    comp = layout.compile_launch(kernel.fn, args, kwargs, layout.amd_target_of(arch),
                                 ptx=True)
    assert comp.llir and comp.target == "hip:" + layout.amd_target_of(arch).arch
    return comp


def _inputs(kind, n, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g)
    if kind == "spread":
        x = x * torch.exp(torch.randn(n, generator=g) * (6 if dtype == torch.float32 else 2))
    elif kind == "cancel":
        x[n // 2:] = -x[: n - n // 2] * (1 + 2.0 ** -10)
        x = x[torch.randperm(n, generator=g)]
    elif kind == "negzero":
        x = torch.full((n,), -0.0)
    return x.to(dtype)


def _compiled_order(x, comp, site, warps, np_dt, combine):
    """The bits the LLVM IR computes: each thread's left fold in register order (the layout's),
    the wave's DPP chain and the cross-warp chain evaluated on them by dpp_eval."""
    tree = reduce.tree_of(site.bases, 0, True)
    W, L, R = tree.idx.shape
    assert (W, L) == (warps, 64)
    v = x[tree.idx]                                   # (W, L, R)
    acc = v[..., 0]
    for r in range(1, R):
        acc = combine((acc,), (v[..., r],))[0]
    defs = _defs(comp.llir)
    start = _root(defs, _dpp_srcs(comp.llir, True)[0][0])
    env = dpp_eval.evaluate(comp.llir, start, acc.reshape(-1).astype(np_dt))
    lanes = [n for n, rhs in defs.items() if n in env and "readlane" in rhs]
    per_warp = env[lanes[0]].reshape(-1, 64)[:, 0]
    if warps == 1:
        return per_warp[0]
    ws = _dpp_srcs(comp.llir, False)
    start = _root(defs, ws[0][0])
    vals = np.zeros(64 * warps, np_dt)
    vals[:warps] = per_warp                           # threads < warps load the partials
    env = dpp_eval.evaluate(comp.llir, start, vals)
    return _last(env, comp.llir)[0]


@pytest.mark.parametrize("arch", ["MI300X", "MI250X"])
@pytest.mark.parametrize("warps", [1, 2, 4, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("kind", ["random", "spread", "cancel", "negzero"])
def test_wave64_sum_matches_the_llvm_ir(arch, warps, dtype, kind):
    n = 64 * warps * 4
    x = _inputs(kind, n, 7 * warps, dtype)
    out = torch.zeros(1, dtype=dtype)
    comp = _compile(sum1d, (x, out), dict(N=n, MAX=False, num_warps=warps), arch)
    assert "row_shr" not in comp.llir                 # (the IR spells DPP controls as ints)
    assert [c for _, c in _dpp_srcs(comp.llir, True)][:6] == [0x118, 0x114, 0x112, 0x111,
                                                              0x142, 0x143]
    np_dt = np.float32 if dtype == torch.float32 else np.float16
    k = "f32" if dtype == torch.float32 else "f16"
    combine = reduce.known_combine(("arith.addf",), k)
    want = _compiled_order(x.numpy(), comp, comp.reduces[0], warps, np_dt, combine)
    with tmt.emulate(arch) as em:
        sum1d[(1,)](x, out, N=n, MAX=False, num_warps=warps)
    assert "DPP" in em.summary() and "NumPy's order" not in em.summary()
    assert out.numpy().view(np.uint16 if k == "f16" else np.uint32)[0] == \
        np.asarray(want, np_dt).view(np.uint16 if k == "f16" else np.uint32), em.summary()


def test_dpp_order_is_not_nvidias_butterfly():
    """The DPP tree (bits 8,4,2,1 within rows, then rows) gives other bits than NVIDIA's
    butterfly (32,16,8,...) on some inputs: the tests above can fail."""
    add = reduce.known_combine(("arith.addf",), "f32")
    idx = np.arange(64).reshape(1, 64, 1)
    dpp = reduce.Tree(idx, (), (), reduce.DPP_WAVE64)
    nv = reduce.Tree(idx, (), ())
    differ = 0
    for seed in range(20):
        x = (np.random.default_rng(seed).standard_normal(64)
             * np.exp(np.random.default_rng(seed + 99).standard_normal(64) * 6)).astype(np.float32)
        differ += reduce.run(dpp, [x], 0, add)[0] != reduce.run(nv, [x], 0, add)[0]
    assert differ > 0


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("warps", [1, 4, 8])
def test_wave64_2d_sums(axis, warps):
    """2-D sums on gfx942: a row of 64 lanes reduced by DPP (axis 1), or across warps only
    (axis 0); the emulation names the tree and its lane bits agree with the layout."""
    x = _inputs("spread", 64 * 64, 3, torch.float32).reshape(64, 64)
    out = torch.zeros(64)
    comp = _compile(sum2d, (x, out), dict(M=64, N=64, AXIS=axis, num_warps=warps), "MI300X")
    site = comp.reduces[0]
    tree = reduce.tree_of(site.bases, axis, True)
    with tmt.emulate("MI300X") as em:
        sum2d[(1,)](x, out, M=64, N=64, AXIS=axis, num_warps=warps)
    assert "NumPy's order" not in em.summary(), em.summary()
    if tree.idx.shape[1] == 64:
        assert tree.lane_order == reduce.DPP_WAVE64 and "DPP" in em.summary()
        # every row of the result: the DPP tree over the 64 lanes after the thread folds
        W, L, R = tree.idx.shape
        assert W == 1                   # the warps hold other rows
        xs = x.numpy()
        add = reduce.known_combine(("arith.addf",), "f32")
        want = reduce.run(tree, [xs], 1, add)[0]
        assert want.tobytes() == out.numpy().tobytes()
        acc = xs[:, tree.idx[0, :, 0]]
        for r in range(1, R):
            acc = add((acc,), (xs[:, tree.idx[0, :, r]],))[0]
        defs = _defs(comp.llir)
        start = _root(defs, _dpp_srcs(comp.llir, True)[0][0])
        got = dpp_eval.evaluate(comp.llir, start, np.tile(acc[0], warps))
        lanes = [n for n, rhs in defs.items() if n in got and "readlane" in rhs]
        assert got[lanes[0]][0].tobytes() == out.numpy()[:1].tobytes()
    else:
        assert not tree.lane_order


def test_max_and_scans_on_amd():
    """tl.max (a single combine): the DPP tree, bits as NumPy's (max is exact); scans on AMD
    stay in NumPy's order and the summary says so."""
    x = _inputs("random", 1024, 1, torch.float32)
    out = torch.zeros(1)
    with tmt.emulate("MI300X") as em:
        sum1d[(1,)](x, out, N=1024, MAX=True, num_warps=4)
    assert out.item() == x.max().item() and "DPP" in em.summary()

    @triton.jit
    def cumsum(x_ptr, o_ptr, N: tl.constexpr):
        tl.store(o_ptr + tl.arange(0, N), tl.cumsum(tl.load(x_ptr + tl.arange(0, N)), 0))
    o = torch.zeros(256)
    with tmt.emulate("MI300X") as em:
        cumsum[(1,)](x[:256], o, N=256)
    assert "AMD scans are not modelled" in em.summary()


def test_dpp_semantics():
    """dpp_eval's DPP controls on a ramp: row_shr with bound_ctrl, bank masks, broadcasts."""
    v = np.arange(64, dtype=np.uint32) + 100
    old = np.full(64, 7, np.uint32)
    r = dpp_eval.dpp(old, v, 0x111, 0xF, 0xF, True)
    assert r[0] == 0 and r[16] == 0 and r[5] == 104
    r = dpp_eval.dpp(old, v, 0x111, 0xF, 0xF, False)
    assert r[0] == 7 and r[5] == 104
    r = dpp_eval.dpp(old, v, 0x142, 0xA, 0xF, True)
    assert r[0] == 7 and r[16] == 115 and r[31] == 115 and r[40] == 7 and r[63] == 147
    r = dpp_eval.dpp(old, v, 0x143, 0xF, 0xF, True)
    assert r[32] == 131 and r[63] == 131 and r[0] == 0
    r = dpp_eval.dpp(old, v, 0xB1, 0xF, 0xF, False)           # quad_perm [1,0,3,2]: xor 1
    assert list(r[:4]) == [101, 100, 103, 102]
    r = dpp_eval.dpp(old, v, 0x104, 0xF, 0x5, False)          # row_shl:4 on banks 0, 2
    assert r[0] == 104 and r[4] == 7 and r[8] == 112 and r[12] == 7
    with pytest.raises(dpp_eval.Unsupported):
        dpp_eval.dpp(old, v, 0x130, 0xF, 0xF, False)


@pytest.mark.parametrize("n,warps", [(128, 4), (64, 4), (32, 1), (32, 2)])
def test_partial_wave_butterfly_matches_the_llvm_ir(n, warps):
    """An axis held by part of a wave (fewer than 64 lanes) takes Triton's generic shuffle
    butterfly (ds_swizzle / DPP xor exchanges), highest lane bit first, as on NVIDIA: the
    IR's dataflow on random per-lane values gives lane 0 the tree's bits."""
    x = torch.zeros(128, n)
    out = torch.zeros(128)
    comp = _compile(sum2d, (x, out), dict(M=128, N=n, AXIS=1, num_warps=warps), "MI300X")
    tree = reduce.tree_of(comp.reduces[0].bases, 1, True)
    L = tree.idx.shape[1]
    assert 1 < L < 64 and not tree.lane_order
    assert tree.lane_offsets == tuple(1 << b for b in range(L.bit_length() - 1))  # lanes 0..L-1
    defs = _defs(comp.llir)
    first = next(re.search(r"\((?:i32|float) (%[\w.]+)", rhs).group(1)
                 for rhs in defs.values() if "ds.swizzle" in rhs or "update.dpp" in rhs)
    start = _root(defs, first)
    add = reduce.known_combine(("arith.addf",), "f32")
    for seed in range(5):
        g = np.random.default_rng(seed)
        v = (g.standard_normal(64 * warps) * np.exp(g.standard_normal(64 * warps) * 6)
             ).astype(np.float32)
        k = re.search(r"<(\d+) x float>", defs.get(start, "").split(",")[0])
        inject = v if k is None else np.stack([v] * int(k.group(1)), axis=1)  # packed rows
        env = dpp_eval.evaluate(comp.llir, start, inject)
        got = _last(env, comp.llir)[0]
        got = got[0] if got.ndim else got
        want = reduce.run(reduce.Tree(np.arange(L).reshape(1, L, 1), (), ()), [v[:L]], 0,
                          add)[0]
        assert got.tobytes() == np.float32(want).tobytes(), seed
    # and a mutation of the order would show: lowest bit first differs on some seed
    low = reduce.Tree(np.arange(L).reshape(1, L, 1), (), (), tuple(range(L.bit_length() - 1)))
    high = reduce.Tree(np.arange(L).reshape(1, L, 1), (), ())
    vs = [(np.random.default_rng(s).standard_normal(64) *
           np.exp(np.random.default_rng(s + 50).standard_normal(64) * 6)).astype(np.float32)
          for s in range(20)]
    assert any(reduce.run(low, [v[:L]], 0, add)[0] != reduce.run(high, [v[:L]], 0, add)[0]
               for v in vs)


def test_swizzle_semantics():
    v = np.arange(64, dtype=np.uint32)
    assert list(dpp_eval.swizzle(v, 0x401F)[:2]) == [16, 17]            # xor 16
    assert dpp_eval.swizzle(v, 0x401F)[40] == 56
    assert list(dpp_eval.swizzle(v, 0x8000 | 0b00011011)[:4]) == [3, 2, 1, 0]
