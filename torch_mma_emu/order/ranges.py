"""Per-range orders: a collective (or any program that reduces a tensor's positions in
different orders) as ``[(start, stop, SumTree), ...]`` over element positions, consecutive
positions with equal trees merged.  FPRev's collective reveals hold one; the NCCL models
produce them."""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from .tree import SumTree


class Ranges(list):
    """A list of ``(start, stop, tree)`` covering ``0..numel-1`` in order."""

    @classmethod
    def of_positions(cls, trees: Iterable[SumTree]) -> "Ranges":
        """Merge one tree per position into ranges of equal trees."""
        out: list = []
        for p, t in enumerate(trees):
            if out and out[-1][2] == t:
                out[-1][1] = p + 1
            else:
                out.append([p, p + 1, t])
        return cls(tuple(r) for r in out)

    @property
    def numel(self) -> int:
        return self[-1][1] if self else 0

    def trees(self) -> list:
        """The distinct trees, in order of first appearance."""
        seen: list = []
        for _, _, t in self:
            if t not in seen:
                seen.append(t)
        return seen

    def tree_at(self, position: int) -> SumTree:
        for start, stop, t in self:
            if start <= position < stop:
                return t
        raise IndexError(f"position {position} outside 0..{self.numel - 1}")

    def to_list(self) -> list:
        """JSON-ready: ``[[start, stop, tree dict], ...]``."""
        return [[s, e, t.to_dict()] for s, e, t in self]

    @classmethod
    def from_list(cls, items: Sequence) -> "Ranges":
        out, at = [], 0
        for item in items:
            if not isinstance(item, (list, tuple)) or len(item) != 3:
                raise ValueError("a range is [start, stop, tree], got "
                                 f"{str(item)[:60]}")
            s, e, d = item
            if s != at or not isinstance(e, int) or e <= s:
                raise ValueError(f"ranges must cover the positions in order from 0; got "
                                 f"[{s}, {e}) after {at}")
            out.append((s, e, d if isinstance(d, SumTree) else SumTree.from_dict(d)))
            at = e
        return cls(out)

    def evaluate(self, x, *, dtype=None, **kw) -> np.ndarray:
        """``x``: ``(..., numel, n)``, the n summands of every position; each position
        summed in its range's order (:func:`.evaluator.evaluate`).  float64 ``(..., numel)``."""
        from .evaluator import evaluate
        import torch
        arr = x if isinstance(x, torch.Tensor) else np.asarray(x)
        if arr.ndim < 2 or arr.shape[-2] != self.numel:
            raise ValueError(f"x must be (..., {self.numel}, n), got {tuple(arr.shape)}")
        parts = [evaluate(t, arr[..., s:e, :], dtype=dtype, **kw) for s, e, t in self]
        return np.concatenate(parts, axis=-1)
