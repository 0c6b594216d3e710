"""Small pieces the validation's parts share: bit patterns, comparison, a clock, files."""
from __future__ import annotations

import os
import re
import time

import torch

from .. import files
from ..formats import INT_OF_SIZE
from ..ops import emulated_mm


def bits(t: torch.Tensor) -> torch.Tensor:
    """The bit patterns of ``t`` (on the CPU) as same-size integers."""
    return t.detach().cpu().contiguous().view(INT_OF_SIZE[t.element_size()])


def spec_id(s) -> str:
    b = f"x{s.in_format_b}" if s.in_format_b else ""
    sc = f" {s.scale_format}/{s.block_size}" if s.scaled else ""
    return f"{s.arch} {s.in_format}{b}->{s.out_format}{sc} [{s.instruction}]"


def hexbits(t: torch.Tensor, idx) -> str:
    return hex(int(bits(t.cpu())[idx]) & ((1 << (8 * t.element_size())) - 1))


class Clock:
    def __init__(self, limit: float):
        self.start = time.time()
        self.limit = limit

    def left(self) -> float:
        return self.limit - (time.time() - self.start)


def to_dev(kw: dict, dev) -> dict:
    return {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}


def compare(x: torch.Tensor, y: torch.Tensor):
    """(number of differing bit patterns, index of the first, how many differ only in a NaN
    payload, the differing indices as an (n, dim) tensor)."""
    bx, by = bits(x.cpu()), bits(y.cpu())
    diff = bx != by
    where = diff.nonzero()
    n = where.shape[0]
    first = tuple(where[0].tolist()) if n else None
    xf, yf = x.cpu().float(), y.cpu().float()
    nan_only = int((diff & torch.isnan(xf) & torch.isnan(yf)).sum()) if n else 0
    return n, first, nan_only, where


def safe_name(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s).strip("_")


def atomic_write(path: str, text: str) -> None:
    """``text`` into ``path`` (its folder made), all or nothing (torch_mma_emu.files)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    files.atomic_write(path, text)


def sticky_cuda_error(dev) -> str | None:
    """A CUDA error that poisons the context (every later call fails): its text, else None."""
    if torch.device(dev).type != "cuda":
        return None
    try:
        torch.cuda.synchronize(dev)
        torch.zeros(1, device=dev).add_(1).item()
        return None
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def emulate(spec, kw, dev, c_mode, C="given"):
    k = to_dev(dict(kw, arch=spec), dev)
    if C is None:
        k["C"] = None
    return emulated_mm(**k, c_mode=c_mode)


def not_run(poisoned: str | None, clock: Clock) -> str | None:
    """Why a row is not run (a lost CUDA context, the time spent), or None: run it."""
    if poisoned:
        return f"not run (CUDA context lost: {poisoned})"
    if clock.left() <= 0:
        return "not run (time limit)"
    return None


def error_status(e: Exception) -> str:
    """The status of a row that raised ``e``."""
    return f"error: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def lost_context(dev, log, part: str, rest: str) -> str | None:
    """After an error: the sticky CUDA error that poisons the context (logged: the remaining
    ``rest`` of ``part`` are not run), else None."""
    poisoned = sticky_cuda_error(dev)
    if poisoned:
        log(f"[{part}] the CUDA context is lost ({poisoned}): the remaining {rest} are not "
            "run; run them in a new process (--resume)")
    return poisoned
