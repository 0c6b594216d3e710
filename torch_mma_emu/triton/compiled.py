"""``tl.reduce`` (so ``tl.sum``, ``tl.max``, ``tl.min``, ``tl.argmax``, ...) in the compiled
order inside an emulate block on an NVIDIA or AMD arch.

At each launch (hook.py ``_launch``) the kernel is compiled to TTGIR for the launch's
specialisation (layout.py, cached), before the interpreter patches ``triton.language``.
Each interpreted reduction is matched to its ``tt.reduce`` by its source frames (the
interpreter keeps file and line numbers; the TTGIR keeps the MLIR call-site chain), shape
and axis, and runs as reduce.py's tree.  What cannot be matched or is not modelled runs in
NumPy's order, and ``em.summary()`` says so.
"""
from __future__ import annotations

import re
import sys
import warnings

import numpy as np

from ..order import arith
from . import layout, reduce
from .target_rules import DPP_ARCHS

_STACK: list = []        # per running launch: [compiled or None, why-not, block]
_NAMES = re.compile(r"\b(sum|max|min|reduce|argmax|argmin|xor_sum|softmax|cumsum|cumprod|"
                    r"associative_scan)\s*\(")


def _may_reduce(fn) -> bool:
    """Cheap test whether compiling is worth it: the source calls a reduction, a @jit
    helper or something in another module (which may)."""
    import inspect
    import types
    hit = _MAY.get(fn)
    if hit is not None:
        return hit
    try:
        names, text = fn.__code__.co_names, inspect.getsource(fn)
    except (OSError, TypeError, AttributeError):
        return True
    g = getattr(fn, "__globals__", {})
    hit = _MAY[fn] = bool(_NAMES.search(text)) or any(
        type(g.get(n)).__name__ in ("JITFunction", "InterpretedFunction")
        or (isinstance(g.get(n), types.ModuleType) and "triton" not in g[n].__name__)
        for n in names)
    return hit


_MAY: dict = {}


def begin(block, interp, args, kwargs, launched=None) -> None:
    """Compile this launch's kernel for the block's arch (NVIDIA only) if it may reduce;
    ``launched``: the kernel object the user launched (its specialisation options)."""
    layout.remember(launched if launched is not None else interp)
    entry = [None, "", block]
    _STACK.append(entry)
    if block.arch is None and getattr(block, "spec", None) is None:
        entry[2] = None                  # tmt.interpret(): the plain interpreter, uncounted
        return
    target = None if block.arch is None else (
        layout.target_of(block.arch) if block.vendor == "nvidia" else
        layout.amd_target_of(block.arch))
    if target is None or (target.backend == "hip" and target.arch not in DPP_ARCHS):
        entry[1] = ("a Spec names no GPU" if block.arch is None else
                    f"{block.arch}: no Triton target known" if target is None else
                    f"AMD reductions are modelled on {' / '.join(DPP_ARCHS)}, "
                    f"not {target.arch}")
        return
    fn = getattr(interp, "fn", None)
    if fn is None or not _may_reduce(fn):
        entry[1] = "the kernel was not compiled: its source calls no reduction"
        return
    try:
        entry[0] = layout.compile_launch(fn, args, kwargs, target)
    except Exception as e:           # the compile is a model input, never fatal
        entry[1] = f"compiling to TTGIR failed ({type(e).__name__}: {str(e)[:120]})"
        entry[0] = _unpipelined(fn, args, kwargs, target, block, entry[1])
    if entry[0] is None:
        name = getattr(fn, "__name__", "kernel")
        if name not in block._warned:
            block._warned.add(name)
            warnings.warn(f"torch_mma_emu.triton: {name}: {entry[1]}; its reductions run in "
                          "NumPy's order, not the GPU's", stacklevel=4)


def _unpipelined(fn, args, kwargs, target, block, why):
    """Triton 3.6's software pipeliner (``TritonGPUPipeline``) fails on the CPU for some
    kernels at num_stages > 1 (tutorial 06's block-pointer attention on sm_90).  The
    reductions' layouts are fixed before that pass (coalescing and the MMA layout choice),
    which changes loads and their scheduling, so the kernel compiled at num_stages=1 gives
    the same reduction trees; the retry is named in the summary and warned once."""
    if int(kwargs.get("num_stages") or 3) == 1:
        return None
    try:
        out = layout.compile_launch(fn, args, {**kwargs, "num_stages": 1}, target)
    except Exception:
        return None
    name = getattr(fn, "__name__", "kernel")
    block.reductions[f"{name}: {why}; reduction layouts from num_stages=1"] += 1
    if name + " num_stages" not in block._warned:
        block._warned.add(name + " num_stages")
        warnings.warn(f"torch_mma_emu.triton: {name}: {why}; its reduction layouts are "
                      "taken from the kernel compiled with num_stages=1", stacklevel=5)
    return out


def end() -> None:
    if _STACK:
        _STACK.pop()


def _stack_frames() -> set:
    out, f = set(), sys._getframe(2)
    while f is not None:
        out.add((f.f_code.co_filename, f.f_lineno))
        f = f.f_back
    return out


def _match(sites, shape, axis, kind="reduce"):
    """The TTGIR site of the running reduction: same kind, shape and axis, then the most
    source frames in common (a frame within 3 lines counts half: a call written over
    several lines has its MLIR location on one of them).  None when that leaves sites with
    different layouts or combines."""
    cands = [s for s in sites if s.kind == kind and s.shape == shape and s.axis == axis]
    if not cands:
        return None
    frames = _stack_frames()
    by_file: dict = {}
    for f, line in frames:
        by_file.setdefault(f, []).append(line)

    def score(site):
        total = 0
        for f, line in site.frames:
            if (f, line) in frames:
                total += 2
            elif any(abs(line - x) <= 3 for x in by_file.get(f, ())):
                total += 1
        return total
    scores = [score(s) for s in cands]
    top = max(scores)
    best = [s for s, sc in zip(cands, scores) if sc == top]
    if top == 0 and len(cands) > 1:
        return None
    if len({(s.encoding, s.ops) for s in best}) == 1:
        return best[0]
    return None


_ELEM = {"fp32": "f32", "fp16": "f16", "bf16": "bf16"}


def _combine(ops, tensors, site):
    """A vectorised combine for this reduction (None: not modelled)."""
    import triton.language as tl
    kinds = [_ELEM.get(t.dtype.name) for t in tensors]
    if len(tensors) == 1 and kinds[0] is not None:
        # by identity: hashing a JITFunction computes its cache key, which compiles
        expect = next((op for n, op in (("_sum_combine", "arith.addf"),
                                        ("_elementwise_max", "arith.maxnumf"),
                                        ("_elementwise_min", "arith.minnumf"))
                       if ops.combine_fn is getattr(tl.standard, n, None)), None)
        if expect is not None and tuple(site.ops) != (expect,):
            return None                   # not this reduction's site: do not guess
        known = reduce.known_combine(site.ops, kinds[0])
        if known is not None:
            return known
    fn = ops.combine_fn
    for name, is_max in (("_argmax_combine_tie_break_left", True),
                         ("_argmin_combine_tie_break_left", False),
                         ("_argmax_combine_tie_break_fast", True),
                         ("_argmin_combine_tie_break_fast", False)):
        if fn is getattr(tl.standard, name, None) and len(tensors) == 2:
            left = name.endswith("left")
            kind = kinds[0]

            def arg(a, b, is_max=is_max, left=left, kind=kind):
                v1, i1 = a
                v2, i2 = b
                if kind == "bf16":
                    v1, v2 = arith.bf16_to_f32(v1), arith.bf16_to_f32(v2)
                better = (v1 > v2) if is_max else (v1 < v2)
                if left:
                    better = better | ((v1 == v2) & (i1 < i2))
                return np.where(better, a[0], b[0]), np.where(better, i1, i2)
            return arg
    return _user_combine(ops, tensors)


def _user_combine(ops, tensors):
    """Any other combine function, called on whole tree levels at once (the interpreter
    runs its body elementwise on blocks).  Its elementwise arithmetic is the interpreter's
    (one rounding per operation, no contraction); a body that cannot run on blocks (Python
    ``and`` / ``or`` on tensors) raises inside, and the reduction falls back to NumPy."""
    fn = getattr(ops.combine_fn, "fn", None)
    if fn is None:
        return None
    dtypes = [t.dtype for t in tensors]

    def user(a, b):
        args = [ops.to_tensor(np.ascontiguousarray(x), d) for x, d in zip(a, dtypes)]
        args += [ops.to_tensor(np.ascontiguousarray(x), d) for x, d in zip(b, dtypes)]
        out = fn(*args)
        out = out if isinstance(out, tuple) else (out,)
        return tuple(np.asarray(o.handle.data).reshape(np.shape(a[0])) for o in out)
    return user


def _guarded(impl, kind):
    """A modelling failure must not break the user's kernel: NumPy's order, a warning once
    and a summary line instead."""
    def run(ops, input):
        try:
            return impl(ops, input)
        except Exception as e:
            block = _STACK[-1][2] if _STACK else None
            msg = f"{kind} in NumPy's order (internal error {type(e).__name__}: {e})"[:200]
            if block is not None:
                block.reductions[msg] += 1
                if kind not in block._warned:
                    block._warned.add(kind)
                    warnings.warn(f"torch_mma_emu.triton: {msg}", stacklevel=2)
            return None
    return run


def _reduce_apply(ops, input):
    """``ReduceOps.apply_impl`` in the compiled order (None: leave it to the interpreter)."""
    if not _STACK or _STACK[-1][0] is None:
        if _STACK and _STACK[-1][2] is not None and _STACK[-1][1]:
            _STACK[-1][2].reductions[f"tl.reduce in NumPy's order ({_STACK[-1][1]})"] += 1
        return None
    compiled, _, block = _STACK[-1]
    if not isinstance(input, tuple):
        input = (input,)
    axis = ops.axis
    datas = [np.asarray(t.handle.data) for t in input]
    if axis is None:
        datas, axis = [d.reshape(-1) for d in datas], 0
    shape = tuple(datas[0].shape)
    site = _match(compiled.reduces, shape, axis)
    what = "tl.reduce " + "/".join(t.dtype.name for t in input)
    if site is None or site.bases is None:
        why = site.why_not if site is not None else "no matching tt.reduce in the TTGIR"
        block.reductions[f"{what} in NumPy's order ({why})"] += 1
        return None
    combine = _combine(ops, input, site)
    if combine is None:
        block.reductions[f"{what} in NumPy's order (combine {'; '.join(site.ops)} not "
                     "modelled)"] += 1
        return None
    try:
        dpp = (compiled.target.startswith("hip:") and len(site.ops) == 1
               and compiled.target[4:] in DPP_ARCHS)
        tree = site.tree if site.tree is not None else reduce.tree_of(site.bases, axis, dpp)
        site.tree = tree                       # one tree per compiled site
    except NotImplementedError as e:
        block.reductions[f"{what} in NumPy's order ({e})"] += 1
        return None
    from . import contract
    fold = contract.fold_products(block, ops.combine_fn, [t.handle for t in input],
                                  datas[0].shape) if block.vendor == "nvidia" else {}
    try:
        outs = reduce.run(tree, datas, axis, combine, fold)
    except Exception as e:                # a user combine that cannot run on blocks
        block.reductions[f"{what} in NumPy's order (combine not vectorisable: "
                         f"{type(e).__name__})"] += 1
        return None
    enc = site.encoding.split("<")[0].split(".")[-1]
    fused = f"; operand {','.join(map(str, fold))} = a product fused into the fold (fma)" \
        if fold else ""
    block.reductions[f"{what} axis {axis} of {list(shape)} #{enc}: {tree.describe()}"
                     f"{fused}"] += 1
    ret = []
    for t, o in zip(input, outs):
        o = np.asarray(o)
        if ops.keep_dims:
            if ops.axis is not None:
                o = np.expand_dims(o, ops.axis)
            else:
                o = o.reshape((1,) * len(input[0].handle.data.shape))
        elif ops.axis is None:
            o = o.reshape(())
        ret.append(ops.to_tensor(o, t.dtype))
    return ret


def _scan_apply(ops, input):
    """``ScanOps.apply_impl`` in the compiled order (None: leave it to the interpreter)."""
    if not _STACK or _STACK[-1][0] is None:
        if _STACK and _STACK[-1][2] is not None and _STACK[-1][1]:
            _STACK[-1][2].reductions[f"tl.associative_scan in NumPy's order "
                                     f"({_STACK[-1][1]})"] += 1
        return None
    compiled, _, block = _STACK[-1]
    datas = [np.asarray(t.handle.data) for t in input]
    shape, axis = tuple(datas[0].shape), ops.axis % datas[0].ndim
    what = "tl.associative_scan " + "/".join(t.dtype.name for t in input)
    site = _match(compiled.reduces, shape, axis, "scan")
    why = None
    if compiled.target.startswith("hip:"):
        why = "AMD scans are not modelled"
    elif site is None or site.bases is None:
        why = site.why_not if site is not None else "no matching tt.scan in the TTGIR"
    elif site.reverse != bool(ops.reverse):
        why = "the scan's direction differs from the TTGIR's"
    combine = None if why else _combine(ops, input, site)
    if why is None and combine is None:
        why = f"combine {'; '.join(site.ops)} not modelled"
    if why is None:
        try:
            tree = site.tree if site.tree is not None else reduce.scan_tree_of(site.bases, axis)
            site.tree = tree
            if site.reverse:     # the mirror image of the forward lowering
                flip = [np.flip(d, axis) for d in datas]
                outs = [np.flip(o, axis) for o in reduce.scan_run(tree, flip, axis, combine)]
            else:
                outs = reduce.scan_run(tree, datas, axis, combine)
        except Exception as e:        # a layout or user combine this cannot run
            why = f"{type(e).__name__}: {e}"[:120]
    if why is not None:
        block.reductions[f"{what} in NumPy's order ({why})"] += 1
        return None
    enc = site.encoding.split("<")[0].split(".")[-1]
    block.reductions[f"{what} axis {axis} of {list(shape)} #{enc}: {tree.describe()}"] += 1
    return [ops.to_tensor(np.asarray(o), t.dtype) for t, o in zip(input, outs)]


reduce_apply = _guarded(_reduce_apply, "tl.reduce")
scan_apply = _guarded(_scan_apply, "tl.associative_scan")
