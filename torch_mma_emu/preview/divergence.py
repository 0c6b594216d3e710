"""Divergence measures for model previews: errors against an fp64 run, distances between
runs in ulps, top-1 agreement of logits, and layer-output capture."""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn as nn

__all__ = ["ulp_of", "ulps_from_reference", "ulp_distance", "divergence", "top1_agreement",
           "capture", "main_tensor"]

_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def ulp_of(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of ``dtype`` numbers at the (float64) values ``ref``: ``2**(e - p + 1)``
    with ``e = floor(log2 |ref|)`` (at least the minimum normal exponent)."""
    fi = torch.finfo(dtype)
    p = int(round(-math.log2(fi.eps))) + 1
    emin = int(round(math.log2(fi.tiny)))
    _, e = torch.frexp(ref.to(torch.float64).abs())
    e = torch.clamp(e.to(torch.float64) - 1, min=emin)
    e = torch.where(ref == 0, torch.full_like(e, emin), e)
    return torch.exp2(e - p + 1)


def ulps_from_reference(x: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """``|x - ref| / ulp_x(ref)``: the error of ``x`` in units of its own dtype at the
    exact value (``ref`` is an fp64 run)."""
    diff = (x.to(torch.float64) - ref.to(torch.float64)).abs()
    return diff / ulp_of(ref, x.dtype)


def _ordered(t: torch.Tensor) -> torch.Tensor:
    n = t.element_size()
    i = t.contiguous().view(_INT[n]).to(torch.int64)
    sign = i < 0
    mag = i & ((1 << (8 * n - 1)) - 1)
    return torch.where(sign, -mag, mag)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many representable numbers lie between a and b (same dtype; 0 = same value,
    +0 and -0 included); NaN anywhere gives a large distance."""
    if a.dtype != b.dtype:
        raise TypeError(f"ulp_distance: dtypes differ ({a.dtype} vs {b.dtype})")
    d = (_ordered(a) - _ordered(b)).abs()
    nan = torch.isnan(a) | torch.isnan(b)
    both = torch.isnan(a) & torch.isnan(b)
    return torch.where(nan & ~both, torch.full_like(d, 1 << 62), torch.where(both, 0, d))


def divergence(x: torch.Tensor, ref: torch.Tensor) -> dict:
    """max |x - ref|, max and median error in ulps of x's dtype, relative L2 error."""
    xd, rd = x.to(torch.float64), ref.to(torch.float64)
    u = ulps_from_reference(x, ref)
    return dict(max_abs=float((xd - rd).abs().max()), max_ulp=float(u.max()),
                median_ulp=float(u.median()),
                rel_l2=float((xd - rd).norm() / rd.norm().clamp_min(1e-300)))


def top1_agreement(a: torch.Tensor, b: torch.Tensor) -> float:
    """Fraction of positions whose argmax over the last dim agrees."""
    return float((a.argmax(-1) == b.argmax(-1)).to(torch.float64).mean())


def capture(model: nn.Module, layers: Sequence[str], *inputs) -> dict:
    """Run ``model(*inputs)`` (no grad) and return ``{layer name: output}`` for ``layers``
    plus ``"output"``."""
    mods = dict(model.named_modules())
    missing = [n for n in layers if n not in mods]
    if missing:
        raise ValueError(f"capture: no modules named {missing}; available: "
                         f"{', '.join(list(mods)[:20])}...")
    got: dict = {}
    hooks = []
    for name in layers:
        def hook(_m, _i, out, name=name):
            got[name] = main_tensor(out, f"layer {name}").detach()
        hooks.append(mods[name].register_forward_hook(hook))
    try:
        with torch.no_grad():
            out = model(*inputs)
    finally:
        for h in hooks:
            h.remove()
    got["output"] = main_tensor(out, "the model").detach()
    return got


_MAIN_KEYS = ("logits", "last_hidden_state", "prediction_logits", "sample")


def main_tensor(out, what: str = "output") -> torch.Tensor:
    """The tensor a layer or model output stands for: the tensor itself; of a tuple / list,
    the first tensor; of a dict (transformers' ``ModelOutput`` is one), ``logits``, else
    ``last_hidden_state``, else its first tensor value."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        for key in _MAIN_KEYS:
            if isinstance(out.get(key), torch.Tensor):
                return out[key]
        items = list(out.values())
    elif isinstance(out, (tuple, list)):
        items = list(out)
    else:
        items = []
    for v in items:
        if isinstance(v, (torch.Tensor, dict, tuple, list)):
            try:
                return main_tensor(v, what)
            except TypeError:
                continue
    raise TypeError(f"capture: {what} returned {type(out).__name__}, which holds no tensor "
                    "to compare")
