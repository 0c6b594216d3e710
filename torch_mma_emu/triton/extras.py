"""What an emulate block adds around the dots, registered with the interpreter seam
(hook.py calls :func:`install` once and :func:`begin_launch` / :func:`end_launch` around
each launch): the target's math (target_math.py), floating-point contraction as the
compiled code does it (contract.py), atomics recorded (atomics.py), and the interpreter gaps
third-party kernels meet (gaps.py).  ``summary_lines`` is what ``em.summary()`` adds."""
from __future__ import annotations

from . import contract, gaps, target_math, zoo_gaps


def _emulating(block) -> bool:
    return block is not None and (block.arch is not None or block.spec is not None)


def install(set_attr, ti, current) -> None:
    IB = ti.InterpreterBuilder
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
    zoo_gaps.install(set_attr, ti, current)


def begin_launch(block, fn, args, kwargs) -> None:
    """Contraction is read from sm_90 PTX: NVIDIA archs only (AMD's is not modelled)."""
    block._launch_info = None
    if _emulating(block) and block.arch is not None and block.vendor == "nvidia":
        block._launch_info = contract.Launch(fn, args, kwargs)
    elif _emulating(block):
        contract.counts(block)[("not modelled", block.arch or "a Spec")] += 1


def end_launch(block) -> None:
    block._launch_info = None


def launch_result(interp, kwargs, out):
    """What ``kernel[grid](...)`` returns: the interpreter's result, or a stand-in for the
    compiled kernel that library caches keep and launch again (gaps.Relaunch)."""
    return gaps.Relaunch(interp, kwargs) if out is None else out


def summary_lines(block) -> list[str]:
    return (target_math.summary_lines(block) + contract.summary_lines(block)
            + gaps.summary_lines(block))
