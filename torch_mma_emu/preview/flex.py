"""``flex_attention`` under ``emulate``: forward and backward in the GPU kernels' form.

Flex attention reaches the mode as the higher-order operators
``torch.ops.higher_order.flex_attention`` and ``flex_attention_backward`` (eager, compiled
with ``aot_eager``, and compiled with Inductor while a block is open: patches.py).  Both
are emulated in the form of Inductor's Triton templates (``flex_attention.py.jinja``,
``flex_backwards.py.jinja``) with the whole sequence in one block, as for SDPA
(attention.py).  ``prod(A, B)`` is the emulated product returning the fp32 accumulator.

Forward::

    S    = prod(Q, K^T) * scale                 (fp32, not rounded)
    S'   = score_mod(S, b, h, q_idx, kv_idx)        (fp32, natively)
    S'   = where(mask_mod(b, h, q_idx, kv_idx), S', -inf) * 1.44269504   (base-2 units)
    m    = rowmax(S') (0 for fully masked rows);  P = exp2(S' - m);  l = rowsum(P)
    O    = prod(P.to(dtype), V) / l             (l = 1 for fully masked rows)
    lse  = m + log2(l)  (base 2, what the operator returns);  max = m

Backward (the dQ and the dK / dV kernels; ``D`` is Inductor's preprocessing step)::

    P    = exp2(S' - lse)                   (lse = 0 for fully masked rows)
    D    = rowsum(O * dO) rounded to dtype, minus dlse / ln 2 when lse has a gradient
    dS   = P * (prod(dO, V^T) - D);   dS = where(mask, joint(S, dS), 0).to(dtype)
    dQ   = prod(dS, K) * scale
    dK   = prod(dS^T, Q) * scale,  dV = prod(P.to(dtype)^T, dO)

``joint`` is the gradient of ``score_mod`` (the joint graph PyTorch builds; it also gives
the gradients of tensors ``score_mod`` captures, computed natively from the same ``dS``: the
kernel adds them atomically, in an order that is not modelled).  With fewer K / V heads
(GQA) the kernel accumulates one K / V head's gradient over its query heads in one fp32
accumulator: here one product over the concatenated query positions.  A K / V batch of 1
broadcast over the query batch: per-batch gradients rounded, then summed (as Inductor does).
The block mask's sparsity only skips blocks whose entries ``mask_mod`` masks anyway, so it
does not change the result (a BlockMask that disagrees with its ``mask_mod`` is not
modelled).  ``kernel_options`` such as ``PRESCALE_QK`` are not modelled.
"""
from __future__ import annotations

import math

import torch

from .dispatch_args import phase
from .gemm import acc_product

__all__ = ["flex_forward", "flex_backward", "HANDLERS", "RCP_LN2"]

RCP_LN2 = 1.44269504        # the Triton templates' constant (fp32)
_FWD = ("query", "key", "value", "score_mod", "block_mask", "scale", "kernel_options",
        "score_mod_other_buffers", "mask_mod_other_buffers")
_BWD = ("query", "key", "value", "out", "logsumexp", "grad_out", "grad_logsumexp",
        "fw_graph", "joint_graph", "block_mask", "scale", "kernel_options",
        "score_mod_other_buffers", "mask_mod_other_buffers")


def _per_query_head(q, k, v):
    """K / V with one head per query head and the query's batch (what each query head
    reads)."""
    G = q.size(1) // k.size(1)
    k = torch.repeat_interleave(k, G, dim=1).expand(q.size(0), -1, -1, -1)
    v = torch.repeat_interleave(v, G, dim=1).expand(q.size(0), -1, -1, -1)
    return k, v


def _scores(q, k, score_mod, block_mask, scale, score_bufs, mask_bufs, prod):
    """``(S, S' in base-2 units, keep)``: the pre-mod scores, the modified and masked
    scores times 1/ln 2, and the mask."""
    from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
    from torch.nn.attention.flex_attention import _vmap_for_bhqkv
    S = prod(q, k.transpose(-2, -1)) * scale
    dev = S.device
    b, h, m, n = (torch.arange(S.size(i), device=dev) for i in range(4))
    smod = _vmap_for_bhqkv(score_mod, prefix=(0,), suffix=(None,) * len(score_bufs))
    mmod = _vmap_for_bhqkv(block_mask[-1], prefix=(), suffix=(None,) * len(mask_bufs))
    with TransformGetItemToIndex():
        post = smod(S, b, h, m, n, *score_bufs).to(S.dtype)
        keep = mmod(b, h, m, n, *mask_bufs)
    post = torch.where(keep, post, torch.full((), float("-inf"), dtype=S.dtype, device=dev))
    return S, post * torch.tensor(RCP_LN2, dtype=S.dtype), keep


def flex_forward(q, k, v, score_mod, block_mask, scale, kernel_options, score_bufs,
                 mask_bufs, prod):
    """``(out, lse (base 2), max (base 2))`` as the flex-attention operator returns them."""
    from torch._higher_order_ops.flex_attention import _permute_strides
    k, v = _per_query_head(q, k, v)
    _, post, _ = _scores(q, k, score_mod, block_mask, scale, score_bufs, mask_bufs, prod)
    mx = post.amax(-1, keepdim=True)
    m_safe = torch.where(torch.isneginf(mx), torch.zeros_like(mx), mx)
    P = torch.exp2(post - m_safe)
    l = P.sum(-1, keepdim=True)
    acc = prod(P.to(q.dtype), v)
    l1 = torch.where(l == 0, torch.ones_like(l), l)
    out = (acc / l1).to(q.dtype)
    lse = (mx + torch.log2(l1)).squeeze(-1)
    return _permute_strides(out, q.stride()), lse, mx.squeeze(-1)


def _grouped(t, hkv):
    """(B, Hq, L, E) -> (B, Hkv, G * L, E): a K / V head's query heads one after another."""
    B, Hq, L, E = t.shape
    return t.reshape(B, hkv, (Hq // hkv) * L, E)


def flex_backward(q, k, v, out, lse, dO, dlse, fw_graph, joint_graph, block_mask, scale,
                  score_bufs, mask_bufs, prod):
    """``(dQ, dK, dV, gradients of score_mod's captured tensors)`` as the backward operator
    returns them."""
    from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
    from torch._higher_order_ops.flex_attention import _permute_strides, create_fw_bw_graph
    from torch.nn.attention.flex_attention import _vmap_for_bhqkv
    dtype = q.dtype
    if joint_graph is None:
        example = (q.new_zeros((), requires_grad=True),) + tuple(
            q.new_zeros((), dtype=torch.int) for _ in range(4))
        _, joint_graph = create_fw_bw_graph(fw_graph, example, score_bufs)
    if dO is None:
        dO = torch.zeros_like(out)
    hkv, bkv = k.size(1), k.size(0)
    kx, vx = _per_query_head(q, k, v)
    S, post, keep = _scores(q, kx, fw_graph, block_mask, scale, score_bufs, mask_bufs, prod)
    lse2 = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse).to(S.dtype)
    P = torch.exp2(post - lse2.unsqueeze(-1))
    D = (out.to(S.dtype) * dO.to(S.dtype)).sum(-1).to(dtype).to(S.dtype)
    if dlse is not None:
        D = D - dlse.to(S.dtype) * (1 / math.log(2))
    dS = P * (prod(dO, vx.transpose(-2, -1)) - D.unsqueeze(-1))
    nb = len(score_bufs)
    joint = _vmap_for_bhqkv(joint_graph, prefix=(0,), suffix=(0,) + (None,) * nb,
                            out_dims=[0, None, None, None, None] + [None] * nb)
    b, h, m, n = (torch.arange(S.size(i), device=S.device) for i in range(4))
    with TransformGetItemToIndex():
        grad_scores, _, _, _, _, *grad_bufs = joint(S, b, h, m, n, dS, *score_bufs)
    dS = torch.where(keep, grad_scores.to(S.dtype), torch.zeros((), dtype=S.dtype)).to(dtype)
    dQ = (prod(dS, kx) * scale).to(dtype)
    dK = (prod(_grouped(dS, hkv).transpose(-2, -1), _grouped(q, hkv)) * scale).to(dtype)
    dV = prod(_grouped(P.to(dtype), hkv).transpose(-2, -1), _grouped(dO.to(dtype), hkv))
    dV = dV.to(dtype)
    if bkv != q.size(0):           # K / V broadcast over the query batch
        dK, dV = dK.sum(0, keepdim=True), dV.sum(0, keepdim=True)
    buf_grads = tuple(torch.empty_like(buf, memory_format=torch.contiguous_format).copy_(g)
                      if isinstance(buf, torch.Tensor) and buf.requires_grad else None
                      for buf, g in zip(score_bufs, grad_bufs))
    return (_permute_strides(dQ, q.stride()), _permute_strides(dK, k.stride()),
            _permute_strides(dV, v.stride()), buf_grads)


def _plan(mode, func, q, k, v, shapes):
    """The plan, or None (recorded) where the policy leaves attention native."""
    plan = mode.plan("attention", q, k, phase())
    if plan.native or not (q.dtype == k.dtype == v.dtype):
        mode.record(func, "attention", "native", shapes, "policy: native")
        return None
    return plan


def _handler(names: tuple, run, note: str):
    """A mode handler: binds ``names`` (the operator's positional arguments), returns
    ``run(a, q, k, v, prod, buffers)`` emulated, or calls the operator natively where the
    policy says so; records the call."""
    def handle(mode, func, args, kwargs):
        a = dict(zip(names, args), **kwargs)
        q, k, v = a["query"], a["key"], a["value"]
        shapes = [q.shape, k.shape, v.shape]
        plan = _plan(mode, func, q, k, v, shapes)
        if plan is None:
            return func(*args, **kwargs)
        buffers = (tuple(a.get("score_mod_other_buffers") or ()),
                   tuple(a.get("mask_mod_other_buffers") or ()))
        out = run(a, q, k, v, acc_product(plan), buffers)
        mode.record(func, "attention", plan.label, shapes, note)
        return out
    return handle


handle_forward = _handler(
    _FWD, lambda a, q, k, v, prod, bufs: flex_forward(
        q, k, v, a["score_mod"], a["block_mask"], a["scale"], a.get("kernel_options") or {},
        *bufs, prod),
    "flex attention (Triton form)")
handle_backward = _handler(
    _BWD, lambda a, q, k, v, prod, bufs: flex_backward(
        q, k, v, a["out"], a["logsumexp"], a["grad_out"], a.get("grad_logsumexp"),
        a["fw_graph"], a["joint_graph"], a["block_mask"], a["scale"], *bufs, prod),
    "flex attention backward (Triton form)")

HANDLERS = {"flex_attention": handle_forward, "flex_attention_backward": handle_backward}
