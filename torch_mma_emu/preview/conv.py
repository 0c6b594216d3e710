"""Convolutions as matrix products (im2col), forward and backward, for any spatial rank.

Every function takes ``mm(A, B, C=None)``: the emulated product (with its bias handling)
to use.  The reduction order is the im2col order ``(input channel, kernel position)`` for
the forward pass and the data gradient, and ``(batch, output position)`` for the weight
gradient.  cuDNN / MIOpen pick their own orders per algorithm; the products here are exact
emulations of one matrix-unit GEMM per convolution, not of a particular library kernel.

* forward:   ``y[n, o, l] = sum_{c, k} W[o, c, k] * cols(x)[n, c k, l]``;
* transposed convolution and the data gradient: zero insertion (stride), padding and a
  forward convolution with the flipped, channel-swapped kernel (the implicit-GEMM dgrad);
* weight gradient: ``dW[o, c k] = sum_{n, l} dy[n, o, l] * cols(x)[n, c k, l]``.

The mode's handlers of ``aten.convolution`` and ``convolution_backward`` are at the end.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F

from ..ops import round_result
from .dispatch_args import bind, phase, restride
from .gemm import mm_product

__all__ = ["im2col", "check_conv", "conv_forward", "conv_transpose", "conv_wgrad",
           "conv_backward", "handle_conv", "handle_conv_backward"]

MM = Callable[..., torch.Tensor]


def _pad_list(left: Sequence[int], right: Sequence[int]) -> list[int]:
    pads = []
    for lo, hi in zip(reversed(list(left)), reversed(list(right))):
        pads += [int(lo), int(hi)]
    return pads


def im2col(x: torch.Tensor, kernel, stride, padding, dilation):
    """``(cols, out_spatial)``: cols (N, C * prod(kernel), L) in (c, k1, k2, ...) order."""
    nd = len(kernel)
    N, C = x.shape[:2]
    if any(padding):
        x = F.pad(x, _pad_list(padding, padding))
    cols = x
    for d in range(nd):
        span = dilation[d] * (kernel[d] - 1) + 1
        if cols.shape[2 + d] < span:
            raise ValueError(f"convolution: kernel span {span} exceeds the padded input "
                             f"size {cols.shape[2 + d]} along spatial dim {d}")
        cols = cols.unfold(2 + d, span, stride[d])
    if any(dl != 1 for dl in dilation):
        idx = (slice(None),) * (2 + nd) + tuple(slice(None, None, dl) for dl in dilation)
        cols = cols[idx]
    out_sp = tuple(cols.shape[2:2 + nd])
    perm = [0, 1] + list(range(2 + nd, 2 + 2 * nd)) + list(range(2, 2 + nd))
    cols = cols.permute(perm).reshape(N, C * math.prod(kernel), math.prod(out_sp))
    return cols, out_sp


_HALF = (torch.float16, torch.bfloat16)   # kept in fp32 by eager adds, rounded once


def check_conv(x, w, groups: int, transposed: bool = False) -> None:
    """PyTorch's shape rules for a convolution, as clear ValueErrors."""
    if x.dim() != w.dim() or x.dim() not in (3, 4, 5):
        raise ValueError(f"convolution: input of shape {tuple(x.shape)} and weight of shape "
                         f"{tuple(w.shape)}: expected a batched {w.dim() - 2}-d input "
                         f"(N, C, {', '.join('*' * (w.dim() - 2))})")
    want = w.shape[0] if transposed else w.shape[1] * groups
    if x.shape[1] != want:
        raise ValueError(f"convolution: weight of shape {tuple(w.shape)} with groups={groups} "
                         f"expects {want} input channels, got {x.shape[1]}")


def conv_forward(x, w, stride, padding, dilation, groups: int, mm: MM,
                 bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``F.conv{1,2,3}d(x, w, bias, ...)`` with ``mm`` for the product.  The bias is added
    after the product is rounded to the output dtype, as PyTorch does after cuDNN / MIOpen
    (``output.add_(bias)``), not fused into the accumulator."""
    check_conv(x, w, groups)
    N, C = x.shape[:2]
    Cout, kernel = w.shape[0], tuple(w.shape[2:])
    G = groups
    cols, out_sp = im2col(x, kernel, stride, padding, dilation)
    Kg = (C // G) * math.prod(kernel)
    cols = cols.reshape(N, G, Kg, cols.shape[-1])
    wm = w.reshape(G, Cout // G, Kg)
    y = mm(wm, cols).reshape(N, Cout, *out_sp)           # (N, G, Cout/G, L) -> (N, Cout, ...)
    if bias is not None:   # computed in fp32 and rounded once, as eager bf16 / fp16 adds do
        b = bias.reshape(1, Cout, *([1] * len(out_sp)))
        y = round_result(y.float() + b.float(), y.dtype) if y.dtype in _HALF else y + b.to(y.dtype)
    return y


def conv_transpose(x, w, stride, padding, output_padding, dilation, groups: int, mm: MM,
                   bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``F.conv_transpose{1,2,3}d``: w is (Cin, Cout/G, *k)."""
    check_conv(x, w, groups, transposed=True)
    nd = x.dim() - 2
    N, Cin = x.shape[:2]
    kernel = tuple(w.shape[2:])
    G = groups
    if any(s != 1 for s in stride):
        up = [(n - 1) * s + 1 for n, s in zip(x.shape[2:], stride)]
        xu = x.new_zeros((N, Cin, *up))
        xu[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in stride)] = x
        x = xu
    left = [d * (k - 1) - p for d, k, p in zip(dilation, kernel, padding)]
    right = [lo + op for lo, op in zip(left, output_padding)]
    if any(left) or any(right):
        x = F.pad(x, _pad_list(left, right))
    co = w.shape[1]
    weq = (w.reshape(G, Cin // G, co, *kernel).transpose(1, 2)
           .flip(list(range(3, 3 + nd))).reshape(G * co, Cin // G, *kernel))
    return conv_forward(x, weq, (1,) * nd, (0,) * nd, dilation, G, mm, bias)


def conv_wgrad(x, grad_y, w_shape, stride, padding, dilation, groups: int, mm: MM,
               crop: bool = False):
    """Weight gradient of a forward convolution: (Cout, Cin/G, *k).  ``crop``: the
    transposed case, where output_padding can give x positions past grad_y's (they meet
    no output, so they are dropped)."""
    N, C = x.shape[:2]
    Cout, kernel = w_shape[0], tuple(w_shape[2:])
    G = groups
    cols, out_sp = im2col(x, kernel, stride, padding, dilation)
    want = tuple(grad_y.shape[2:])
    if crop and tuple(out_sp) != want and all(o >= g for o, g in zip(out_sp, want)):
        idx = (slice(None), slice(None)) + tuple(slice(0, g) for g in want)
        cols = cols.reshape(N, cols.shape[1], *out_sp)[idx].reshape(N, cols.shape[1], -1)
        out_sp = want
    L = cols.shape[-1]
    if tuple(out_sp) != want:
        raise ValueError(f"convolution_backward: grad_output spatial shape "
                         f"{want} does not match {out_sp}")
    Kg = (C // G) * math.prod(kernel)
    a = grad_y.reshape(N, G, Cout // G, L).permute(1, 2, 0, 3).reshape(G, Cout // G, N * L)
    b = cols.reshape(N, G, Kg, L).permute(1, 0, 3, 2).reshape(G, N * L, Kg)
    return mm(a, b).reshape(w_shape)


def conv_backward(grad_y, x, w, stride, padding, dilation, transposed: bool, output_padding,
                  groups: int, output_mask, mm: MM):
    """``aten.convolution_backward``: (grad_input, grad_weight, grad_bias) or None each."""
    nd = x.dim() - 2
    gx = gw = gb = None
    if transposed:
        if output_mask[0]:    # output_padding can add positions past x's: drop them
            gx = conv_forward(grad_y, w, stride, padding, dilation, groups, mm)
            gx = gx[(slice(None), slice(None)) + tuple(slice(0, n) for n in x.shape[2:])]
        if output_mask[1]:
            gw = conv_wgrad(grad_y, x, tuple(w.shape), stride, padding, dilation, groups, mm,
                            crop=True)
    else:
        if output_mask[0]:
            kernel = w.shape[2:]
            op = [xs - ((gs - 1) * s - 2 * p + d * (k - 1) + 1) for xs, gs, s, p, d, k in
                  zip(x.shape[2:], grad_y.shape[2:], stride, padding, dilation, kernel)]
            gx = conv_transpose(grad_y, w, stride, padding, op, dilation, groups, mm)
        if output_mask[1]:
            gw = conv_wgrad(x, grad_y, tuple(w.shape), stride, padding, dilation, groups, mm)
    if output_mask[2]:
        gb = grad_y.sum(dim=[0] + list(range(2, 2 + nd)))
    return gx, gw, gb


# -- under emulate: aten.convolution and convolution_backward ------------------------------
def handle_conv(mode, func, args, kwargs):
    a = bind(func, args, kwargs)
    x, w, bias = a["input"], a["weight"], a["bias"]
    plan = mode.plan("conv", x, w, phase())
    if plan.native or x.dtype != w.dtype or x.dim() < 3:
        mode.record(func, "conv", "native", [x.shape, w.shape], "policy: native")
        return func(*args, **kwargs)
    mm = mm_product(plan, mode.policy.bias, x.dtype)
    st, pad, dil = list(a["stride"]), list(a["padding"]), list(a["dilation"])
    if a["transposed"]:
        y = conv_transpose(x, w, st, pad, list(a["output_padding"]), dil, a["groups"], mm,
                           bias)
    else:
        y = conv_forward(x, w, st, pad, dil, a["groups"], mm, bias)
    mode.record(func, "conv", plan.label, [x.shape, w.shape])
    if a.get("out") is not None:
        a["out"].resize_(y.shape)
        return a["out"].copy_(y)
    return restride(y, func, args, kwargs)


def handle_conv_backward(mode, func, args, kwargs):
    a = bind(func, args, kwargs)
    gy, x, w = a["grad_output"], a["input"], a["weight"]
    plan = mode.plan("conv", gy, w, "backward")
    if plan.native or gy.dtype != w.dtype:
        mode.record(func, "conv", "native", [gy.shape, w.shape], "policy: native")
        return func(*args, **kwargs)
    mm = mm_product(plan, mode.policy.bias, gy.dtype)
    gx, gw, gb = conv_backward(gy, x, w, list(a["stride"]), list(a["padding"]),
                               list(a["dilation"]), a["transposed"],
                               list(a["output_padding"]), a["groups"], a["output_mask"], mm)
    mode.record(func, "conv", plan.label, [gy.shape, x.shape, w.shape])
    return restride((gx, gw, gb), func, args, kwargs)
