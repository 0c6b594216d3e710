"""``F.scaled_dot_product_attention`` under ``emulate``: the kernel the *target* GPU would run
(sdpa_target.py), eager and under ``torch.compile`` alike.

The router (functions.py) sends each SDPA call through :func:`route`, which calls the aten
op of the target's choice, whatever this CPU would choose; the dispatch mode emulates it:

* the target has no fused kernel for the call (bf16 on sm70 / sm75, MI100, 3-D inputs, ...):
  PyTorch's math path, ``_scaled_dot_product_attention_math`` (its products reach the mode
  as ``bmm``, in fp32 for bf16 / fp16 inputs as on the GPU);
* the target has a fused kernel (flash, memory-efficient or cuDNN: all emulated in the same
  flash form of attention.py): the memory-efficient attention op
  ``_scaled_dot_product_efficient_attention``, which takes a mask with a gradient, any value
  head dim and dropout (:func:`handle_forward` / :func:`handle_backward`; this CPU has no
  kernel for it).  This CPU would take its fp32 math path for a mask that requires grad, a
  value head dim unlike the query's or dropout, and its own flash kernel otherwise; neither
  matters.
* fp64 (no GPU kernel takes it: attention.py's gradient-check path), dtypes the block leaves
  native, nested tensors: the call goes on to PyTorch.

Under ``torch.compile`` the router, which Dynamo traces, calls :data:`traced_route`: the same
function marked ``nonstrict_trace``, so that the decision is taken on the traced tensors (their
dtype, shapes, ``requires_grad``, the grad mode, PyTorch's SDPA switches) and the chosen op
is what the graph holds; the op is the same in eager and compiled code, so are the bits.

Dropout in the efficient op: the keep mask is drawn from a generator seeded by a number
drawn from PyTorch's default generator (so ``torch.manual_seed`` fixes it), returned as the
op's ``philox_seed`` and drawn again in the backward.  A GPU's Philox masks cannot be
reproduced: the bits match a GPU's only up to which entries are dropped.  A grouped-query
call (fewer K / V heads) has its K / V heads repeated for the efficient op (which has no
GQA), so their gradients are summed over the query heads after rounding, as FlashAttention-2
does.  The backward of the efficient op has no CPU kernel: eager code carries the mode on
its autograd node (``.backward()`` after the block is emulated too); compiled code must
run ``.backward()`` inside the block (PyTorch raises outside it).
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from ..registry import ARCHS
from .attention import attention_backward, attention_forward
from .dispatch_args import bind, restride
from .gemm import acc_product
from .sdpa_target import SM, Choice, gpu_choice

__all__ = ["route", "traced_route", "handle_forward", "handle_backward"]

aten = torch.ops.aten
_MATH, _EFFICIENT = "math", "efficient"


def decide(arch: str, q, k, v, mask, p: float, is_causal: bool, gqa: bool) -> Optional[str]:
    """``"math"``, ``"efficient"`` or None (leave the call to PyTorch): what the target runs,
    whatever this CPU would choose."""
    if q.dtype == torch.float64:
        # no GPU kernel takes fp64 and this CPU's choice is kept: fp64 is attention.py's
        # gradient-check path (the flash form, with dropout too)
        return _EFFICIENT if p else None
    return _EFFICIENT if gpu_choice(arch, q, k, v, mask, p, is_causal, gqa).fused else _MATH


def route(arch: str, emulated: tuple, q, k, v, mask, p: float, is_causal: bool, scale,
          gqa: bool, mode=None) -> Optional[torch.Tensor]:
    """The call as the target GPU would run it, or None: leave it to PyTorch (fp64 without
    dropout, a dtype the block does not emulate).  ``emulated``: the names of the dtypes
    whose attention the block emulates; ``mode``: the emulating mode in eager code (None
    while traced)."""
    if str(q.dtype) not in emulated or not (q.dtype == k.dtype == v.dtype):
        return None
    choice = decide(arch, q, k, v, mask, p, is_causal, gqa)
    if choice == _MATH:
        return _math(q, k, v, mask, p, is_causal, scale, gqa)
    if choice == _EFFICIENT:
        if q.shape[-3] != k.shape[-3]:
            G = q.shape[-3] // k.shape[-3]
            k, v = k.repeat_interleave(G, dim=-3), v.repeat_interleave(G, dim=-3)
        if mode is not None:
            return _Efficient.apply(q, k, v, mask, p, is_causal, scale, mode)
        grad = torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (q, k, v, mask))
        return aten._scaled_dot_product_efficient_attention(
            q, k, v, mask, grad, p, is_causal, scale=scale)[0]
    return None


class _Efficient(torch.autograd.Function):
    """The efficient-attention op and its backward, emulated by ``mode``'s handlers (below)
    with the op's own autograd formula, in eager code: the backward is emulated also where
    ``.backward()`` runs after the block has closed (PyTorch has no CPU kernel for it)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, p, is_causal, scale, mode):
        with mode.handler_call():
            out, lse, seed, offset = handle_forward(
                mode, aten._scaled_dot_product_efficient_attention.default,
                (q, k, v, mask, True, p, is_causal), {"scale": scale})
        ctx.save_for_backward(q, k, v, out, lse, seed, offset)
        ctx.mask, ctx.args = mask, (p, is_causal, scale, mode)
        return out

    @staticmethod
    def backward(ctx, dO):
        q, k, v, out, lse, seed, offset = ctx.saved_tensors
        p, is_causal, scale, mode = ctx.args
        need = list(ctx.needs_input_grad[:4])
        with mode.handler_call():
            dq, dk, dv, db = handle_backward(
                mode, aten._scaled_dot_product_efficient_attention_backward.default,
                (dO, q, k, v, ctx.mask, out, lse, seed, offset, p, need, is_causal),
                {"scale": scale})
        return dq, dk, dv, db, None, None, None, None


def _route_or_pytorch(arch: str, emulated: tuple, q, k, v, mask: tuple, p: float,
                      is_causal: bool, scale: tuple, gqa: bool) -> torch.Tensor:
    # (mask and scale as () or a 1-tuple: nonstrict_trace takes no None)
    mask, scale = (mask or (None,))[0], (scale or (None,))[0]
    out = route(arch, emulated, q, k, v, mask, p, is_causal, scale, gqa)
    if out is None:       # (an aten op: the router lets it pass, no second routing)
        out = aten.scaled_dot_product_attention.default(q, k, v, mask, p, is_causal,
                                                        scale=scale, enable_gqa=gqa)
    return out


_nonstrict = getattr(getattr(torch, "_dynamo", None), "nonstrict_trace", None)
# None where this PyTorch has no nonstrict_trace: compiled code keeps the CPU's choice
traced_route = _nonstrict(_route_or_pytorch) if _nonstrict is not None else None


def _math(q, k, v, mask, p, is_causal, scale, gqa):
    """PyTorch's math path (what the GPU runs where no fused kernel applies): its products
    come to the mode as bmm (in fp32 for bf16 / fp16 inputs unless
    ``torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)``, as on the GPU)."""
    if mask is not None and mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(
            mask.logical_not(), float("-inf"))
    return aten._scaled_dot_product_attention_math(
        q, k, v, mask, p, bool(is_causal), None, scale=scale, enable_gqa=bool(gqa))[0]


# -- the efficient-attention op in the mode --------------------------------------------------

def _keep(seed: int, q, k, p: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    shape = (*q.shape[:-1], k.shape[-2])
    return (torch.rand(shape, generator=g) >= p).to(q.device)


def _note(q, k, v, mask, p, is_causal, arch) -> str:
    gpu = gpu_choice(arch, q, k, v, mask, p, is_causal, False) \
        if q.dtype != torch.float64 else Choice(True, "fp64 check path")
    kernel = gpu.kernel if gpu.fused else "efficient"
    amd = arch in ARCHS and ARCHS[arch].vendor == "amd"
    where = arch if arch in SM or amd else f"{arch}, taken as sm90"
    return "flash form" + (f", dropout_p={p}" if p else "") + f" ({kernel} on {where})"


def _bias(mask):
    return None if mask is None or mask.numel() == 0 else mask     # (CUDA's "no bias")


def _arch(mode) -> str:
    return mode.policy.spec.arch if mode.policy.spec is not None else mode.policy.arch


def _operands(mode, func, args, kwargs, phase: str):
    """``(bound args, q, k, v, mask, dropout p, shapes, plan)``; plan None (recorded) where
    the policy leaves attention native."""
    a = bind(func, args, kwargs)
    q, k, v, mask = a["query"], a["key"], a["value"], _bias(a["attn_bias"])
    p = float(a["dropout_p"] or 0.0)
    shapes = [q.shape, k.shape, v.shape]
    plan = mode.plan("attention", q, k, phase)
    if plan.native or not (q.dtype == k.dtype == v.dtype):
        mode.record(func, "attention", "native", shapes, "policy: native")
        plan = None
    return a, q, k, v, mask, p, shapes, plan


def handle_forward(mode, func, args, kwargs):
    """``_scaled_dot_product_efficient_attention`` emulated: ``(out, lse, philox_seed,
    philox_offset)`` with lse padded to a multiple of 32 (or empty), as the GPU kernel
    returns them."""
    a, q, k, v, mask, p, shapes, plan = _operands(mode, func, args, kwargs, "forward")
    if plan is None:
        return func(*args, **kwargs)
    if p and not 0 < p < 1:
        raise ValueError(f"scaled_dot_product_attention: dropout_p must be in [0, 1), got {p}")
    seed = int(torch.randint(0, 2 ** 62, ())) if p else 0
    keep = _keep(seed, q, k, p) if p else None
    out, lse = attention_forward(q, k, v, mask, bool(a["is_causal"]), a["scale"],
                                 acc_product(plan), keep, p)
    L = q.shape[-2]
    width = math.ceil(L / 32) * 32 if a["compute_log_sumexp"] else 0
    # fp32 as the kernel's (fp64 keeps its lse: attention.py's gradient-check path)
    lse_out = lse.new_zeros((*lse.shape[:-1], width),
                            dtype=lse.dtype if q.dtype == torch.float64 else torch.float32)
    if width:
        lse_out[..., :L] = lse
    mode.record(func, "attention", plan.label, shapes,
               _note(q, k, v, mask, p, a["is_causal"], _arch(mode)))
    i64 = dict(dtype=torch.int64, device=q.device)
    out, lse_out = restride((out, lse_out), func, args, kwargs)
    return out, lse_out, torch.tensor(seed, **i64), torch.zeros((), **i64)


def handle_backward(mode, func, args, kwargs):
    """``_scaled_dot_product_efficient_attention_backward`` emulated (the flash form's
    backward; the mask's gradient summed to its shape)."""
    a, q, k, v, mask, p, shapes, plan = _operands(mode, func, args, kwargs, "backward")
    if plan is None:
        return func(*args, **kwargs)
    dO = a["grad_out_"]
    if dO is None:        # undefined output gradient (gradcheck's check_undefined_grad)
        return tuple(torch.zeros_like(t) for t in (q, k, v)) + (None,)
    keep = _keep(int(a["philox_seed"]), q, k, p) if p else None
    lse = a["logsumexp"][..., :q.shape[-2]]
    dq, dk, dv, dS = attention_backward(dO, q, k, v, a["out"], lse, mask,
                                        bool(a["is_causal"]), a["scale"],
                                        acc_product(plan), keep, p)
    mode.record(func, "attention", plan.label, shapes,
               _note(q, k, v, mask, p, a["is_causal"], _arch(mode)))
    db = None
    gmask = a.get("grad_input_mask") or [True] * 4
    if mask is not None and len(gmask) > 3 and gmask[3]:
        db = dS.to(mask.dtype)
        while db.dim() > mask.dim():
            db = db.sum(0)
        for i, n in enumerate(mask.shape):
            if n == 1 and db.shape[i] != 1:
                db = db.sum(i, keepdim=True)
    # (the kernel's strides: Inductor checks them; the bias gradient's rows padded to 16)
    outs = restride((dq, dk, dv) if db is None else (dq, dk, dv, db), func, args, kwargs)
    return tuple(outs) + ((None,) if db is None else ())
