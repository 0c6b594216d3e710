"""Summation trees (torch_mma_emu.order's SumTree, e.g. revealed by FPRev) as schedules: a
tree's nodes mapped to elementary operations and IEEE additions, compiled into the
interpreter's program (csrc/core/schedule.h), and the epilogue's opcodes every schedule
program ends with.  The only module of the schedule that reads the tree type."""
from __future__ import annotations

from functools import lru_cache
from typing import Optional

from . import cpp
from .order import SumTree
from .schedule_split import ScheduleRowError
from .spec import Spec

# program opcodes, by name (csrc/core/layout.h MMA_SCHED_OPS, checked by cpp.py)
_C, _ADD, _NODE = cpp.SCHED["C"], cpp.SCHED["ADD"], cpp.SCHED["NODE"]
_EPI_ALPHA, _EPI_FMA = cpp.SCHED["EPI_ALPHA"], cpp.SCHED["EPI_FMA"]
_EPI_MULADD = cpp.SCHED["EPI_MULADD"]
_MAX_STACK = 64


@lru_cache(maxsize=64)
def parse_tree(text: str):
    """The SumTree of a tree schedule's text (ValueError when it is not one)."""
    try:
        return SumTree.parse(text)
    except ValueError as e:
        raise ValueError(f"Schedule tree is not a valid SumTree: {e}") from None


def tree_text(tree) -> Optional[str]:
    """The text of a SumTree; None when ``tree`` is not one."""
    return tree.to_text() if isinstance(tree, SumTree) else None


def node_capacity(spec: Spec) -> int:
    """Products one elementary operation of ``spec`` takes."""
    if spec.scaled:
        raise ValueError(f"schedules on block-scaled instructions ({spec.op}) are not "
                         "supported yet")
    return spec.L      # every operation: FMA has L = 1; FTZ-AddMul's L products flush once


def _slots(ks: list[int], width: int) -> list[int]:
    """Chunk positions of a node's products: k mod width when they share one aligned
    window of the instruction (as in the chain), else ascending order."""
    if ks[0] // width == ks[-1] // width:
        return [k % width for k in ks]
    return list(range(len(ks)))


class TreeScheduleError(ScheduleRowError):
    """A tree schedule that this product cannot run: its K, its arch's elementary operation
    (a node wider than the fused length) or the interpreter's stack (``compare`` marks such
    rows instead of failing)."""


@lru_cache(maxsize=64)
def compile_tree(text: str, K: int, spec: Spec, has_c: bool, alpha: float,
                 beta: float, epilogue: str) -> tuple[int, ...]:
    """The interpreter program (csrc/core/schedule.h) of a tree for products of length K.

    Raises :class:`TreeScheduleError` when the tree does not fit K or the arch cannot run it."""
    tree = parse_tree(text)
    if tree.n not in (K, K + 1):
        raise TreeScheduleError(f"the schedule's tree has {tree.n} leaves; a product with "
                                f"K = {K} needs K leaves (C in the epilogue) or K + 1 (leaf K "
                                "is C)")
    c_leaf = K if tree.n == K + 1 else None
    cap = node_capacity(spec)
    # what each internal node is: ("op", products, acc_child) or ("add", x, y)
    plan = {}
    need = {}
    for v in tree.postorder():
        ch = tree.child_list(v)
        prods = sorted(c for c in ch if c < K)
        sums = [c for c in ch if c >= K]      # internal nodes and the C leaf
        if len(ch) == 2 and not prods:
            plan[v] = ("add",) + tuple(sums)
            nx, ny = (need.get(c, 1) for c in sums)
            need[v] = max(nx, ny) if nx != ny else nx + 1
            continue
        if len(sums) > 1:
            raise TreeScheduleError(
                f"tree node {tree.to_text() if tree.n <= 64 else v} has {len(sums)} "
                f"non-product children; an elementary operation of {spec.arch} takes products "
                "and at most one accumulator")
        acc = sums[0] if sums else None
        if len(prods) > cap and not (cap == 1 and acc is None and len(prods) == 2):
            raise TreeScheduleError(
                f"a tree node sums {len(prods)} products, but one elementary operation of "
                f"{spec.arch} ({spec.op}, L={spec.L}) takes at most {cap}; this arch cannot "
                "run this tree")
        plan[v] = ("op", prods, acc)
        need[v] = need.get(acc, 1) if acc is not None else 1
    prog: list[int] = []

    def emit_op(prods, with_acc):
        if cap == 1 and len(prods) == 2 and not with_acc:   # FMA chain from +0, ascending k
            prog.extend([_NODE, 1, 0, 1, prods[0], 0, _NODE, 1, 1, 1, prods[1], 0])
            return
        prog.extend([_NODE, len(prods), int(with_acc), cap])
        for k, s in zip(prods, _slots(prods, cap)):
            prog.extend([k, s])

    if tree.root < K:           # a single product (K == 1): one operation from +0
        emit_op([tree.root], False)
    elif tree.root == c_leaf:
        raise TreeScheduleError("the tree's root is the C leaf")
    else:
        # iterative postfix emission; the operand needing the deeper stack goes first
        stack = [(tree.root, False)]
        while stack:
            v, done = stack.pop()
            if v == c_leaf:
                prog.append(_C)
                continue
            p = plan[v]
            if p[0] == "add":
                if done:
                    prog.append(_ADD)
                    continue
                x, y = p[1], p[2]
                if need.get(y, 1) > need.get(x, 1):
                    x, y = y, x
                stack.extend([(v, True), (y, False), (x, False)])
            else:
                _, prods, acc = p
                if done or acc is None:
                    emit_op(prods, acc is not None)
                else:
                    stack.extend([(v, True), (acc, False)])
    if need.get(tree.root, 1) > _MAX_STACK:
        raise TreeScheduleError(f"the tree needs {need[tree.root]} pending partial sums; "
                                f"the interpreter holds {_MAX_STACK}")
    prog.extend(epilogue_program(has_c and c_leaf is None, alpha, beta, epilogue))
    return tuple(prog)


def epilogue_program(c_in_epilogue: bool, alpha: float, beta: float, epilogue: str) -> list[int]:
    """The epilogue's opcodes: C added (``fma`` / ``mul_add``) when it is in the epilogue and
    beta != 0, else alpha applied when alpha != 1."""
    if c_in_epilogue and beta != 0.0:
        return [_EPI_FMA if epilogue == "fma" else _EPI_MULADD]
    return [_EPI_ALPHA] if alpha != 1.0 else []
