"""Math as the target computes it: what each ``tl`` / ``tl.math`` function becomes in the PTX
that Triton 3.6 emits for sm_90 (read on the CPU: tests/triton_emu/test_triton_math.py compiles each
function and checks this table against the PTX), evaluated with :mod:`torch_mma_emu.gpu_math`
inside an ``emulate`` block.

``SEQUENCES`` is the one table: interpreter builder method -> {dtype: steps}, each step a
PTX instruction and its operands ("x", "y", "z": the function's arguments; "_": the previous
step's result; a float: an immediate).  ``None``: a libdevice routine (``__nv_logf``, ...):
on fp32 its PTX, cut out of a one-element kernel compiled on the CPU, runs instruction by
instruction with gpu_math (``gpu_math.ptx_run``; ``tl.log``, ``tl.log2``, ``tl.erf``); what
that cannot run (``tl.sin`` / ``tl.cos``: local memory and a loop) and fp64 are computed in
float64 rounded to the dtype and named APPROXIMATE in ``em.summary()``, as is every step
whose instruction model is not bit-exact (``gpu_math.FUNCTIONS[...].exact``).  Targets other than
NVIDIA keep NumPy's math, named approximate too.  ``emulate(..., exact_math=False)`` keeps
NumPy's math everywhere (faster), said in the summary.
"""
from __future__ import annotations

import re
from collections import Counter

import numpy as np

from .. import gpu_math
from ..gpu_math import ptx_run
from . import libdevice_calls, target_rules
from .record import emulating

LOG2E = np.float32(1.44269502162933349609375)        # 0f3FB8AA3B, the PTX immediate

# builder method -> (tl name, {dtype: steps or None (libdevice routine), ...})
SEQUENCES: dict[str, tuple[str, dict]] = {
    "create_exp": ("tl.exp", {"fp32": (("mul.rn.f32", "x", LOG2E), ("ex2.approx.f32", "_")),
                              "fp64": None}),
    "create_exp2": ("tl.exp2", {"fp32": (("ex2.approx.ftz.f32", "x"),), "fp64": None}),
    "create_fdiv": ("a / b", {"fp32": (("div.full.f32", "x", "y"),),
                              "fp64": (("div.rn.f64", "x", "y"),)}),
    "create_precise_divf": ("tl.math.div_rn", {"fp32": (("div.rn.f32", "x", "y"),),
                                               "fp64": (("div.rn.f64", "x", "y"),)}),
    "create_sqrt": ("tl.sqrt", {"fp32": (("sqrt.approx.ftz.f32", "x"),),
                                "fp64": (("sqrt.rn.f64", "x"),)}),
    "create_precise_sqrt": ("tl.sqrt_rn", {"fp32": (("sqrt.rn.f32", "x"),),
                                           "fp64": (("sqrt.rn.f64", "x"),)}),
    "create_rsqrt": ("tl.rsqrt", {"fp32": (("rsqrt.approx.ftz.f32", "x"),), "fp64": None}),
    "create_fma": ("tl.fma", {"fp32": (("fma.rn.f32", "x", "y", "z"),), "fp64": None}),
    "create_maxnumf": ("tl.maximum", {"fp32": (("max.f32", "x", "y"),)}),
    "create_minnumf": ("tl.minimum", {"fp32": (("min.f32", "x", "y"),)}),
    "create_maximumf": ("tl.maximum(propagate_nan=ALL)", {"fp32": (("max.NaN.f32", "x", "y"),)}),
    "create_minimumf": ("tl.minimum(propagate_nan=ALL)", {"fp32": (("min.NaN.f32", "x", "y"),)}),
    "create_log": ("tl.log", {"fp32": None, "fp64": None}),
    "create_log2": ("tl.log2", {"fp32": None, "fp64": None}),
    "create_sin": ("tl.sin", {"fp32": None, "fp64": None}),
    "create_cos": ("tl.cos", {"fp32": None, "fp64": None}),
    "create_erf": ("tl.erf", {"fp32": None, "fp64": None}),
}
# the libdevice routine each ``None`` above is (from the same PTX: a call-free inlined body)
LIBDEVICE = {("create_exp", "fp64"): "__nv_exp", ("create_exp2", "fp64"): "__nv_exp2",
             ("create_rsqrt", "fp64"): "rsqrt.approx.f64", ("create_fma", "fp64"): "fma.rn.f64",
             ("create_log", "fp32"): "__nv_logf", ("create_log", "fp64"): "__nv_log",
             ("create_log2", "fp32"): "__nv_log2f", ("create_log2", "fp64"): "__nv_log2",
             ("create_sin", "fp32"): "__nv_sinf", ("create_sin", "fp64"): "__nv_sin",
             ("create_cos", "fp32"): "__nv_cosf", ("create_cos", "fp64"): "__nv_cos",
             ("create_erf", "fp32"): "__nv_erff", ("create_erf", "fp64"): "__nv_erf"}
# the float64 function an unmodelled step or routine is approximated with
_F64 = {"create_exp": np.exp, "create_exp2": np.exp2, "create_log": np.log,
        "create_log2": np.log2, "create_sin": np.sin, "create_cos": np.cos,
        "create_rsqrt": lambda v: 1 / np.sqrt(v), "create_fma": lambda a, b, c: a * b + c,
        "create_sqrt": np.sqrt, "create_precise_sqrt": np.sqrt, "create_fdiv": np.divide,
        "create_precise_divf": np.divide}
_F64_EXACT = {"div.rn.f64": np.divide, "sqrt.rn.f64": np.sqrt}     # IEEE in NumPy float64


def _erf(v):
    import math
    return np.vectorize(math.erf, otypes=[np.float64])(v)


_F64["create_erf"] = _erf


def _dtype_name(h) -> str:
    return getattr(h.dtype, "name", str(h.dtype))


def describe(steps) -> str:
    return " ; ".join(s[0] for s in steps)


def _run(steps, args):
    vals = {"x": args[0], "y": args[1] if len(args) > 1 else None,
            "z": args[2] if len(args) > 2 else None}
    prev = None
    for name, *ops in steps:
        xs = [prev if o == "_" else vals[o] if isinstance(o, str) else np.float32(o)
              for o in ops]
        if name in _F64_EXACT:
            with np.errstate(all="ignore"):
                prev = _F64_EXACT[name](*[np.asarray(v, np.float64) for v in xs])
        else:
            prev = gpu_math.evaluate(name, *[np.asarray(v, np.float32) for v in xs])
    return prev


def _approx(method, args, np_dtype):
    with np.errstate(all="ignore"):
        out = _F64[method](*[np.asarray(a, np.float64) for a in args])
    return np.asarray(out).astype(np_dtype)


# builder method -> the libdevice function whose routine it inlines (the same PTX as
# ``libdevice.<name>``: libdevice_calls compiles and caches both)
_WORDS = {"create_log": "log", "create_log2": "log2", "create_sin": "sin", "create_cos": "cos",
          "create_erf": "erf"}


def prepare(fn) -> None:
    """Compile the routines a kernel may call before its launch (the interpreter patches
    ``triton.language`` during it, which compiling needs unpatched): those whose name
    appears in the kernel's source file."""
    import inspect
    if fn in _PREPARED:
        return
    _PREPARED.add(fn)
    try:
        with open(inspect.getsourcefile(fn)) as f:    # closed at once
            text = f.read()
    except (TypeError, OSError):
        return
    for word in _WORDS.values():
        if re.search(rf"\b{word}\b", text):
            libdevice_calls.routine(word)


_PREPARED: set = set()        # kernels whose file was scanned


def dead_reason() -> str:
    return ptx_run.dead_reason[0] if ptx_run.dead_reason else "unsupported code"


def counts(block) -> Counter:
    return block.tallies.math


def evaluate(block, method: str, args):
    """The interpreter's ``method`` on TensorHandles ``args`` as ``block``'s target computes
    it: a TensorHandle, or None to leave it to the interpreter (no emulation, or a dtype
    this table does not cover, e.g. an integer or fp16 ``tl.fma``)."""
    if not emulating(block):
        return None
    tl_name, per_dtype = SEQUENCES[method]
    dt = _dtype_name(args[0])
    if dt not in per_dtype or any(_dtype_name(a) != dt for a in args):
        return None
    from triton.runtime.interpreter import TensorHandle
    data = [a.data for a in args]
    np_dtype = data[0].dtype
    if not getattr(block, "exact_math", True):
        counts(block)[(tl_name, dt, "NumPy (exact_math=False)", False)] += 1
        return None
    steps = per_dtype[dt]
    if not target_rules.ptx_modelled(block.arch):
        what = "a Spec names no target" if block.arch is None else f"{block.arch}: not modelled"
        if method not in _F64:                      # min / max: the interpreter's NumPy
            counts(block)[(tl_name, dt, f"NumPy ({what})", False)] += 1
            return None
        counts(block)[(tl_name, dt, f"float64 rounded ({what})", False)] += 1
        return TensorHandle(_approx(method, data, np_dtype), args[0].dtype)
    if steps is None:
        got = libdevice_calls.compiled(_WORDS[method]) if dt == "fp32" else None
        if isinstance(got, tuple):
            prog, src, dst = got
            out, dead = ptx_run.run_lanes(prog, src, dst, data[0])
            how = f"{LIBDEVICE[(method, dt)]} (its {len(prog)} PTX instructions)"
            counts(block)[(tl_name, dt, how, ptx_run.exact(prog))] += 1
            if dead.any():                  # the routine's slow path: float64 rounded
                why = dead_reason()
                counts(block)[(tl_name, dt, f"{LIBDEVICE[(method, dt)]} slow path, "
                               f"{int(dead.sum())} elements ({why}): float64 rounded",
                               False)] += 1
                flat = data[0].reshape(-1)
                out = out.copy()
                out[dead] = _approx(method, [flat[dead]], np_dtype)
            return TensorHandle(out.reshape(data[0].shape).copy(), args[0].dtype)
        why = "float64 rounded" + (f"; its PTX has {got}" if got else "")
        counts(block)[(tl_name, dt, f"{LIBDEVICE[(method, dt)]} ({why})", False)] += 1
        return TensorHandle(_approx(method, data, np_dtype), args[0].dtype)
    exact = all(s[0] in _F64_EXACT or gpu_math.FUNCTIONS[s[0]].exact for s in steps)
    counts(block)[(tl_name, dt, describe(steps), exact)] += 1
    shape = np.broadcast_shapes(*[d.shape for d in data])
    out = _run(steps, [np.broadcast_to(d, shape) for d in data])
    return TensorHandle(np.asarray(out).astype(np_dtype).reshape(shape), args[0].dtype)


def summary_lines(block) -> list[str]:
    c = block.tallies.math
    if not c:
        return []
    if block.arch is not None and block.vendor == "nvidia":
        head = f"math on {block.arch} (Triton 3.6's sm_90 PTX; torch_mma_emu.gpu_math models):"
    else:     # AMD targets (or a Spec): the lines say what ran instead
        head = f"math on {block.arch or 'a Spec'} (its compiled math is not modelled):"
    lines = [head]
    for (name, dt, how, exact), n in sorted(c.items(), key=lambda kv: -kv[1]):
        tag = "bit-exact" if exact else "APPROXIMATE"
        lines.append(f"{n:8d}  {name} {dt} = {how} [{tag}]")
    return lines


def approximate(block) -> list[str]:
    """The functions ``block`` ran that are not bit-exact ("tl.log fp32 = __nv_logf ...")."""
    return [f"{n} {dt} = {how}" for (n, dt, how, exact) in block.tallies.math
            if not exact]


def install(set_attr, builder_cls, current) -> None:
    """Replace the interpreter builder's math methods (hook.py's registration point)."""
    for method in SEQUENCES:
        orig = getattr(builder_cls, method)

        def replaced(self, *args, _orig=orig, _method=method):
            out = evaluate(current(), _method, args)
            return _orig(self, *args) if out is None else out
        set_attr(builder_cls, method, replaced)
