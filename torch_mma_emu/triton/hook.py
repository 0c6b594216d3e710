"""The seam into Triton's interpreter (triton/runtime/interpreter.py), installed while at
least one :func:`~torch_mma_emu.triton.emulate` block is open in any thread.

Triton decides between compiling and interpreting when ``@triton.jit`` decorates a function
(``TRITON_INTERPRET`` is read there), so a kernel imported before the block is a
``JITFunction`` that would compile for the GPU.  While installed, these class attributes are
replaced; each replacement asks whether the *calling thread* has a block open and otherwise
does exactly what the original does:

* ``JITFunction.run`` (every ``kernel[grid](...)`` launch) and ``InterpretedFunction.run``:
  the launch runs in Triton's interpreter, with the interpreter's options (default input
  precision, fp8 defaults, minimum dot size) set to the target arch's for its duration;
* ``JITFunction.__call__``: a ``@triton.jit`` helper called from a kernel is interpreted;
* ``Autotuner.run``: no benchmarking on the CPU; the block picks the config;
* ``InterpreterBuilder.create_dot`` / ``create_dot_scaled``: the block computes the dot;
* ``InterpreterBuilder.cast_impl`` / ``create_fp_to_fp``: bf16 and fp8 conversions round as
  the GPU does (convert.py; the interpreter truncates);
* ``TritonSemantic.dot``, ``InterpreterBuilder.create_fadd / create_fmul / create_expand_dims
  / create_broadcast`` and ``ReduceOps.sum``: the compiler's rewrites into and of dots
  (combine.py: ``acc += tl.dot(a, b)`` is ``tl.dot(a, b, acc)``; a broadcast
  multiply-and-sum is a tf32 dot).
* ``ReduceOps.apply_impl`` / ``ScanOps.apply_impl``: reductions and scans in the compiled
  order (compiled.py; each launch's TTGIR is compiled first, in ``_launch``).
* Inductor's ``CachingAutotuner.run``: a user kernel with a dot that torch.compile compiled
  and would launch natively raises (inductor.py);
* what extras.py registers: the builder's math methods (target_math.py), fmul / fadd / fsub
  (contraction: contract.py), atomics, extern calls (libdevice_calls.py), the interpreter's
  loop rewrite, ``Autotuner.__getitem__`` and a CPU stand-in for Triton's driver (gaps.py).

Threads started while a block is open adopt the innermost open block (``switches.py``).
The interpreter keeps its state in one global builder, so interpreted launches are
serialised by a lock (a plain interpreted launch in another thread waits too).  Everything is
restored when the last block closes.  An interpreter whose layout differs from the one this
was written against (Triton 3.x) makes :func:`check_layout` raise and names what is missing.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import threading
from collections import Counter

from .. import switches
from . import combine, compiled, extras

_LAUNCH = threading.RLock()     # one interpreted launch at a time (global builder state)
_TLS = threading.local()        # .stack: open blocks of this thread; .depth: launches running
_MISSING = object()
_orig: dict = {}
_interpreted: dict = {}         # python function -> InterpretedFunction
_OPEN: Counter = Counter()      # block -> how many times it is entered (any thread)

DOT_PARAMS = ["self", "a", "b", "d", "input_precision", "max_num_imprecise_acc"]


def current():
    """The innermost open block of the calling thread (None: Triton behaves as usual)."""
    for block in reversed(getattr(_TLS, "stack", ())):
        if _OPEN[block] > 0:
            return block
    return None


def check_layout():
    """The interpreter's modules, after checking they have the layout the seam patches."""
    try:
        import triton
        from triton.language import semantic
        from triton.runtime import autotuner, interpreter as ti, jit
    except ImportError as e:
        raise ImportError("torch_mma_emu.triton needs Triton (pip install triton, pinned with "
                          f"your torch): {e}") from None
    need = [(ti, "InterpreterBuilder"), (ti, "InterpretedFunction"), (ti, "GridExecutor"),
            (ti, "_patch_lang"), (ti, "_patch_lang_core"),
            (ti, "interpreter_builder"), (ti, "TensorHandle"), (ti, "_patch_lang_tensor"),
            (ti, "ReduceOps"), (ti, "ScanOps"), (semantic, "TritonSemantic"),
            (jit, "JITFunction"), (autotuner, "Autotuner")]
    missing = [f"{m.__name__}.{n}" for m, n in need if not hasattr(m, n)]
    if not missing:
        for owner, names in ((ti.InterpreterBuilder, ("create_dot", "set_grid_idx", "cast_impl",
                                                       "create_fp_to_fp", "create_fadd",
                                                       "create_fmul", "create_expand_dims",
                                                       "create_broadcast")),
                             (ti.ReduceOps, ("sum", "apply_impl")),
                             (ti.ScanOps, ("apply_impl",)), (semantic.TritonSemantic, ("dot",)),
                             (ti.InterpretedFunction, ("run", "rewrite", "__call__")),
                             (ti.GridExecutor, ("_init_args_hst",)),
                             (jit.JITFunction, ("run", "__call__")),
                             (autotuner.Autotuner, ("run",))):
            missing += [f"{owner.__name__}.{n}" for n in names if not hasattr(owner, n)]
    if not missing:
        params = list(inspect.signature(ti.InterpreterBuilder.create_dot).parameters)
        if params != DOT_PARAMS:
            missing.append(f"InterpreterBuilder.create_dot{tuple(DOT_PARAMS[1:])} (found "
                           f"{tuple(params[1:])})")
        b = ti.interpreter_builder
        if not (dataclasses.is_dataclass(getattr(b, "options", None))
                and isinstance(getattr(b, "codegen_fns", None), dict)):
            missing.append("interpreter_builder.options / .codegen_fns")
    if missing:
        raise RuntimeError(
            f"torch_mma_emu.triton: Triton {getattr(triton, '__version__', '?')}'s interpreter "
            "does not have the layout this emulator hooks into (written for Triton 3.x, "
            f"checked with 3.6); missing: {', '.join(missing)}")
    return ti, jit, autotuner


# The Triton whose compiler target_rules.py and combine.py model (its TTGIR checked them);
# the GPU machine has it.  Another version may choose other instructions for the same tl.dot.
MODELLED_TRITON = (3, 6)
# versions whose TTGIR agreed with every case of those tests (3.7: torch 2.12's)
AGREES = {(3, 6), (3, 7)}
# what Triton 3.8 (torch 2.14's) was seen to compile otherwise (tests/triton_emu/test_triton_choice.py
# and test_triton_combine.py, TTGIR on the CPU)
SEEN_DIFFERENT = {(3, 8): "wgmma (sm90) and tcgen05 (sm100) for N = 8 tiles where 3.6 takes "
                          "mma.sync, and no tl.dot made of a broadcast multiply + tl.sum on "
                          "NVIDIA"}


def version_warning(version: str) -> str | None:
    """What to tell a user whose Triton is not the modelled one (None: it is)."""
    try:
        mm = tuple(int(x) for x in version.split(".")[:2])
    except ValueError:
        mm = None
    if mm in AGREES:
        return None
    seen = SEEN_DIFFERENT.get(mm)
    return (f"torch_mma_emu.triton: Triton {version} is installed, but the instruction choice "
            f"and compiler rewrites replayed here are Triton "
            f"{'.'.join(map(str, MODELLED_TRITON))}'s; where {version} compiles otherwise "
            "the emulation follows " + ".".join(map(str, MODELLED_TRITON)) +
            (f" (seen with {version}: {seen})" if seen else "") +
            ". emulate(arch, instruction=...) picks the instruction explicitly.")


def _install(p: switches.Patches) -> None:
    ti, jit, autotuner = check_layout()
    _set = functools.partial(p.set, mine=False)
    from triton.language.semantic import TritonSemantic
    IB = ti.InterpreterBuilder
    _orig.update(jit_run=jit.JITFunction.run, jit_call=jit.JITFunction.__call__,
                 interp_run=ti.InterpretedFunction.run, autotune_run=autotuner.Autotuner.run,
                 create_dot=IB.create_dot, cast_impl=IB.cast_impl, fp_to_fp=IB.create_fp_to_fp,
                 create_dot_scaled=getattr(IB, "create_dot_scaled", None),
                 patch_tensor=ti._patch_lang_tensor, patch_core=ti._patch_lang_core,
                 fadd=IB.create_fadd, fmul=IB.create_fmul,
                 expand_dims=IB.create_expand_dims, broadcast=IB.create_broadcast,
                 reduce_sum=ti.ReduceOps.sum, reduce_apply=ti.ReduceOps.apply_impl,
                 scan_apply=ti.ScanOps.apply_impl,
                 init_args_hst=ti.GridExecutor._init_args_hst, patch_lang=ti._patch_lang)
    # launches run eagerly under torch.compile: without a GPU, Dynamo does not know Triton
    # kernels and would trace into the interpreter (its NumPy as torch ops), and fail
    import torch
    eager = torch.compiler.disable
    _set(jit.JITFunction, "run", eager(_jit_run))
    _set(jit.JITFunction, "__call__", _jit_call)
    _set(ti.InterpretedFunction, "run", eager(_interp_run))
    _set(ti.InterpretedFunction, "__call__", _interp_call)
    _set(ti.GridExecutor, "_init_args_hst", _init_args_hst)
    _set(ti, "_patch_lang", _patch_lang)
    _set(autotuner.Autotuner, "run", eager(_autotune_run))
    _set(ti.InterpreterBuilder, "create_dot", _create_dot)
    _set(ti.InterpreterBuilder, "create_dot_scaled", _create_dot_scaled)
    _set(ti.InterpreterBuilder, "cast_impl", _cast_impl)
    _set(ti.InterpreterBuilder, "create_fp_to_fp", _create_fp_to_fp)
    _set(ti, "_patch_lang_tensor", _patch_lang_tensor)
    _set(ti, "_patch_lang_core", _patch_lang_core)
    _set(TritonSemantic, "dot", combine.semantic_dot(TritonSemantic.dot))
    _set(IB, "create_fadd", _create_fadd)
    _set(IB, "create_fmul", _create_fmul)
    _set(IB, "create_expand_dims", _create_expand_dims)
    _set(IB, "create_broadcast", _create_broadcast)
    _set(ti.ReduceOps, "sum", _reduce_sum)
    _set(ti.ReduceOps, "apply_impl", _reduce_apply)     # compiled.py: the GPU's order
    _set(ti.ScanOps, "apply_impl", _scan_apply)
    extras.install(_set, ti, current)     # math, contraction, atomics, interpreter gaps
    try:      # user kernels torch.compile hands to Inductor (inductor.py)
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except ImportError:
        CachingAutotuner = None
    if CachingAutotuner is not None and hasattr(CachingAutotuner, "run"):
        from . import inductor
        _set(CachingAutotuner, "run", inductor.guard(CachingAutotuner.run, current))


SEAM = switches.patch_switch(
    "Triton interpreter seam", "the class attributes of Triton's interpreter, JIT, autotuner "
    "and Inductor's CachingAutotuner listed in this module's doc, replaced by functions that "
    "ask whether the calling thread has a block open", _install)


def enter(block) -> None:
    SEAM.enter()
    _OPEN[block] += 1
    _TLS.stack = getattr(_TLS, "stack", []) + [block]
    switches.THREADS.enter("triton", block, adopt)     # threads started inside it adopt it


def is_open(block) -> bool:
    """Whether ``block`` has been entered and not yet left."""
    return _OPEN.get(block, 0) > 0


def adopt(block) -> None:
    """Make ``block`` the calling thread's block too (a thread started inside it:
    switches.py); it counts while the block is open."""
    _TLS.stack = getattr(_TLS, "stack", []) + [block]


def leave(block) -> None:
    switches.THREADS.leave(block)
    _OPEN[block] -= 1
    if _OPEN[block] <= 0:
        del _OPEN[block]
    stack = getattr(_TLS, "stack", [])
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is block:
            _TLS.stack = stack[:i] + stack[i + 1:]
            break
    SEAM.leave()


def _interpreted_of(fn):
    from triton.runtime.interpreter import InterpretedFunction
    f = _interpreted.get(fn)
    if f is None:
        f = _interpreted[fn] = InterpretedFunction(fn)
    return f


def _launch(block, interp, args, grid, warmup, kwargs, launched=None):
    """One launch in the interpreter with the block's target options."""
    from triton.runtime.interpreter import interpreter_builder as b
    with _LAUNCH:
        saved = (b.options, b.codegen_fns.get("min_dot_size", _MISSING), block.launch)
        _TLS.depth = getattr(_TLS, "depth", 0) + 1
        try:
            b.options = block.interpreter_options(b.options)
            if block.min_dot_size is not None:
                b.codegen_fns["min_dot_size"] = block.min_dot_size
            block.begin_launch(interp, args, grid, kwargs, launched)
            compiled.begin(block, interp, args, kwargs, launched)
            extras.begin_launch(block, interp.fn, args, kwargs)
            out = _orig["interp_run"](interp, *args, grid=grid, warmup=warmup, **kwargs)
            return extras.launch_result(interp, kwargs, out)
        finally:
            _TLS.depth -= 1
            b.options = saved[0]
            if saved[1] is _MISSING:
                b.codegen_fns.pop("min_dot_size", None)
            else:
                b.codegen_fns["min_dot_size"] = saved[1]
            block.end_launch(saved[2])
            compiled.end()
            extras.end_launch(block)


def _jit_run(self, *args, grid, warmup, **kwargs):
    block = current()
    if block is None:
        return _orig["jit_run"](self, *args, grid=grid, warmup=warmup, **kwargs)
    interp = _interpreted_of(self.fn)
    interp.pre_run_hooks = list(getattr(self, "pre_run_hooks", []))
    return _launch(block, interp, args, grid, warmup, kwargs, self)


def _interp_run(self, *args, grid, warmup, **kwargs):
    block = current()
    if block is None:
        with _LAUNCH:
            return _orig["interp_run"](self, *args, grid=grid, warmup=warmup, **kwargs)
    return _launch(block, self, args, grid, warmup, kwargs)


def _jit_call(self, *args, **kwargs):
    if current() is None or not getattr(_TLS, "depth", 0):
        return _orig["jit_call"](self, *args, **kwargs)
    return _interp_call(_interpreted_of(self.fn), *args, **kwargs)


def _interp_call(self, *args, **kwargs):
    """A @jit helper called from an interpreted kernel.  Triton's own version patches the
    helper module's triton.language and never restores it, which breaks compiling any
    kernel afterwards; this one restores."""
    from triton.runtime.errors import InterpreterError
    args, kwargs = _dtypes_as_constexpr(self.fn, args, kwargs)
    scope = _patch_lang(self.fn)
    try:
        return self.rewrite()(*args, **kwargs)
    except InterpreterError:
        raise
    except Exception as e:
        raise InterpreterError(repr(e)) from e
    finally:
        scope.restore()


@functools.lru_cache(maxsize=None)
def _dtype_constexpr_class():
    import triton.language as tl

    class DtypeConstexpr(tl.constexpr):
        """A dtype as compiled Triton hands it to a helper: ``.value`` is the dtype, and
        other attributes reach it (the code generator unwraps constexprs on attribute
        access: ``dtype.is_floating()`` works too)."""

        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return getattr(self.value, name)
    return DtypeConstexpr


def _DtypeConstexpr(v):
    return _dtype_constexpr_class()(v)


def _dtypes_as_constexpr(fn, args, kwargs):
    """A ``tl.dtype`` passed to a @jit helper reaches it as ``tl.constexpr`` in compiled
    Triton (a dtype is a compile-time value), and helpers read ``dtype.value`` (FlagGems'
    ``get_dtype_min``, used by 20 of its files); Triton 3.6's interpreter passes the bare
    dtype and the helper fails.  Inside a block the interpreter is patched to pass it as the
    compiler does; each patched call is counted in the summary."""
    import triton.language as tl

    def wrap(v):
        return _DtypeConstexpr(v) if isinstance(v, tl.dtype) else v
    if not any(isinstance(v, tl.dtype) for v in (*args, *kwargs.values())):
        return args, kwargs
    block = current()
    if block is not None:
        block.tallies.interpreter[
            "a tl.dtype argument of a @jit helper passed as tl.constexpr, as compiled Triton "
            "passes it (Triton 3.6's interpreter passes the bare dtype)"] += 1
    return tuple(wrap(v) for v in args), {k: wrap(v) for k, v in kwargs.items()}


def _patch_lang(fn):
    """Triton's patch of ``triton.language`` for an interpreted function, plus the builtins
    the function's module imported by name (``erf = libdevice.erf``, FlagGems'
    ``tl_extra_shim``): Triton patches the modules, so such a name keeps the compiler's
    version, which fails in the interpreter ("Did you forget to add @triton.jit?")."""
    import sys
    from triton.runtime import interpreter as ti
    block = current()
    try:
        scope = _orig["patch_lang"](fn)
    except AssertionError:      # no triton.language in the helper's module (FlagGems' add
        if block is None:       # helper): the kernel's own patch of the modules serves it
            raise
        scope = ti._LangPatchScope()
        block.tallies.interpreter["a @jit helper whose module does not import "
                                  "triton.language run with the kernel's patch"] += 1
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    if block is not None and module is not None:
        import triton.language as tl
        names = [n for n, v in vars(module).items() if tl.core.is_builtin(v)
                 and getattr(v, "__module__", "").startswith("triton.language.extra")]
        for n in names:
            ti._patch_attr(module, n, getattr(module, n), ti.interpreter_builder, scope)
        if names:
            block.tallies.interpreter["a libdevice function imported by name into a kernel's "
                                      "module (erf = libdevice.erf) patched too"] += 1
    return scope


class _HostBuffer:
    """Stands in for a host buffer while Triton's interpreter copies arguments (no
    ``data_ptr``: passed through), then is replaced by the buffer itself."""

    def __init__(self, buf):
        self.buf = buf


def _duck_buffer(arg) -> bool:
    import torch
    if isinstance(arg, torch.Tensor) or not hasattr(arg, "data_ptr"):
        return False
    try:
        return arg.untyped_storage().device.type == "cpu"
    except Exception:                    # noqa: BLE001 - not a buffer the hook knows
        return False


def _init_args_hst(self, args_dev, kwargs):
    """Triton's copy of the launch arguments to the host, which needs ``torch.Tensor``
    methods (``new_empty``, ``set_``); a pointer argument that is another object with a
    ``data_ptr`` (FlagGems' ``StridedBuffer``, a view with an offset and any strides that a
    tensor cannot express) fails there.  Inside a block such an object whose storage is on
    the CPU is passed as it is (its memory is the host's: nothing to copy); each is counted
    in the summary."""
    block = current()
    if block is None:
        return _orig["init_args_hst"](self, args_dev, kwargs)
    wrap = lambda a: _HostBuffer(a) if _duck_buffer(a) else a        # noqa: E731
    unwrap = lambda a: a.buf if isinstance(a, _HostBuffer) else a    # noqa: E731
    args_hst, kwargs_hst = _orig["init_args_hst"](
        self, [wrap(a) for a in args_dev], {k: wrap(v) for k, v in kwargs.items()})
    n = sum(isinstance(a, _HostBuffer) for a in (*args_hst, *kwargs_hst.values()))
    if n:
        block.tallies.interpreter[
            "a pointer argument that is not a torch.Tensor (it has data_ptr: e.g. FlagGems' "
            "StridedBuffer) passed as it is, its storage being the host's"] += n
    return [unwrap(a) for a in args_hst], {k: unwrap(v) for k, v in kwargs_hst.items()}


def _autotune_run(self, *args, **kwargs):
    block = current()
    if block is None:
        return _orig["autotune_run"](self, *args, **kwargs)
    return block.run_autotuned(self, args, kwargs)


def _create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    block = current()
    compute = None if block is None else block.prepare(a, b, d, input_precision,
                                                       max_num_imprecise_acc)
    if compute is None:
        return _orig["create_dot"](self, a, b, d, input_precision, max_num_imprecise_acc)
    return combine.dot_result(compute, d, max_num_imprecise_acc)


def _create_fadd(self, lhs, rhs):
    out = combine.fadd(current(), lhs, rhs)
    return _orig["fadd"](self, lhs, rhs) if out is None else out


def _create_fmul(self, lhs, rhs):
    return combine.fmul(current(), _orig["fmul"](self, lhs, rhs), lhs, rhs)


def _create_expand_dims(self, arg, axis):
    return combine.expand_dims(current(), _orig["expand_dims"](self, arg, axis), arg, axis)


def _create_broadcast(self, arg, shape):
    return combine.broadcast(current(), _orig["broadcast"](self, arg, shape), arg)


def _reduce_sum(self, input):
    out = combine.reduce_sum(current(), self, input)
    return _orig["reduce_sum"](self, input) if out is None else out


def _reduce_apply(self, input):
    out = None
    if current() is not None and not any(combine.BMR in t.handle.attr for t in input):
        out = compiled.reduce_apply(self, input)
    return _orig["reduce_apply"](self, input) if out is None else out


def _scan_apply(self, input):
    out = compiled.scan_apply(self, input) if current() is not None else None
    return _orig["scan_apply"](self, input) if out is None else out


def _create_dot_scaled(self, lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format,
                       fast_math, lhs_k_pack, rhs_k_pack, acc):
    block = current()
    if block is None:
        if _orig["create_dot_scaled"] is not None:
            return _orig["create_dot_scaled"](self, lhs, lhs_scale, lhs_format, rhs, rhs_scale,
                                              rhs_format, fast_math, lhs_k_pack, rhs_k_pack, acc)
        raise NotImplementedError("Triton's interpreter has no tl.dot_scaled; run the kernel "
                                  "inside torch_mma_emu.triton.emulate(arch)")
    return block.dot_scaled(lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format,
                            fast_math, lhs_k_pack, rhs_k_pack, acc)


def _cast_impl(self, src, dst_type):
    block = current()
    out = None if block is None else block.convert(src, dst_type, None)
    return _orig["cast_impl"](self, src, dst_type) if out is None else out


def _create_fp_to_fp(self, src, dst_type, rounding_mode):
    block = current()
    out = None if block is None else block.convert(src, dst_type, rounding_mode)
    return _orig["fp_to_fp"](self, src, dst_type, rounding_mode) if out is None else out


def _patch_lang_tensor(tensor, scope):
    """Triton's own patch plus two gaps of its interpreter, filled while installed:
    ``__index__`` on 1-element arrays (NumPy 2.4 refuses ``int()`` of a 1-D array, which
    ``range(0, K, BLOCK)`` on a kernel argument needs), and ``tl.dot_scaled``'s format
    strings, which its semantic reads as constexprs (``.value``)."""
    import triton.language as tl
    _orig["patch_tensor"](tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
    for mod in (tl, tl.core):
        cur = getattr(mod, "dot_scaled", None)
        if cur is None or tl.core.is_builtin(cur) or getattr(cur, "_tme_formats", False):
            continue

        def dot_scaled(lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, *args,
                       _cur=cur, **kwargs):
            return _cur(lhs, lhs_scale, tl.constexpr(lhs_format), rhs, rhs_scale,
                        tl.constexpr(rhs_format), *args, **kwargs)
        dot_scaled._tme_formats = True
        scope.set_attr(mod, "dot_scaled", dot_scaled)


def _patch_lang_core(lang, scope):
    """Triton's own patch, plus the AMD fnuz fp8 types (float8e4b8 / float8e5b16, i.e.
    torch.float8_e4m3fnuz / e5m2fnuz), which its ``dtype.to_ir`` does not know: a kernel
    taking such tensors could not even load them."""
    _orig["patch_core"](lang, scope)
    extras.patch_lang(lang, scope)
    to_ir = lang.dtype.to_ir

    def fnuz_to_ir(self, builder, _to_ir=to_ir):
        if self.name == "fp8e4b8":
            return builder.get_fp8e4b8_ty()
        if self.name == "fp8e5b16":
            return builder.get_fp8e5b16_ty()
        return _to_ir(self, builder)
    scope.set_attr(lang.dtype, "to_ir", fnuz_to_ir)
