"""Wall-clock timing shared by previews and benchmark scripts."""
from __future__ import annotations

import time
from typing import Callable

__all__ = ["best_of"]


def best_of(fn: Callable[[], object], repeat: int, *, warm_up: bool = False) -> float:
    """Seconds of the fastest of ``repeat`` runs of ``fn()`` (the one least disturbed by other
    work on a shared machine), after one untimed run if ``warm_up``."""
    if warm_up:
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)
