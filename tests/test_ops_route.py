"""The routes of one eager ``emulated_mm`` call (ops_autograd.route, issue 41): the
autograd.Function where a derivative can be asked for, the custom op where something could
see it, else the op's kernel directly.  Every route gives the same bits; each route is taken
where it must be."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import torch_mma_emu as tme
import torch_mma_emu.ops_autograd as route_mod
from torch_mma_emu.ops_autograd import EmulatedMM
from torch_mma_emu.ops_kernel import broadcast_pair
from helpers import bits

KW = dict(arch="sm90", in_format=None, out_dtype=None, instruction=None, c_mode="chain",
          schedule=None)
CASES = [("sm90", torch.float16, None), ("sm80", torch.bfloat16, None),
         ("gfx942", torch.float16, None), ("sm100", torch.uint8, "fp4_e2m1"),
         ("sm90", torch.float32, "tf32"), ("sm80", torch.float64, None),
         ("sm90", torch.float8_e4m3fn, None), ("sm90", torch.float32, None)]


def rnd(*shape, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.uint8:
        return torch.randint(0, 16, shape, dtype=torch.uint8, generator=g)
    return (torch.randn(*shape, generator=g) * 4).to(dtype)


class Routes:
    """Counts which route each call takes (wraps the three callees)."""

    def __init__(self, monkeypatch):
        self.taken = []
        for name, target in (("function", EmulatedMM.apply), ("kernel", route_mod.gemm_impl)):
            def wrap(*a, _t=target, _n=name, **k):
                self.taken.append(_n)
                return _t(*a, **k)
            if name == "function":
                monkeypatch.setattr(EmulatedMM, "apply", wrap)
            else:
                monkeypatch.setattr(route_mod, "gemm_impl", wrap)

    def last(self):
        return self.taken[-1] if self.taken else "op"


@pytest.mark.parametrize("arch,dtype,in_format", CASES)
def test_every_route_gives_the_same_bits(arch, dtype, in_format):
    A, B = rnd(2, 24, 40, dtype=dtype), rnd(40, 17, dtype=dtype, seed=1)
    out = torch.float64 if dtype == torch.float64 else torch.float32
    C = rnd(24, 1, dtype=out, seed=2)
    kw = dict(KW, arch=arch, in_format=in_format)
    direct = tme.emulated_mm(A, B, C, arch=arch, in_format=in_format)
    op = torch.ops.mma_emu.emulated_mm(A, B, C, **kw)
    fn = EmulatedMM.apply(A, B, C, None, None, kw)
    assert torch.equal(bits(direct), bits(op)) and torch.equal(bits(direct), bits(fn))
    if dtype.is_floating_point:      # through the Function because A requires grad
        Ag = A.clone().requires_grad_()
        viaf = tme.emulated_mm(Ag, B, C, arch=arch, in_format=in_format)
        assert viaf.grad_fn is not None and torch.equal(bits(viaf.detach()), bits(direct))


@pytest.mark.parametrize("arch,cdt,out", [("sm70", torch.float16, None),
                                           ("sm70", torch.float16, torch.float16),
                                           ("sm80", torch.bfloat16, None),
                                           ("sm90", torch.float32, torch.float16)])
def test_c_formats_and_out_dtypes_on_every_route(arch, cdt, out):
    """C in another dtype than the output (Volta reads an fp16 C as it is), fp16 outputs,
    no C (the cached zero)."""
    A, B = rnd(3, 32), rnd(32, 9, seed=1)
    for C in (rnd(3, 9, dtype=cdt, seed=2), None):
        kw = dict(KW, arch=arch, out_dtype=out)
        direct = tme.emulated_mm(A, B, C, arch=arch, out_dtype=out)
        op = torch.ops.mma_emu.emulated_mm(A, B, C, **kw)
        fn = EmulatedMM.apply(A, B, C, None, None, kw)
        assert direct.dtype == op.dtype == (out or torch.float32)
        assert torch.equal(bits(direct), bits(op)) and torch.equal(bits(direct), bits(fn))


def test_routes_taken(monkeypatch):
    r = Routes(monkeypatch)
    A, B = rnd(8, 16), rnd(16, 8, seed=1)
    tme.emulated_mm(A, B)
    assert r.last() == "kernel"
    Ag = A.clone().requires_grad_()
    D = tme.emulated_mm(Ag, B)
    assert r.last() == "function" and D.requires_grad
    with torch.no_grad():
        r.taken.clear()
        D = tme.emulated_mm(Ag, B)
        assert r.last() == "kernel" and not D.requires_grad
    with torch.inference_mode():
        D = tme.emulated_mm(Ag, B)
        assert r.taken[-1] == "kernel" and D.is_inference()
    # a parameter is a plain tensor too
    tme.emulated_mm(torch.nn.Parameter(A.float(), requires_grad=False), B.float())
    assert r.last() == "kernel"


def test_grads_flow_where_required():
    A = rnd(6, 32).float().requires_grad_()
    B = rnd(32, 5, seed=1).float()
    C = rnd(6, 5, dtype=torch.float32, seed=2).requires_grad_()
    D = tme.emulated_mm(A, B, C, arch="sm90", in_format="tf32")
    g = rnd(6, 5, dtype=torch.float32, seed=3)
    D.backward(g)
    want = tme.emulated_mm(g, B.mT, arch="sm90", in_format="tf32")
    assert torch.equal(bits(A.grad), bits(want)) and torch.equal(C.grad, g)
    # only B requires grad: still the Function
    Bg = B.clone().requires_grad_()
    tme.emulated_mm(A.detach(), Bg, arch="sm90", in_format="tf32").sum().backward()
    assert Bg.grad is not None and Bg.grad.shape == B.shape


def test_forward_ad_under_no_grad_keeps_its_tangent():
    import torch.autograd.forward_ad as fwAD
    A, B = rnd(4, 16).float(), rnd(16, 3, seed=1).float()
    tA = rnd(4, 16, seed=2).float()
    with torch.no_grad(), fwAD.dual_level():
        D = tme.emulated_mm(fwAD.make_dual(A, tA), B, arch="sm80", in_format="tf32")
        tangent = fwAD.unpack_dual(D).tangent
    assert tangent is not None
    assert torch.equal(bits(tangent), bits(tme.emulated_mm(tA, B, arch="sm80",
                                                          in_format="tf32")))


def test_vmap_under_no_grad():
    A, B = rnd(3, 4, 16), rnd(16, 5, seed=1)
    with torch.no_grad():
        D = torch.func.vmap(lambda a: tme.emulated_mm(a, B))(A)
    assert torch.equal(bits(D), bits(tme.emulated_mm(A, B)))


class Seen(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_a_dispatch_mode_sees_the_op(monkeypatch):
    r = Routes(monkeypatch)
    A, B = rnd(8, 16), rnd(16, 8, seed=1)
    with torch.no_grad(), Seen() as seen:
        D = tme.emulated_mm(A, B)
    assert r.last() == "op" and "mma_emu.emulated_mm.default" in seen.ops
    assert torch.equal(bits(D), bits(tme.emulated_mm(A, B)))


def test_the_profiler_sees_the_op():
    A, B = rnd(8, 16), rnd(16, 8, seed=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        tme.emulated_mm(A, B)
    assert any(e.name == "mma_emu::emulated_mm" for e in prof.events())


def test_below_autograd_the_function_is_skipped(monkeypatch):
    """Inside a __torch_dispatch__ handler the outer op's autograd sets the history: the
    product runs without the Function, and the gradient still flows through the outer op."""
    r = Routes(monkeypatch)

    class Mm(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.mm.default:
                return tme.emulated_mm(*args, arch="sm90", in_format="tf32")
            return func(*args, **(kwargs or {}))
    x, w = rnd(4, 16).float(), rnd(16, 3, seed=1).float().requires_grad_()
    with Mm():
        y = x @ w
    assert r.taken == ["kernel"] and type(y.grad_fn).__name__ == "MmBackward0"
    y.sum().backward()
    assert w.grad is not None


def test_compile_traces_the_op_under_no_grad():
    graphs = []

    def backend(gm, inputs):
        graphs.append(str(gm.graph))
        return gm
    A, B = rnd(8, 16), rnd(16, 8, seed=1)
    f = torch.compile(lambda a, b: tme.emulated_mm(a, b, arch="gfx942"), backend=backend,
                      fullgraph=True)
    with torch.no_grad():
        D = f(A, B)
    assert graphs and "mma_emu.emulated_mm" in graphs[0]
    assert torch.equal(bits(D), bits(tme.emulated_mm(A, B, arch="gfx942")))


@pytest.mark.parametrize("s1,s2", [((), ()), ((3,), ()), ((2, 1), (5,)), ((1, 4), (3, 1)),
                                   ((0,), (1,)), ((1,), (0,)), ((2, 3), (3, 2)), ((0,), (3,)),
                                   ((4, 1, 2), (1, 5, 1)), ((7,), (2, 7))])
def test_broadcast_pair_is_torchs(s1, s2):
    try:
        want = tuple(torch.broadcast_shapes(s1, s2))
    except RuntimeError:
        with pytest.raises(RuntimeError):
            broadcast_pair(torch.Size(s1), torch.Size(s2))
        return
    assert broadcast_pair(torch.Size(s1), torch.Size(s2)) == want


def test_errors_are_raised_on_every_call(monkeypatch):
    A, B = rnd(4, 8), rnd(8, 3, seed=1)
    for _ in range(2):    # the caches keep results, never a skipped check
        with pytest.raises(TypeError, match="in_format"):
            tme.emulated_mm(A, B, in_format="tf32")
        with pytest.raises(ValueError, match="do not broadcast"):
            tme.emulated_mm(rnd(2, 4, 8), rnd(3, 8, 3))
    tme.emulated_mm(A, B)
    monkeypatch.setenv("MMA_EMU_SCALAR", "yes")
    with pytest.raises(ValueError, match="MMA_EMU_SCALAR"):
        tme.emulated_mm(A, B)
    monkeypatch.setenv("MMA_EMU_SCALAR", "1")
    assert torch.equal(bits(tme.emulated_mm(A, B)), bits(torch.ops.mma_emu.emulated_mm(A, B)))


def test_bench_small_runs(capsys):
    """scripts/bench_small.py (the figures of docs/cpu_fast.md, "Small products") runs and
    prints a ratio per row; nothing about the time is asserted."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_small.py"
    spec = importlib.util.spec_from_file_location("bench_small", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    threads = torch.get_num_threads()
    try:
        mod.main(["--only", "batched", "--reps", "1"])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "batched sm90 fp16" in out and "8x64^3" in out and out.count("x ") >= 1
