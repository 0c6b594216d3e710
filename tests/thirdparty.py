"""The spy and the checks shared by the third-party zoo (tests/test_thirdparty_*.py).

The spy is a TorchDispatchMode entered *outside* (before) ``emulate``: the emulating mode
sees every op first, and what it lets through (its own ``mma_emu`` products, every native
op) reaches the spy.  The spy counts each matrix-multiplying op that reaches it; the check
then asks that each one was recorded by ``emulate`` as ``native`` (a warned, deliberate
escape), so that nothing runs natively unseen.  The spy looks inside what would otherwise
hide products from it: composite ops (decomposed with the spy on), ``torch.library``
custom ops with a Python implementation (run with the spy on) and higher-order operators
(counted as one product: their insides are the op's own business).

The spec is deliberately coarse (``tme.spec("sm90", "bf16").replace(F=3)``: 3 bits kept
below the largest product's exponent) so that an emulated output differs visibly from a
native one: ``differs()`` checks that the preview did change the numbers.
"""
from __future__ import annotations

import os
import warnings
from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import torch_mma_emu as tme
from torch_mma_emu.preview.mode import WATCHED_NATIVE, _decomposes
from torch_mma_emu.preview.aten_math import LABEL as KERNEL_LABEL

os.environ.setdefault("HF_HUB_OFFLINE", "1")        # configs only: never reach a hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

COARSE = tme.spec("sm90", "bf16").replace(F=3)

# aten ops that multiply matrices (what emulate routes, and what it watches and warns about)
PRODUCTS = {"mm", "addmm", "bmm", "baddbmm", "convolution", "convolution_backward",
            "_addmm_activation", "_scaled_mm", "_scaled_mm_v2", "_convolution",
            "_scaled_dot_product_flash_attention_for_cpu",
            "_scaled_dot_product_flash_attention_for_cpu_backward",
            "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
            "_scaled_dot_product_cudnn_attention",
            "_scaled_dot_product_fused_attention_overrideable",
            "_flash_attention_forward", "_efficient_attention_forward"} | set(WATCHED_NATIVE)


def _custom_impl(func):
    """The Python implementation of a ``torch.library.custom_op`` (None for other ops)."""
    try:
        from torch._library.custom_ops import _maybe_get_opdef
    except ImportError:                                      # pragma: no cover
        return None
    opdef = _maybe_get_opdef(func)
    if opdef is None:
        return None
    fns = getattr(opdef, "_backend_fns", {})
    return fns.get("cpu") or fns.get(None) or getattr(opdef, "_init_fn", None)


def _computes_nothing(args) -> bool:
    """Fake / meta operands: ``emulate`` asks PyTorch for an op's output strides on fake
    tensors (no numbers are computed)."""
    from torch._subclasses.fake_tensor import FakeTensor
    ts = [a for a in torch.utils._pytree.tree_leaves(args) if isinstance(a, torch.Tensor)]
    return any(isinstance(t, FakeTensor) or t.is_meta for t in ts)


class Spy(TorchDispatchMode):
    """Counts the matrix products that reach it, by op name (``aten.mm.default`` ...)."""

    supports_higher_order_operators = True

    def __init__(self):
        super().__init__()
        self.seen: Counter = Counter()

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True       # as emulate does: Dynamo traces, compiled calls come through

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            self.seen[str(func)] += 1
            return func(*args, **kwargs)
        ns = func.namespace
        if ns == "mma_emu":             # an emulated product
            return func(*args, **kwargs)
        if _decomposes(func):
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        if ns not in ("aten", "prims"):
            impl = _custom_impl(func)
            if impl is not None:                  # look inside: its products must show
                with self:
                    return impl(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name.rstrip("_") in PRODUCTS and not _computes_nothing(args):
            self.seen[str(func)] += 1
        return func(*args, **kwargs)


def native_calls(em) -> Counter:
    """Calls that ``emulate`` recorded as running natively, by op name."""
    out: Counter = Counter()
    for (op, _phase, fmt), n in em.counts.items():
        if fmt == "native":
            out[op] += n
    return out


def unseen(spy: Spy, em) -> dict:
    """Products that reached the spy beyond what ``emulate`` recorded as native."""
    nat = native_calls(em)
    return {op: n - nat.get(op, 0) for op, n in spy.seen.items() if n > nat.get(op, 0)}


def emulated_calls(em) -> int:
    """Emulated products (not PyTorch's CUDA math kernels, preview/aten_math.py)."""
    return sum(n for (_op, _ph, fmt), n in em.counts.items()
               if fmt != "native" and fmt != KERNEL_LABEL)


def product_counts(em) -> dict:
    """``em.counts`` without PyTorch's CUDA math kernels (preview/aten_math.py)."""
    return {k: n for k, n in em.counts.items() if k[2] != KERNEL_LABEL}


def product_formats(em) -> set:
    """The formats of the block's products."""
    return {fmt for (_op, _ph, fmt) in product_counts(em)}


def run_spied(fn, arch=COARSE, **emulate_kw):
    """``fn()`` under ``emulate(arch)`` with the spy outside it; returns (result, em, spy)."""
    spy = Spy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # native ops are checked from the records
        with spy, tme.emulate(arch, **emulate_kw) as em:
            out = fn()
    return out, em, spy


def check(em, spy, *, allow_native: bool = False, what: str = "") -> None:
    """No product reached the spy unrecorded, at least one product was emulated and, unless
    ``allow_native``, none ran natively (not even recorded)."""
    assert emulated_calls(em) > 0, f"{what}: no product was emulated\n{em.summary()}"
    esc = unseen(spy, em)
    assert not esc, f"{what}: products ran natively without a record: {esc}\n{em.summary()}"
    if not allow_native:
        nat = native_calls(em)
        assert not nat, f"{what}: products ran natively (recorded, warned): {dict(nat)}"


def first_tensor(out):
    """The main tensor of a model output: logits / last_hidden_state / the first tensor of a
    ModelOutput, tuple or dict."""
    if isinstance(out, torch.Tensor):
        return out
    for key in ("logits", "last_hidden_state", "sequences"):
        v = out.get(key) if isinstance(out, dict) else getattr(out, key, None)
        if isinstance(v, torch.Tensor):
            return v
    vals = out.values() if isinstance(out, dict) else out
    for v in vals:
        t = first_tensor(v) if not isinstance(v, torch.Tensor) else v
        if isinstance(t, torch.Tensor):
            return t
    raise TypeError(f"no tensor in {type(out).__name__}")


def differs(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The emulated output is visibly not the native one (the coarse spec shows)."""
    a, b = a.detach().float(), b.detach().float()
    return a.shape == b.shape and not torch.equal(a, b)


def import_timm():
    """``timm``, or skip (with the torchvision guard of thirdparty_models)."""
    import thirdparty_models  # noqa: F401  (the guard)
    return pytest.importorskip("timm")
