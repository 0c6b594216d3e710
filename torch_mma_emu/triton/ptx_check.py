"""A checker that needs no GPU: run the PTX Triton compiles for a launch on the CPU and
compare its bits with the emulation's.

The PTX runs on the SIMT interpreter :mod:`torch_mma_emu.ptx` (every thread of every CTA:
loops, branches, masks, ``bar.sync``, shuffles, atomics, bit-exact rounding, ``ldmatrix``
and ``mma.sync`` with the arch's instruction model) under Triton's launch conventions
(``num_warps`` * 32 threads, the metadata's dynamic shared memory, the two trailing scratch
pointers).  So the order of every floating-point operation is the compiled code's own,
derived from nothing but the PTX: an independent evaluation to hold the emulation against.
A kernel with an instruction the interpreter lacks, if it is straight-line code, is evaluated
by the older one-CTA evaluator ``ptx_eval`` (fp8 ``cvt.rn.satfinite``, a given ``wgmma``
result); otherwise :class:`Unsupported` names what is missing, never a silent guess.
"""
from __future__ import annotations

import re

import numpy as np

from .ptx_eval import ADDRESS_STRIDE, CTA, Unsupported

__all__ = ["Unsupported", "parse", "run_ptx", "check"]


def parse(ptx: str):
    """(kernel name, parameter names, body lines, threads per CTA) of the first entry."""
    m = re.search(r"\.visible \.entry (\w+)\(\s*(.*?)\)\s*(?:\.reqntid (\d+))?", ptx, re.S)
    if not m:
        raise Unsupported("no .entry in the PTX")
    params = re.findall(r"\.param \.\S+ (?:\.ptr \.global \.align \d+ )?(\w+)", m.group(2))
    start = ptx.index("{", m.end())
    body, depth = [], 0
    for line in ptx[start + 1:].splitlines():
        line = line.split("//")[0].strip()
        if line in ("{", "}"):             # an inline-asm scope, or the end of the kernel
            depth += 1 if line == "{" else -1
            if depth < 0:
                break
            continue
        if not line or line.startswith((".reg", ".loc", ".shared", "$L", ".file")) \
                or line.endswith(":"):
            continue
        if line.startswith(("bra", "@%p")) and " bra" in " " + line:
            raise Unsupported(
                f"the kernel {m.group(1)} has a branch or loop in its PTX ('{line}': a "
                "loop over a runtime bound, an if on a runtime value, an atomic retry, ...); "
                "the checker runs straight-line code of one CTA only (a full SIMT PTX "
                "interpreter is future work)")
        body.append(line.rstrip(";").strip())
    return m.group(1), params, body, int(m.group(3) or 0)


def run_ptx(ptx: str, args: list, grid=1, num_warps: int = 4, wgmma=None, *,
            shared=None, scratch=(0, 0), arch=None) -> list:
    """Run the kernel's PTX on ``args`` (tensors, ints, floats: the launch's non-constexpr
    arguments, in order) over ``grid`` (an int or a 1- to 3-tuple, x fastest) with the
    SIMT interpreter ``torch_mma_emu.ptx`` (loops, branches, masks, barriers, atomics,
    ``mma.sync`` on ``arch``'s matrix unit): ``num_warps`` * 32 threads per CTA, ``shared``
    bytes of dynamic shared memory (None: unknown, so the most a CTA may have, 232,448
    bytes), Triton's trailing global / profile scratch pointers
    given ``scratch`` bytes per CTA.  Returns the tensors as the PTX leaves them (copies).
    A kernel the interpreter cannot run (``ptx.Unsupported``) and that is straight-line
    code goes to the older one-CTA evaluator ``ptx_eval`` (it has the fp8 ``cvt``s)."""
    import torch

    from .. import ptx as P
    from ..ptx import coverage
    g = tuple(grid) if isinstance(grid, (tuple, list)) else (int(grid),)
    nctas = int(np.prod(g))
    arrays, outs = [], []
    for a in args:
        if isinstance(a, torch.Tensor):
            buf = _region(a).clone().view(-1)
            arrays.append(buf.view(torch.uint8).numpy())
            outs.append((a, buf))
        elif isinstance(a, float):
            arrays.append(np.float32(a))
        else:
            arrays.append(int(a) if not isinstance(a, np.ndarray) else a)
    try:
        mod = P.Module(ptx)
        gaps = coverage.missing(mod)
        if gaps:
            raise P.Unsupported("PTX instructions the SIMT interpreter lacks: "
                                + ", ".join(sorted(set().union(*gaps.values()))))
        kern = next(iter(mod.kernels.values()))
        for i, p in enumerate(kern.params[len(args):]):   # Triton's scratch pointers
            size = scratch[i] if i < len(scratch) else 0
            arrays.append(np.zeros(max(16, size * nctas), np.uint8))
        launch = P.Launch(kern, g, 32 * num_warps, arrays,
                          dynamic_smem=232448 if shared is None else shared,
                          arch=arch, wgmma=wgmma)
        launch.run()
    except P.Unsupported as e:
        try:
            return _straight_line(ptx, args, g, num_warps, wgmma)
        except Unsupported as old:
            raise Unsupported(f"{e} (and the straight-line evaluator: {old})") from None
    return [buf.as_strided(a.shape, a.stride()) for a, buf in outs]


def _straight_line(ptx: str, args: list, g: tuple, num_warps: int, wgmma) -> list:
    """The older evaluator (ptx_eval): straight-line code of one CTA at a time."""
    import itertools
    import torch
    name, pnames, body, n = parse(ptx)
    n = n or 32 * num_warps
    mem, params, outs = [], {}, []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            t = _region(a).clone()                 # the bytes the view spans, strides kept
            buf = t.view(torch.uint8).reshape(-1).numpy()
            off = a.data_ptr() % 16
            mem.append(np.concatenate([np.zeros(off, np.uint8), buf]))
            params[pnames[i]] = (i + 1) * ADDRESS_STRIDE + off
            outs.append((a, i, off))
        else:
            mem.append(None)
            v = int(a) if not isinstance(a, float) else int(np.float32(a).view(np.uint32))
            params[pnames[i]] = v & 0xFFFFFFFFFFFFFFFF
    for extra in pnames[len(args):]:
        params[extra] = 0
    g = g + (1,) * (3 - len(g))
    for z, y, x in itertools.product(range(g[2]), range(g[1]), range(g[0])):
        CTA(body, params, mem, n, (x, y, z), wgmma, g).run()
    res = []
    for a, i, off in outs:
        flat = torch.from_numpy(mem[i][off:].copy()).view(a.dtype)
        res.append(flat.as_strided(a.shape, a.stride()))
    return res


def _region(a):
    """The 1-D stretch of storage a (possibly strided) view spans, from its first element."""
    ext = 1 + sum((s - 1) * st for s, st in zip(a.shape, a.stride())) if a.numel() else 0
    return a.detach().cpu().as_strided((ext,), (1,))


def _same_alignment(a):
    """A copy of tensor ``a`` with the same strides, at an address with the same remainder
    mod 16 (the launcher specialises on it)."""
    import torch
    if not isinstance(a, torch.Tensor):
        return a
    es = a.element_size()
    region = _region(a)
    off = (a.data_ptr() % 16) // es
    buf = torch.empty(region.numel() + 32 // es, dtype=a.dtype)
    start = (-(buf.data_ptr() % 16) // es) % (16 // es) + off
    flat = buf[start:start + region.numel()]
    flat.copy_(region)
    return flat.as_strided(a.shape, a.stride())


def innermost(kernel):
    """The ``@triton.jit`` kernel under autotune / heuristics / library wrappers (their
    ``.fn`` chain): the object whose ``fn`` is the Python function."""
    import inspect
    k = kernel
    for _ in range(32):
        fn = getattr(k, "fn", None)
        if fn is None:
            break
        if inspect.isfunction(fn) and hasattr(k, "__getitem__"):
            return k
        k = fn
    raise TypeError("ptx_check: kernel must be a @triton.jit kernel (or an autotune / "
                    f"heuristics wrapper of one), got {type(kernel).__name__}")


def grid_of(grid, meta):
    g = grid(meta) if callable(grid) else grid
    g = tuple(g) if isinstance(g, (tuple, list)) else (g,)
    return tuple(int(x) for x in g)


def check(kernel, args: tuple, kwargs: dict, *, grid=1, arch: str = "H100",
          outputs=None, wgmma=None) -> dict:
    """Run ``kernel[grid](*args, **kwargs)`` twice, emulated (``emulate(arch)``) and as
    its compiled PTX evaluated here, and compare the bits of every tensor argument of the
    compiled kernel (or of the parameter names in ``outputs``).  ``kernel`` may be wrapped
    (autotune, heuristics, a library's ``.fn`` chain): the emulated launch runs through the
    wrappers and the PTX is compiled for the arguments the inner kernel received.  The
    caller's tensors are not modified.  Returns {"equal": bool, "mismatches": [names],
    "summary": em.summary(), "ptx": the PTX}."""
    import inspect

    import torch

    from .context import emulate
    from .layout import compile_launch, remember, target_of
    inner = innermost(kernel)
    fn = inner.fn
    if isinstance(grid, int) and grid < 1 or not isinstance(grid, (int, tuple, list)) \
            and not callable(grid):
        raise ValueError(f"ptx_check.check: grid must be a positive int, a tuple or a "
                         f"callable, got {grid!r}")
    from ..registry import canonical_arch
    target = target_of(arch)
    if target is None:
        raise ValueError(f"ptx_check.check: arch must be an NVIDIA arch (the checker reads "
                         f"PTX), got {arch!r} ({canonical_arch(arch)})")
    remember(inner)
    calls = []

    def spy(*a, **kw):          # the inner launch: its arguments before it runs
        calls.append(([_same_alignment(x) for x in a],
                      {k: _same_alignment(v) for k, v in kw.items()}, a, kw))
        return type(inner).run(inner, *a, **kw)
    emu_args = [_same_alignment(a) for a in args]
    emu_kwargs = {k: _same_alignment(v) for k, v in kwargs.items()}
    inner.run = spy
    try:
        with emulate(arch) as em:
            kernel[grid if not isinstance(grid, int) else (grid,)](*emu_args, **emu_kwargs)
    finally:
        inner.__dict__.pop("run", None)
    if not calls:
        raise ValueError("ptx_check.check: the launch did not reach the kernel's "
                         "JITFunction.run (a wrapper that caches compiled kernels, e.g. "
                         "FlagGems' LibEntry): pass ptx_check.innermost(kernel)")
    if len(calls) != 1:
        raise ValueError(f"ptx_check.check: the launch ran the kernel {len(calls)} times "
                         "(one launch is compared; use check_program for several)")
    pre_a, pre_kw, post_a, post_kw = calls[0]
    params = inspect.signature(fn).parameters
    bound = inspect.signature(fn).bind(*pre_a, **{k: v for k, v in pre_kw.items()
                                                  if k in params})
    bound.apply_defaults()
    post = inspect.signature(fn).bind(*post_a, **{k: v for k, v in post_kw.items()
                                                  if k in params})
    launch_kw = {k: v for k, v in pre_kw.items() if k not in ("grid", "warmup")}
    comp = compile_launch(fn, tuple(pre_a), launch_kw, target, ptx=True)
    meta = dict(bound.arguments, **{k: v for k, v in launch_kw.items() if k not in params})
    g = grid_of(pre_kw.get("grid", grid), meta)
    rt = [bound.arguments[k] for k in comp.runtime_args]
    ptx_out = run_ptx(comp.ptx, rt, g, comp.num_warps, wgmma, shared=comp.shared,
                      scratch=comp.scratch, arch=arch)
    tensors = [k for k in comp.runtime_args if isinstance(bound.arguments[k], torch.Tensor)]
    mism = []
    for name, got in zip(tensors, ptx_out):
        if outputs is not None and name not in outputs:
            continue
        e = post.arguments[name]
        eb = e.contiguous().reshape(-1).view(torch.uint8)      # 0-d tensors too
        gb = got.contiguous().reshape(-1).view(torch.uint8)
        if not torch.equal(eb, gb):
            mism.append(name)
    return {"equal": not mism, "mismatches": mism, "summary": em.summary(), "ptx": comp.ptx}
