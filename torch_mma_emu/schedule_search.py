"""Which schedules reproduce a library's result: the emulated product under each candidate
schedule against the library's bits (docs/schedules.md, "Confirming a preset").

    cands = candidate_schedules(K=1024, L=32)
    ranking = match_schedules(D, A, B, arch="sm90", candidates=cands)   # best first
    ranking[0]          # (Schedule, mismatching outputs); 0: reproduces D bit for bit

Used on the GPU by ``scripts/gpu/schedules.py`` (cuBLAS split-K, ``torch._scaled_mm``'s
``use_fast_accum``, Triton's ``max_num_imprecise_acc``) to confirm or correct the presets.
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional, Sequence

import torch

from .schedule import Schedule
from .schedule_split import GRAIN_CUBLAS

__all__ = ["candidate_schedules", "match_schedules", "mismatches"]


def candidate_schedules(K: int, L: int, *, split_ks: Sequence[int] = tuple(range(1, 17)),
                        promote: bool = True, reduces: Sequence[str] = ("sequential",
                                                                           "pairwise"),
                        c_modes: Sequence[str] = ("epilogue",),
                        grains: Sequence[str] = (GRAIN_CUBLAS,),
                        merges: Sequence[str] = ("workspace",)) -> list[Schedule]:
    """The plain chain, split-K over ``split_ks`` (each reduce order at the instruction's K;
    forward at each of ``grains``, e.g. cuBLAS's, with each of ``merges``), and promotion
    every L * 2^i < K (C in each of ``c_modes``); no duplicates (split-K 2 sequential and
    pairwise are one order).  The fp16 merges need ``out_dtype=torch.float32``."""
    out: list[Schedule] = [Schedule()]
    chunks = -(-K // L)
    for s in split_ks:
        if s <= 1 or s > max(chunks, 1):
            continue
        for r in (reduces if s > 2 else reduces[:1]):
            out.append(Schedule(split_k=s, reduce=r))
        out += [Schedule(split_k=s, split_grain=g, merge=m) for g in grains for m in merges]
    if promote:
        p = L
        while p < K:
            for cm in c_modes:
                out.append(Schedule(promote_every=p, c_mode=cm))
            p *= 2
    return list(dict.fromkeys(out))


def mismatches(X: torch.Tensor, Y: torch.Tensor) -> int:
    """Outputs whose bits differ (NaN equals NaN, whatever its encoding)."""
    X, Y = X.detach().cpu(), Y.detach().cpu()
    if X.shape != Y.shape or X.dtype != Y.dtype:
        raise ValueError(f"mismatches: {tuple(X.shape)} {X.dtype} vs {tuple(Y.shape)} {Y.dtype}")
    iv = {2: torch.int16, 4: torch.int32, 8: torch.int64}[X.element_size()]
    same = (X.contiguous().view(iv) == Y.contiguous().view(iv)) | (X.isnan() & Y.isnan())
    return int((~same).sum())


def match_schedules(D: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                    C: Optional[torch.Tensor] = None, *, arch, candidates: Iterable[Schedule],
                    post: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
                    **kw) -> list[tuple[Schedule, int]]:
    """Each candidate's mismatching outputs against ``D`` (the library's result of
    ``C + A @ B``), fewest first (ties keep the candidates' order).  ``kw`` goes to
    ``emulated_mm`` (in_format, out_dtype, instruction, scale_a, scale_b); ``post`` maps the
    emulated result to the library's output (e.g. the final rounding to fp16 of a GEMM that
    accumulates in fp32).  Operands on a GPU are emulated on the CPU (the same bits)."""
    from .ops import emulated_mm
    cpu = lambda t: t.detach().cpu() if isinstance(t, torch.Tensor) else t  # noqa: E731
    A, B, C = cpu(A), cpu(B), cpu(C)
    kw = {k: cpu(v) for k, v in kw.items()}
    if post is None:
        kw.setdefault("out_dtype", D.dtype)
    scored = []
    for i, s in enumerate(candidates):
        E = emulated_mm(A, B, C, arch=arch, schedule=s, **kw)
        if post is not None:
            E = post(E)
        scored.append((mismatches(E, D), i, s))
    scored.sort(key=lambda t: (t[0], t[1]))
    return [(s, n) for n, _, s in scored]
