"""What an emulate block adds around the dots, registered with the interpreter seam
(hook.py calls :func:`install` once): the target's math (target_math.py), floating-point
contraction as the compiled code does it (contract.py), atomics recorded (atomics.py), and
the interpreter gaps third-party kernels meet (gaps.py).  ``summary_lines`` is what
``em.summary()`` adds for them."""
from __future__ import annotations

from . import target_math


def install(set_attr, ti, current) -> None:
    target_math.install(set_attr, ti.InterpreterBuilder, current)


def summary_lines(block) -> list[str]:
    return target_math.summary_lines(block)
