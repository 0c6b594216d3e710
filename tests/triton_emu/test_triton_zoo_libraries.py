"""The zoo grown with issue 37's libraries (FlagGems, Liger-Kernel, fla, torchao,
bitsandbytes; gemlite has its own file): each op as shipped on an NVIDIA (sm_90) and an AMD
(gfx942) target against a float64 reference (the ops beyond ``FAST`` and dyt on gfx942 are
marked slow), and on sm_90 each kernel's first launch (grids of 1 to 3 dimensions)
run again under the PTX checker (ptx_check.py), bit for bit; a kernel the checker cannot
read records the instruction it lacks (``record_property("checker", ...)``) instead of
failing.  mamba_ssm is not here: its setup.py needs a CUDA torch to pick a wheel
(``torch.version.cuda`` is None on a CPU torch), so it cannot be installed CPU-only.
Each library skips when absent (requirements-triton-zoo.txt; FlagGems --no-deps)."""
import os
import tempfile
import warnings

import pytest
import torch
import torch.nn.functional as F

from triton_zoo import ARCHS, close, need, run_zoo

from torch_mma_emu.triton import device_queries, ptx_check

KEYS = ["sm90", "gfx942"]
FAST = {"gelu", "exp", "rsqrt", "add", "true_divide", "sum", "log_softmax", "argmax", "cumsum"}


def cases(names):
    """(name, key) for every op on both targets; beyond FAST, marked slow (the file's fast
    part stays near a minute)."""
    return [pytest.param(n, k, marks=() if n in FAST else pytest.mark.slow)
            for n in sorted(names) for k in KEYS]
os.environ.setdefault("GEMS_VENDOR", "nvidia")             # no vendor probing subprocesses
os.environ.setdefault("FLAGGEMS_CACHE_DIR", tempfile.mkdtemp(prefix="flaggems-"))


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _checker(em, arch):
    """Each distinct kernel's first launch under the PTX checker: a list of (kernel,
    "equal" / "lacks: ..." / "mismatch: ...")."""
    out, seen = [], set()
    for rec in em.launches:
        if rec.kernel in seen or rec.inputs is None:
            continue
        seen.add(rec.kernel)
        kernel, args, kwargs = rec.inputs
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = ptx_check.check(kernel, args, kwargs, grid=tuple(rec.grid), arch=arch)
        except (ptx_check.Unsupported, NotImplementedError, TypeError, ValueError,
                KeyError, IndexError, AttributeError, RuntimeError) as e:
            out.append((rec.kernel, f"lacks: {type(e).__name__}: {str(e)[:160]}"))
            continue
        out.append((rec.kernel, "equal" if r["equal"] else f"mismatch: {r['mismatches']}"))
    return out


def zoo(key, fn, record_property, *, available=False, queries=False):
    """``fn()`` emulated for ``ARCHS[key]`` (inside ``device_queries`` when the library asks
    the device), then the checker on sm_90; returns (result, em)."""
    arch = ARCHS[key]
    if queries or available:
        with device_queries(arch, available=available):
            out, em, _ = run_zoo(key, fn, keep_inputs=key == "sm90")
    else:
        out, em, _ = run_zoo(key, fn, keep_inputs=key == "sm90")
    if key == "sm90":
        got = _checker(em, arch)
        record_property("checker", got)
        bad = [(k, v) for k, v in got if v.startswith("mismatch")]
        assert not bad, f"the emulation and the PTX checker differ: {bad}"
    return out, em


# -- FlagGems: 22 ops, one kernel each (pointwise_dynamic, reductions, scans) --------------
try:
    with device_queries("H100"):
        import flag_gems  # noqa: F401
        from flag_gems import ops as gems
except Exception as e:          # noqa: BLE001 - not installed, or fails on this machine
    gems = None
    GEMS_WHY = f"{type(e).__name__}: {e}"

POS = {"log", "rsqrt", "sqrt", "reciprocal"}       # defined for positive inputs
UNARY = {"gelu": lambda x: F.gelu(x), "silu": F.silu, "exp": torch.exp, "relu": torch.relu,
         "sigmoid": torch.sigmoid, "tanh": torch.tanh, "abs": torch.abs, "neg": torch.neg,
         "sin": torch.sin, "cos": torch.cos, "log": torch.log, "rsqrt": torch.rsqrt,
         "sqrt": torch.sqrt, "reciprocal": torch.reciprocal, "erf": torch.erf}
BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "true_divide": torch.div}
REDUCE = {"sum": lambda x: x.sum(), "mean": lambda x: x.mean(), "amax": lambda x: x.amax(1),
          "log_softmax": lambda x: torch.log_softmax(x, -1),
          "cumsum": lambda x: torch.cumsum(x, 1), "argmax": lambda x: x.argmax(1)}


def _gems():
    if gems is None:
        pytest.skip(f"flag_gems not importable here (pip install flag-gems torch==<yours> "
                    f"--no-deps): {GEMS_WHY}")
    return gems


@pytest.mark.parametrize("name,key", cases(UNARY))
def test_flaggems_unary(name, key, record_property):
    ops = _gems()
    x = torch.randn(96, generator=_gen(len(name)))
    if name in POS:
        x = x.abs() + 0.1
    y, em = zoo(key, lambda: getattr(ops, name)(x), record_property, queries=True)
    close(y, UNARY[name](x.double()), 2e-6, 1e-6)


@pytest.mark.parametrize("name,key", cases(BINARY))
def test_flaggems_binary(name, key, record_property):
    ops = _gems()
    a, b = torch.randn(64, generator=_gen(1)), torch.randn(64, generator=_gen(2)) + 3
    y, em = zoo(key, lambda: getattr(ops, name)(a, b), record_property, queries=True)
    close(y, BINARY[name](a.double(), b.double()), 1e-7, 0)      # one fp32 rounding


@pytest.mark.parametrize("name,key", cases(REDUCE))
def test_flaggems_reductions(name, key, record_property):
    ops = _gems()
    x = torch.randn(4, 50, generator=_gen(3))
    if name in ("amax", "log_softmax", "cumsum", "argmax"):
        call = {"amax": lambda: ops.amax(x, [1]), "log_softmax": lambda: ops.log_softmax(x, -1),
                "cumsum": lambda: ops.cumsum(x, 1), "argmax": lambda: ops.argmax(x, 1)}[name]
    else:
        call = lambda: getattr(ops, name)(x)                # noqa: E731
    y, em = zoo(key, call, record_property, queries=True)
    ref = REDUCE[name](x.double())
    if name == "argmax":
        assert torch.equal(y, ref)
    else:
        close(y, ref, 1e-5, 1e-5)


# -- Liger-Kernel: dyt (asks torch.cuda.is_available), layer_norm, geglu, kl_div -----------
@pytest.mark.parametrize("key", ["sm90", pytest.param("gfx942", marks=pytest.mark.slow)])
def test_liger_dyt_forward_backward(key, record_property):
    lf = need("liger_kernel.transformers.functional")
    x = torch.randn(4, 64, generator=_gen(4), requires_grad=True)
    a = torch.tensor([0.5], requires_grad=True)
    g = torch.randn(64, generator=_gen(5), requires_grad=True)
    b = torch.randn(64, generator=_gen(6), requires_grad=True)
    (y, *grads), em = zoo(key, lambda: (lambda y: (y, *torch.autograd.grad(
        y.sum(), (x, a, g, b))))(lf.liger_dyt(x, a, g, b)), record_property, available=True)
    d = [t.double().detach().requires_grad_() for t in (x, a, g, b)]
    ref = d[2] * torch.tanh(d[1] * d[0]) + d[3]
    close(y, ref, 1e-5, 1e-6)
    for got, want in zip(grads, torch.autograd.grad(ref.sum(), d)):
        close(got, want, 1e-4, 1e-5)
    assert {r.kernel for r in em.launches} == {"_dyt_fwd_kernel", "_dyt_bwd_kernel"}


@pytest.mark.parametrize("key", KEYS)
def test_liger_layer_norm_geglu_kl_div(key, record_property):
    lf = need("liger_kernel.transformers.functional")
    x = torch.randn(6, 80, generator=_gen(7))
    w, bb = 1 + 0.1 * torch.randn(80, generator=_gen(8)), torch.randn(80, generator=_gen(9))
    a, c = torch.randn(4, 64, generator=_gen(10)), torch.randn(4, 64, generator=_gen(11))
    p = torch.log_softmax(torch.randn(4, 32, generator=_gen(12)), -1)
    q = torch.softmax(torch.randn(4, 32, generator=_gen(13)), -1)
    (ln, gg, kl), em = zoo(key, lambda: (lf.liger_layer_norm(x, w, bb, 1e-6),
                                         lf.liger_geglu(a, c),
                                         lf.liger_kl_div(p, q, reduction="batchmean")),
                             record_property)
    close(ln, F.layer_norm(x.double(), [80], w.double(), bb.double(), 1e-6), 1e-5, 1e-5)
    close(gg, F.gelu(a.double(), approximate="tanh") * c.double(), 1e-5, 1e-6)
    close(kl, F.kl_div(p.double(), q.double(), reduction="batchmean"), 1e-5, 1e-6)
    assert len({r.kernel for r in em.launches}) >= 3


# -- fla: l2norm forward and backward ------------------------------------------------------
@pytest.mark.parametrize("key", KEYS)
def test_fla_l2norm(key, record_property):
    l2 = need("fla.modules.l2norm")
    x = torch.randn(2, 8, 64, generator=_gen(14), requires_grad=True)
    (y, gx), em = zoo(key, lambda: (lambda y: (y, torch.autograd.grad(
        (y * y.detach().flip(-1)).sum(), x)[0]))(l2.l2norm(x)), record_property, queries=True)
    xd = x.double().detach().requires_grad_()
    ref = xd / torch.sqrt((xd * xd).sum(-1, keepdim=True) + 1e-6)
    (rg,) = torch.autograd.grad((ref * ref.detach().flip(-1)).sum(), xd)
    close(y, ref, 1e-5, 1e-6)
    close(gx, rg, 1e-4, 1e-5)
    assert len({r.kernel for r in em.launches}) >= 2


# -- torchao: fp8 blockwise activation and weight quantisation -----------------------------
@pytest.mark.parametrize("key", KEYS)
def test_torchao_fp8_blockwise_quant(key, record_property):
    bq = need("torchao.kernel.blockwise_quantization")
    x = torch.randn(4, 128, generator=_gen(15))
    w = torch.randn(128, 128, generator=_gen(16))
    (y, s, yw, sw), em = zoo(key, lambda: (*bq.fp8_blockwise_act_quant(x, 128),
                                           *bq.fp8_blockwise_weight_quant(w, 128)),
                             record_property, available=True)
    for q, sc, ref in ((y, s.repeat_interleave(128, -1), x), (yw, sw.repeat_interleave(
            128, 0).repeat_interleave(128, 1), w)):
        close(q.double() * sc.double(), ref.double(), 2.0 ** -4, 2.0 ** -9 * ref.abs().max())


# -- bitsandbytes: 8-bit blockwise quantisation and dequantisation -------------------------
@pytest.mark.parametrize("key", KEYS)
def test_bitsandbytes_blockwise_8bit(key, record_property):
    k8 = need("bitsandbytes.backends.triton.kernels_8bit_quant")
    fn = need("bitsandbytes.functional")
    code = fn.create_dynamic_map(signed=True).float()
    A = torch.randn(512, generator=_gen(17))
    (q, absmax, back), em = zoo(key, lambda: (lambda q, m: (q, m, k8.dequant_8bit_blockwise(
        q, m, code, 256, dtype=torch.float32)))(*k8.quantize_blockwise_triton(A, code, 256)),
        record_property)
    blocks = A.double().view(-1, 256)
    assert torch.equal(absmax.double(), blocks.abs().amax(1))
    idx = ((blocks / blocks.abs().amax(1, keepdim=True)).reshape(-1, 1)
           - code.double()).abs().argmin(1)                   # nearest code (float64)
    ref = code.double()[idx].view(-1, 256) * blocks.abs().amax(1, keepdim=True)
    close(back, ref.reshape(-1), 1e-6, 1e-7)
