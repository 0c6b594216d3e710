"""Run one model under many (arch, format) previews and measure how each diverges: the
engine of ``mma-emu preview``.

For every format (fp32, tf32, xf32, fp16, bf16, fp8) and every arch with an instruction
for it, the model runs a batch under :func:`emulate`; a native run of the same dtype on
this machine is timed alongside.  Layer outputs are compared with an fp64 run (max abs,
ulps of the run's dtype, top-1 agreement of the logits) and the logits of archs with each
other (top-1 agreement, ulp distance, bit-identical fraction).
"""
from __future__ import annotations

import copy
import itertools
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch
import torch.nn as nn

from ..formats import FLOAT_DTYPES
from ..registry import ARCHS
from ..timing import best_of
from .divergence import capture, divergence, top1_agreement, ulp_distance
from .mode import emulate
from .policy import arch_has

__all__ = ["Run", "PreviewResult", "FORMATS", "MODEL_DTYPE", "runs_for", "preview_model"]

# preview format -> (model dtype, emulate() options builder, archs predicate)
FORMATS = ("fp32", "tf32", "xf32", "fp16", "bf16", "fp8")
# the model runs in the format's dtype; fp8 previews run a bf16 model (scaled fp8 products)
MODEL_DTYPE = {**{f: FLOAT_DTYPES[f] for f in FORMATS if f != "fp8"}, "fp8": torch.bfloat16}


def _fp8_name(arch: str) -> Optional[str]:
    for name in ("fp8_e4m3", "fp8_e4m3fnuz"):
        if arch_has(arch, name):
            return name
    return None


def run_options(fmt: str, arch: str) -> Optional[dict]:
    """emulate() options for this preview format on ``arch``, None where unsupported."""
    if fmt == "fp32":
        return dict(fp32_format="fp32")
    if fmt in ("tf32", "xf32"):
        return dict(fp32_format=fmt) if arch_has(arch, fmt) else None
    if fmt in ("fp16", "bf16"):
        return {} if arch_has(arch, fmt) else None
    f8 = _fp8_name(arch)  # fp8: the Linear layers (addmm / mm) in fp8, tensorwise scaled
    return dict(formats={"mm": f8, "addmm": f8}) if f8 else None


@dataclass
class Run:
    fmt: str
    arch: str                     # "native" for this machine's own run
    options: dict
    outputs: dict = field(default_factory=dict)
    seconds: float = float("nan")
    native_seconds: float = float("nan")
    vs_fp64: dict = field(default_factory=dict)     # layer -> divergence()
    top1_vs_fp64: float = float("nan")
    counts: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        if self.arch == "native":
            return "native (this CPU)"
        gpus = ARCHS[self.arch].gpus
        return f"{self.arch} ({gpus[0]})"


@dataclass
class PreviewResult:
    layers: list
    runs: list
    between: dict      # fmt -> {(arch_a, arch_b): dict(top1, max_ulp, identical)}
    reference_seconds: float


def runs_for(archs: Sequence[str], formats: Sequence[str]) -> list[Run]:
    """The (format, arch) runs; archs may be aliases (H100, MI300X); a format that no
    requested arch has is an error, not a silently empty table."""
    from ..registry import canonical_arch
    archs = [canonical_arch(a) for a in archs]        # ValueError names the known archs
    out = []
    for fmt in formats:
        if fmt not in FORMATS:
            raise ValueError(f"unknown preview format {fmt!r}; allowed: {', '.join(FORMATS)}")
        if fmt in ("fp32", "fp16", "bf16"):
            out.append(Run(fmt, "native", {}))
        emulated = [Run(fmt, a, o) for a in archs if (o := run_options(fmt, a)) is not None]
        if not emulated:
            raise ValueError(f"no arch of {', '.join(archs)} has a {fmt} instruction")
        out += emulated
    return out


def _cast_inputs(inputs, dtype):
    return tuple(t.to(dtype) if t.is_floating_point() else t for t in inputs)


def preview_model(model: nn.Module, inputs, layers: Optional[Sequence[str]] = None,
                  archs: Optional[Sequence[str]] = None,
                  formats: Optional[Sequence[str]] = None, repeat: int = 1,
                  progress: Optional[Callable[[str], None]] = None) -> PreviewResult:
    """Run ``model(*inputs)`` under every (format, arch) preview and compare.

    ``inputs``: a tensor or a tuple of tensors (floating ones are cast to each run's dtype).
    ``layers``: module names whose outputs are compared (default ``model.preview_layers()``
    when defined, else the top-level children); the model output is always compared.
    ``archs``: names or aliases (default: every arch).  ``formats``: from ``FORMATS``
    (default: each format one of the archs has).  ``repeat``: timed passes per run, the best
    is kept.  ``progress(label)`` is called before each emulated run.  Returns a
    :class:`PreviewResult` (``mma-emu preview`` renders it as a table and a plot).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"preview_model: model must be an nn.Module, got "
                        f"{type(model).__name__}")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    inputs = tuple(inputs)
    if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise TypeError("preview_model: inputs must be a tensor or a tuple of tensors")
    if not isinstance(repeat, int) or repeat <= 0:
        raise ValueError(f"preview_model: repeat must be a positive integer, got {repeat!r}")
    if layers is None:
        layers = (list(model.preview_layers()) if hasattr(model, "preview_layers")
                  else [n for n, _ in model.named_children()])
    if archs is None:
        archs = list(ARCHS)
    if formats is None:
        from ..registry import canonical_arch
        names = [canonical_arch(a) for a in archs]
        formats = [f for f in FORMATS if any(run_options(f, a) is not None for a in names)]
    say = progress or (lambda s: None)
    model = model.eval()
    with torch.no_grad():  # materialise lazy modules once, before the per-dtype copies
        model(*inputs)
    ref_model = copy.deepcopy(model).to(torch.float64)
    ref_in = _cast_inputs(inputs, torch.float64)
    t0 = time.perf_counter()
    ref = capture(ref_model, layers, *ref_in)
    ref_seconds = time.perf_counter() - t0
    runs = runs_for(archs, formats)
    models = {}
    for run in runs:
        dt = MODEL_DTYPE[run.fmt]
        if dt not in models:
            models[dt] = copy.deepcopy(model).to(dt)
        m, x = models[dt], _cast_inputs(inputs, dt)
        # the native forward of this dtype is timed next to each emulated one, each side
        # after an untimed run of its own: neither is timed cold (lazy set-up on first
        # calls: oneDNN's kernels for a dtype, the imports of a first emulate block)
        run.native_seconds = best_of(lambda: capture(m, layers, *x), repeat, warm_up=True)
        if run.arch == "native":
            run.outputs = capture(m, layers, *x)
            run.seconds = run.native_seconds
        else:
            say(f"{run.fmt:5s} {run.arch}")
            # the untimed emulated run: its outputs are the run's (and it warms up)
            with emulate(run.arch, **run.options) as em:
                run.outputs = capture(m, layers, *x)
            run.counts = dict(em.counts)

            def fwd():
                with emulate(run.arch, **run.options):
                    capture(m, layers, *x)
            run.seconds = best_of(fwd, repeat)
        run.vs_fp64 = {k: divergence(v, ref[k]) for k, v in run.outputs.items()}
        run.top1_vs_fp64 = top1_agreement(run.outputs["output"], ref["output"])
    between = {}
    for fmt in formats:
        rs = [r for r in runs if r.fmt == fmt and r.arch != "native"]
        pairs = {}
        for a, b in itertools.combinations(rs, 2):
            la, lb = a.outputs["output"], b.outputs["output"]
            d = ulp_distance(la, lb)
            pairs[(a.arch, b.arch)] = dict(top1=top1_agreement(la, lb), max_ulp=int(d.max()),
                                           identical=float((d == 0).to(torch.float64).mean()))
        between[fmt] = pairs
    return PreviewResult(list(layers) + ["output"], runs, between, ref_seconds)
