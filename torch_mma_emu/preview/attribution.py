"""Per-layer attribution: which module each routed product belongs to, and how far each
layer's output is from a reference run (``EmulateMode.report``).

* Module paths come from ``torch.utils.module_tracker.ModuleTracker`` (forward *and*
  backward: it follows autograd through multi-grad hooks).  Its names start with the root
  module's class (``TinyGPT.blocks.0.attn``); records carry the path below the root
  (``blocks.0.attn``), the ``named_modules()`` / state_dict name.
* With ``record=True`` the first top-level module call in the block is captured: a copy of
  the module (taken before its forward), its inputs, and every submodule's output.
  ``report(reference)`` re-runs that call as the reference (fp64 natively, another arch, or
  native in the same dtype) and compares layer by layer.
"""
from __future__ import annotations

import copy
import math
import os
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import torch.nn as nn
from torch.autograd.graph import register_multi_grad_hook
from torch.utils._pytree import tree_flatten
from torch.utils.module_tracker import ModuleTracker

from ..files import atomic_path
from . import module_hooks
from .divergence import divergence

__all__ = ["LayerTracker", "Capture", "Report", "LayerRow", "run_captured"]


def _innermost(parents) -> str:
    """The current module path below the root ('' outside any module)."""
    best = max(parents, key=lambda p: p.count(".") + (p != "Global"), default="Global")
    if best == "Global":
        return ""
    head, _, rest = best.partition(".")
    return rest or head        # the root itself: its class name


def _first_tensor(out) -> Optional[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        for o in out:
            t = _first_tensor(o)
            if t is not None:
                return t
    if isinstance(out, dict):
        for o in out.values():
            t = _first_tensor(o)
            if t is not None:
                return t
    return None


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (tuple, list)):
        return type(x)(_clone(v) for v in x)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


@dataclass
class Capture:
    """One top-level module call: a copy of the module, its inputs, each layer's output."""
    model: Optional[nn.Module] = None
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)     # path -> [output per call, ...]
    types: dict = field(default_factory=dict)       # path -> module class name
    done: bool = False
    note: str = ""
    root_path: str = ""                             # the root's row (its class name)
    active: bool = False                            # inside the captured call
    modules: list = field(default_factory=list)     # module of each emulated forward product


class _Tracker(ModuleTracker):
    """ModuleTracker driven by :mod:`.module_hooks` (its own ``__enter__`` would install
    process-wide hooks per block) and doing nothing while Dynamo traces (under
    ``torch.compile`` records carry no module path)."""

    def _fw_pre_hook(self, mod, input):
        # as ModuleTracker's, but the backward "leave" hook goes on non-leaf inputs only:
        # multi-grad hooks on leaves fail under autograd.grad (gradcheck); a module whose
        # inputs are leaves stays "entered" until its backward ends
        if torch.compiler.is_compiling():
            return
        name = self._get_mod_name(mod)
        self._get_append_fn(name, False)()
        tensors = [a for a in tree_flatten(input)[0] if isinstance(a, torch.Tensor)
                   and a.requires_grad and a.grad_fn is not None]
        if tensors:
            self._hooks.append(register_multi_grad_hook(tensors, self._get_pop_fn(name, True)))

    def _fw_post_hook(self, mod, input, output):
        if not torch.compiler.is_compiling():
            super()._fw_post_hook(mod, input, output)

    def clear(self):
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()


class _OutputHooks:
    """Stores every module's (first) floating output by path, for the first top-level call
    (the root)."""

    def __init__(self, tracker: ModuleTracker, cap: Capture, root_hook: bool):
        self.tracker, self.cap, self.root_hook = tracker, cap, root_hook
        self.depth = 0
        self.root = None

    def _pre(self, mod, args):
        if torch.compiler.is_compiling() or self.cap.done:
            return
        if self.depth == 0 and self.root is None:
            self.root = mod
            self.cap.active = True
            if self.root_hook:
                try:
                    self.cap.model = copy.deepcopy(mod)
                except Exception as e:   # noqa: BLE001 - a module that cannot be copied
                    self.cap.model = mod
                    self.cap.note = (f"the model could not be copied ({type(e).__name__}); "
                                     "the reference re-runs it with its current weights")
        self.depth += 1

    def _post(self, mod, args, kwargs, out):
        if torch.compiler.is_compiling() or self.cap.done or self.root is None:
            return
        self.depth -= 1
        t = _first_tensor(out)
        if t is not None and t.is_floating_point():
            path = _innermost(self.tracker.parents)
            self.cap.outputs.setdefault(path, []).append(t.detach())
            self.cap.types.setdefault(path, type(mod).__name__)
        if self.depth == 0 and mod is self.root:
            self.cap.root_path = _innermost(self.tracker.parents)
            self.cap.active = False
            if self.root_hook:
                self.cap.args, self.cap.kwargs = _clone(tuple(args)), _clone(dict(kwargs))
            self.cap.done = True


class _Listener:
    """The module-hook listener of one tracker (and its capture): output hooks first, so
    that the tracker's parents still hold the module when its output is stored."""

    def __init__(self, tracker: _Tracker, out_hooks: Optional[_OutputHooks]):
        self.tracker, self.out_hooks = tracker, out_hooks

    def pre(self, mod, args):
        if self.out_hooks is not None:
            self.out_hooks._pre(mod, args)
        self.tracker._fw_pre_hook(mod, args)

    def post(self, mod, args, kwargs, out):
        if self.out_hooks is not None:
            self.out_hooks._post(mod, args, kwargs, out)
        self.tracker._fw_post_hook(mod, args, out)


class LayerTracker:
    """Module paths for records and, when asked, the capture of the first top-level call,
    for the module calls of the threads of one block (the one that entered it and those
    it adopted: :meth:`adopt`)."""

    def __init__(self, capture: bool):
        self.tracker = _Tracker()
        self.capture = Capture() if capture else None
        self._listener = None
        self._threads: list[int] = []
        self._lock = threading.Lock()
        self.depth = 0

    def enter(self):
        if self.depth == 0:
            hooks = None
            if self.capture is not None and not self.capture.done:
                hooks = _OutputHooks(self.tracker, self.capture, root_hook=True)
            self._listener = _Listener(self.tracker, hooks)
            self.adopt()
        self.depth += 1

    def adopt(self):
        """Track the module calls of the calling thread too (until the block closes)."""
        with self._lock:
            if self._listener is None:
                return
            tid = threading.get_ident()
            if tid not in self._threads:
                self._threads.append(tid)
                module_hooks.add_listener(self._listener, tid)

    def leave(self):
        self.depth -= 1
        if self.depth == 0:
            with self._lock:
                for tid in self._threads:
                    module_hooks.remove_listener(self._listener, tid)
                self._threads, self._listener = [], None
            self.tracker.clear()

    def path(self) -> str:
        return _innermost(self.tracker.parents)


def run_captured(model: nn.Module, args: tuple, kwargs: dict) -> dict:
    """Run ``model(*args, **kwargs)`` without grad and return ``{path: [outputs]}`` with the
    same paths as a capture inside a block."""
    cap = Capture()
    tracker = _Tracker()
    listener = _Listener(tracker, _OutputHooks(tracker, cap, root_hook=False))
    module_hooks.add_listener(listener)
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        module_hooks.remove_listener(listener)
        tracker.clear()
    return cap.outputs


def _to(x, dtype):
    if isinstance(x, torch.Tensor):
        return x.to(dtype) if x.is_floating_point() else x
    if isinstance(x, (tuple, list)):
        return type(x)(_to(v, dtype) for v in x)
    if isinstance(x, dict):
        return {k: _to(v, dtype) for k, v in x.items()}
    return x


@dataclass
class LayerRow:
    path: str
    module: str
    products: int           # emulated forward products recorded in this module (and below)
    dtype: str
    max_abs: float
    max_ulp: float          # in ulps of the run's dtype at the reference values
    median_ulp: float
    rel_l2: float


class Report:
    """Per-layer divergence of a block's first top-level call from a reference."""

    def __init__(self, arch: str, reference: str, rows: list, note: str = ""):
        self.arch, self.reference, self.rows, self.note = arch, reference, rows, note

    def __str__(self) -> str:
        from ..text_table import format_table
        body = [[r.path, r.module, r.products, r.dtype, f"{r.max_abs:.3g}", f"{r.max_ulp:.3g}",
                 f"{r.median_ulp:.3g}", f"{r.rel_l2:.3g}"] for r in self.rows]
        t = format_table(["layer", "module", "products", "dtype", "max |err|", "max ulp",
                          "median ulp", "rel L2"], body,
                         title=f"{self.arch} against {self.reference} (layer outputs)")
        return t + (f"\nnote: {self.note}" if self.note else "")

    def to_dict(self) -> dict:
        return dict(arch=self.arch, reference=self.reference, note=self.note,
                    rows=[r.__dict__ for r in self.rows])

    def plot(self, path: str) -> str:
        """A bar chart of each layer's relative L2 error (log scale) written to ``path``."""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        rows = self.rows
        fig, ax = plt.subplots(figsize=(8, 0.25 * len(rows) + 1.5))
        vals = [max(r.rel_l2, 1e-300) for r in rows]
        ax.barh(range(len(rows)), vals, color=["C0" if r.products else "C7" for r in rows])
        ax.set_yticks(range(len(rows)), [f"{r.path} ({r.module})" for r in rows], fontsize=7)
        ax.invert_yaxis()
        if any(v > 1e-300 for v in vals):
            ax.set_xscale("log")
        ax.set_xlabel(f"relative L2 error of the layer output vs {self.reference}")
        ax.set_title(f"{self.arch}: per-layer divergence (grey: no product inside)")
        fig.tight_layout()
        with atomic_path(path) as tmp:       # all or nothing (torch_mma_emu.files)
            fig.savefig(tmp, dpi=110, format=os.path.splitext(path)[1][1:] or None)
        plt.close(fig)
        return path


def products_in(path: str, modules: list, root_path: str) -> int:
    """Emulated forward products recorded inside the module at ``path`` (children too)."""
    if path == root_path:
        return len(modules)
    return sum(m == path or m.startswith(path + ".") for m in modules)


def compare_outputs(outputs: dict, ref: dict, types: dict, modules: list,
                    root_path: str) -> list:
    """One :class:`LayerRow` per captured module call (forward order of completion)."""
    rows = []
    for path, outs in outputs.items():
        refs = ref.get(path)
        if not refs or len(refs) != len(outs):
            continue
        for i, (o, r) in enumerate(zip(outs, refs)):
            if o.shape != r.shape or not o.is_floating_point():
                continue
            if o.dtype == torch.float64 and r.dtype == torch.float64 and torch.equal(o, r):
                d = dict(max_abs=0.0, max_ulp=0.0, median_ulp=0.0, rel_l2=0.0)
            else:
                d = divergence(o, r)
            name = path if len(outs) == 1 else f"{path}#{i}"
            rows.append(LayerRow(name, types.get(path, "?"),
                                 products_in(path, modules, root_path),
                                 str(o.dtype).replace("torch.", ""), d["max_abs"],
                                 d["max_ulp"] if math.isfinite(d["max_ulp"]) else float("inf"),
                                 d["median_ulp"], d["rel_l2"]))
    return rows


def block_outputs(tracker: Optional[LayerTracker]) -> dict:
    """``{path: [outputs]}`` captured by another block (the reference of a report)."""
    other = tracker.capture if tracker is not None else None
    if other is None or not other.done:
        raise ValueError("report: the reference block captured no module call (use "
                         "emulate(..., record=True) and call a module inside it)")
    return other.outputs


def reference_outputs(cap: Capture, reference: Any, mode_factory) -> tuple[dict, str]:
    """``{path: [outputs]}`` of the reference run (``"fp64"``, ``"native"`` or an arch run
    by ``mode_factory``) and its label."""
    model = cap.model
    if reference in ("fp64", "float64", torch.float64):
        from .grouped import Float64Groups
        m = copy.deepcopy(model).to(torch.float64)
        with Float64Groups():        # grouped products have no float64 kernel in PyTorch
            out = run_captured(m, _to(cap.args, torch.float64), _to(cap.kwargs, torch.float64))
        return out, "fp64 (native)"
    if reference == "native":
        return run_captured(model, cap.args, cap.kwargs), "native (this machine)"
    with mode_factory(reference) as ref_mode:
        out = run_captured(model, cap.args, cap.kwargs)
    return out, ref_mode.policy.arch_name


def warn_training(model: nn.Module):
    if model.training and any(isinstance(m, nn.modules.dropout._DropoutNd)
                              for m in model.modules()):
        warnings.warn("report: the captured model is in training mode with dropout; the "
                      "reference run draws other masks (call model.eval() for a preview)",
                      stacklevel=3)
