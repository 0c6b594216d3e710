"""torch_mma_emu.triton.choose (which instruction Triton makes of a tl.dot) against the
compiler itself: the installed Triton compiles kernels for each target on the CPU up to TTGIR
and the dot operations there (wgmma / tcgen05 / mma.sync / mfma / FMA, operand conversions,
accumulator type) must be what choose() models.  When a Triton release changes its rules,
these fail (an xfail naming the case where the installed Triton is not 3.6, the version
modelled) and docs/triton.md's table needs the update."""
import pytest
import torch

triton = pytest.importorskip("triton")

import torch_mma_emu as tme  # noqa: E402
import torch_mma_emu.triton as tmt  # noqa: E402
from torch_mma_emu import registry  # noqa: E402
from torch_mma_emu.triton import target_rules  # noqa: E402
from torch_mma_emu.triton.target_rules import TL_FORMATS, choose  # noqa: E402
from helpers import triton_as_modelled  # noqa: E402

tt = pytest.importorskip("triton_ttgir")

FP32_DEFAULT = {"gfx90a": "ieee"}       # core.dot: "tf32" where the backend allows it


def modelled(arch, tl_type, BM, BN, BK, nw, imp, prec, out16):
    """[(path, operand format, result format)] that choose() predicts."""
    fmt = TL_FORMATS[tl_type]
    out = "fp16" if out16 else "fp32"
    p = FP32_DEFAULT.get(arch, "tf32") if prec == "default" else prec
    subs = {"tf32x3": [("fp32", "tf32")] * 3, "bf16x3": [("bf16", "ieee")] * 3,
            "bf16x6": [("bf16", "ieee")] * 6}.get(p if fmt == "fp32" else None)
    if imp is None:                        # the backend's default (Triton: 2**30 on sm90)
        imp = 2**30 if arch == "sm90" else 0
    plans = [choose(arch, f, f, out, q, imp, (BM, BN, BK), False, nw)
             for f, q in (subs or [(fmt, p)])]
    res = []
    for plan in plans:
        f = plan.convert or plan.fmt_a
        res.append((plan.path, "fp32" if f in ("tf32", "xf32") else f, plan.out))
    return res


CASES = [
    # arch,   type,      BM,  BN, BK, nw, imp,  prec,     out16
    ("sm80", "fp16", 64, 64, 64, 4, None, "default", False),
    ("sm80", "bf16", 32, 32, 32, 2, None, "default", False),
    ("sm80", "fp32", 64, 64, 32, 4, None, "default", False),
    ("sm80", "fp32", 64, 64, 32, 4, None, "ieee", False),
    ("sm80", "fp32", 64, 64, 32, 4, None, "tf32x3", False),
    ("sm80", "fp8e5", 64, 64, 64, 4, None, "default", False),
    ("sm80", "fp16", 64, 64, 64, 4, None, "default", True),
    ("sm75", "fp16", 64, 64, 64, 4, None, "default", False),
    ("sm89", "fp8e4nv", 64, 64, 64, 4, None, "default", False),
    ("sm90", "fp16", 64, 64, 64, 4, None, "default", False),
    ("sm90", "fp16", 128, 64, 64, 8, None, "default", False),
    ("sm90", "fp16", 32, 64, 64, 4, None, "default", False),
    ("sm90", "fp16", 64, 64, 64, 2, None, "default", False),
    ("sm90", "fp16", 64, 8, 64, 4, None, "default", False),
    ("sm90", "fp16", 64, 16, 16, 4, None, "default", True),
    ("sm90", "bf16", 64, 32, 32, 4, None, "default", False),
    ("sm90", "fp32", 64, 64, 32, 4, None, "default", False),
    ("sm90", "fp32", 64, 64, 32, 4, None, "tf32x3", False),
    ("sm90", "fp32", 64, 64, 32, 4, None, "bf16x3", False),
    ("sm90", "fp32", 64, 64, 32, 4, None, "bf16x6", False),
    ("sm90", "fp8e4nv", 64, 64, 64, 4, None, "default", False),
    ("sm90", "fp8e4nv", 64, 64, 64, 4, 32, "default", False),
    ("sm90", "fp8e4nv", 64, 64, 64, 4, 16, "default", False),
    ("sm90", "fp8e5", 32, 64, 64, 4, None, "default", False),
    ("sm90", "fp8e4nv", 64, 64, 64, 4, None, "default", True),
    ("sm100", "fp16", 128, 64, 64, 4, None, "default", False),
    ("sm100", "fp16", 64, 64, 64, 8, None, "default", False),
    ("sm100", "fp16", 128, 64, 64, 2, None, "default", False),
    ("sm100", "fp16", 128, 8, 64, 4, None, "default", False),
    ("sm100", "fp32", 128, 64, 32, 4, None, "default", False),
    ("sm100", "fp32", 128, 64, 32, 4, None, "ieee", False),
    ("sm100", "fp8e4nv", 128, 64, 64, 4, None, "default", False),
    ("sm100", "fp8e4nv", 32, 64, 64, 4, None, "default", False),
    ("sm120", "fp8e4nv", 64, 64, 64, 4, None, "default", False),
    ("sm120", "fp16", 64, 64, 64, 4, None, "default", False),
    ("gfx942", "fp16", 64, 64, 64, 4, None, "default", False),
    ("gfx942", "fp16", 16, 64, 64, 4, None, "default", False),
    ("gfx942", "fp16", 32, 32, 64, 4, None, "default", True),
    ("gfx942", "bf16", 64, 64, 64, 4, None, "default", False),
    ("gfx942", "fp32", 64, 64, 32, 4, None, "default", False),
    ("gfx942", "fp32", 64, 64, 32, 4, None, "ieee", False),
    ("gfx942", "fp32", 64, 64, 32, 4, None, "bf16x3", False),
    ("gfx942", "fp8e4nv", 64, 64, 64, 4, None, "default", False),
    ("gfx942", "fp8e4b8", 64, 64, 64, 4, None, "default", False),
    ("gfx942", "fp8e4b8", 16, 64, 16, 4, None, "default", False),
    ("gfx90a", "fp16", 64, 64, 64, 4, None, "default", False),
    ("gfx90a", "fp8e5", 64, 64, 64, 4, None, "default", False),
    ("gfx90a", "fp8e4b8", 64, 64, 64, 4, None, "default", False),
    ("gfx90a", "fp32", 64, 64, 32, 4, None, "default", False),
]


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_choose_is_what_triton_compiles(case):
    import triton_dot_cases as dc
    arch, ty, BM, BN, BK, nw, imp, prec, out16 = case
    sig = {"a_ptr": "*" + ty, "b_ptr": "*" + ty, "c_ptr": "*fp32", "BM": "constexpr",
           "BN": "constexpr", "BK": "constexpr", "IMP": "constexpr", "PREC": "constexpr",
           "OUT16": "constexpr"}
    text = tt.ttgir(dc.dot_kernel, sig, dict(BM=BM, BN=BN, BK=BK, IMP=imp, PREC=prec,
                                             OUT16=out16), arch, nw)
    triton_as_modelled(tt.dots(text) == modelled(*case), f"the tl.dot of case {case}")


@pytest.mark.parametrize("arch", list(registry.ARCHS))
def test_backend_options_are_what_triton_parses(arch):
    """target_rules' per-target backend rules (dot options, GPUTarget, warp size) against
    the installed Triton's backend for that target: read off the compiler, not restated."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    opts = make_backend(GPUTarget(*target_rules.gpu_target(arch))).parse_options({})
    norm = lambda v: tuple(sorted(v)) if isinstance(v, tuple) else v  # noqa: E731
    mine = target_rules.backend_dot_options(arch)
    got = {k: norm(getattr(opts, k)) for k in mine}
    triton_as_modelled(got == {k: norm(v) for k, v in mine.items()},
                       f"the backend dot options of {arch}: Triton {got}")
    assert opts.warp_size == target_rules.gpu_target(arch)[2]


def test_amd_4x4_tiles_are_refused_not_guessed():
    with pytest.raises(NotImplementedError, match="4x4 MFMA"):
        choose("gfx942", "fp16", "fp16", "fp32", "ieee", 0, (8, 64, 64))


def test_a_plan_names_the_instruction_and_the_model_that_runs_it():
    """describe() (em.counts, em.summary()) names the family and types, the instruction
    Triton issues and the registry row whose arithmetic runs the dot; where the arch has no
    row of that family (mma.sync on sm90), the row standing in says so."""
    p = choose("sm90", "fp16", "fp16", "fp32")
    assert p.describe() == ("wgmma fp16->fp32: instruction HGMMA (wgmma.m64nNk16), model "
                            "sm90 hgmma.k16")
    p = choose("sm90", "fp16", "fp16", "fp32", shape=(32, 64, 64), num_warps=2)
    assert p.path == "mma.sync" and p.row is None
    assert p.describe() == ("mma.sync fp16->fp32: instruction mma.sync (no sm90 row of its "
                            "own), model sm90 hgmma.k16 standing in")
    p = choose("sm80", "fp8_e5m2", "fp8_e5m2", "fp32")
    assert p.describe() == ("mma.sync fp16->fp32 (operands converted to fp16): instruction "
                            "HMMA.16816 (mma.m16n8k16, 2 x k8), model sm80 hmma.16816")


@pytest.mark.parametrize("arch,fmt,shape,nw", [
    ("sm90", "fp16", (64, 64, 64), 4), ("sm90", "fp16", (32, 64, 64), 2),
    ("sm80", "fp8_e5m2", (64, 64, 64), 4), ("gfx942", "bf16", (32, 32, 64), 4),
    ("sm90", "fp64", (16, 16, 32), 4)])
def test_the_model_a_plan_names_is_the_arithmetic_that_runs_it(arch, fmt, shape, nw):
    from helpers import rnd, same
    from torch_mma_emu import registry
    from torch_mma_emu.formats import FLOAT_DTYPES
    from torch_mma_emu.triton.dot import run_plan
    p = choose(arch, fmt, fmt, "fp64" if fmt == "fp64" else "fp32", shape=shape, num_warps=nw)
    row = next(r for r in registry.rows_for(arch) if r.instruction == p.model()
               and p.fmt_a in r.formats and r.out == p.out)
    M, N, K = shape
    A = rnd(M, K, dtype=FLOAT_DTYPES[fmt], seed=1, scale=8.0)
    B = rnd(K, N, dtype=FLOAT_DTYPES[fmt], seed=2, scale=8.0)
    C = rnd(M, N, dtype=FLOAT_DTYPES[p.out], seed=3)
    conv = FLOAT_DTYPES[p.convert] if p.convert else None
    want = tme.emulated_mm(A.to(conv) if conv else A, B.to(conv) if conv else B, C,
                           arch=row.make_spec(p.fmt_a, p.fmt_b))
    assert same(run_plan(p, arch, A, B, C), want)


def _launches(monkeypatch, fn):
    """(JITFunction, args, kwargs) of the launches ``fn`` makes (none runs)."""
    from triton.runtime.jit import JITFunction
    calls = []
    monkeypatch.setattr(JITFunction, "run", lambda self, *a, grid, warmup, **kw:
                        calls.append((self, a, kw)))
    fn()
    monkeypatch.undo()
    return calls


def _kernels():
    from torch_mma_emu import triton_kernels as K
    from helpers import rnd
    q, k, v = (rnd(1, n, 64, dtype=torch.float16, seed=s) for n, s in ((128, 1), (128, 2),
                                                                       (128, 3)))
    a8, b8 = rnd(2, 64, 64, dtype=torch.float8_e4m3fn), rnd(2, 64, 32, dtype=torch.float8_e4m3fn)
    a4 = torch.randint(0, 256, (128, 64), dtype=torch.uint8)
    b4 = torch.randint(0, 256, (64, 128), dtype=torch.uint8)
    s = torch.full((128, 4), 127, dtype=torch.uint8)
    return [("attention", lambda: K.attention(q, k, v)),
            ("bmm fp8", lambda: K.bmm(a8, b8)),
            ("mxfp4", lambda: K.scaled_matmul(a4, s, b4, s, "e2m1"))]


@pytest.mark.parametrize("arch", ["sm90", "sm100", "gfx942"])
def test_project_kernels_emulate_the_instructions_triton_compiles(arch, monkeypatch):
    """End to end: the paths an emulate block records are the compiled kernel's dots."""
    for name, run in _kernels():
        if name == "mxfp4" and arch == "gfx942":
            continue                             # AMD tl.dot_scaled is not modelled
        [(jitfn, args, kw)] = _launches(monkeypatch, run)
        sig, const = tt.signature_of(jitfn, args, kw)
        compiled = [d[0].replace(" scaled", "") for d in tt.dots(tt.ttgir(
            jitfn, sig, const, arch, kw.get("num_warps", 4)))]
        with tmt.emulate(arch) as em:
            run()
        emulated = {k.split()[0] for k in em.counts}
        assert emulated == set(compiled), (name, compiled, dict(em.counts))


@pytest.mark.parametrize("arch", ["sm80", "sm90"])
def test_tf32x3_order_is_what_triton_emits(arch):
    """The F32DotTC order the emulator runs (schedule_partials.f32dottc_tf32x3: lo*hi from 0,
    hi*lo, NaN -> 0, hi*hi, then + acc) read off the TTGIR Triton compiles for a tf32x3 dot."""
    import re
    import triton_dot_cases as dc
    sig = {"a_ptr": "*fp32", "b_ptr": "*fp32", "c_ptr": "*fp32", "BM": "constexpr",
           "BN": "constexpr", "BK": "constexpr", "IMP": "constexpr", "PREC": "constexpr",
           "OUT16": "constexpr"}
    text = tt.ttgir(dc.dot_kernel, sig, dict(BM=64, BN=64, BK=32, IMP=None, PREC="tf32x3",
                                             OUT16=False), arch, 4)
    alias, hi, lo, dots, sel, add, zero = {}, {}, {}, [], {}, [], None
    name = lambda v: alias.get(v, v)  # noqa: E731
    for ln in text.splitlines():
        ln = ln.strip()
        m = re.match(r"(%\w+) = (\S+) ?(.*)", ln)
        if not m:
            continue
        out, op, rest = m.groups()
        args = re.findall(r"%\w+", re.sub(r"\{[^}]*\}", "", rest).split(" : ")[0])
        if op in ("ttg.local_alloc", "ttg.convert_layout") and args:
            alias[out] = name(args[0])
        elif op == "tt.elementwise_inline_asm" and "cvt.rna.tf32.f32" in rest:
            hi[out] = name(args[-1])
        elif op == "arith.subf":
            lo[out] = name(args[0])
            assert hi.get(name(args[1])) == name(args[0])       # lo = x - hi(x)
        elif op in ("tt.dot", "ttng.warp_group_dot"):
            dots.append((out, *[name(a) for a in args[:3]]))
        elif op == "arith.select":
            sel[out] = [name(a) for a in args]
        elif op == "arith.addf":
            add.append([name(a) for a in args])
        elif op == "arith.constant" and "dense<0.0" in rest and "#mma" in rest:
            zero = out
    (d1, a1, b1, c1), (d2, a2, b2, c2), (d3, a3, b3, c3) = dots
    x, y = lo[a1], hi[b1]                          # dot 1: lo(a) * hi(b) from 0
    assert c1 == zero and hi[a2] == x and lo[b2] == y and c2 == d1    # dot 2: hi(a) * lo(b)
    assert sel[c3][1:] == [zero, d2]               # NaNs of dot 2 -> 0
    assert hi[a3] == x and hi[b3] == y             # dot 3: hi(a) * hi(b)
    assert add == [[d3, zero]]                     # then + acc (tl.zeros here)
