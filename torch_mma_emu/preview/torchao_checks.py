"""``gpu_checks_pass(arch)``: let torchao's own GPU checks pass for an emulated NVIDIA arch.

Some torchao recipes refuse to *set up* on a machine without the GPU they target, before
any product exists for :func:`emulate` to see (docs/preview.md, "Third-party code"):

* float8 inference, ``quantize_(m, Float8DynamicActivationFloat8WeightConfig(...))``:
  ``assert torch.cuda.is_available() and is_sm_at_least_89()``;
* NVFP4 inference, ``quantize_(m, NVFP4DynamicActivationNVFP4WeightConfig())``:
  ``assert is_sm_at_least_100()``.

Inside ``with gpu_checks_pass("H100"):`` torchao's ``is_sm_at_least_89/90/100`` answer as
that arch would, and ``torch.cuda.is_available()`` answers True.  The checks run when the
recipe is applied, so wrap the ``quantize_`` call only, not the forward pass: other code
asking ``torch.cuda.is_available()`` inside the block is told a lie too.  The products the
recipe then issues (``torch._scaled_mm`` on plain fp8 tensors) run under ``emulate`` as
usual.  Recipes whose *forward* needs a GPU kernel (torchao's Triton / CUDA casts, e.g.
``MXFP8Linear``'s dim-1 cast) cannot be rescued this way.
"""
from __future__ import annotations

import re

from ..registry import canonical_arch
from .patches import torchao_checks

__all__ = ["gpu_checks_pass"]


def _answers(arch: str) -> tuple[int, int]:
    name = canonical_arch(arch)
    m = re.fullmatch(r"sm(\d+)(\d)", name)
    if m is None:
        raise ValueError(f"gpu_checks_pass: {arch!r} ({name}) is not an NVIDIA arch; torchao's "
                         "checks ask for a CUDA compute capability (sm70 ... sm120)")
    return int(m.group(1)), int(m.group(2))


def gpu_checks_pass(arch):
    """torchao's ``is_sm_at_least_*`` (in every loaded torchao module that imported them)
    answer for ``arch``'s compute capability, ``torch.cuda.is_available()`` is True;
    everything is restored when the last such block closes (``patches.TORCHAO_GPU_CHECKS``:
    nested and concurrent blocks answer for the innermost one opened)."""
    return torchao_checks(_answers(arch))
