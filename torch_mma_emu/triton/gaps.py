"""Atomics, and the gaps of Triton's interpreter that third-party kernels meet, filled while
a block is open (``tmt.emulate`` and ``tmt.interpret`` alike):

* **atomics**: a GPU applies the atomics of different programs in an order it does not
  promise (float ``atomic_add`` results can change bits from run to run); the interpreter
  applies them in grid order, one of the orders a GPU may take.  Each atomic op is counted in
  ``em.summary()`` and the first float one warns once per block.
* **loop variables are tensors**: compiled Triton makes ``for i in range(n)`` (and
  ``tl.range``) an i32 loop (i64 when a bound is), so kernels call ``i.to(tl.int64)`` on it
  (fla's chunk kernels); the interpreter gives Python ints.  Kernels are rewritten so that
  inside a block the loop variable is a scalar tensor (``tl.static_range`` stays ints).
* **autotuner subclasses that override ``run``** and time configs on the GPU driver
  (FlagGems' ``LibTuner``: "0 active drivers" on a CPU): ``kernel[grid](...)`` on any
  ``Autotuner`` goes to the block's config choice, as the plain ``Autotuner`` does.
* **launch results kept by library caches** (FlagGems' ``LibEntry`` keeps what the first
  ``fn.run`` returns and launches it with ``kernel[grid](*args)`` afterwards): an interpreted
  launch returns a :class:`Relaunch` that does that in the interpreter.
* **driver queries** (``triton.runtime.driver.active.get_current_target()``, device
  properties) in a process without a GPU: answered as the block's arch (:class:`CpuDriver`),
  so a library that asks at import works when imported inside a block.
"""
from __future__ import annotations

import ast
import warnings

import numpy as np

RANGE_NAME = "_tme_loop_range"       # what rewritten kernels call for range / tl.range
BOOL_NAME = "_tme_bool_op"            # what rewritten kernels call for `and` / `or`
_current = None                       # hook.current, set by install (no import circle)


def record_atomic(block, op: str, dtype) -> None:
    if block is None:
        return
    name = getattr(dtype, "name", str(dtype))
    block.tallies.atomics[(op, name)] += 1
    if name.startswith(("fp", "bf")) and block.tallies.warn_once("atomics"):
        warnings.warn(f"torch_mma_emu.triton: tl.atomic_{op} on {name}: a GPU applies atomics "
                      "in an order it does not promise, so the bits of a float atomic "
                      "reduction can change from run to run; the emulation applies them in "
                      "grid order (one order a GPU may take)", stacklevel=4)


def summary_lines(block) -> list[str]:
    c = block.tallies.atomics
    if not c:
        return []
    ops = ", ".join(f"{n} x atomic_{op} {dt}" for (op, dt), n in sorted(c.items()))
    return [f"atomics (order not deterministic on a GPU; applied in grid order): {ops}"]


# -- loop variables ------------------------------------------------------------------------
def loop_range(*args, **kwargs):
    """``range`` / ``tl.range`` in a rewritten kernel: scalar int32 (int64) tensors inside a
    block, Python ints outside."""
    extra = ("num_stages", "loop_unroll_factor", "disallow_acc_multi_buffer", "flatten",
             "warp_specialize", "disable_licm")
    step = kwargs.pop("step", None)
    for k in extra:
        kwargs.pop(k, None)
    if kwargs:
        raise TypeError(f"range() got unexpected keyword arguments {sorted(kwargs)}")
    vals = [int(a) if hasattr(a, "__index__") else a for a in args]
    if step is not None:
        vals = (vals + [0, 0])[:2] if len(vals) < 2 else vals[:2]
        vals.append(int(step))
    r = range(*vals)
    if _current is None or _current() is None:
        return r
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle
    wide = any(getattr(getattr(a, "dtype", None), "name", "") == "int64" for a in args) or \
        not all(-2 ** 31 <= v < 2 ** 31 for v in (r.start, r.stop))
    ty, npt = (tl.int64, np.int64) if wide else (tl.int32, np.int32)
    return (tl.tensor(TensorHandle(np.array([i], dtype=npt), ty), ty) for i in r)


def bool_op(is_and: bool, *thunks):
    """``a and b`` / ``a or b`` in a rewritten kernel.  Compiled Triton evaluates every
    operand, short-circuits only on non-tensors, and combines tensors element-wise
    (``logical_and`` / ``logical_or``: FlagGems writes ``mask = m[:, None] < M and n[None, :]
    < N``); Python's ``and`` on a block tensor returns the last operand, so the interpreter
    dropped ``m < M`` from such a mask and loaded / stored out of bounds.  Outside a block:
    Python's own semantics."""
    import triton.language as tl
    if _current is None or _current() is None:
        value = None
        for t in thunks:
            value = t()
            if bool(value) != is_and:
                return value
        return value
    tensors, value = [], None
    for t in thunks:
        value = t()
        if isinstance(value, tl.tensor):
            tensors.append(value)
        elif bool(value) != is_and:         # a falsy value ends `and`, a truthy one `or`
            return value
    if not tensors:
        return value
    out = tensors[0]
    for v in tensors[1:]:
        out = out.logical_and(v) if is_and else out.logical_or(v)
    return out


class _Rewrite(ast.NodeTransformer):
    def visit_BoolOp(self, node):
        self.generic_visit(node)
        thunks = [ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                                                kw_defaults=[], defaults=[]), body=v)
                  for v in node.values]
        call = ast.Call(func=ast.Name(id=BOOL_NAME, ctx=ast.Load()),
                        args=[ast.Constant(isinstance(node.op, ast.And)), *thunks],
                        keywords=[])
        return ast.copy_location(call, node)

    def visit_For(self, node):
        self.generic_visit(node)
        it = node.iter
        if isinstance(it, ast.Call):
            f = it.func
            plain = isinstance(f, ast.Name) and f.id == "range"
            tl_range = isinstance(f, ast.Attribute) and f.attr == "range" \
                and isinstance(f.value, ast.Name) and f.value.id in ("tl", "triton_language")
            if plain or tl_range:
                it.func = ast.copy_location(ast.Name(id=RANGE_NAME, ctx=ast.Load()), f)
        return node


def transform_ast(orig, current):
    """``FunctionRewriter._transform_ast`` plus the loop rewrite (and the name it calls)."""
    global _current
    _current = current

    def _transform_ast(self, src):
        tree = orig(self, src)
        self.fn.__globals__.setdefault(RANGE_NAME, loop_range)
        self.fn.__globals__.setdefault(BOOL_NAME, bool_op)
        return ast.fix_missing_locations(_Rewrite().visit(tree))
    return _transform_ast


# -- autotuners and launch results ---------------------------------------------------------
def autotuner_getitem(autotuner_cls, current):
    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            block = current()
            if block is not None and type(self).run is not autotuner_cls.run:
                return block.run_autotuned(self, args, dict(kwargs, grid=grid, warmup=False))
            return self.run(*args, grid=grid, warmup=False, **kwargs)
        return launch
    return __getitem__


class Relaunch:
    """What an interpreted launch returns in place of the compiled kernel: ``[grid](*args)``
    launches it again in the interpreter with the first launch's keyword arguments
    (constexprs, options); positional arguments fill the other parameters in order, or all
    of them when there are as many (FlagGems' LibEntry passes every parameter, constexprs
    included, as Triton 3.3-3.6's compiled kernels take them)."""

    def __init__(self, interp, kwargs):
        import inspect
        self._interp, self._kwargs = interp, dict(kwargs)
        params = inspect.signature(interp.fn).parameters.values()
        self._names = [p.name for p in params if p.name not in kwargs
                       and "constexpr" not in str(p.annotation)]
        self._all = [p.name for p in params]   # Triton 3.3-3.6 kernels take every parameter
        self.metadata = type("metadata", (), {"num_warps": kwargs.get("num_warps", 4),
                                              "num_stages": kwargs.get("num_stages", 3),
                                              "shared": 0})()
        self.n_regs, self.n_spills = 0, 0

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            names = self._all if len(args) == len(self._all) else self._names
            named = dict(zip(names, args))
            base = {k: v for k, v in self._kwargs.items() if k not in named}
            return self._interp.run(grid=grid, warmup=False, **named,
                                    **{**base, **kwargs})
        return launch


# -- the driver a CPU-only process lacks ---------------------------------------------------
# device properties of the emulated GPU that libraries read to size their launches (NVIDIA
# and AMD product specifications); archs missing here answer with sm_90's
PROPERTIES = {
    "cuda": {"max_shared_mem": 232448, "max_num_regs": 65536, "multiprocessor_count": 132,
             "warpSize": 32, "sm_clock_rate": 1980000, "mem_clock_rate": 2619000,
             "mem_bus_width": 5120},
    "hip": {"max_shared_mem": 65536, "max_num_regs": 65536, "multiprocessor_count": 304,
            "warpSize": 64, "sm_clock_rate": 2100000, "mem_clock_rate": 2600000,
            "mem_bus_width": 8192},
}


class CpuDriver:
    """``triton.runtime.driver.active`` while a block is open in a process without a GPU
    (where Triton raises "0 active drivers"): it answers target and device queries as the
    innermost block's arch (libraries ask them at import or before a launch: import them
    inside the block); timing kernels is refused with a clear error."""

    def __init__(self, current):
        self._current = current

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget
        from .target_rules import gpu_target
        return GPUTarget(*gpu_target(getattr(self._current(), "arch", None)))

    def get_current_device(self):
        return 0

    def set_current_device(self, device):
        return None

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        import torch
        return torch.device("cpu")

    def get_device_capability(self, device=0):
        from ..registry import DEFAULT_ARCH
        from .target_rules import device_capability
        return device_capability(getattr(self._current(), "arch", None) or DEFAULT_ARCH)

    def get_device_interface(self):
        import torch
        return torch.cpu

    @property
    def utils(self):
        return self

    def get_device_properties(self, device=0):
        return dict(PROPERTIES[self.get_current_target().backend])

    def map_python_to_cpp_type(self, ty: str) -> str:
        raise RuntimeError("torch_mma_emu.triton: no GPU here; kernels run in the interpreter")

    def get_benchmarker(self):
        def refuse(*args, **kwargs):
            raise RuntimeError("torch_mma_emu.triton: kernels cannot be timed without a GPU; "
                               "inside an emulate block an autotuned kernel runs the config "
                               "the block's autotune= picks")
        return refuse

    def get_empty_cache_for_benchmark(self):
        import torch
        return torch.empty(0, dtype=torch.int)

    def clear_cache(self, cache):
        return None

    @property
    def launcher_cls(self):
        """Reached only by a compiled launch: a thread with no block open (a block applies
        to the thread that opened it and to threads started inside it)."""
        raise RuntimeError(
            "torch_mma_emu.triton: this thread has no emulate/interpret block open, and there "
            "is no GPU to launch the compiled kernel on; a block applies to the thread that "
            "opened it and to threads started inside it: open a block in this thread too, or "
            "start the thread inside the block")


def install_driver(set_attr, current) -> None:
    """Put a :class:`CpuDriver` in place where Triton finds no active driver (none; or
    one that fails to start without a GPU: with ``device_queries(available=True)`` torch
    says CUDA is available, and Triton's CUDA driver then looks for libcuda)."""
    from triton.runtime import driver
    try:
        driver.default
    except (RuntimeError, AssertionError, ImportError, OSError):
        set_attr(driver, "_active", CpuDriver(current))
