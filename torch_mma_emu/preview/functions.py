"""Routing above autograd: a ``TorchFunctionMode`` that :func:`emulate` enters next to its
dispatch mode, for the calls whose products would otherwise stay native or be emulated
in the wrong form.

* ``torch.lstm`` / ``gru`` / ``rnn_tanh`` / ``rnn_relu`` (what ``nn.LSTM`` / ``nn.GRU`` /
  ``nn.RNN`` call): on CPU in fp32 / bf16 PyTorch runs them as one oneDNN kernel
  (``mkldnn_rnn_layer``, backward ``mkldnn_rnn_layer_backward``) whose products never reach
  a dispatch mode.  The call runs with oneDNN off (``torch.backends.mkldnn``, for the call
  only; ``patches.ONEDNN_OFF`` restores it when the last overlapping call in any thread
  ends), so PyTorch's cell-by-cell code issues ``addmm`` / ``mm`` that are routed, forward
  and backward (the backward nodes are those of that code).
* ``F.scaled_dot_product_attention``: the preview models the kernel the *target* GPU would
  run, not this CPU's choice: sdpa_route.py picks the aten op (PyTorch's math path, the
  memory-efficient attention op that the mode emulates in the flash form, or the call as it
  is), in eager code and, traced by Dynamo, in compiled code alike.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch.overrides import TorchFunctionMode

from . import aten_norms, aten_reductions, sdpa_route
from .patches import ONEDNN_OFF

__all__ = ["FunctionRouter"]

_RNNS = frozenset({"lstm", "gru", "rnn_tanh", "rnn_relu"})
_RMS_NORMS = (torch.rms_norm, torch.nn.functional.rms_norm)
_SDPA = torch._C._nn.scaled_dot_product_attention
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_PLAIN = (torch.Tensor, torch.nn.Parameter)


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
        policy = mode.policy
        self.arch = policy.spec.arch if policy.spec is not None else policy.arch
        # the dtypes whose attention the block emulates (by name: a constant for Dynamo)
        self.emulated = tuple(str(d) for d in _FLOATS if _emulates(policy, d))

    @_never_a_dynamo_frame
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if torch.compiler.is_compiling():
            # Dynamo traces this: SDPA becomes the op the target would run (decided on the
            # traced tensors, sdpa_route.py); anything else is traced as it is
            if func is _SDPA and sdpa_route.traced_route is not None:
                out = self._sdpa(args, kwargs, sdpa_route.traced_route)
                if out is not None:
                    return out
            return func(*args, **kwargs)
        if func is _SDPA:
            out = self._sdpa(args, kwargs, sdpa_route.route)
            if out is not None:
                return out
        elif func in _RMS_NORMS:
            out = aten_norms.rms_norm(self.mode, func, args, kwargs)
            if out is not None:
                return out
        elif getattr(func, "__name__", "") in _RNNS and _on_cpu(args):
            with ONEDNN_OFF:
                return func(*args, **kwargs)
        return func(*args, **kwargs)

    def _sdpa(self, args, kwargs, route) -> Optional[torch.Tensor]:
        """What the target GPU would run (sdpa_route.py); None: leave the call to PyTorch
        (its CPU choice agrees, or the arguments are PyTorch's to reject)."""
        q, k, v, mask, p, is_causal, scale, gqa = _sdpa_args(*args, **kwargs)
        if not all(type(t) in _PLAIN for t in (q, k, v)) or q.is_nested or q.dim() < 3 \
                or not (mask is None or type(mask) in _PLAIN):
            return None         # (a tensor subclass unwraps itself: its parts come back)
        if q.shape[-3] != k.shape[-3] and not gqa:
            return None               # PyTorch's own shape error
        if p and not (0 <= p < 1):
            raise ValueError(f"scaled_dot_product_attention: dropout_p must be in [0, 1), "
                             f"got {p}")
        if route is sdpa_route.route:
            with aten_reductions.parts_of_a_model():
                return route(self.arch, self.emulated, q, k, v, mask, float(p or 0.0),
                             bool(is_causal), scale, bool(gqa), self.mode)
        return route(self.arch, self.emulated, q, k, v, () if mask is None else (mask,),
                     float(p or 0.0), bool(is_causal), () if scale is None else (scale,),
                     bool(gqa))


def _emulates(policy, dtype) -> bool:
    try:
        return not policy.plan("attention", dtype, dtype).native
    except ValueError:            # no such product on the arch: the mode raises on use
        return False


def _on_cpu(args) -> bool:
    return bool(args) and isinstance(args[0], torch.Tensor) and args[0].device.type == "cpu"
