"""The checker on kernels as users write them (issue 37 item 5): 0-d tensor arguments,
``rem`` / ``neg`` / eviction hints, autotune and heuristics wrappers, a plain error on
loops, and ``check_program`` over a whole program."""
import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import torch_mma_emu.triton as tmt  # noqa: E402
from torch_mma_emu.triton import ptx_check  # noqa: E402


@triton.jit
def scaled_rem(x_ptr, s_ptr, o_ptr, m, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs, eviction_policy="evict_last")
    s = tl.load(s_ptr)                                   # a 0-d tensor argument
    r = (offs - 17) % m                                  # rem.s32 on a runtime modulus
    tl.store(o_ptr + offs, x * s + r.to(tl.float32), eviction_policy="evict_first")
    tl.store(o_ptr + N + offs, -x)                       # neg.f32


@triton.heuristics({"TWICE": lambda args: args["N"] * 2})
@triton.jit
def heur(x_ptr, o_ptr, N: tl.constexpr, TWICE: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(o_ptr + offs, tl.sum(tl.load(x_ptr + offs)) * TWICE + offs)


@triton.autotune(configs=[triton.Config({"B": 32}), triton.Config({"B": 64})], key=["n"])
@triton.jit
def tuned(x_ptr, o_ptr, n, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    m = offs < n
    tl.store(o_ptr + offs, tl.abs(tl.load(x_ptr + offs, mask=m)) + 1.0, mask=m)


@triton.jit
def looped(x_ptr, o_ptr, n, B: tl.constexpr):
    acc = tl.zeros((B,), tl.float32)
    for i in range(0, n, B):
        acc += tl.load(x_ptr + i + tl.arange(0, B))
    tl.store(o_ptr + tl.arange(0, B), acc)


@triton.jit
def grid2d(x_ptr, o_ptr, B: tl.constexpr):
    row = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
    offs = row * B + tl.arange(0, B)
    tl.store(o_ptr + offs, tl.load(x_ptr + offs) * (row + 1))


def test_zero_d_rem_neg_and_eviction_hints():
    g = torch.Generator().manual_seed(0)
    x, o = torch.randn(128, generator=g), torch.zeros(256)
    s = torch.tensor(1.75)
    for m in (5, -3):
        r = ptx_check.check(scaled_rem, (x, s, o, m), {"N": 128})
        assert r["equal"], r["mismatches"]
    for ins in ("rem.s32", "createpolicy"):
        assert ins in r["ptx"], ins
    assert s.item() == 1.75 and not o.any()              # the caller's tensors untouched


def test_neg_and_abs_flip_the_sign_bit_only():
    import numpy as np
    from torch_mma_emu.triton.ptx_eval import CTA
    vals = np.array([0x00000000, 0x80000000, 0x7FC00001, 0xFF800000, 0x00000001, 0x3F800000],
                    np.uint64)
    cta = CTA(["neg.f32 %r2, %r1", "abs.f32 %r3, %r1", "neg.f16x2 %r4, %r1",
               "rem.s32 %r5, %r6, %r7", "div.s32 %r8, %r6, %r7"], {}, [], 6, 0)
    cta.r["%r1"] = vals
    cta.r["%r6"] = np.array([7, -7, 7, -7, 0, 2**31 - 1], np.int64).astype(np.uint64) \
        & np.uint64(0xFFFFFFFF)
    cta.r["%r7"] = np.array([3, 3, -3, -3, 5, 2], np.int64).astype(np.uint64) \
        & np.uint64(0xFFFFFFFF)
    cta.run()
    assert (cta.r["%r2"] == vals ^ np.uint64(0x80000000)).all()
    assert (cta.r["%r3"] == vals & np.uint64(0x7FFFFFFF)).all()
    assert (cta.r["%r4"] == vals ^ np.uint64(0x80008000)).all()
    s32 = lambda v: ((v.astype(np.int64) + 2**31) % 2**32) - 2**31  # noqa: E731
    assert s32(cta.r["%r5"]).tolist() == [1, -1, 1, -1, 0, 1]        # C's remainder
    assert s32(cta.r["%r8"]).tolist() == [2, -2, -2, 2, 0, 2**30 - 1]


def test_heuristics_and_autotune_wrappers_are_unwrapped():
    g = torch.Generator().manual_seed(1)
    x, o = torch.randn(64, generator=g), torch.empty(64)
    assert ptx_check.check(heur, (x, o), {"N": 64})["equal"]
    x, o = torch.randn(200, generator=g), torch.empty(200)
    r = ptx_check.check(tuned, (x, o, 200), {}, grid=lambda m: (triton.cdiv(200, m["B"]),))
    assert r["equal"]


def test_two_dimensional_grid():
    x, o = torch.randn(6 * 32), torch.empty(6 * 32)
    assert ptx_check.check(grid2d, (x, o), {"B": 32}, grid=(3, 2))["equal"]


def test_loops_are_checked_by_the_simt_interpreter():
    # refused by the straight-line evaluator ("branch or loop"); torch_mma_emu.ptx runs it
    with pytest.raises(ptx_check.Unsupported, match="branch or loop.*straight-line"):
        ptx_check.parse(ptx_check.check(looped, (torch.randn(64), torch.empty(32), 64),
                                        {"B": 32})["ptx"])
    assert ptx_check.check(looped, (torch.randn(64), torch.empty(32), 64), {"B": 32})["equal"]


def test_a_missing_instruction_is_named():
    from torch_mma_emu.triton.ptx_eval import CTA
    with pytest.raises(ptx_check.Unsupported, match="PTX instruction tanh.approx.f32"):
        CTA(["tanh.approx.f32 %r1, %r2"], {}, [], 32, 0).run()


def test_not_a_kernel_is_a_type_error():
    with pytest.raises(TypeError, match="@triton.jit kernel"):
        ptx_check.check(lambda x: x, (torch.zeros(1),), {})


def _program(x, s):
    o, o2, o3 = torch.empty(256), torch.empty(64), torch.empty(32)
    scaled_rem[(1,)](x, s, o, 7, N=128)
    heur[(1,)](o, o2, N=64)
    looped[(1,)](o, o3, 128, B=32)
    return o2, o3


def test_check_program_compares_a_whole_program():
    g = torch.Generator().manual_seed(2)
    x, s = torch.randn(128, generator=g) * 1e3, torch.tensor(0.3)
    x0 = x.clone()
    rep = tmt.check_program(_program, x, s, arch="H100")
    assert rep.equal, str(rep)
    assert [r["kernel"] for r in rep.launches] == ["scaled_rem", "heur", "looped"]
    assert [r["checked"] for r in rep.launches] == [True, True, True]   # loop included
    assert torch.equal(x, x0)
    assert "3 of 3 launches evaluated as PTX" in str(rep)


def test_check_program_reports_a_difference(monkeypatch):
    # the report's machinery: one flipped bit in the evaluated PTX's output is named
    from torch_mma_emu.triton import ptx_check as pc
    real = pc.run_ptx

    def flipped(*a, **k):
        outs = real(*a, **k)
        outs[-1].view(torch.int32).reshape(-1)[5] ^= 1
        return outs
    monkeypatch.setattr(pc, "run_ptx", flipped)

    def prog(x):
        o = torch.empty(64)
        heur[(1,)](x, o, N=64)
        return o
    rep = tmt.check_program(prog, torch.randn(64), arch="H100")
    assert not rep.equal
    assert rep.outputs[0]["name"] == "result" and rep.outputs[0]["differing"] == 1
    assert "result: 1 of 64 elements differ" in str(rep)


def test_check_program_says_when_no_launch_was_evaluated():
    rep = tmt.check_program(lambda x: x * 2, torch.randn(8), arch="H100")
    assert rep.equal and rep.launches == []
    assert "no launch reached the checker" in str(rep)
