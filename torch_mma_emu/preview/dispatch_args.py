"""Small helpers shared by the dispatch-mode handlers (the op families in their own modules:
gemm.py, conv.py, attention.py, scaled.py, grouped.py, flex.py, sdpa_route.py; mode.py's
routing table points to them)."""
from __future__ import annotations

import torch

__all__ = ["bind", "phase", "restride"]


def bind(func, args, kwargs) -> dict:
    """``{argument name: value}`` of one aten call, defaults filled in."""
    out = {}
    for i, a in enumerate(func._schema.arguments):
        if i < len(args):
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            out[a.name] = None
    return out


def phase() -> str:
    """``backward`` while an autograd node runs, else ``forward``."""
    return "backward" if torch._C._current_autograd_node() is not None else "forward"


def _fake(fm, t):
    if isinstance(t, torch.Tensor):
        return fm.from_tensor(t)
    if isinstance(t, (list, tuple)):
        return type(t)(_fake(fm, u) for u in t)
    return t


def restride(result, func, args, kwargs):
    """Give the outputs the strides of PyTorch's own kernel (as its fake-tensor rule says):
    views taken by the caller and Inductor's stride assertions rely on them."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    try:
        with FakeTensorMode(allow_non_fake_inputs=True) as fm:
            ref = func(*_fake(fm, args), **{k: _fake(fm, v) for k, v in kwargs.items()})
    except Exception:  # no fake rule: keep our (contiguous) layout
        return result
    single = isinstance(result, torch.Tensor)
    outs, refs = ([result], [ref]) if single else (list(result), list(ref))
    for i, (o, r) in enumerate(zip(outs, refs)):
        if (isinstance(o, torch.Tensor) and isinstance(r, torch.Tensor)
                and o.shape == r.shape and o.stride() != r.stride()):
            outs[i] = torch.empty_strided(r.shape, r.stride(), dtype=o.dtype,
                                          device=o.device).copy_(o)
    return outs[0] if single else tuple(outs)
