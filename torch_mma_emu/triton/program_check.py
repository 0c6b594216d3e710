"""``check_program(fn, *args, arch=...)``: a user's whole Triton program run twice, once under
``emulate(arch)`` and once with every kernel launch executed as its compiled PTX evaluated
on the CPU (the checker, ptx_check.py), and the outputs compared bit for bit.

Both runs start from copies of the tensor arguments (the caller's tensors are not touched)
and both run inside an ``emulate(arch)`` block, so autotuners, heuristics and device
queries behave the same; in the second, each launch of a ``@triton.jit`` kernel is compiled
to PTX for its arguments and evaluated here instead of interpreted.  A launch the checker
cannot evaluate (a loop or branch in its PTX, an instruction it lacks) runs emulated and
is listed as not checked, with the reason."""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ProgramReport", "check_program"]


@dataclass
class ProgramReport:
    """``equal``: every output has the same bits; ``outputs``: one dict per compared output
    (name, elements, differing, max_abs_diff); ``launches``: one dict per kernel launch of
    the checker's run (kernel, grid, checked, why)."""
    equal: bool
    outputs: list = field(default_factory=list)
    launches: list = field(default_factory=list)

    def __str__(self) -> str:
        checked = sum(x["checked"] for x in self.launches)
        lines = [f"{'EQUAL' if self.equal else 'DIFFERENT'}: {len(self.outputs)} outputs, "
                 f"{checked} of {len(self.launches)} launches evaluated as PTX"]
        for o in self.outputs:
            if o["differing"]:
                lines.append(f"  {o['name']}: {o['differing']} of {o['elements']} elements "
                             f"differ (max |diff| {o['max_abs_diff']:.3g})")
        if not self.launches:
            lines.append("  no launch reached the checker: nothing was evaluated as PTX (a "
                         "library that caches its compiled kernels, e.g. FlagGems' LibEntry, "
                         "launches them past JITFunction.run)")
        for x in self.launches:
            if not x["checked"]:
                lines.append(f"  not checked: {x['kernel']} grid {x['grid']}: {x['why']}")
        return "\n".join(lines)


def _copy(x):
    import torch
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_copy(v) for v in x)
    if isinstance(x, dict):
        return {k: _copy(v) for k, v in x.items()}
    return x


def _tensors(x, name, out):
    import torch
    if isinstance(x, torch.Tensor):
        out.append((name, x))
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            _tensors(v, f"{name}[{i}]", out)
    elif isinstance(x, dict):
        for k, v in x.items():
            _tensors(v, f"{name}[{k!r}]", out)
    return out


def check_program(fn, *args, arch: str = "H100", **kwargs) -> ProgramReport:
    """Run ``fn(*args, **kwargs)`` emulated and under the checker (NVIDIA archs: the
    checker reads PTX) and compare its return value and its tensor arguments afterwards."""
    import inspect

    import torch
    from triton.runtime.jit import JITFunction

    from .context import emulate
    from .layout import compile_launch, remember, target_of
    from .ptx_check import grid_of, run_ptx
    from .ptx_eval import Unsupported
    target = target_of(arch)
    if target is None:
        raise ValueError(f"check_program: arch must be an NVIDIA arch (the checker reads "
                         f"PTX), got {arch!r}")
    if not callable(fn):
        raise TypeError(f"check_program: fn must be callable, got {type(fn).__name__}")
    a1, k1 = _copy(args), _copy(kwargs)
    with emulate(arch):
        r1 = fn(*a1, **k1)
    a2, k2 = _copy(args), _copy(kwargs)
    launches = []
    with emulate(arch):
        emulated_run = JITFunction.run           # the block's (patched) launch

        def run(self, *a, grid, warmup, **kw):
            if warmup:
                return emulated_run(self, *a, grid=grid, warmup=warmup, **kw)
            params = inspect.signature(self.fn).parameters
            bound = inspect.signature(self.fn).bind(*a, **{k: v for k, v in kw.items()
                                                         if k in params})
            bound.apply_defaults()
            meta = dict(bound.arguments, **{k: v for k, v in kw.items() if k not in params})
            g = grid_of(grid, meta)
            rec = {"kernel": self.fn.__name__, "grid": g, "checked": False, "why": ""}
            launches.append(rec)
            try:
                remember(self)
                comp = compile_launch(self.fn, a, kw, target, ptx=True)
                rt = [bound.arguments[k] for k in comp.runtime_args]
                outs = run_ptx(comp.ptx, rt, g, comp.num_warps, shared=comp.shared,
                               scratch=comp.scratch, arch=arch)
            except Unsupported as e:
                rec["why"] = str(e)[:300]
                return emulated_run(self, *a, grid=grid, warmup=warmup, **kw)
            for t, o in zip([x for x in rt if isinstance(x, torch.Tensor)], outs):
                t.copy_(o)
            rec["checked"] = True
        JITFunction.run = run
        try:
            r2 = fn(*a2, **k2)
        finally:
            JITFunction.run = emulated_run
    names = [f"arg {i}" for i in range(len(args))] + [f"kwarg {k}" for k in kwargs]
    left = _tensors(r1, "result", []) + _tensors(list(a1) + list(k1.values()), "", [])
    right = _tensors(r2, "result", []) + _tensors(list(a2) + list(k2.values()), "", [])
    outputs, equal = [], True
    for (name, x), (_, y) in zip(left, right):
        if name.startswith("[") and name[1:].split("]")[0].isdigit():
            i = int(name[1:].split("]")[0])
            name = names[i] + name[name.index("]") + 1:]
        xb, yb = x.contiguous().reshape(-1), y.contiguous().reshape(-1)
        diff = xb.view(torch.uint8) != yb.view(torch.uint8)
        n = int((xb.view(torch.uint8).reshape(xb.numel(), -1) != yb.view(torch.uint8)
                 .reshape(yb.numel(), -1)).any(1).sum()) if xb.numel() else 0
        mad = float((xb.double() - yb.double()).abs().nan_to_num(0).max()) \
            if n and xb.is_floating_point() else 0.0
        outputs.append({"name": name, "elements": xb.numel(), "differing": n,
                        "max_abs_diff": mad})
        equal &= not bool(diff.any())
    return ProgramReport(equal, outputs, launches)
