"""Routing above autograd: a ``TorchFunctionMode`` that :func:`emulate` enters next to its
dispatch mode, for the two calls whose products would otherwise stay native or be
emulated in the wrong form.

* ``torch.lstm`` / ``gru`` / ``rnn_tanh`` / ``rnn_relu`` (what ``nn.LSTM`` / ``nn.GRU`` /
  ``nn.RNN`` call): on CPU in fp32 / bf16 PyTorch runs them as one oneDNN kernel
  (``mkldnn_rnn_layer``, backward ``mkldnn_rnn_layer_backward``) whose products never reach
  a dispatch mode.  The call runs with oneDNN off (``torch.backends.mkldnn``, for the call
  only; a shared count restores it when the last overlapping call in any thread ends), so
  PyTorch's cell-by-cell code issues ``addmm`` / ``mm`` that are routed, forward
  and backward (the backward nodes are those of that code).
* ``F.scaled_dot_product_attention`` with ``dropout_p > 0``: PyTorch's CPU flash kernel has
  no dropout, so it would run the math path (products upcast to fp32 on CPU, unlike a
  GPU's flash kernel).  It runs here as the flash form of ``attention.py`` with a dropout
  mask drawn from PyTorch's generator (a GPU's Philox masks cannot be reproduced: the bits
  match a GPU's only up to which entries are dropped), forward and backward emulated.
"""
from __future__ import annotations

import threading
from typing import Optional

import torch
from torch.overrides import TorchFunctionMode

from .attention import attention_backward, attention_forward

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


class _DropoutAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, keep, p, is_causal, scale, mode, plan):
        prod = mode._prod_fn(plan)
        out, lse = attention_forward(q, k, v, mask, is_causal, scale, prod, keep, p)
        ctx.save_for_backward(q, k, v, out, lse, keep)
        ctx.mask, ctx.args = mask, (p, is_causal, scale, mode, plan)
        mode._note("scaled_dot_product_attention", "attention", plan.label,
                   [q.shape, k.shape, v.shape], f"flash form, dropout_p={p}")
        return out

    @staticmethod
    def backward(ctx, dO):
        q, k, v, out, lse, keep = ctx.saved_tensors
        p, is_causal, scale, mode, plan = ctx.args
        dq, dk, dv, _ = attention_backward(dO, q, k, v, out, lse, ctx.mask, is_causal, scale,
                                           mode._prod_fn(plan), keep, p)
        mode._note("scaled_dot_product_attention", "attention", plan.label,
                   [q.shape, k.shape, v.shape], f"flash form, dropout_p={p}")
        return dq, dk, dv, None, None, None, None, None, None, None


def _sdpa_args(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
               scale=None, enable_gqa=False):
    return query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa


class FunctionRouter(TorchFunctionMode):
    """The function-level half of an :class:`~.mode.EmulateMode` (see the module doc)."""

    def __init__(self, mode):
        super().__init__()
        self.mode = mode

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
        q, k, v, mask, p, is_causal, scale, gqa = _sdpa_args(*args, **kwargs)
        if not p or p <= 0 or q.is_nested or q.dim() < 3:
            return None
        if q.shape[-3] != k.shape[-3] and not gqa:
            return None               # PyTorch's own shape error
        if not (0 < p < 1):
            raise ValueError(f"scaled_dot_product_attention: dropout_p must be in [0, 1), "
                             f"got {p}")
        mode = self.mode
        plan = mode._plan("attention", q, k, "forward")
        if plan.native or q.dtype != k.dtype or k.dtype != v.dtype:
            return None
        batch = torch.broadcast_shapes(q.shape[:-3], k.shape[:-3])
        shape = (*batch, q.shape[-3], q.shape[-2], k.shape[-2])
        keep = torch.rand(shape, device=q.device) >= p
        return _DropoutAttention.apply(q, k, v, mask, keep, float(p), bool(is_causal), scale,
                                       mode, plan)


def _on_cpu(args) -> bool:
    return bool(args) and isinstance(args[0], torch.Tensor) and args[0].device.type == "cpu"
