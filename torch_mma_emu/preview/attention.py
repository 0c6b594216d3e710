"""Scaled dot-product attention with emulated products: the flash form in one KV block.

``prod(A, B)`` is the emulated batched product returning the accumulator (fp32, or fp64 for
fp64 inputs) without rounding to the input dtype, as a flash-attention kernel keeps S and
the output accumulator in fp32.  Everything between the two products (scale, mask,
max, exp, row sums, the final division) runs natively in the accumulator type.

Forward (FlashAttention-2 with the whole KV sequence in one block):
``S = prod(Q, K^T) * scale + mask``, ``m = rowmax(S)``, ``P = exp(S - m)``,
``l = rowsum(P)``, ``O = prod(P.to(dtype), V) / l``, ``lse = m + log(l)``.
Backward (FlashAttention-2): ``P = exp(S - lse)``, ``dV = prod(P.to(dtype)^T, dO)``,
``dP = prod(dO, V^T)``, ``D = rowsum(dO * O)``, ``dS = P * (dP - D)``,
``dQ = prod(dS.to(dtype), K) * scale``, ``dK = prod(dS.to(dtype)^T, Q) * scale``.
Rows whose keys are all masked give zeros (as PyTorch's CPU kernel does).
Dropout (``keep`` mask, probability p): ``O = prod(drop(P).to(dtype), V) / l`` with
``drop(P) = where(keep, P / (1-p), 0)``; backward ``dV = prod(drop(P)^T, dO)``,
``dP = drop(prod(dO, V^T))``, the rest unchanged (FlashAttention-2 with dropout).
Grouped-query attention (fewer K/V heads) repeats K/V heads and sums their gradients.

The mode's handlers of the flash / cuDNN / CPU-flash attention ops (forward and backward)
are at the end; the memory-efficient op is sdpa_route.py's.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch

from ..ops import round_result
from .dispatch_args import bind, phase, restride
from .gemm import acc_product

__all__ = ["attention_forward", "attention_backward", "handle_forward", "handle_backward",
           "FLASH_OPS"]

Prod = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _expand_heads(q, k, v):
    hq, hk = q.shape[-3], k.shape[-3]
    if hq == hk:
        return k, v, 1
    if hq % hk:
        raise ValueError(f"attention: {hq} query heads are not a multiple of {hk} key heads")
    rep = hq // hk
    return k.repeat_interleave(rep, dim=-3), v.repeat_interleave(rep, dim=-3), rep


def _scores(q, k, mask, is_causal, scale, prod):
    S = prod(q, k.transpose(-2, -1)) * scale
    if mask is not None:
        if mask.dtype == torch.bool:
            S = S.masked_fill(~mask, float("-inf"))
        else:
            S = S + mask.to(S.dtype)
    if is_causal:
        L, Skv = S.shape[-2:]
        keep = torch.ones(L, Skv, dtype=torch.bool, device=S.device).tril()
        S = S.masked_fill(~keep, float("-inf"))
    return S


def default_scale(q: torch.Tensor, scale: Optional[float]) -> float:
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def _dropped(P, keep, p: float):
    """FlashAttention's dropout: kept probabilities scaled by 1/(1-p), the rest zero (the
    row sums l and lse stay those of the undropped P)."""
    if keep is None:
        return P
    return torch.where(keep, P * (1.0 / (1.0 - p)), torch.zeros_like(P))


def attention_forward(q, k, v, mask, is_causal: bool, scale: Optional[float], prod: Prod,
                      keep: Optional[torch.Tensor] = None, dropout_p: float = 0.0):
    """``(out in q.dtype, logsumexp in the accumulator type)``.  ``keep``: a boolean dropout
    mask of the scores' shape (None: no dropout)."""
    dtype = q.dtype
    scale = default_scale(q, scale)
    k, v, _ = _expand_heads(q, k, v)
    S = _scores(q, k, mask, is_causal, scale, prod)
    m = S.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    P = torch.exp(S - m)
    l = P.sum(dim=-1, keepdim=True)
    O = prod(_dropped(P, keep, dropout_p).to(dtype), v)
    empty = l == 0
    O = torch.where(empty, torch.zeros_like(O), O / torch.where(empty, torch.ones_like(l), l))
    lse = torch.where(empty, torch.zeros_like(l), m + torch.log(l)).squeeze(-1)
    return round_result(O, dtype), lse


def attention_backward(dO, q, k, v, O, lse, mask, is_causal: bool, scale: Optional[float],
                       prod: Prod, keep: Optional[torch.Tensor] = None, dropout_p: float = 0.0):
    """``(dQ, dK, dV, dS)`` in the input dtype (dS, the score gradient, in the accumulator
    type: the gradient of an additive mask)."""
    dtype = q.dtype
    scale = default_scale(q, scale)
    hk = k.shape[-3]
    k, v, rep = _expand_heads(q, k, v)
    S = _scores(q, k, mask, is_causal, scale, prod)
    P = torch.exp(S - lse.to(S.dtype).unsqueeze(-1))
    dO = dO.to(dtype)
    dV = prod(_dropped(P, keep, dropout_p).to(dtype).transpose(-2, -1), dO)
    dP = _dropped(prod(dO, v.transpose(-2, -1)), keep, dropout_p)
    D = (dO.to(S.dtype) * O.to(S.dtype)).sum(dim=-1, keepdim=True)
    dS = P * (dP - D)
    dSd = dS.to(dtype)
    dQ = prod(dSd, k) * scale
    dK = prod(dSd.transpose(-2, -1), q) * scale
    if rep > 1:
        dK = dK.unflatten(-3, (hk, rep)).sum(-3)
        dV = dV.unflatten(-3, (hk, rep)).sum(-3)
    return round_result(dQ, dtype), round_result(dK, dtype), round_result(dV, dtype), dS


# -- under emulate: the flash / cuDNN / CPU-flash attention ops ------------------------------
FLASH_OPS = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_cudnn_attention")


def _plan(mode, func, q, k, dropout_p, shapes):
    plan = mode.plan("attention", q, k, phase())
    if dropout_p and dropout_p > 0:
        mode.warn_once(("dropout", str(func)),
                       f"emulate: {func} with dropout_p={dropout_p} runs natively "
                       "(its random mask cannot be reproduced); use eval() or "
                       "dropout_p=0 to emulate attention", stacklevel=4)
        mode.record(func, "attention", "native", shapes, "dropout")
        return None
    if plan.native or q.dtype != k.dtype:
        mode.record(func, "attention", "native", shapes, "policy: native")
        return None
    return plan


def handle_forward(mode, func, args, kwargs):
    a = bind(func, args, kwargs)
    q, k, v = a["query"], a["key"], a["value"]
    mask = a.get("attn_mask", a.get("attn_bias"))
    plan = _plan(mode, func, q, k, a.get("dropout_p"), [q.shape, k.shape, v.shape])
    if plan is None:
        return func(*args, **kwargs)
    out, lse = attention_forward(q, k, v, mask, bool(a.get("is_causal")), a.get("scale"),
                                 acc_product(plan))
    mode.record(func, "attention", plan.label, [q.shape, k.shape, v.shape])
    lse = lse.to(torch.float32) if q.dtype != torch.float64 else lse
    return restride(_outputs(func, q, k, out, lse), func, args, kwargs)


def _outputs(func, q, k, out, lse):
    name = func.overloadpacket.__name__
    if name == "_scaled_dot_product_flash_attention_for_cpu":
        return out, lse
    i64 = dict(dtype=torch.int64)
    Lq, Lk = q.shape[-2], k.shape[-2]
    e_i = q.new_empty(0, dtype=torch.int32)
    if name == "_scaled_dot_product_flash_attention":
        return (out, lse, e_i, e_i, Lq, Lk, q.new_zeros(2, **i64), q.new_empty(0, **i64),
                q.new_empty(0))
    # _scaled_dot_product_cudnn_attention
    return (out, lse, e_i, e_i, Lq, Lk, q.new_zeros((), **i64), q.new_zeros((), **i64),
            q.new_empty(0))


def handle_backward(mode, func, args, kwargs):
    a = bind(func, args, kwargs)
    q, k, v = a["query"], a["key"], a["value"]
    mask = a.get("attn_mask", a.get("attn_bias"))
    if mask is not None and mask.numel() == 0:
        mask = None
    plan = _plan(mode, func, q, k, a.get("dropout_p"), [q.shape, k.shape, v.shape])
    if plan is None:
        return func(*args, **kwargs)
    dO = a.get("grad_out", a.get("grad_out_"))
    if dO is None:  # undefined output gradient (gradcheck's check_undefined_grad)
        return tuple(torch.zeros_like(t) for t in (q, k, v))
    dq, dk, dv, _ = attention_backward(dO, q, k, v, a["out"], a["logsumexp"], mask,
                                       bool(a.get("is_causal")), a.get("scale"),
                                       acc_product(plan))
    mode.record(func, "attention", plan.label, [q.shape, k.shape, v.shape])
    return restride((dq, dk, dv), func, args, kwargs)
