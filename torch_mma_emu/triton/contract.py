"""Floating-point contraction as the compiled code does it: with ``enable_fp_fusion`` on
(Triton's default) LLVM's NVPTX backend fuses an fp32 ``fmul`` feeding an ``fadd`` / ``fsub``
into one ``fma.rn.f32`` (one rounding), where the interpreter rounds twice.  Which additions
are fused is read from the kernel's PTX, compiled on the CPU for the launch's
specialisation (ptx_of.py, cached), not guessed from the source:

* every PTX instruction carries the source location Triton gave its op: for ``a op b`` the
  position of ``b`` (the code generator leaves the location of the last node it visited),
  for ``x op= v`` the position of ``v``;
* in the interpreter, an fp32 ``tl`` multiplication remembers its operands and the location
  of its op; an addition or subtraction finds its own location from the kernel's frame and
  source, and is an fma where the PTX has ``fma.rn.f32`` at that location (``add.f32`` /
  ``sub.f32``: rounded twice, as the interpreter does);
* when both operands are products, the one the PTX keeps as a separate ``mul.f32`` (the fma's
  addend: made at that mul's location, or of the same operands, which the compiler merges)
  stays rounded; with no such evidence the left one is fused (LLVM's DAG combiner takes its
  first operand when the uses tie).

PTX is not the last word: ptxas contracts a ``mul.f32`` feeding an ``add.f32`` (no ``.rn``)
when it can (seen in SASS from this machine's ptxas within a basic block; LLVM leaves such
pairs only across blocks, where ptxas was seen not to fuse).  Such additions are rounded
twice here and counted in the summary as uncertain.  What the interpreter cannot see is
counted in ``em.summary()`` too: a location whose PTX has both
fused and unfused additions (the majority wins), an fma whose product reached the addition
through another op, a kernel that does not compile on the CPU (no contraction then, with a
warning).
"""
from __future__ import annotations

import ast
import linecache
import os
import sys
import warnings
from collections import Counter

import numpy as np

from ..gpu_math import ieee
from . import combine, ptx_of

PRODUCT = "tme_fmul"          # on fp32 products: (lhs data, rhs data, site of the op)
_PLANS: dict = {}             # (kernel, specialisation) -> {loc: decision} or an error text
_LOCS: dict = {}              # site -> (file, line, col) of the op, or None
_POSITIONS: dict = {}         # code object -> its instruction positions
_SKIP: tuple = ()
_JIT: dict = {}               # python function -> JITFunction to compile


def _skip_dirs() -> tuple:
    global _SKIP
    if not _SKIP:
        import triton
        here = os.path.dirname(os.path.abspath(__file__))      # torch_mma_emu/triton
        _SKIP = tuple(os.path.dirname(m.__file__) + os.sep for m in (triton, np)) + (
            here + os.sep, os.path.join(os.path.dirname(here), "gpu_math") + os.sep)
    return _SKIP


def site():
    """(file, first line of the code, positions) of the kernel instruction running now."""
    skip = _skip_dirs()
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename.startswith(skip):
        f = f.f_back
    if f is None:
        return None
    code = f.f_code
    pos = _POSITIONS.get(code)
    if pos is None:
        pos = _POSITIONS[code] = list(code.co_positions())
    i = f.f_lasti // 2
    return (code.co_filename, code.co_firstlineno, pos[i]) if i < len(pos) else None


def op_loc(where):
    """The location Triton's code generator gives the binary op at ``where``: its right
    operand's position (an augmented assignment: its value's), in the dedented source."""
    if where is None:
        return None
    if where in _LOCS:
        return _LOCS[where]
    file, first, (l0, l1, c0, c1) = where
    loc = None
    try:
        lines = linecache.getlines(file)
        head = lines[first - 1]
        base = len(head) - len(head.lstrip())
        seg = [ln[base:].rstrip("\n") for ln in lines[l0 - 1:l1]]
        text = seg[0][c0:c1] if l0 == l1 else "\n".join([seg[0][c0:]] + seg[1:-1]
                                                        + [seg[-1][:c1]])
        try:
            node, shift = ast.parse("(" + text + ")", mode="eval").body, 1
        except SyntaxError:
            node, shift = ast.parse(text).body[0], 0
        right = node.right if isinstance(node, ast.BinOp) else \
            node.value if isinstance(node, ast.AugAssign) else None
        if right is not None:
            col = c0 + right.col_offset - shift if right.lineno == 1 else right.col_offset
            loc = (file, l0 + right.lineno - 1, col)
    except (IndexError, SyntaxError, TypeError, ValueError):
        loc = None
    _LOCS[where] = loc
    return loc


def plan_of(ptx: str) -> dict:
    """{(file, line, col): (fused count, unfused count, locations of kept products)} of the
    fp32 additions in ``ptx``."""
    instrs = ptx_of.instructions(ptx)
    defs = {i.dst: i for i in instrs if i.dst}
    plan: dict = {}
    for i in instrs:
        if i.op == "fma.rn.f32":
            f, u, kept = plan.get(i.loc, (0, 0, frozenset()))
            src = defs.get(i.srcs[2]) if len(i.srcs) == 3 else None
            if src is not None and src.op in ("mul.f32", "mul.rn.f32"):
                kept = kept | {src.loc}
            plan[i.loc] = (f + 1, u, kept)
        elif i.op in ("add.f32", "sub.f32", "add.rn.f32", "sub.rn.f32"):
            f, u, kept = plan.get(i.loc, (0, 0, frozenset()))
            plan[i.loc] = (f, u + 1, kept)
            if i.op in ("add.f32", "sub.f32") and any(
                    defs.get(r) is not None and defs[r].op == "mul.f32" for r in i.srcs):
                MAYBE.add(i.loc)      # ptxas may still fuse mul.f32 + add.f32 (not .rn)
    return plan


MAYBE: set = set()            # locations of add.f32 (mul.f32, ...) that LLVM left apart


class Launch:
    """The launch running: its kernel and the contraction plan of its PTX, compiled before
    the interpreter patches ``triton.language`` (cached per kernel and specialisation)."""

    def __init__(self, fn, args, kwargs):
        self.fn = fn
        self.plan, self.error = _plan_for(fn, args, kwargs)
        self.made: dict = {}       # site of a product -> ids of its operands (the latest)

    def decisions(self):
        return self.plan


def _plan_for(fn, args, kwargs):
    from triton.runtime.jit import JITFunction
    jit = _JIT.get(fn)
    if jit is None:
        jit = _JIT[fn] = JITFunction(fn)
    sig = ptx_of.signature_of(jit, args, kwargs)
    if sig is None:
        return None, "an argument the CPU compile cannot type"
    opts = {k: kwargs[k] for k in ptx_of.OPTIONS if kwargs.get(k) is not None}
    key = (fn, repr(sig), tuple(sorted(opts.items())))
    if key not in _PLANS:
        try:
            _PLANS[key] = plan_of(ptx_of.compile_ptx(jit, *sig, **opts))
        except Exception as e:                      # noqa: BLE001 - reported, not fatal
            _PLANS[key] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    got = _PLANS[key]
    return (None, got) if isinstance(got, str) else (got, None)


def counts(block) -> Counter:
    return block.tallies.contract


def _launch_of(block):
    """The running launch's PTX reading (None: not an NVIDIA target, or no launch)."""
    launch = getattr(block, "launch", None) if block is not None else None
    return None if launch is None else launch.contract


def _fp32(h) -> bool:
    return getattr(h.dtype, "name", "") == "fp32" and getattr(h.data, "dtype", None) == np.float32


def fmul(block, out, lhs, rhs):
    """Tag an fp32 product with its operands and where it was made."""
    launch = _launch_of(block)
    if launch is not None and _fp32(lhs) and _fp32(rhs):
        where = site()
        out.attr[PRODUCT] = (lhs.data, rhs.data, where)
        launch.made[where] = (id(lhs.data), id(rhs.data))
    return out


def _is_kept(launch, prod, kept) -> bool:
    """Whether the PTX keeps ``prod`` as a separate ``mul.f32``: made at a kept location, or
    the same operands as a product made there (the compiler merged the two: CSE)."""
    if op_loc(prod[2]) in kept:
        return True
    ids = {(id(prod[0]), id(prod[1])), (id(prod[1]), id(prod[0]))}
    return any(op_loc(w) in kept and m in ids for w, m in launch.made.items())


def fadd(block, lhs, rhs, negate_rhs: bool = False):
    """``lhs + rhs`` (``lhs - rhs``) as the compiled code computes it when it fused a product
    into it (a TensorHandle), else None (the interpreter's two roundings are the GPU's)."""
    launch = _launch_of(block)
    if launch is None:
        return None
    pl, pr = lhs.attr.get(PRODUCT), rhs.attr.get(PRODUCT)
    if (pl is None and pr is None) or lhs.attr.get(combine.DOT) or rhs.attr.get(combine.DOT):
        return None          # a dot result absorbs the addition first (combine.py), unread
    if not (_fp32(lhs) and _fp32(rhs)):
        return None
    plan = launch.decisions()
    c = counts(block)
    if plan is None:
        if launch.error and ("warned", launch.error) not in c:
            c[("warned", launch.error)] += 1
            warnings.warn(f"torch_mma_emu.triton: {getattr(launch.fn, '__name__', 'kernel')} "
                          f"did not compile on the CPU ({launch.error}); its mul + add are "
                          "not contracted into fma", stacklevel=4)
        c[("unknown", launch.error)] += 1
        return None
    loc = op_loc(site())
    fused, unfused, kept = plan.get(loc, (0, 0, frozenset()))
    if fused and unfused:
        c[("ambiguous", loc)] += 1
    if fused <= unfused:
        c[("rounded twice", None)] += 1
        if loc in MAYBE:
            c[("maybe", None)] += 1
        return None
    if pl is not None and pr is not None:
        take_right = _is_kept(launch, pl, kept) and not _is_kept(launch, pr, kept)
        prod, other, product_left = (pr, lhs, False) if take_right else (pl, rhs, True)
    else:
        prod, other, product_left = (pl, rhs, True) if pl is not None else (pr, lhs, False)
    x, y = prod[0], prod[1]
    addend = other.data
    if negate_rhs and product_left:           # x*y - c = fma(x, y, -c)
        addend = -addend
    elif negate_rhs:                          # c - x*y = fma(-x, y, c)
        x = -x
    from triton.runtime.interpreter import TensorHandle
    c[("fma", None)] += 1
    out = ieee.fma(*np.broadcast_arrays(x, y, addend))
    return TensorHandle(np.asarray(out, np.float32), lhs.dtype)


def summary_lines(block) -> list[str]:
    c = block.tallies.contract
    if not c:
        return []
    fma, twice = c[("fma", None)], c[("rounded twice", None)]
    lines = []
    if fma or twice or len(c) > sum(1 for k in c if k[0] == "not modelled"):
        lines.append(f"contraction (PTX compiled on the CPU): {fma} product-additions fused "
                     f"into fma.rn.f32, {twice} rounded twice")
    for (k, where), n in c.items():
        if k == "not modelled":
            lines.append(f"contraction: not modelled on {where} (mul + add rounded twice, "
                         f"{n} launches)")
    if c[("fold", None)]:
        lines.append(f"  {c[('fold', None)]} reduction operands are products fused into the "
                     "in-thread fold (fma.rn.f32 acc, x, y, acc)")
    if c[("maybe", None)]:
        lines.append(f"  {c[('maybe', None)]} of those are add.f32 of a mul.f32 in the PTX "
                     "(no .rn): ptxas may still fuse them in SASS (not read)")
    amb = sum(n for (k, _), n in c.items() if k == "ambiguous")
    if amb:
        lines.append(f"  {amb} at source locations the PTX fuses only sometimes (majority)")
    for (k, why), n in c.items():
        if k == "unknown":
            lines.append(f"  {n} NOT contracted: the kernel did not compile on the CPU ({why})")
    return lines


# -- a product contracted into a reduction's in-thread fold -----------------------------------
_ADDS: dict = {}              # combine function -> {operand j: location of its a_j + b_j}


def _combine_adds(fn) -> dict:
    """{j: (file, line, col)} for each result ``a_j + b_j`` (or ``b_j + a_j``) of a combine
    function's ``return``: the location Triton gives that addition (its right operand's)."""
    import inspect
    import textwrap
    if fn in _ADDS:
        return _ADDS[fn]
    out: dict = {}
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
        params = [a.arg for a in tree.body[0].args.args]
        n = len(params) // 2
        rets = [r for r in ast.walk(tree.body[0]) if isinstance(r, ast.Return)]
        if len(rets) == 1 and len(params) == 2 * n:
            vals = rets[0].value.elts if isinstance(rets[0].value, ast.Tuple) else [rets[0].value]
            for j, v in enumerate(vals):
                if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add) and \
                        {getattr(v.left, "id", None), getattr(v.right, "id", None)} == \
                        {params[j], params[n + j]}:
                    out[j] = (inspect.getsourcefile(fn), first + v.right.lineno - 1,
                              v.right.col_offset)
    except (OSError, TypeError, SyntaxError, IndexError, AttributeError):
        out = {}
    _ADDS[fn] = out
    return out


def fold_products(block, combine_fn, handles, shape) -> dict:
    """{operand j: (x, y)} for the fp32 reduction operands that are products ``x * y`` which
    the PTX contracts into the reduction's in-thread fold: ``fma.rn.f32`` at the location of
    the combine's ``a_j + b_j`` (LLVM turns ``acc + x_r * y_r`` into ``fma(x_r, y_r, acc)``;
    the lane and warp steps add rounded partials).  Empty when nothing is fused."""
    launch = _launch_of(block)
    plan = launch.decisions() if launch is not None else None
    fn = getattr(combine_fn, "fn", None)
    if not plan or fn is None:
        return {}
    adds = _combine_adds(fn)
    out = {}
    for j, h in enumerate(handles):
        prod = h.attr.get(PRODUCT)
        if prod is None or j not in adds or not _fp32(h) or h.attr.get(combine.DOT):
            continue
        if plan.get(adds[j], (0, 0, None))[0]:
            full = np.shape(h.data)
            out[j] = tuple(np.broadcast_to(np.asarray(p, np.float32), full).reshape(shape)
                           for p in prod[:2])
    if out:
        counts(block)[("fold", None)] += len(out)
    return out
