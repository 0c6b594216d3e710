"""Interpreter gaps met running third-party kernels as shipped (the zoo:
tests/triton_emu/test_triton_zoo*.py), filled while a block is open; gaps.py holds the others.

* **float scalar arguments**: a compiled kernel takes a Python ``float`` argument as an fp32
  scalar (``triton.runtime.jit.mangle_type`` gives "fp32"), so kernels call ``eps.to(...)`` on
  it (Liger-Kernel's ``_rms_norm_forward_kernel``); Triton 3.6's interpreter passes the Python
  float through (its ``_implicit_cvt`` converts ints and pointers only).  Inside a block a float
  argument becomes an fp32 scalar tensor, rounded to fp32 as the launcher does.
* **bool arguments** that are not constexpr (gemlite's ``load_scales_as_block``): the
  launcher passes an ``i1``; Triton 3.6's interpreter builds an int32 array typed ``int1`` and
  fails ("itemsize (32 bits) exceeds ... int1").  Inside a block a bool is an int1 scalar.
* **the generic libdevice stubs**: ``triton.language.extra.libdevice`` holds stubs the
  compiler replaces by the backend's libdevice calls; the interpreter leaves them returning
  ``None`` (``from triton.language.extra.libdevice import rsqrt``: Liger-Kernel).  Inside a
  block each such function a kernel (or a function it calls) names runs as the CUDA
  backend's routine where libdevice_calls.py has its sm_90 PTX (unary fp32, NVIDIA arch,
  compiled before the kernel runs), else in float64 rounded to the argument's dtype:
  correctly rounded for ``div_rn`` / ``sqrt_rn`` / ``add_rn`` style routines and named
  APPROXIMATE in ``em.summary()`` otherwise.
* **bfloat16 arithmetic**: the interpreter stores bf16 as its uint16 bit patterns and applies
  NumPy's ``+ - * /``, ``min``/``max`` and comparisons to those integers (Triton 3.6:
  ``bf16 * bf16`` gives garbage, Liger-Kernel's ``swiglu`` NaN).  Inside a block bf16
  operands are decoded, the operation is done in fp32 and rounded once to bf16 (RNE): the
  correctly rounded result (fp32's 24 bits >= 2 x 8 + 2 make the double rounding innocuous
  for + - * /), which is what sm_90's ``add/mul.rn.bf16`` and sm_80's ``fma.rn.bf16``
  compute.  (AMD upcasts to fp32 and rounds back: the same bits for these operations.)
* **autotuners that time configs themselves** (FlagGems' ``LibEntry`` calls its
  ``LibTuner``'s ``run`` directly, which times each config with ``Autotuner._bench`` on the GPU
  driver: "0 active drivers" on a CPU): inside an emulating block ``_bench`` launches nothing
  and reports the config the block's ``autotune`` picks (the first by default) as fastest
  (0 ms) and every other as infinitely slow, so the tuner's own choice is the block's.
"""
from __future__ import annotations

import math

import numpy as np

_MODULES = ("triton.language.extra.libdevice",)    # the backends' modules: libdevice_calls.py
_erf = np.vectorize(math.erf, otypes=[np.float64])
# libdevice name -> float64 function; names in EXACT round correctly through float64
F64 = {"rsqrt": lambda x: 1 / np.sqrt(x), "sqrt": np.sqrt, "exp": np.exp, "exp2": np.exp2,
       "exp10": lambda x: np.power(10.0, x), "expm1": np.expm1, "log": np.log,
       "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "tanh": np.tanh, "sin": np.sin,
       "cos": np.cos, "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh, "asin": np.arcsin,
       "acos": np.arccos, "atan": np.arctan, "atan2": np.arctan2, "erf": _erf,
       "pow": np.power, "fast_expf": np.exp, "fast_logf": np.log, "fast_powf": np.power,
       "fast_tanhf": np.tanh, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
       "rint": np.rint, "nearbyint": np.rint, "round": np.round, "fabs": np.abs, "abs": np.abs,
       "fmax": np.fmax, "fmin": np.fmin, "copysign": np.copysign, "div_rn": np.divide,
       "sqrt_rn": np.sqrt, "fma_rn": lambda a, b, c: a * b + c, "fma": lambda a, b, c: a * b + c,
       "add_rn": np.add, "mul_rn": np.multiply, "sub_rn": np.subtract}
EXACT = {"floor", "ceil", "trunc", "rint", "nearbyint", "fabs", "abs", "fmax", "fmin",
         "copysign", "div_rn", "sqrt_rn", "add_rn", "mul_rn", "sub_rn"}


class _Globals:
    """A function's globals as attributes, for the interpreter's restorable patch scope."""

    def __init__(self, d):
        object.__setattr__(self, "_d", d)

    def __getattr__(self, name):
        try:
            return self._d[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        self._d[name] = value

    def __delattr__(self, name):
        del self._d[name]


def _libdevice(name, stub, current):
    f = F64.get(name)

    def call(*args, **kwargs):
        block = current()
        if block is None or f is None:
            return stub(*args, **kwargs)
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle
        from . import target_math
        ts = [a for a in args if isinstance(a, tl.tensor)]
        if not ts:
            raise TypeError(f"libdevice.{name} needs a tensor argument in the interpreter")
        ref = max(ts, key=lambda t: t.handle.data.size)
        out = _as_ptx(block, name, args, ref)
        if out is not None:
            return out
        npdt = ref.handle.data.dtype
        data = [a.handle.data.astype(np.float64) if isinstance(a, tl.tensor)
                else np.float64(a) for a in args]
        with np.errstate(all="ignore"):
            out = np.asarray(f(*data)).astype(npdt)
        dt = getattr(ref.handle.dtype, "name", str(npdt))
        exact = name in EXACT
        how = f"libdevice {name} ({'float64, rounded once' if exact else 'float64 rounded'})"
        target_math.counts(block)[(f"libdevice.{name}", dt, how, exact)] += 1
        return tl.tensor(TensorHandle(out, ref.handle.dtype), ref.type)
    call._tme_libdevice = name
    return call


def _nvidia(block) -> bool:
    from .target_rules import ptx_modelled
    return ptx_modelled(block.arch) and getattr(block, "exact_math", True)


def _as_ptx(block, name, args, ref):
    """The call through libdevice_calls (sm_90 PTX), when its routine is compiled."""
    from . import libdevice_calls, target_math
    if not _nvidia(block) or len(args) != 1 or getattr(ref.handle.dtype, "name", "") != "fp32":
        return None
    if not isinstance(libdevice_calls.compiled(name), tuple):
        return None
    sym = {v: k for k, v in libdevice_calls.symbols().items()}.get(name)
    out = None if sym is None else libdevice_calls.evaluate(block, sym, [ref.handle],
                                                            target_math.counts(block))
    import triton.language as tl
    return None if out is None else tl.tensor(out, ref.type)


def _precompile(fn, block) -> None:
    """Compile the PTX routines of the generic stubs ``fn`` names (before the interpreter
    patches triton.language: compiling needs the real one)."""
    from . import libdevice_calls
    unary = set(libdevice_calls.symbols().values())
    for value in list(fn.__globals__.values()):
        if getattr(value, "__module__", None) in _MODULES and \
                getattr(value, "__name__", None) in unary:
            libdevice_calls.routine(value.__name__)


def _patch_libdevice(fn, scope, current):
    import inspect
    g = fn.__globals__
    for key, value in list(g.items()):
        if getattr(value, "_tme_libdevice", None):
            continue
        if inspect.ismodule(value) and value.__name__ in _MODULES:
            for name in F64:
                stub = getattr(value, name, None)
                if stub is not None and not getattr(stub, "_tme_libdevice", None):
                    scope.set_attr(value, name, _libdevice(name, stub, current))
        elif callable(value) and getattr(value, "__module__", None) in _MODULES \
                and getattr(value, "__name__", None) in F64:
            scope.set_attr(_Globals(g), key, _libdevice(value.__name__, value, current))


def _bf16_to_f32(data):
    return (np.asarray(data).astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(x):
    import torch
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().view(np.uint16)


def _bf16_op(op, *handles):
    with np.errstate(all="ignore"):
        out = np.asarray(op(*[_bf16_to_f32(h.data) for h in handles]))
    if out.dtype == np.bool_:            # a comparison: as the interpreter returns it
        return out.astype(np.uint16)
    return _f32_to_bf16(out)


def install(set_attr, ti, current) -> None:
    prev_cvt, prev_patch = ti._implicit_cvt, ti._patch_lang
    IB = ti.InterpreterBuilder
    prev_bin, prev_un, prev_fma = IB.binary_op, IB.unary_op, IB.create_fma
    import triton.language as tl

    def binary_op(self, lhs, rhs, op):
        if lhs.dtype.scalar == tl.bfloat16 and current() is not None:
            return ti.TensorHandle(_bf16_op(op, lhs, rhs), tl.bfloat16)
        return prev_bin(self, lhs, rhs, op)

    def unary_op(self, arg, op):
        if arg.dtype.scalar == tl.bfloat16 and current() is not None:
            return ti.TensorHandle(_bf16_op(op, arg), tl.bfloat16)
        return prev_un(self, arg, op)

    def create_fma(self, x, y, z):
        if z.dtype.scalar == tl.bfloat16 and current() is not None:   # fma.rn.bf16: exact
            a, b, c = (_bf16_to_f32(h.data).astype(np.float64) for h in (x, y, z))
            return ti.TensorHandle(_f32_to_bf16((a * b + c).astype(np.float32)), tl.bfloat16)
        return prev_fma(self, x, y, z)
    set_attr(IB, "binary_op", binary_op)
    set_attr(IB, "unary_op", unary_op)
    set_attr(IB, "create_fma", create_fma)

    def _implicit_cvt(arg):
        if isinstance(arg, bool) and current() is not None:      # an int1 scalar, not int32
            import triton.language as tl
            return tl.tensor(ti.TensorHandle(np.array([arg], dtype=np.bool_), tl.int1), tl.int1)
        if isinstance(arg, float) and current() is not None:
            import triton.language as tl
            handle = ti.TensorHandle(np.array([arg], dtype=np.float32), tl.float32)
            return tl.tensor(handle, tl.float32)
        return prev_cvt(arg)

    import triton.language as tl_
    unpatched = tl_.static_range

    def _patch_lang(fn):
        block = current()
        if block is not None and _nvidia(block) and tl_.static_range is unpatched:
            _precompile(fn, block)          # the kernel itself, before its launch patches
        scope = prev_patch(fn)
        if current() is not None:
            _patch_libdevice(fn, scope, current)
        return scope
    from triton.runtime.autotuner import Autotuner
    prev_bench = Autotuner._bench

    def _bench(self, *args, config, **meta):
        block = current()
        if block is None:
            return prev_bench(self, *args, config=config, **meta)
        configs = list(self.configs)
        pick = configs[0] if block.autotune == "first" else block.autotune(configs)
        return [0.0 if config is pick else float("inf")] * 3
    set_attr(Autotuner, "_bench", _bench)
    set_attr(ti, "_implicit_cvt", _implicit_cvt)
    set_attr(ti, "_patch_lang", _patch_lang)
