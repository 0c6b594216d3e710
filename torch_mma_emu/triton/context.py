"""The ``with`` blocks: :class:`TritonEmulation` behind :func:`emulate` and
:func:`interpret`."""
from __future__ import annotations

import dataclasses
import warnings
from collections import Counter
from typing import Callable, Optional, Union

import torch

from ..ops import emulated_mm
from ..registry import ARCHS, canonical_arch
from ..spec import Spec
from . import bounds, hook
from . import target_rules
from .record import Launch, Tallies, emulating, snapshot
from .dot import format_of, run_plan, split_fp32, to_numpy, to_torch
from .target_rules import PATHS, DotPlan, choose

SPLITS = ("tf32x3", "bf16x3", "bf16x6")


def _precision(p) -> str:
    name = getattr(p, "name", str(p)).split(".")[-1]
    return name.lower()


def launch_meta(fn, args, kwargs) -> dict:
    """What a grid function is given: every parameter of the kernel bound as Triton's
    launcher binds it (defaults included, so ``BLOCK: tl.constexpr = 64`` is there), plus the
    launch options (``num_warps``, ...)."""
    import inspect
    names = inspect.getfullargspec(fn).args
    bound = inspect.getcallargs(fn, *args, **{k: v for k, v in kwargs.items() if k in names})
    return {**kwargs, **bound}


class TritonEmulation:
    """An open block: Triton kernels launched in it run in Triton's interpreter, with
    ``tl.dot`` / ``tl.dot_scaled`` computed as ``arch``'s matrix units do (``arch=None``:
    the interpreter's own NumPy arithmetic).  ``counts`` says which plans ran how often."""

    def __init__(self, arch, instruction: Optional[str] = None, *,
                 autotune: Union[str, Callable] = "first", exact_math: bool = True,
                 keep_inputs: bool = False):
        self.keep_inputs = bool(keep_inputs)
        self.spec = arch if isinstance(arch, Spec) else None
        self.arch = None if arch is None or self.spec is not None else canonical_arch(arch)
        if instruction is not None and not isinstance(instruction, str):
            raise TypeError("torch_mma_emu.triton.emulate: instruction must be a path "
                            f"({', '.join(PATHS)}) or a registry instruction name, "
                            f"got {type(instruction).__name__}")
        if self.spec is None:       # "" / unknown: refused here, not at the first tl.dot
            bounds.check_instruction(self.arch, instruction)
        self.path = instruction if instruction in PATHS else None
        self.variant = instruction if instruction is not None and self.path is None else None
        if self.spec is not None and instruction is not None:
            raise ValueError("torch_mma_emu.triton.emulate: a Spec is one instruction already; "
                             "leave instruction out")
        if not (autotune == "first" or callable(autotune)):
            raise ValueError("torch_mma_emu.triton.emulate: autotune must be 'first' or a "
                             "function (list of triton.Config) -> triton.Config")
        self.autotune = autotune
        self.exact_math = bool(exact_math)
        self.counts: Counter = Counter()
        self.reductions: Counter = Counter()      # each reduction's tree (compiled.py)
        self.launches: list = []    # a record.Launch per launch (kernel name, grid, scalars)
        self.launch: Optional[Launch] = None      # the running launch's record
        self.tallies = Tallies()    # what the modules counted for the summary (record.py)

    # -- the block -----------------------------------------------------------------------
    def __enter__(self):
        hook.enter(self)
        return self

    def __exit__(self, *exc):
        if not hook.is_open(self):
            raise RuntimeError("torch_mma_emu.triton: __exit__ of a block that is not open")
        hook.leave(self)
        return False

    def __repr__(self):
        what = self.spec.describe() if self.spec else (self.arch or "interpreter")
        return f"<torch_mma_emu.triton block: {what}>"

    def summary(self) -> str:
        from . import extras
        lines = [f"{n:8d}  {k}" for k, n in (self.counts + self.reductions).most_common()]
        return "\n".join((lines or ["no tl.dot ran"]) + extras.summary_lines(self))

    # -- what the hook asks ------------------------------------------------------------
    @property
    def emulating(self) -> bool:
        """Whether the block emulates a target (False: ``tmt.interpret()``)."""
        return emulating(self)

    @property
    def num_warps(self) -> int:
        return self.launch.num_warps if self.launch is not None else 4

    @property
    def vendor(self) -> Optional[str]:
        return ARCHS[self.arch].vendor if self.arch else None

    def interpreter_options(self, opts):
        """The interpreter's options with the target backend's dot defaults
        (``target_rules.backend_dot_options``)."""
        if self.arch is None:
            return opts
        new = target_rules.backend_dot_options(self.arch)
        names = {f.name for f in dataclasses.fields(opts)}
        return dataclasses.replace(opts, **{k: v for k, v in new.items() if k in names})

    @property
    def min_dot_size(self):
        return target_rules.min_dot_size(self.arch)

    def begin_launch(self, interp, args, grid, kwargs, launched=None):
        g = grid(launch_meta(interp.fn, args, kwargs)) if callable(grid) else grid
        bounds.check_grid(interp.fn.__name__, g)
        self.launch = Launch(interp.fn.__name__, tuple(g), tuple(sorted(
            (k, v) for k, v in kwargs.items() if isinstance(v, (int, float, str, bool)))),
            num_warps=int(kwargs.get("num_warps") or 4))
        if self.keep_inputs:        # the launch's inputs, to run it again (the PTX checker)
            self.launch.inputs = snapshot(launched if launched is not None else interp, args,
                                          kwargs)
        self.launches.append(self.launch)

    def end_launch(self, previous: Optional[Launch] = None):
        self.launch = previous

    def run_autotuned(self, tuner, args, kwargs):
        """An autotuned kernel: the GPU picks a config by timing, which the CPU cannot;
        the block's ``autotune`` picks one (the first after Triton's early pruning)."""
        tuner.nargs = dict(zip(tuner.arg_names, args))
        try:
            configs = list(tuner.configs)
            prune = getattr(tuner, "early_config_prune", None)
            if prune and len(configs) > 1:
                configs = list(prune(configs, tuner.nargs, **kwargs))
            config = configs[0] if self.autotune == "first" else self.autotune(configs)
            tuner.best_config = config          # as Triton's run sets it (users read it)
            name = getattr(getattr(tuner, "base_fn", None), "__name__", "kernel")
            if len(configs) > 1 and self.autotune == "first" and \
                    self.tallies.warn_once(("autotune", name)):
                warnings.warn(f"torch_mma_emu.triton: {name} is autotuned over {len(configs)} "
                              f"configs; a GPU picks one by timing, the emulation runs {config}"
                              " (the first); emulate(..., autotune=fn) chooses another",
                              stacklevel=3)
            full = {**tuner.nargs, **kwargs, **config.all_kwargs()}
            if config.pre_hook is not None:
                config.pre_hook(full)
            return tuner.fn.run(*args, **kwargs, **config.all_kwargs())
        finally:
            tuner.nargs = None

    # -- the arithmetic ----------------------------------------------------------------
    def plan(self, A, B, fa, fb, out, precision, imp) -> DotPlan:
        """The instruction plan of one dot of ``A`` (..., M, K) and ``B`` (..., K, N)."""
        M, K, N = A.shape[-2], A.shape[-1], B.shape[-1]
        if self.variant is not None:
            f = lambda x: "tf32" if x == "fp32" and precision == "tf32" else x  # noqa: E731
            return DotPlan("registry", f(fa), f(fb), out, instruction=self.variant)
        if self.path is None and self.tallies.warn_once("triton version"):
            # Triton's rules decide: say whose
            import triton
            msg = hook.version_warning(getattr(triton, "__version__", "?"))
            if msg:
                warnings.warn(msg, stacklevel=3)
        return choose(self.arch, fa, fb, out, precision, imp, (M, N, K), A.dim() == 3,
                      self.num_warps, self.path)

    def single_dot(self, A, B, C, fa, fb, out, precision, imp) -> torch.Tensor:
        plan = self.plan(A, B, fa, fb, out, precision, imp)
        self.counts[plan.describe()] += 1
        return run_plan(plan, self.arch, A, B, C, self.variant)

    def reduce_dot_precision(self) -> str:
        """The precision of the dot Triton makes of ``tl.sum(x[:, :, None] * y[None, :, :],
        1)`` (combine.py; ``target_rules.reduce_dot_precision``)."""
        return "tf32" if self.arch is None else target_rules.reduce_dot_precision(self.arch)

    def prepare(self, a, b, d, input_precision, max_num_imprecise_acc):
        """The interpreter's dot ``d + a @ b``, planned and counted now; the returned
        function computes it with a given C handle (of ``d``'s shape and type), so that a
        dot the compiler folds an addition into (combine.py) is computed once, with the
        addend as C.  None: leave the dot to the interpreter."""
        if not self.emulating:
            return None
        fa, fb, out = format_of(a.dtype), format_of(b.dtype), format_of(d.dtype)
        if fa is None or fb is None or out is None:
            self.counts["integer dot (exact; NumPy)"] += 1
            return None
        A, B = to_torch(a.data, fa), to_torch(b.data, fb)
        prec = _precision(input_precision)
        imp = int(max_num_imprecise_acc or 0)
        if self.spec is not None:
            self.counts[f"spec {self.spec.describe()}"] += 1
            fmt = None if A.dtype != torch.float32 else self.spec.in_format
            spec = self.spec

            def run(C):
                return emulated_mm(A, B, C.to(torch.float16 if spec.out_format == "fp16"
                                               else C.dtype), arch=spec, in_format=fmt)
        elif fa == "fp32" and prec in SPLITS:      # one plan for all sub-dots of the split
            sub, f = ("tf32", "fp32") if prec == "tf32x3" else ("ieee", "bf16")
            plan = self.plan(A, B, f, f, "fp32", sub, imp)
            self.counts[plan.describe()] += {"tf32x3": 3, "bf16x3": 3, "bf16x6": 6}[prec]

            def run(C):
                return split_fp32(A, B, C, prec, lambda x, y, acc, _f: run_plan(
                    plan, self.arch, x, y, acc, self.variant))
        else:
            plan = self.plan(A, B, fa, fb, out, prec, imp)
            self.counts[plan.describe()] += 1

            def run(C):
                return run_plan(plan, self.arch, A, B, C, self.variant)
        from triton.runtime.interpreter import TensorHandle

        def compute(c):
            C = to_torch(c.data, out)
            return TensorHandle(to_numpy(run(C).to(C.dtype)), d.dtype)
        return compute

    def dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        """``d + a @ b`` of the interpreter (None: leave it to the interpreter)."""
        compute = self.prepare(a, b, d, input_precision, max_num_imprecise_acc)
        return None if compute is None else compute(d)

    def convert(self, src, dst_type, rounding_mode):
        """A float conversion as the GPU rounds it (None: the interpreter's is right)."""
        if not self.emulating:
            return None
        from triton.runtime.interpreter import TensorHandle
        from .convert import convert
        rtz = getattr(rounding_mode, "name", "") == "RTZ"
        out = convert(self.arch, self.vendor, src.data, src.dtype.scalar, dst_type.scalar, rtz)
        return None if out is None else TensorHandle(out, dst_type.scalar)

    def dot_scaled(self, lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, fast_math,
                   lhs_k_pack, rhs_k_pack, acc):
        from triton.runtime.interpreter import TensorHandle
        from . import scaled
        if not self.emulating:
            raise NotImplementedError("Triton's interpreter has no tl.dot_scaled; run the "
                                      "kernel inside torch_mma_emu.triton.emulate(arch)")
        if not target_rules.scaled_dot_modelled(self.arch):
            where = self.arch or "a Spec"
            raise NotImplementedError(f"torch_mma_emu.triton: tl.dot_scaled on {where} is not "
                                      "modelled (NVIDIA archs are)")
        fa, fb = scaled.elem_format(lhs_format), scaled.elem_format(rhs_format)
        path = target_rules.scaled_dot_path(self.arch, fa, fb, lhs.data.shape[-2],
                                            lhs.data.ndim, self.num_warps)
        if path is not None:
            self.counts[f"{path} block_scale {fa},{fb}"] += 1
            D = scaled.native(self.arch, lhs, lhs_scale, fa, rhs, rhs_scale, fb, lhs_k_pack,
                              rhs_k_pack, acc)
        else:
            D = scaled.decomposed(lambda *a: self.single_dot(*a), lhs, lhs_scale, fa, rhs,
                                  rhs_scale, fb, fast_math, lhs_k_pack, rhs_k_pack, acc)
        return TensorHandle(to_numpy(D.float()), acc.dtype)


def emulate(arch, instruction: Optional[str] = None, *,
            autotune: Union[str, Callable] = "first", exact_math: bool = True,
            keep_inputs: bool = False) -> TritonEmulation:
    """Run Triton kernels as ``arch``'s matrix units compute them (docs/triton.md).

    ::

        with torch_mma_emu.triton.emulate("H100") as em:
            my_kernel[grid](a_cpu, b_cpu, c_cpu, ...)   # a @jit kernel, CPU tensors
        print(em.summary())                            # which instructions ran

    Inside the block every Triton launch of the calling thread runs in Triton's interpreter
    (``TRITON_INTERPRET`` need not be set, before or after importing Triton; CUDA tensors
    are copied to the host and back), and each ``tl.dot`` is one chain step of the
    instruction Triton would pick on ``arch`` for that dot's dtypes, tile and ``num_warps``
    (``target_rules.choose``), with the accumulator as C; ``tl.dot_scaled`` takes the MX / NVFP4
    rows.  ``instruction``: force a path (``"wgmma"``, ``"mma.sync"``, ``"tcgen05"``,
    ``"mfma"``, ``"fma"``) or name a registry instruction variant (``tme.instructions``).
    ``arch`` may be a :class:`~torch_mma_emu.Spec`: every dot then uses it.  ``autotune``:
    which config an autotuned kernel runs ("first", or a function of the config list).
    ``tl.exp``, ``/``, ``tl.sqrt``, ... run as the target's instructions (target_math.py;
    ``exact_math=False``: NumPy's, faster), fp32 ``a * b + c`` is contracted into one fma
    where the compiled code does (contract.py), atomics are recorded (extras.py); the rest
    (loads, ``tl.sum``) is the interpreter's NumPy arithmetic: docs/triton.md lists what is
    and is not emulated.  ``keep_inputs``: each launch record (``em.launches``) keeps
    ``inputs``, the kernel and a copy of its arguments before it ran (to run it again under
    the PTX checker, ``ptx_check.check``)."""
    if arch is None:
        raise ValueError("torch_mma_emu.triton.emulate: give an arch (tme.archs()) or a Spec; "
                         "torch_mma_emu.triton.interpret() runs the plain interpreter")
    return TritonEmulation(arch, instruction, autotune=autotune, exact_math=exact_math,
                           keep_inputs=keep_inputs)


def interpret(*, autotune: Union[str, Callable] = "first") -> TritonEmulation:
    """Run Triton kernels in Triton's plain interpreter (NumPy arithmetic for ``tl.dot``)
    without setting ``TRITON_INTERPRET``: the reference the emulation differs from."""
    return TritonEmulation(None, autotune=autotune)


def open_for(policy) -> Optional[TritonEmulation]:
    """The block ``torch_mma_emu.emulate`` opens for its policy's arch (None without
    Triton).  An interpreter this cannot hook into is reported loudly, not fatal."""
    import importlib.util
    if importlib.util.find_spec("triton") is None:
        return None
    arch = policy.spec if policy.spec is not None else policy.arch
    try:
        return emulate(arch).__enter__()
    except (RuntimeError, ImportError) as e:
        warnings.warn(f"torch_mma_emu.emulate: Triton kernels inside this block are NOT "
                      f"emulated: {e}", stacklevel=3)
        return None


def close(block: Optional[TritonEmulation]) -> None:
    if block is not None:
        block.__exit__(None, None, None)
