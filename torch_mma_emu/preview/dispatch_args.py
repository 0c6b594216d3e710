"""Small helpers shared by the dispatch-mode handlers (mode.py and the op families in their
own modules: grouped.py, flex.py)."""
from __future__ import annotations

import torch

__all__ = ["bind", "phase"]


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
