"""What an emulate block adds around the dots, registered with the interpreter seam
(hook.py calls :func:`install` once and :func:`begin_launch` / :func:`end_launch` around
each launch): the target's math (target_math.py), floating-point contraction as the
compiled code does it (contract.py), atomics recorded (atomics.py), loads and stores outside
the arguments refused (bounds.py), and the interpreter gaps
third-party kernels meet (gaps.py).  ``summary_lines`` is what ``em.summary()`` adds."""
from __future__ import annotations

from . import bounds, contract, gaps, libdevice_calls, target_math, target_rules, zoo_gaps
from .record import emulating


def install(set_attr, ti, current) -> None:
    IB = ti.InterpreterBuilder
    bounds.install(set_attr, ti, current)       # loads and stores outside the arguments
    target_math.install(set_attr, IB, current)
    prev = {n: getattr(IB, n) for n in ("create_fmul", "create_fadd", "create_fsub")}

    def create_fmul(self, lhs, rhs):
        return contract.fmul(current(), prev["create_fmul"](self, lhs, rhs), lhs, rhs)

    def create_fadd(self, lhs, rhs):
        out = contract.fadd(current(), lhs, rhs)
        return prev["create_fadd"](self, lhs, rhs) if out is None else out

    def create_fsub(self, lhs, rhs):
        out = contract.fadd(current(), lhs, rhs, negate_rhs=True)
        return prev["create_fsub"](self, lhs, rhs) if out is None else out
    set_attr(IB, "create_fmul", create_fmul)
    set_attr(IB, "create_fadd", create_fadd)
    set_attr(IB, "create_fsub", create_fsub)

    for name, op in (("create_atomic_rmw", None), ("create_atomic_cas", "cas")):
        def atomic(self, *args, _prev=getattr(IB, name), _op=op):
            out = _prev(self, *args)
            kind = _op or getattr(args[0], "name", str(args[0])).lower()
            gaps.record_atomic(current(), kind, out.dtype)
            return out
        set_attr(IB, name, atomic)
    set_attr(ti.FunctionRewriter, "_transform_ast",
             gaps.transform_ast(ti.FunctionRewriter._transform_ast, current))
    from triton.runtime.autotuner import Autotuner
    set_attr(Autotuner, "__getitem__", gaps.autotuner_getitem(Autotuner, current))
    gaps.install_driver(set_attr, current)
    from .device_queries import install_in_blocks
    install_in_blocks(set_attr, current)
    prev_ext = IB.create_extern_elementwise

    def create_extern_elementwise(self, libName, libPath, symbol, argList, retType, isPure):
        block = current()
        out = None if block is None or not getattr(block, "exact_math", True) else \
            libdevice_calls.evaluate(block, symbol, argList, target_math.counts(block))
        if out is None and emulating(block) and not target_rules.ptx_modelled(block.arch):
            out = _extern_f64(block, symbol, argList)
        if out is None:
            return prev_ext(self, libName, libPath, symbol, argList, retType, isPure)
        return out
    set_attr(IB, "create_extern_elementwise", create_extern_elementwise)
    zoo_gaps.install(set_attr, ti, current)


def _erf(v):
    import math
    import numpy as np
    return np.vectorize(math.erf, otypes=[np.float64])(v)


def _erfc(v):
    import math
    import numpy as np
    return np.vectorize(math.erfc, otypes=[np.float64])(v)


_F64_MORE = {"erf": _erf, "erfc": _erfc}      # beyond libdevice_calls.F64 (FlagGems gelu)


def _extern_f64(block, symbol, args):
    """A libdevice call on a target whose code is not read from PTX (AMD, a Spec): the
    function in float64, rounded to fp32 (named APPROXIMATE in the summary); None where
    libdevice_calls has no float64 version (the interpreter then raises)."""
    import numpy as np
    from triton.runtime.interpreter import TensorHandle
    name = libdevice_calls.symbols().get(symbol)
    f = libdevice_calls.F64.get(name) or _F64_MORE.get(name)
    if f is None or len(args) != 1 or getattr(args[0].dtype, "name", "") != "fp32":
        return None
    what = block.arch or "a Spec"
    target_math.counts(block)[(f"libdevice.{name}", "fp32",
                               f"float64 rounded ({what}: not modelled)", False)] += 1
    x = np.asarray(args[0].data, np.float32)
    with np.errstate(all="ignore"):
        out = f(x.astype(np.float64)).astype(np.float32)
    return TensorHandle(out.reshape(x.shape).copy(), args[0].dtype)


def patch_lang(lang, scope) -> None:
    """With ``triton.language`` patched for an interpreted launch: libdevice's functions too
    (the interpreter leaves them calling the compiler's semantic, which fails)."""
    import triton.language as tl
    if lang is not tl:
        return
    from triton.runtime import interpreter as ti
    try:
        from triton.language.extra.cuda import libdevice
    except ImportError:
        return
    ti._patch_builtin(libdevice, ti.interpreter_builder, scope)


def begin_launch(block, fn, args, kwargs) -> None:
    """Contraction and libdevice routines are read from the PTX the target compiles
    (``target_rules.ptx_modelled``); elsewhere contraction is named as not modelled."""
    if not emulating(block):
        return
    if target_rules.ptx_modelled(block.arch):
        block.launch.contract = contract.Launch(fn, args, kwargs)
        if block.exact_math:
            target_math.prepare(fn)
            libdevice_calls.prepare(fn)
            _prepare_named(fn)
    else:
        contract.counts(block)[("not modelled", block.arch or "a Spec")] += 1


_NAMED: set = set()


def _prepare_named(fn, depth: int = 2) -> None:
    """Compile, before the launch, the libdevice routines that the kernel and the @jit
    helpers it names (``depth`` levels) reach by a name of their module (``exp2 =
    tl_extra_shim.exp2``, FlagGems), which ``libdevice_calls.prepare``'s scan for
    ``libdevice.<name>(`` misses (compiling one during the launch is not possible)."""
    if fn in _NAMED or depth < 0:
        return
    _NAMED.add(fn)
    import triton.language as tl
    unary = set(libdevice_calls.symbols().values())
    for v in list(getattr(fn, "__globals__", {}).values()):
        if tl.core.is_builtin(v) and getattr(v, "__module__", "").startswith(
                "triton.language.extra") and getattr(v, "__name__", "") in unary:
            libdevice_calls.routine(v.__name__)
        elif type(v).__name__ in ("JITFunction", "InterpretedFunction"):
            _prepare_named(v.fn, depth - 1)


def end_launch(block) -> None:
    """The launch's bounds record goes (bounds.py); the rest goes with ``block.launch``."""
    bounds.end_launch(block)


def launch_result(interp, kwargs, out):
    """What ``kernel[grid](...)`` returns: the interpreter's result, or a stand-in for the
    compiled kernel that library caches keep and launch again (gaps.Relaunch)."""
    return gaps.Relaunch(interp, kwargs) if out is None else out


def summary_lines(block) -> list[str]:
    patched = [f"{n:8d}  {what}" for what, n in block.tallies.interpreter.most_common()]
    return (target_math.summary_lines(block) + contract.summary_lines(block)
            + gaps.summary_lines(block)
            + (["Triton's interpreter patched:"] + patched if patched else []))
