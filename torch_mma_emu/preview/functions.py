"""Routing above autograd: a ``TorchFunctionMode`` that :func:`emulate` enters next to its
dispatch mode, for the calls whose products would otherwise stay native or be emulated
in the wrong form.

* ``torch.lstm`` / ``gru`` / ``rnn_tanh`` / ``rnn_relu`` (what ``nn.LSTM`` / ``nn.GRU`` /
  ``nn.RNN`` call): on CPU in fp32 / bf16 PyTorch runs them as one oneDNN kernel
  (``mkldnn_rnn_layer``, backward ``mkldnn_rnn_layer_backward``) whose products never reach
  a dispatch mode.  The call runs with oneDNN off (``torch.backends.mkldnn``, for the call
  only; a shared count restores it when the last overlapping call in any thread ends), so
  PyTorch's cell-by-cell code issues ``addmm`` / ``mm`` that are routed, forward
  and backward (the backward nodes are those of that code).
* ``F.scaled_dot_product_attention``: the preview models the kernel the *target* GPU would
  run (``sdpa_target.py``), not this CPU's choice.  Where the GPU has a fused kernel but
  the CPU would take its math path (a mask that requires grad, a value head dim unlike
  the query's, ``dropout_p > 0``: products upcast to fp32), the call runs here as the
  flash form of ``attention.py`` (``_FlashForm``; with a dropout mask drawn from PyTorch's
  generator: a GPU's Philox masks cannot be reproduced, the bits match a GPU's only up to
  which entries are dropped), forward and backward emulated, the mask's gradient too.
  Where the GPU has none (bf16 on sm70 / sm75, MI100, 3-D inputs) PyTorch's math path
  runs, its ``bmm`` routed.  Where both agree the call goes on to PyTorch (its CPU flash
  kernel is emulated by the dispatch mode).
"""
from __future__ import annotations

import threading
from typing import Optional

import torch
from torch.overrides import TorchFunctionMode

from .attention import attention_backward, attention_forward
from .sdpa_target import Choice, gpu_choice

__all__ = ["FunctionRouter"]

_RNNS = frozenset({"lstm", "gru", "rnn_tanh", "rnn_relu"})
_SDPA = torch._C._nn.scaled_dot_product_attention


class SharedOff:
    """A process-wide boolean setting held off while at least one call (in any thread)
    needs it off: the first to enter saves it, the last to leave restores it.  (Saving and
    restoring per call would let two overlapping calls leave it off for good.)"""

    def __init__(self, get, put):
        self.get, self.put = get, put
        self.depth = 0
        self.saved = None
        self.lock = threading.Lock()

    def __enter__(self):
        with self.lock:
            if self.depth == 0:
                self.saved = self.get()
                self.put(False)
            self.depth += 1

    def __exit__(self, *exc):
        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                self.put(self.saved)


# (torch.backends.mkldnn.flags would also set oneDNN's TF32 flag, with a warning)
ONEDNN_OFF = SharedOff(torch._C._get_mkldnn_enabled, torch._C._set_mkldnn_enabled)


class _FlashForm(torch.autograd.Function):
    """Attention in the flash form of attention.py, with an optional dropout mask."""

    @staticmethod
    def forward(ctx, q, k, v, mask, keep, p, is_causal, scale, mode, plan, note):
        prod = mode._prod_fn(plan)
        out, lse = attention_forward(q, k, v, mask, is_causal, scale, prod, keep, p)
        ctx.save_for_backward(q, k, v, out, lse, keep)
        ctx.mask, ctx.args = mask, (p, is_causal, scale, mode, plan, note)
        mode._note("scaled_dot_product_attention", "attention", plan.label,
                   [q.shape, k.shape, v.shape], note)
        return out

    @staticmethod
    def backward(ctx, dO):
        q, k, v, out, lse, keep = ctx.saved_tensors
        p, is_causal, scale, mode, plan, note = ctx.args
        mask = ctx.mask
        dq, dk, dv, dS = attention_backward(dO, q, k, v, out, lse, mask, is_causal, scale,
                                            mode._prod_fn(plan), keep, p)
        mode._note("scaled_dot_product_attention", "attention", plan.label,
                   [q.shape, k.shape, v.shape], note)
        dmask = None
        if mask is not None and ctx.needs_input_grad[3]:
            # the memory-efficient kernel's bias gradient: dS summed to the mask's shape
            dmask = dS
            while dmask.dim() > mask.dim():
                dmask = dmask.sum(0)
            for i, n in enumerate(mask.shape):
                if n == 1 and dmask.shape[i] != 1:
                    dmask = dmask.sum(i, keepdim=True)
            dmask = dmask.to(mask.dtype)
        return dq, dk, dv, dmask, None, None, None, None, None, None, None


def _sdpa_args(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
               scale=None, enable_gqa=False):
    return query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa


def _never_a_dynamo_frame(fn):
    """Keep Dynamo from compiling ``fn`` as a frame of its own (it still inlines it when it
    traces a caller).  Where Dynamo runs a frame eagerly with its callback on (a frame it
    gave up on, PyTorch code it skips), it would compile the router's ``__torch_function__``
    called from there and cache it without a guard on ``func``: the constant answer of one
    call (``q.is_nested`` -> False) was served to the next (``q.dim()`` -> False; seen as
    flex attention's "Expected query, key, and value to all be at least 2 dimensional, but
    got query.dim: False")."""
    try:
        from torch._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy
    except ImportError:  # an older Dynamo: nothing to set
        return fn
    set_code_exec_strategy(fn.__code__, FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP))
    return fn


class FunctionRouter(TorchFunctionMode):
    """The function-level half of an :class:`~.mode.EmulateMode` (see the module doc)."""

    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    @_never_a_dynamo_frame
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if torch.compiler.is_compiling():
            return func(*args, **kwargs)
        if func is _SDPA:
            out = self._sdpa(args, kwargs)
            if out is not None:
                return out
        elif getattr(func, "__name__", "") in _RNNS and _on_cpu(args):
            with ONEDNN_OFF:
                return func(*args, **kwargs)
        return func(*args, **kwargs)

    def _sdpa(self, args, kwargs) -> Optional[torch.Tensor]:
        """What the target GPU would run (sdpa_target.py), where this machine would choose
        otherwise: a fused kernel (the flash form, with dropout too) where the CPU would
        take its math path, or PyTorch's math path where the CPU would take its flash
        kernel.  None: leave the call to PyTorch (its CPU choice agrees)."""
        q, k, v, mask, p, is_causal, scale, gqa = _sdpa_args(*args, **kwargs)
        if not all(isinstance(t, torch.Tensor) for t in (q, k, v)) or q.is_nested \
                or q.dim() < 3:
            return None
        if q.shape[-3] != k.shape[-3] and not gqa:
            return None               # PyTorch's own shape error
        if p and not (0 <= p < 1):
            raise ValueError(f"scaled_dot_product_attention: dropout_p must be in [0, 1), "
                             f"got {p}")
        mode = self.mode
        plan = mode._plan("attention", q, k, "forward")
        if plan.native or q.dtype != k.dtype or k.dtype != v.dtype:
            return None
        arch = mode.policy.spec.arch if mode.policy.spec is not None else mode.policy.arch
        if q.dtype == torch.float64:
            # no GPU kernel but the math path takes fp64 (fp64 products either way); fp64
            # keeps the flash form as attention.py's gradient-check path
            if not p:
                return None
            gpu = Choice(True, "fp64 check path")
        else:
            gpu = gpu_choice(arch, q, k, v, mask, p or 0.0, bool(is_causal), bool(gqa))
        if not gpu.fused:
            if p or _cpu_fused(q, k, v, mask, is_causal, scale, gqa):
                return _math(q, k, v, mask, p or 0.0, is_causal, scale, gqa)
            return None               # PyTorch's CPU takes its math path as well
        keep = None
        if p:
            batch = torch.broadcast_shapes(q.shape[:-3], k.shape[:-3])
            shape = (*batch, q.shape[-3], q.shape[-2], k.shape[-2])
            keep = torch.rand(shape, device=q.device) >= p
        elif _cpu_fused(q, k, v, mask, is_causal, scale, gqa):
            return None               # PyTorch's CPU flash kernel: emulated by the mode
        note = "flash form" + (f", dropout_p={p}" if p else "") + f" ({gpu.kernel} on {arch})"
        return _FlashForm.apply(q, k, v, mask, keep, float(p or 0.0), bool(is_causal), scale,
                                mode, plan, note)


def _cpu_fused(q, k, v, mask, is_causal, scale, gqa) -> bool:
    """Whether PyTorch on this CPU runs its flash kernel for these arguments."""
    flash = 1      # at::SDPBackend::flash_attention
    return torch._fused_sdp_choice(q, k, v, mask, 0.0, bool(is_causal), scale=scale,
                                   enable_gqa=bool(gqa)) == flash


def _math(q, k, v, mask, p, is_causal, scale, gqa):
    """PyTorch's math path (what the GPU runs where no fused kernel applies): its products
    come to the mode as bmm (in fp32 for bf16 / fp16 inputs unless
    ``torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)``, as on the GPU)."""
    if mask is not None and mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(
            mask.logical_not(), float("-inf"))
    return torch.ops.aten._scaled_dot_product_attention_math(
        q, k, v, mask, p, bool(is_causal), None, scale=scale, enable_gqa=bool(gqa))[0]


def _on_cpu(args) -> bool:
    return bool(args) and isinstance(args[0], torch.Tensor) and args[0].device.type == "cpu"
