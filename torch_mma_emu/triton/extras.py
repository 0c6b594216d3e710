"""What an emulate block adds around the dots, registered with the interpreter seam
(hook.py calls :func:`install` once and :func:`begin_launch` / :func:`end_launch` around
each launch): the target's math (target_math.py), floating-point contraction as the
compiled code does it (contract.py), atomics recorded (atomics.py), loads and stores outside
the arguments refused (bounds.py), and the interpreter gaps
third-party kernels meet (gaps.py).  ``summary_lines`` is what ``em.summary()`` adds."""
from __future__ import annotations

from . import bounds, contract, gaps, libdevice_calls, target_math, zoo_gaps


def _emulating(block) -> bool:
    return block is not None and (block.arch is not None or block.spec is not None)


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
    prev_ext = IB.create_extern_elementwise

    def create_extern_elementwise(self, libName, libPath, symbol, argList, retType, isPure):
        block = current()
        out = None if block is None or not getattr(block, "exact_math", True) else \
            libdevice_calls.evaluate(block, symbol, argList, target_math.counts(block))
        if out is None:
            return prev_ext(self, libName, libPath, symbol, argList, retType, isPure)
        return out
    set_attr(IB, "create_extern_elementwise", create_extern_elementwise)
    zoo_gaps.install(set_attr, ti, current)


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
    """Contraction is read from sm_90 PTX: NVIDIA archs only (AMD's is not modelled)."""
    block._launch_info = None
    if _emulating(block) and block.arch is not None and block.vendor == "nvidia":
        block._launch_info = contract.Launch(fn, args, kwargs)
        if block.exact_math:
            target_math.prepare(fn)
            libdevice_calls.prepare(fn)
    elif _emulating(block):
        contract.counts(block)[("not modelled", block.arch or "a Spec")] += 1


def end_launch(block) -> None:
    block._launch_info = None
    bounds.end_launch(block)


def launch_result(interp, kwargs, out):
    """What ``kernel[grid](...)`` returns: the interpreter's result, or a stand-in for the
    compiled kernel that library caches keep and launch again (gaps.Relaunch)."""
    return gaps.Relaunch(interp, kwargs) if out is None else out


def summary_lines(block) -> list[str]:
    return (target_math.summary_lines(block) + contract.summary_lines(block)
            + gaps.summary_lines(block))
