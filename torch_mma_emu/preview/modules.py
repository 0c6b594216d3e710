"""``convert(model, arch)`` / ``revert(model)``: swap ``nn.Linear``, ``nn.Conv1d/2d/3d`` and
``nn.ConvTranspose1d/2d/3d`` for emulated modules that share the same parameters (in the
style of torchao's ``quantize_``).  Each emulated module is a subclass of the class it
replaces (``EmulatedLinear`` is an ``nn.Linear``, ``EmulatedConv2d`` an ``nn.Conv2d``), so
code that selects modules by type (weight init, optimizer groups, adapters) still finds
them; ``reset_parameters``, ``extra_repr`` and the state_dict keys are the original's.

The emulated modules compute exactly what :func:`emulate` computes for the aten ops the
original modules turn into (``addmm`` / ``mm`` for Linear, ``convolution`` for Conv), with
the same :class:`Policy` and the same helpers, forward and backward:

* Linear: ``y = addmm(b, x, W^T)`` (``mm`` without bias) on ``x`` flattened to 2-D;
  backward ``dx = mm(dy, W)``, ``dW = mm(dy^T, x)``, ``db = dy.sum(0)`` (``mm`` plans,
  backward phase), as autograd's ``AddmmBackward`` does;
* Conv: ``conv.conv_forward`` / ``conv.conv_backward``; ConvTranspose:
  ``conv.conv_transpose`` / ``conv.conv_backward(transposed=True)``.

They are ``torch.autograd.Function``s with plain-tensor bodies, so ``torch.compile(model,
fullgraph=True)`` traces them without graph breaks (the emulated product is the custom op
``mma_emu::emulated_mm``) and gives the eager bits.  Under ``torch.autocast`` the inputs are
cast to the autocast dtype first, as ``F.linear`` / ``F.conv*d`` do.
"""
from __future__ import annotations

import re
import warnings
from typing import Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .conv import conv_backward, conv_forward, conv_transpose
from .gemm import run_product
from .policy import Plan, Policy

__all__ = ["EmulatedLinear", "EmulatedConv", "EmulatedConv1d", "EmulatedConv2d",
           "EmulatedConv3d", "EmulatedConvTranspose1d", "EmulatedConvTranspose2d",
           "EmulatedConvTranspose3d", "convert", "revert"]

_PLAN_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


class _Plans:
    """Forward / backward plans per input dtype, computed once (dict lookups trace cleanly
    under torch.compile)."""

    def __init__(self, policy: Policy, fwd_kind: str, bwd_kind: str):
        self.table = {}
        for dt in _PLAN_DTYPES:
            try:
                self.table[dt] = (policy.plan(fwd_kind, dt, dt, backward=False),
                                  policy.plan(bwd_kind, dt, dt, backward=True))
            except ValueError as e:  # dtype the arch cannot take: raise when used
                self.table[dt] = e

    def get(self, dtype):
        p = self.table.get(dtype)
        if p is None:
            raise TypeError(f"emulated module: inputs of dtype {dtype} are not supported; "
                            "allowed: float64, float32, float16, bfloat16")
        if isinstance(p, ValueError):
            raise p
        return p


def _autocast(*ts):
    """What autocast does to a Linear / Conv: float32 operands go to the autocast dtype
    (float64 and already-low-precision tensors stay as they are)."""
    dev = ts[0].device.type
    if torch.is_autocast_enabled(dev):
        dt = torch.get_autocast_dtype(dev)
        return tuple(t.to(dt) if t is not None and t.dtype == torch.float32 else t
                     for t in ts)
    return ts


class _LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, fwd: Plan, bwd: Plan, bias_mode: str):
        ctx.save_for_backward(x, weight)
        ctx.bwd, ctx.has_bias = bwd, bias is not None
        return run_product(x, weight.t(), fwd, C=bias, bias_mode=bias_mode, out_dtype=x.dtype)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        gx = gw = gb = None
        grad = grad.to(x.dtype)
        if ctx.needs_input_grad[0]:
            gx = run_product(grad, weight, ctx.bwd, out_dtype=x.dtype)
        if ctx.needs_input_grad[1]:
            gw = run_product(grad.t(), x, ctx.bwd, out_dtype=weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = grad.sum(0)
        return gx, gw, gb, None, None, None


class _ConvFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, fwd: Plan, bwd: Plan, bias_mode: str, geom: tuple):
        stride, padding, dilation, groups, outpad = geom
        ctx.save_for_backward(x, weight)
        ctx.bwd, ctx.bias_mode, ctx.geom, ctx.has_bias = bwd, bias_mode, geom, bias is not None

        def mm(A, B, C=None):
            return run_product(A, B, fwd, C=C, bias_mode=bias_mode, out_dtype=x.dtype)
        if outpad is not None:
            return conv_transpose(x, weight, list(stride), list(padding), list(outpad),
                                  list(dilation), groups, mm, bias)
        return conv_forward(x, weight, stride, padding, dilation, groups, mm, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        stride, padding, dilation, groups, outpad = ctx.geom
        bwd, bias_mode = ctx.bwd, ctx.bias_mode
        grad = grad.to(x.dtype)

        def mm(A, B, C=None):
            return run_product(A, B, bwd, C=C, bias_mode=bias_mode, out_dtype=x.dtype)
        mask = (ctx.needs_input_grad[0], ctx.needs_input_grad[1],
                ctx.has_bias and ctx.needs_input_grad[2])
        transposed = outpad is not None
        gx, gw, gb = conv_backward(grad, x, weight, list(stride), list(padding),
                                   list(dilation), transposed,
                                   list(outpad) if transposed else [0] * len(stride), groups,
                                   mask, mm)
        return gx, gw, gb, None, None, None, None


_MODULE_INTERNALS = frozenset(nn.Module().__dict__)


class _Emulated:
    """Common part of the emulated modules (a mixin before the torch.nn class they
    subclass): the original module's attributes (``in_features``, ``stride``,
    ``padding_mode``, ...) and parameters (shared, same state_dict keys), the original kept
    for ``revert``; ``reset_parameters`` and the rest of the class's API are the torch.nn
    class's own."""

    def _setup(self, original: nn.Module, policy: Policy, fwd_kind: str, bwd_kind: str):
        nn.Module.__init__(self)
        for k, v in original.__dict__.items():
            if k not in _MODULE_INTERNALS:
                self.__dict__[k] = v
        self.training = original.training
        self.__dict__["_original"] = original
        self.policy = policy
        self._plans = _Plans(policy, fwd_kind, bwd_kind)
        self.register_parameter("weight", original.weight)
        self.register_parameter("bias", original.bias)

    def _operands(self, x: torch.Tensor, name: str):
        """``(x, weight, bias, forward plan, backward plan)`` after autocast; the input's
        dtype must be the weight's."""
        x, w, b = _autocast(x, self.weight, self.bias)
        fwd, bwd = self._plans.get(x.dtype)
        if x.dtype != w.dtype:
            raise TypeError(f"{name}: input dtype {x.dtype} != weight dtype {w.dtype}")
        return x, w, b, fwd, bwd

    @property
    def original(self) -> nn.Module:
        return self.__dict__["_original"]

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, {self.policy.describe()}"


class EmulatedLinear(_Emulated, nn.Linear):
    """An ``nn.Linear`` whose products run as ``policy.arch`` computes them."""

    def __init__(self, original: nn.Linear, policy: Policy):
        self._setup(original, policy, "addmm" if original.bias is not None else "mm", "mm")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, w, b, fwd, bwd = self._operands(x, "EmulatedLinear")
        if fwd.native:
            return F.linear(x, w, b)
        lead = x.shape[:-1]
        # aten.linear fuses the bias (addmm) unless the input is N-D (N != 2) and not
        # contiguous: then matmul + add_, two roundings; do the same
        fused = b is None or x.dim() == 2 or x.is_contiguous()
        y = _LinearFn.apply(x.reshape(-1, x.shape[-1]), w, b if fused else None, fwd, bwd,
                            self.policy.bias)
        y = y.reshape(*lead, y.shape[-1])
        return y if fused else y + b


class _EmulatedHFConv1D(_Emulated):
    """transformers' ``Conv1D`` (GPT-2's Linear with a transposed ``(in, out)`` weight:
    ``addmm(bias, x, weight)``) on emulated products: the same ``addmm`` / ``mm`` plans and
    the same products as :class:`EmulatedLinear` with ``weight.t()``, which are the products
    ``emulate`` runs for its ``addmm`` (each output element the same dot product)."""

    def __init__(self, original: nn.Module, policy: Policy):
        self._setup(original, policy, "addmm" if original.bias is not None else "mm", "mm")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, w, b, fwd, bwd = self._operands(x, "EmulatedConv1D")
        x2 = x.reshape(-1, x.shape[-1])
        if fwd.native:
            y = torch.addmm(b, x2, w) if b is not None else x2 @ w
        else:
            y = _LinearFn.apply(x2, w.t(), b, fwd, bwd, self.policy.bias)
        return y.reshape(*x.shape[:-1], y.shape[-1])


_HF_CLASSES: dict = {}


def _hf_conv1d_class(cls: type):
    """The emulated subclass of transformers' ``Conv1D`` (made once, without importing
    transformers: the class comes from the model)."""
    if cls not in _HF_CLASSES:
        _HF_CLASSES[cls] = type("EmulatedConv1D", (_EmulatedHFConv1D, cls),
                                {"__module__": __name__, "__doc__": _EmulatedHFConv1D.__doc__})
    return _HF_CLASSES[cls]


def _conv_pads(o: nn.modules.conv._ConvNd):
    """(left, right) zero padding per spatial dim of a (non-transposed) convolution."""
    nd = len(o.kernel_size)
    if isinstance(o.padding, str):
        if o.padding == "valid":
            return (0,) * nd, (0,) * nd
        tot = [d * (k - 1) for d, k in zip(o.dilation, o.kernel_size)]   # "same": extra on
        return tuple(t // 2 for t in tot), tuple(t - t // 2 for t in tot)   # the right
    return tuple(o.padding), tuple(o.padding)


class EmulatedConv(_Emulated):
    """Common part of ``EmulatedConv1d/2d/3d`` (subclasses of ``nn.Conv1d/2d/3d``) and
    ``EmulatedConvTranspose1d/2d/3d``: any padding mode, groups, dilation."""

    def __init__(self, original: nn.modules.conv._ConvNd, policy: Policy):
        self._setup(original, policy, "conv", "conv")
        self.nd = len(original.kernel_size)
        if not original.transposed:
            self.pad_lo, self.pad_hi = _conv_pads(original)

    def _native(self, x, w, b, pad):
        fn = (F.conv1d, F.conv2d, F.conv3d)[self.nd - 1]
        return fn(x, w, b, self.stride, pad, self.dilation, self.groups)

    def _pad_input(self, x):
        if self.padding_mode != "zeros":
            pads = []
            for lo, hi in zip(reversed(self.pad_lo), reversed(self.pad_hi)):
                pads += [lo, hi]
            return F.pad(x, pads, mode=self.padding_mode), (0,) * self.nd
        if self.pad_lo == self.pad_hi:
            return x, self.pad_lo
        pads = []
        for lo, hi in zip(reversed(self.pad_lo), reversed(self.pad_hi)):
            pads += [0, hi - lo]
        return F.pad(x, pads), self.pad_lo

    def forward(self, x: torch.Tensor, output_size=None) -> torch.Tensor:
        batched = x.dim() == self.nd + 2
        if not batched:
            x = x.unsqueeze(0)
        if self.transposed:
            outpad = self._output_padding(x, output_size, list(self.stride),
                                          list(self.padding), list(self.kernel_size),
                                          self.nd, list(self.dilation))
            pad = tuple(self.padding)
        else:
            outpad = None
            x, pad = self._pad_input(x)   # before autocast, as nn.Conv pads before F.conv
        x, w, b = _autocast(x, self.weight, self.bias)
        if x.dtype != w.dtype:
            raise TypeError(f"{type(self).__name__}: input dtype {x.dtype} != weight dtype "
                            f"{w.dtype}")
        fwd, bwd = self._plans.get(x.dtype)
        if fwd.native:
            if self.transposed:
                fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[self.nd - 1]
                y = fn(x, w, b, self.stride, pad, outpad, self.groups, self.dilation)
            else:
                y = self._native(x, w, b, pad)
            return y if batched else y.squeeze(0)
        geom = (tuple(self.stride), tuple(pad), tuple(self.dilation), self.groups,
                None if outpad is None else tuple(outpad))
        y = _ConvFn.apply(x, w, b, fwd, bwd, self.policy.bias, geom)
        return y if batched else y.squeeze(0)


class EmulatedConv1d(EmulatedConv, nn.Conv1d):
    """An ``nn.Conv1d`` on emulated products."""


class EmulatedConv2d(EmulatedConv, nn.Conv2d):
    """An ``nn.Conv2d`` on emulated products."""


class EmulatedConv3d(EmulatedConv, nn.Conv3d):
    """An ``nn.Conv3d`` on emulated products."""


class EmulatedConvTranspose1d(EmulatedConv, nn.ConvTranspose1d):
    """An ``nn.ConvTranspose1d`` on emulated products."""


class EmulatedConvTranspose2d(EmulatedConv, nn.ConvTranspose2d):
    """An ``nn.ConvTranspose2d`` on emulated products."""


class EmulatedConvTranspose3d(EmulatedConv, nn.ConvTranspose3d):
    """An ``nn.ConvTranspose3d`` on emulated products."""


_SWAPS: dict[type, Callable] = {
    nn.Linear: EmulatedLinear, nn.Conv1d: EmulatedConv1d, nn.Conv2d: EmulatedConv2d,
    nn.Conv3d: EmulatedConv3d, nn.ConvTranspose1d: EmulatedConvTranspose1d,
    nn.ConvTranspose2d: EmulatedConvTranspose2d, nn.ConvTranspose3d: EmulatedConvTranspose3d}


def convert(model: nn.Module, arch, *, formats=None, fp32_format: str = "auto",
            bias: str = "epilogue", fp16_accumulation: Optional[bool] = None,
            fp16_alt_impl: str = "off",
            filter_fn: Optional[Callable[[nn.Module, str], bool]] = None,
            schedule=None) -> nn.Module:
    """Swap every ``nn.Linear`` / ``nn.Conv1d/2d/3d`` in ``model`` (in place) for an emulated
    module on ``arch`` sharing its parameters; returns ``model``.

    Options as for :func:`emulate` (``formats`` keys used here: ``addmm`` / ``mm`` for
    Linear, ``conv``, ``default``).  ``filter_fn(module, fqn) -> bool`` picks which modules
    to swap (default: all).  ``schedule``: as for :func:`emulate`.  PyTorch's TF32 settings are read now.  ``revert(model)`` puts
    the original modules back.  A bare ``nn.Linear`` / ``nn.Conv2d`` is returned swapped.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"convert: model must be an nn.Module, got {type(model).__name__}")
    policy = Policy(arch, formats=formats, fp32_format=fp32_format, bias=bias,
                    fp16_accumulation=fp16_accumulation, fp16_alt_impl=fp16_alt_impl,
                    schedule=schedule)

    skipped = []

    def swap(m: nn.Module, fqn: str):
        """The module to put at ``fqn`` (None: keep ``m``)."""
        again = isinstance(m, _Emulated)     # converted before: re-target it
        if again:
            m = _restore(m)
        if filter_fn is not None and not filter_fn(m, fqn):
            return m if again else None
        cls = _swap_class(type(m))
        why = _not_swapped(m, cls)
        if why:
            skipped.append(f"{fqn or type(m).__name__} ({type(m).__name__}: {why})")
        if why or cls is None:
            return m if again else None
        return cls(m, policy)

    top = swap(model, "")
    if top is not None:
        model = top
    if not isinstance(model, _Emulated):
        for fqn, parent in list(model.named_modules()):
            if isinstance(parent, _Emulated):
                continue
            for name, child in list(parent.named_children()):
                new = swap(child, f"{fqn}.{name}" if fqn else name)
                if new is not None:
                    setattr(parent, name, new)
    found = {fqn: m for fqn, m in model.named_modules()
             if _ATTENTION.search(type(m).__name__) and not isinstance(m, nn.MultiheadAttention)}
    attn = [f"{fqn} ({type(m).__name__})" for fqn, m in found.items()   # the innermost ones
            if not any(o.startswith(fqn + ".") for o in found if fqn)]
    if attn:
        warnings.warn("convert swaps Linear / Conv modules only: the attention products "
                      "(scaled_dot_product_attention, matmul, ...) in the forward of "
                      + ", ".join(attn[:8]) + (f", ... {len(attn) - 8} more" if len(attn) > 8
                                               else "")
                      + " keep running natively. emulate() routes them too.", stacklevel=2)
    if skipped:
        warnings.warn("convert: these matrix-product modules keep running natively: "
                      + "; ".join(skipped[:12]) + (f"; ... {len(skipped) - 12} more"
                                                    if len(skipped) > 12 else "")
                      + ". emulate() routes every product instead.", stacklevel=2)
    return model


def _swap_class(cls: type):
    """The emulated class for modules of class ``cls`` (None: not swapped)."""
    if cls in _SWAPS:
        return _SWAPS[cls]
    if cls.__name__ == "Conv1D" and cls.__module__ == "transformers.pytorch_utils":
        return _hf_conv1d_class(cls)
    return None


# modules whose own forward multiplies attention matrices (by class name: transformers'
# LlamaAttention, GPT2Attention, T5Attention, BertSelfAttention, ViTSelfAttention, timm's
# Attention, ...): convert cannot swap them, so it names them
_ATTENTION = re.compile(r"attention|attn", re.IGNORECASE)

_MATRIX_MODULES = (nn.Linear, nn.modules.conv._ConvNd, nn.MultiheadAttention, nn.Bilinear,
                   nn.RNNBase)


def _not_swapped(m: nn.Module, cls) -> str:
    """Why a matrix-product module cannot be swapped ('' when it can, or is no such module)."""
    if cls is None:
        if not isinstance(m, _MATRIX_MODULES) or \
                type(m).__name__ == "NonDynamicallyQuantizableLinear":   # MHA's: reported
            return ""
        if isinstance(m, (nn.Linear, nn.modules.conv._ConvNd)):
            return "a subclass whose forward may differ"
        return "its products are not a Linear / Conv"
    if m._forward_hooks or m._forward_pre_hooks or getattr(m, "parametrizations", None):
        return "forward hooks or parametrizations (e.g. weight_norm) would be bypassed"
    return ""


def _restore(m: "_Emulated") -> nn.Module:
    """The original module of ``m`` with ``m``'s current weight and bias (they may have been
    reassigned or loaded with ``assign=True`` since the swap)."""
    orig = m.original
    for name in ("weight", "bias"):
        v = getattr(m, name)
        try:
            setattr(orig, name, v)
        except TypeError:              # a plain tensor where a Parameter was
            orig._parameters.pop(name, None)
            setattr(orig, name, v)
    return orig




def revert(model: nn.Module) -> nn.Module:
    """Put back the original modules that :func:`convert` replaced; returns ``model``."""
    if isinstance(model, _Emulated):
        return _restore(model)
    for _, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, _Emulated):
                setattr(parent, name, _restore(child))
    return model
