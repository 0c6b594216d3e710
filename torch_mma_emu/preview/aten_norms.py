"""Under ``emulate``: layer_norm and rms_norm forward with the bits of torch 2.13.0's CUDA
``vectorized_layer_norm_kernel`` (torch_mma_emu/aten_cuda/norms.py).

* ``aten.native_layer_norm`` (what ``F.layer_norm`` / ``nn.LayerNorm`` reach below
  autograd): modelled y, mean and rstd, so the backward op reads the modelled statistics.
* ``F.rms_norm`` / ``torch.rms_norm``: on the CPU PyTorch decomposes it into pow / mean /
  rsqrt / mul, on CUDA it runs the fused kernel (``_fused_rms_norm``), so the function is
  caught above autograd (functions.py) and the fused kernel's bits come back; in backward
  dX is the model's (``_fused_rms_norm_backward``'s kernel, aten_cuda/norms_backward.py),
  dgamma too (aten_cuda/gamma_beta.py, ``rms_norm = true``), recorded apart.

Rows the vectorised kernel does not take (N % 4 != 0, N > 2^24, unaligned views) get the
unvectorised pair's bits.  Native, recorded with the reason: fp64, non-contiguous inputs,
non-CPU tensors, AMD targets; rms_norm's dgamma with mixed dtypes.

* ``aten.native_layer_norm_backward``: dX with the bits of torch 2.13's
  ``layer_norm_grad_input_kernel[_vectorized]`` (aten_cuda/norms_backward.py), from the
  forward's float statistics (kept here for 16-bit inputs, whose CPU forward stores them
  rounded); dgamma / dbeta with the bits of ``GammaBetaBackwardCUDAKernelTemplate`` in the
  tiling torch 2.13 picks (aten_cuda/gamma_beta.py; the 2-pass one with its ``.sum(0)``),
  recorded apart with the tiling named.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import torch

from .. import aten_cuda
from ..aten_cuda import gamma_beta, norms, norms_backward
from . import aten_reductions
from .records import KERNEL_NATIVE

__all__ = ["handle_layer_norm", "handle_layer_norm_backward", "rms_norm", "KIND"]

KIND = "normalization"
_LABEL = f"torch {aten_cuda.TORCH_VERSION} CUDA kernel"
_BACKWARD = "backward: not modelled (PyTorch's CPU kernel)"
_BUSY = threading.local()         # rms_norm's backward recomputes PyTorch's own forward
_STATS: OrderedDict = OrderedDict()  # (x, mean, rstd) data_ptrs -> float32 (mean, rstd)
_STATS_KEEP = 256
_STATS_LOCK = threading.Lock()


def _why_native(mode, x, n, *others) -> str:
    if not isinstance(x, torch.Tensor) or x.device.type != "cpu":
        return "not a CPU tensor"
    if x.dtype == torch.float64:
        return "float64: no model"
    if x.numel() == 0:
        return "empty input"
    if aten_reductions.target_gpu(mode) is None:
        return f"{mode.policy.arch_name}: no model of this target's norm kernel"
    if not x.is_contiguous() or any(t is not None and not t.is_contiguous() for t in others):
        return "non-contiguous input: PyTorch copies it first (not modelled)"
    if x.numel() >= 2 ** 31:
        return "size outside the model (64-bit indexing)"
    return ""


def handle_layer_norm(mode, func, args, kwargs):
    """``native_layer_norm(x, normalized_shape, weight, bias, eps)``."""
    x, shape, weight, bias, eps = args[:5]
    if not x.is_floating_point():
        return func(*args, **kwargs)
    n = 1
    for s in shape:
        n *= int(s)
    why = _why_native(mode, x, n, weight, bias)
    if why:
        mode.record(func, KIND, KERNEL_NATIVE, [x.shape], why)
        return func(*args, **kwargs)
    aten_reductions.warn_version(mode, aten_cuda.version_mismatch())
    y, mean, rstd = norms.layer_norm(x.detach(), shape, _plain(weight), _plain(bias),
                                     float(eps))
    # the CPU backward that follows reads mean / rstd in the dtype its forward stores them
    # (the input's, float when weight / bias are of another dtype); CUDA keeps float
    mixed = any(t is not None and t.dtype != x.dtype for t in (weight, bias))
    stat = torch.float32 if mixed else x.dtype
    out = (y, mean.to(stat), rstd.to(stat))
    if stat != torch.float32:
        _keep_stats(x, out[1], out[2], mean, rstd)
    mode.record(func, KIND, _LABEL, [x.shape], norms.kernel_name(n, x.dtype, x, weight, bias))
    return out


def _keep_stats(x, mean_out, rstd_out, mean32, rstd32):
    with _STATS_LOCK:
        _STATS[(x.data_ptr(), mean_out.data_ptr(), rstd_out.data_ptr())] = (mean32, rstd32)
        while len(_STATS) > _STATS_KEEP:
            _STATS.popitem(last=False)


def _float_stats(x, mean, rstd):
    """The forward's float32 mean / rstd: kept by handle_layer_norm where its CPU output
    rounded them (checked to round to what the backward got), else ``mean`` / ``rstd``."""
    with _STATS_LOCK:
        kept = _STATS.get((x.data_ptr(), mean.data_ptr(), rstd.data_ptr()))
    if kept is not None and torch.equal(kept[0].to(mean.dtype).reshape(mean.shape), mean) \
            and torch.equal(kept[1].to(rstd.dtype).reshape(rstd.shape), rstd):
        return kept
    return mean.float(), rstd.float()


def handle_layer_norm_backward(mode, func, args, kwargs):
    """``native_layer_norm_backward(dy, x, shape, mean, rstd, weight, bias, mask)``: dX and
    dgamma / dbeta modelled."""
    dy, x, shape, mean, rstd, weight, bias, mask = (list(args) + [None] * 8)[:8]
    n = 1
    for s in shape:
        n *= int(s)
    mask = [True, True, True] if mask is None else list(mask)
    why = _why_native(mode, x, n, weight)
    if not why and (dy.dtype != x.dtype or any(t is not None and t.dtype != x.dtype
                                               for t in (weight, bias))):
        why = "mixed dtypes: not modelled"
    if not why and not any(mask):
        why = "no gradient asked"
    if why or kwargs:
        mode.record(func, KIND, KERNEL_NATIVE, [dy.shape], why or "keyword arguments")
        return func(*args, **kwargs)
    aten_reductions.warn_version(mode, aten_cuda.version_mismatch())
    m32, r32 = _float_stats(x, mean, rstd)
    dx = dg = db = None
    if mask[0]:
        dx = norms_backward.layer_norm_grad_input(dy, x, n, m32, r32, _plain(weight))
        mode.record(func, KIND, _LABEL, [dy.shape],
                    "dX: " + norms_backward.kernel_name(n, x.dtype, dy, x, weight))
    if not (mask[1] or mask[2]):
        return dx, None, None
    m, gpu = x.numel() // n, aten_reductions.target_gpu(mode)
    dg, db = gamma_beta.gamma_beta_grads(dy, x, n, m32, r32, gpu)
    mode.record(f"{func} (dgamma, dbeta)", KIND, _LABEL, [dy.shape],
                "dgamma / dbeta: " + gamma_beta.kernel_name(m, n, x.dtype, gpu.sms))
    return dx, (dg if mask[1] else None), (db if mask[2] else None)


def _plain(t):
    return None if t is None else t.detach()


class _RmsNorm(torch.autograd.Function):
    """Forward: the model's y; backward: dX the model's (``layer_norm_grad_input_kernel*<T,
    float, true>`` from the modelled rstd), dgamma too (``GammaBetaBackwardCUDAKernelTemplate<T,
    float, ..., true>``) but with mixed dtypes: PyTorch's decomposition."""

    @staticmethod
    def forward(ctx, x, weight, shape, eps, y, mode, rstd):
        ctx.save_for_backward(x, weight, rstd)
        ctx.shape, ctx.eps, ctx.mode = shape, eps, mode
        return y

    @staticmethod
    def backward(ctx, gy):
        x, weight, rstd = ctx.saved_tensors
        gx = None
        if ctx.needs_input_grad[0] and gy.dtype == x.dtype:
            n = x.numel() // max(rstd.numel(), 1)
            gx = norms_backward.layer_norm_grad_input(gy, x, n, None, rstd, _plain(weight),
                                                      rms=True)
            ctx.mode.record("aten._fused_rms_norm_backward", KIND, _LABEL, [x.shape],
                            "dX: " + norms_backward.kernel_name(n, x.dtype, gy, x, weight,
                                                                rms=True))
        wants_w = weight is not None and ctx.needs_input_grad[1]
        cw = None
        if wants_w and gy.dtype == x.dtype == weight.dtype:
            n = x.numel() // max(rstd.numel(), 1)
            m, gpu = x.numel() // n, aten_reductions.target_gpu(ctx.mode)
            cw = gamma_beta.gamma_beta_grads(gy, x, n, None, rstd, gpu, rms=True)[0]
            cw = cw.reshape(weight.shape)
            ctx.mode.record("aten._fused_rms_norm_backward (dgamma)", KIND, _LABEL, [x.shape],
                            "dgamma: " + gamma_beta.kernel_name(m, n, x.dtype, gpu.sms,
                                                                rms=True))
            wants_w = False
        want_x = ctx.needs_input_grad[0] and gx is None
        if want_x or wants_w:
            what = ", ".join(w for w, on in (("dX", want_x), ("dgamma", wants_w)) if on)
            ctx.mode.record(f"aten._fused_rms_norm_backward ({what})", KIND, KERNEL_NATIVE,
                            [x.shape], f"{what}: {_BACKWARD}")
            _BUSY.on = True
            try:
                cx, cw2 = _RmsNorm._grads(ctx, x, weight, gy, gx is None)[:2]
            finally:
                _BUSY.on = False
            gx = cx if gx is None else gx
            cw = cw2 if wants_w else cw
        return gx, cw, None, None, None, None, None

    @staticmethod
    def _grads(ctx, x, weight, gy, want_x):
        with torch.enable_grad(), aten_reductions.parts_of_a_model():
            xs = x.detach().requires_grad_(want_x and ctx.needs_input_grad[0])
            ws = None if weight is None else weight.detach().requires_grad_(
                ctx.needs_input_grad[1])
            y = torch.rms_norm(xs, ctx.shape, ws, ctx.eps)
            wanted = [t for t in (xs, ws) if t is not None and t.requires_grad]
            grads = iter(torch.autograd.grad(y, wanted, gy)) if wanted else iter(())
        gx = next(grads) if xs.requires_grad else None
        gw = next(grads) if ws is not None and ctx.needs_input_grad[1] else None
        return gx, gw


def _rms_args(input, normalized_shape, weight=None, eps=None):
    return input, normalized_shape, weight, eps


def rms_norm(mode, func, args, kwargs):
    """``F.rms_norm`` / ``torch.rms_norm`` caught by the function router: the fused kernel's
    bits, or None to let PyTorch run it (recorded as native with the reason)."""
    x, shape, weight, eps = _rms_args(*args, **kwargs)
    if getattr(_BUSY, "on", False):
        return None
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or \
            type(x) not in (torch.Tensor, torch.nn.Parameter):
        return None
    shape = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
    n = 1
    for s in shape:
        n *= s
    why = _why_native(mode, x, n, weight)
    if not why and tuple(x.shape[x.dim() - len(shape):]) != shape:
        return None                                   # PyTorch's own error
    if why:
        mode.record("aten._fused_rms_norm", KIND, KERNEL_NATIVE, [x.shape], why)
        with aten_reductions.parts_of_a_model():
            return func(*args, **kwargs)
    aten_reductions.warn_version(mode, aten_cuda.version_mismatch())
    y, rstd = norms.rms_norm(x.detach(), shape, _plain(weight), eps)
    mode.record("aten._fused_rms_norm", KIND, _LABEL, [x.shape],
                "rms_norm: " + norms.kernel_name(n, x.dtype, x, weight))
    needs = torch.is_grad_enabled() and (x.requires_grad or (
        weight is not None and weight.requires_grad))
    if not needs:
        return y
    return _RmsNorm.apply(x, weight, shape, eps, y, mode, rstd)
