"""``flex_attention`` under ``emulate``.

Eager ``flex_attention`` reaches the mode as the higher-order operator
``torch.ops.higher_order.flex_attention``.  Its forward is emulated in the form of the GPU
kernel (Inductor's Triton flex-attention template), with the whole KV sequence in one
block, as for SDPA (attention.py):

    S    = emulated(Q, K^T) * scale                 (fp32 accumulator, not rounded)
    S'   = score_mod(S, b, h, q_idx, kv_idx)        (fp32, natively)
    S'   = where(mask_mod(b, h, q_idx, kv_idx), S', -inf) * 1.44269504   (base-2 units)
    m    = rowmax(S') (0 for fully masked rows);  P = exp2(S' - m);  l = rowsum(P)
    O    = emulated(P.to(dtype), V) / l             (l = 1 for fully masked rows)
    lse  = m + log2(l)  (base 2, what the operator returns);  max = m

with K / V heads repeated for GQA and a broadcast KV batch expanded, as PyTorch does.  The
block mask's sparsity only skips blocks whose entries ``mask_mod`` masks anyway, so it does
not change the result (a BlockMask that disagrees with its ``mask_mod`` is not modelled).
``kernel_options`` such as ``PRESCALE_QK`` are not modelled.

The backward operator (``flex_attention_backward``) runs natively, recorded and warned
about; so does flex attention compiled by Inductor, whose products are generated code that
never reaches a dispatch mode (mode.py records and warns at compile time).
"""
from __future__ import annotations

import torch

__all__ = ["flex_forward", "RCP_LN2"]

RCP_LN2 = 1.44269504        # the Triton template's constant (fp32)


def flex_forward(q, k, v, score_mod, block_mask, scale, kernel_options, score_bufs,
                 mask_bufs, prod):
    """``(out, lse (base 2), max (base 2))`` as the flex-attention operator returns them;
    ``prod(A, B)`` is the emulated product returning the fp32 accumulator."""
    from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
    from torch._higher_order_ops.flex_attention import _permute_strides
    from torch.nn.attention.flex_attention import _vmap_for_bhqkv
    G = q.size(1) // k.size(1)
    k = torch.repeat_interleave(k, G, dim=1).expand(q.size(0), -1, -1, -1)
    v = torch.repeat_interleave(v, G, dim=1).expand(q.size(0), -1, -1, -1)
    S = prod(q, k.transpose(-2, -1)) * scale
    dev = S.device
    b, h, m, n = (torch.arange(S.size(i), device=dev) for i in range(4))
    smod = _vmap_for_bhqkv(score_mod, prefix=(0,), suffix=(None,) * len(score_bufs))
    mmod = _vmap_for_bhqkv(block_mask[-1], prefix=(), suffix=(None,) * len(mask_bufs))
    with TransformGetItemToIndex():
        post = smod(S, b, h, m, n, *score_bufs).to(S.dtype)
        keep = mmod(b, h, m, n, *mask_bufs)
    post = torch.where(keep, post, torch.full((), float("-inf"), dtype=S.dtype, device=dev))
    post = post * torch.tensor(RCP_LN2, dtype=S.dtype)
    mx = post.amax(-1, keepdim=True)
    m_safe = torch.where(torch.isneginf(mx), torch.zeros_like(mx), mx)
    P = torch.exp2(post - m_safe)
    l = P.sum(-1, keepdim=True)
    acc = prod(P.to(q.dtype), v)
    l1 = torch.where(l == 0, torch.ones_like(l), l)
    out = (acc / l1).to(q.dtype)
    lse = (mx + torch.log2(l1)).squeeze(-1)
    return _permute_strides(out, q.stride()), lse, mx.squeeze(-1)
