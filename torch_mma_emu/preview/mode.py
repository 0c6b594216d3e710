"""``emulate(arch)``: a TorchDispatchMode that runs the matrix products of any PyTorch code
as ``arch``'s matrix units compute them.

What reaches a dispatch mode is the aten level below autograd: ``matmul`` / ``linear`` /
``einsum`` arrive as ``mm`` / ``addmm`` / ``bmm`` (+ views), convolutions as
``aten.convolution`` (and ``convolution_backward``), ``scaled_dot_product_attention`` as the
op of the target GPU's choice (the memory-efficient attention op or the math path's ``bmm``:
sdpa_route.py) and its backward op, flex attention as its higher-order operators (flex.py).
Autograd records the usual nodes above the
mode; their backward ops (``mm``, ``convolution_backward``, the attention backward) come
back through the mode when ``.backward()`` runs inside the context, and are emulated too.

Under ``torch.inference_mode`` composite ops (``linear``, ``matmul``, ``einsum``, ``lstm``,
``scaled_dot_product_attention``, ...) reach the mode un-split; it runs their decomposition
with itself on, so it sees what ``no_grad`` code sends (same bits).  Two calls are routed one
level up, by ``functions.FunctionRouter`` (CPU RNNs without oneDNN, attention).
Ops that multiply matrices without an emulation are recorded and warned about once.

Under ``torch.compile`` the mode asks to be ignored while compiling
(``ignore_compile_internals``): Dynamo traces normally (fullgraph works), and the compiled
code's library calls (``mm.out``, ``addmm.out``, ``convolution``, attention kernels) come
through the mode at run time.  With ``backend="aot_eager"`` the results are those of eager
mode bit for bit.  Inductor would turn some products into generated code that never reaches
the mode (K = 1 outer products, CPU dot products, max-autotune templates, prepacked oneDNN
Linear); while a block is open the process-wide switches keep them library calls
(patches.py, docs/preview.md, "torch.compile").

This module holds the mode and its routing table (``_HANDLERS``: aten op -> handler); each
op family's handler lives with the family (gemm.py, conv.py, attention.py, scaled.py,
grouped.py, flex.py, sdpa_route.py) and is called as ``handler(mode, func, args, kwargs)``.
A handler talks to the mode through its handler API only: :meth:`EmulateMode.plan` (the
policy's plan for two operands), :meth:`~EmulateMode.record` (one call, emulated or
native), :meth:`~EmulateMode.record_native` (a product that runs natively: recorded and
warned once), :meth:`~EmulateMode.count_native` (any other op left native: counted in the
summary's "ran natively" line, census.py), :meth:`~EmulateMode.warn_once`, and the attributes ``policy`` and
``fp8_promotion``; :data:`WATCHED_NATIVE` names the ops recorded when they run natively.
"""
from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Any, Optional

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode

from .. import switches
from ..triton import context as _triton
from . import (aten_backward, aten_embedding, aten_math, aten_moments, aten_norms,
               aten_pointwise, aten_reductions, attention, census, conv, custom_ops, flex,
               gemm, grouped, patches, scaled, sdpa_route)
from .attribution import LayerTracker
from .dispatch_args import phase
from .functions import FunctionRouter
from .policy import Plan, Policy
from .records import Record, Recorder

__all__ = ["EmulateMode", "emulate", "WATCHED_NATIVE"]

aten = torch.ops.aten

# Ops that multiply matrices and stay native (they do not run on matrix units in PyTorch's
# GPU paths, have no emulation here, or are backend kernels that the switches keep out of
# the block): each is recorded and warned about once per block, by name.
WATCHED_NATIVE = frozenset({"mv", "dot", "vdot", "addmv", "addbmm", "addr", "_int_mm", "_weight_int8pack_mm",
                 "linalg_vecdot", "_native_multi_head_attention", "_transformer_encoder_layer_fwd",
                 "_trilinear",
                 "_cdist_forward", "_cdist_backward",
                 "mkldnn_rnn_layer", "mkldnn_rnn_layer_backward", "_cudnn_rnn",
                 "_cudnn_rnn_backward", "miopen_rnn", "miopen_rnn_backward",
                 "mkldnn_linear", "mkldnn_linear_backward", "mkldnn_linear_backward_input",
                 "mkldnn_linear_backward_weights", "mkldnn_convolution", "_convolution",
                 "cudnn_convolution", "cudnn_convolution_transpose", "miopen_convolution",
                 "_slow_conv2d_forward", "_slow_conv2d_backward", "slow_conv3d_forward",
                 "slow_conv_dilated2d", "slow_conv_dilated3d", "slow_conv_transpose2d",
                 "slow_conv_transpose3d", "thnn_conv2d", "_nnpack_spatial_convolution",
                 "convolution_overrideable", "_efficient_attention_forward",
                 "_efficient_attention_backward", "_flash_attention_forward",
                 "_flash_attention_backward", "_linear_pointwise", "_convolution_pointwise",
                 "_convolution_transpose_pointwise", "_mkl_linear", "qlinear_pointwise",
                 "qconv_pointwise", "qconv2d_pointwise"})

_CIA = "CompositeImplicitAutograd"
_DECOMPOSES: dict = {}      # op -> has a CompositeImplicitAutograd kernel (cached)


def _decomposes(func) -> bool:
    """Whether ``func`` is a composite op (``linear``, ``matmul``, ``einsum``, ``lstm``,
    ``scaled_dot_product_attention``, ...).  Such ops reach the mode un-split only where
    autograd is off for good (``torch.inference_mode``); running their decomposition with
    the mode on gives the ops that ``no_grad`` code would have sent."""
    d = _DECOMPOSES.get(func)
    if d is None:       # (silu_backward, mish_backward: a CPU / CUDA kernel besides, which runs)
        d = _DECOMPOSES[func] = custom_ops.has_kernel(func, _CIA) and \
            not custom_ops.has_kernel(func, "CPU")
    return d


# threads started inside a block run under its mode (and its Triton block), ../switches.py
_THREADS = switches.THREADS


class _Reentered:
    """The mode pushed again while its handler runs (a handler runs with it popped), for
    running a composite op's decomposition through it."""

    def __init__(self, mode):
        self.mode = mode

    def __enter__(self):
        TorchDispatchMode.__enter__(self.mode)

    def __exit__(self, *exc):
        TorchDispatchMode.__exit__(self.mode, *exc)


_PLAIN = (torch.Tensor, torch.nn.Parameter)
_OPEN = threading.local()       # .stack: this thread's open EmulateModes, innermost last


class EmulateMode(TorchDispatchMode):
    """The mode behind :func:`emulate`.  ``counts`` / ``records`` / ``summary()`` say
    which ops were emulated, in which format, in which phase."""

    # Higher-order operators reach the mode: flex attention is emulated (flex.py), others
    # run natively and are recorded instead of raising.
    supports_higher_order_operators = True
    collectives = None      # an nccl_emu.NcclCollectives entered with the block (emulate())

    def __init__(self, policy: Policy, *, record: bool = False,
                 fp8_promotion: Optional[int] = 128, options: Optional[dict] = None):
        super().__init__()
        self.policy = policy
        self.recorder = Recorder(keep=record)
        if fp8_promotion is not None and (not isinstance(fp8_promotion, int)
                                          or fp8_promotion <= 0):
            raise ValueError("fp8_promotion must be None (no promotion) or a positive number "
                             f"of K elements, got {fp8_promotion!r}")
        self.fp8_promotion = fp8_promotion
        self.options = dict(options or {})      # emulate()'s options, for report() reruns
        self._warned: set = set()
        self.layer_tracker = LayerTracker(capture=True) if record else None
        self._lock = threading.Lock()
        self._router = FunctionRouter(self)
        self._inside = threading.local()      # .depth: a handler called from above the mode

    # Entering the block also (1) holds the process-wide switches that keep products
    # visible to the mode (patches.EMULATE), (2) enters the function-level router
    # (functions.py: RNNs, attention with dropout), (3) makes threads started inside it run
    # under it (switches.THREADS), (4) with record=True, tracks module paths and captures the
    # first top-level module call (attribution.py).  Leaving undoes them, also when the
    # body raises.
    def __enter__(self):
        switches.enter_all(patches.EMULATE)
        entered = []
        try:
            self._triton = _triton.open_for(self.policy)    # Triton kernels too (triton.md)
            _THREADS.enter("mode", self, EmulateMode._adopt_thread)
            entered.append(_THREADS)
            if self.layer_tracker is not None:
                self.layer_tracker.enter()
                entered.append(self.layer_tracker)
            self._router.__enter__()
            entered.append(self._router)
            if self.collectives is not None:
                entered.append(self.collectives.__enter__())
            out = super().__enter__()
            _OPEN.stack = getattr(_OPEN, "stack", []) + [self]
            return out
        except BaseException:
            self._leave(entered)
            raise

    def __exit__(self, exc_type, exc_val, exc_tb):
        stack = getattr(_OPEN, "stack", [])
        if self in stack and stack[-1] is not self:      # torch would pop the inner mode
            outer, inner = self.policy.arch_name, stack[-1].policy.arch_name
            raise RuntimeError(f"torch_mma_emu.emulate: closing the block of {outer} while a "
                               f"block opened inside it ({inner}) is open: close the inner "
                               "block first (nothing was closed)")
        _OPEN.stack = [m for m in stack if m is not self]
        try:
            return super().__exit__(exc_type, exc_val, exc_tb)
        finally:
            self._leave([_THREADS, self.layer_tracker, self._router, self.collectives])

    def _leave(self, entered):
        try:
            if self.collectives is not None and self.collectives in entered:
                self.collectives.__exit__(None, None, None)
            if self._router in entered:
                self._router.__exit__(None, None, None)
            if self.layer_tracker is not None and self.layer_tracker in entered:
                self.layer_tracker.leave()
            if _THREADS in entered:
                _THREADS.leave(self)
        finally:
            try:
                _triton.close(getattr(self, "_triton", None))
                self._triton = None
            finally:
                switches.leave_all(patches.EMULATE)

    def _adopt_thread(self):
        """Called in a thread started inside the block: run it under this mode (until the
        thread ends; its mode stacks are its own)."""
        for s in patches.EMULATE:      # settings PyTorch keeps per thread
            s.adopt()
        self._router.__enter__()
        if self.layer_tracker is not None:
            self.layer_tracker.adopt()
        from torch.utils._python_dispatch import _push_mode
        _push_mode(self)        # its Triton block: the innermost one is adopted (switches.py)

    # -- records ------------------------------------------------------------------------
    @property
    def records(self) -> list[Record]:
        return self.recorder.records

    @property
    def counts(self):
        return self.recorder.counts

    def summary(self) -> str:
        text = self.recorder.summary()
        return text if self.collectives is None else f"{text}\n{self.collectives.summary_line()}"

    # -- the handler API (what the op families' handlers call) ------------------------
    def plan(self, kind: str, a, b, phase: str) -> Plan:
        """The policy's plan for a product of ``kind`` of operands ``a`` and ``b`` (their
        dtypes) in ``phase`` (``"forward"`` / ``"backward"``, dispatch_args.phase)."""
        return self.policy.plan(kind, a.dtype, b.dtype, backward=phase == "backward")

    def record(self, func, kind: str, plan_label: str, shapes, note: str = "") -> None:
        """One call of ``func``: its op kind, the plan's label (``"native"`` where it ran
        natively), its operand shapes and a note; kept in ``records`` / ``counts`` with the
        phase and the module path (``record=True``)."""
        lt = self.layer_tracker
        module = lt.path() if lt is not None else ""
        rec = Record(str(func), kind, phase(), plan_label, self.policy.arch_name,
                     tuple(tuple(s) for s in shapes), note, module)
        with self._lock:
            self.recorder.add(rec)
            if lt is not None and lt.capture.active and rec.emulated and rec.product and \
                    rec.phase == "forward":
                lt.capture.modules.append(module)

    def record_native(self, func, args, why: str) -> None:
        """An op that multiplies matrices and runs natively: recorded, warned once."""
        self.record(func, "other", "native", [a.shape for a in args
                                              if isinstance(a, torch.Tensor)], why)
        name = str(func)
        self.warn_once(name, f"emulate({self.policy.arch_name}): {name} multiplies matrices and "
                       f"runs natively ({why}); em.records lists each call", stacklevel=3)

    def count_native(self, func, why: str = "") -> None:
        """An op that runs natively without a record (no handler, or its handler has no
        model for these operands): counted by name for the summary's "ran natively" line,
        unless it only views, copies or moves bits (census.py)."""
        if isinstance(func, torch._ops.OpOverload) and census.is_bookkeeping(func):
            return
        with self._lock:
            self.recorder.add_native(str(getattr(func, "overloadpacket", func)))

    @contextlib.contextmanager
    def handler_call(self):
        """For a handler called from above the mode (a function-level route, sdpa_route.py):
        the ops it runs pass through natively, neither routed nor counted, as they do where
        the mode calls a handler (with itself popped)."""
        self._inside.depth = getattr(self._inside, "depth", 0) + 1
        try:
            yield
        finally:
            self._inside.depth -= 1

    def warn_once(self, key, message: str, stacklevel: int = 2) -> bool:
        """Warn ``message`` unless this block warned under ``key`` already (any thread);
        ``stacklevel`` counts from the caller, as in ``warnings.warn``.  Whether it warned."""
        with self._lock:
            if key in self._warned:
                return False
            self._warned.add(key)
        warnings.warn(message, stacklevel=stacklevel + 1)
        return True

    def report(self, reference="fp64", *, plot: Optional[str] = None):
        """Per-layer divergence of the block's first top-level module call from
        ``reference``: ``"fp64"`` (the same call in float64, natively), ``"native"`` (this
        machine in the run's dtype), an arch name / alias / Spec (the same call emulated
        there with this block's options), or another ``EmulateMode`` that ran the same
        call (``record=True``).  Returns a :class:`~.attribution.Report`; ``str(report)``
        is a table, ``plot="file.png"`` also writes a bar chart.  Needs ``record=True``."""
        from . import attribution as at
        cap = self.layer_tracker.capture if self.layer_tracker is not None else None
        if cap is None:
            raise ValueError("report: use emulate(..., record=True); the block kept no "
                             "layer outputs")
        if not cap.done:
            raise ValueError("report: no module was called inside the block (the report "
                             "compares the outputs of the first top-level module call)")
        if isinstance(reference, EmulateMode):
            ref, label = at.block_outputs(reference.layer_tracker), reference.policy.arch_name
        else:
            at.warn_training(cap.model)
            opts = dict(self.options)

            def factory(arch):
                return emulate(arch, **opts)
            ref, label = at.reference_outputs(cap, reference, factory)
        rows = at.compare_outputs(cap.outputs, ref, cap.types, cap.modules, cap.root_path)
        rep = at.Report(self.policy.arch_name, label, rows, cap.note)
        if plot is not None:
            rep.plot(plot)
        return rep

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    # -- dispatch -------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(t not in _PLAIN for t in types):
            if any(issubclass(t, FakeTensor) for t in types):
                # no numbers: DTensor's sharding propagation runs the op on fake tensors
                # (a NotImplemented here would fail it: FakeTensor defers to the modes)
                return func(*args, **kwargs)
            # a tensor subclass (torchao's Float8TrainingTensor / MXTensor, DTensor, ...):
            # it unwraps itself, and the plain-tensor ops it runs on its contents
            # (_scaled_mm, mm on local shards) come back here
            return NotImplemented
        if getattr(self._inside, "depth", 0):
            return func(*args, **kwargs)          # inside a handler (handler_call)
        handler = _HANDLERS.get(func)
        if isinstance(func, torch._ops.HigherOrderOperator):
            hop = flex.HANDLERS.get(func.name())      # flex attention, forward and backward
            if hop is not None:
                return hop(self, func, args, kwargs)
            self.record_native(func, args, "higher-order operator: products inside it are "
                                          "not emulated")
            return func(*args, **kwargs)
        if handler is None:
            if _decomposes(func):
                with _Reentered(self):
                    out = func.decompose(*args, **kwargs)
                if out is not NotImplemented:
                    return out
            if func.namespace not in custom_ops.OWN:
                return self._foreign(func, args, kwargs)
            if func.overloadpacket.__name__ in WATCHED_NATIVE:
                self.record_native(func, args, "no emulation of this op")
            else:
                self.count_native(func)
            return func(*args, **kwargs)
        return handler(self, func, args, kwargs)

    def _foreign(self, func, args, kwargs):
        """An op of another library (custom_ops.py): its Python kernel runs with the mode
        on; a compiled one runs natively, recorded and warned about unless its library
        multiplies no matrices."""
        key = custom_ops.kernel_is_python(func, args, kwargs)
        if key is not None:
            with _Reentered(self):
                return custom_ops.run_own_kernel(func, key, args, kwargs)
        if custom_ops.is_opaque_and_unknown(func):
            self.record_native(func, args, "a compiled kernel of another library: products "
                                          "inside it, if any, are not seen")
        else:
            self.count_native(func)
        return func(*args, **kwargs)


def _overloads(name: str, which) -> list:
    pkt = getattr(aten, name, None)
    if pkt is None:
        return []
    return [getattr(pkt, o) for o in which if o in pkt.overloads()]


# The routing table: (aten op names, overloads, handler(mode, func, args, kwargs)).
# Higher-order operators (flex attention) are routed by name: flex.HANDLERS.
_ROUTES = [
    (("mm", "addmm", "bmm", "baddbmm"), ("default", "out", "dtype", "dtype_out"),
     gemm.handle_gemm),
    (("addmm_", "baddbmm_"), ("default",), gemm.handle_gemm),
    (("_addmm_activation",), ("default",), gemm.handle_addmm_activation),
    (("convolution",), ("default", "out"), conv.handle_conv),
    (("convolution_backward",), ("default",), conv.handle_conv_backward),
    (attention.FLASH_OPS, ("default",), attention.handle_forward),
    (tuple(n + "_backward" for n in attention.FLASH_OPS), ("default",),
     attention.handle_backward),
    # the op sdpa_route.py calls where the target GPU runs a fused kernel and the CPU would not
    (("_scaled_dot_product_efficient_attention",), ("default",), sdpa_route.handle_forward),
    (("_scaled_dot_product_efficient_attention_backward",), ("default",),
     sdpa_route.handle_backward),
    (("_scaled_mm", "_scaled_mm_v2"), ("default", "out"), scaled.handle_scaled_mm),
    (("_grouped_mm",), ("default",), grouped.handle_grouped_mm),
    (("_scaled_grouped_mm",), ("default",), grouped.handle_scaled_grouped_mm),
    # PyTorch's own CUDA reductions (torch 2.13's kernels on the target GPU)
    (("sum",), ("default", "dim_IntList"), aten_reductions.handle_sum),
    (("mean",), ("default", "dim"), aten_reductions.handle_mean),
    (("_softmax", "_log_softmax"), ("default",), aten_reductions.handle_softmax),
    (aten_moments.OPS, ("correction",), aten_moments.handle),
    (("native_layer_norm",), ("default",), aten_norms.handle_layer_norm),
    (("native_layer_norm_backward",), ("default",), aten_norms.handle_layer_norm_backward),
    # PyTorch's own CUDA elementwise math (torch 2.13's kernels, aten_math.py)
    (tuple(aten_math.OPS), ("default", "out"), aten_math.handle),
    (aten_embedding.OPS, ("default", "out"), aten_embedding.handle),
    (tuple(n + "_" for n in aten_math.OPS), ("default",), aten_math.handle),
    (aten_backward.OPS, ("default", "grad_input"), aten_backward.handle),
    (aten_backward.SOFTMAX_OPS, ("default", "out"), aten_backward.handle_softmax),
    # PyTorch's own CUDA pointwise arithmetic (aten_pointwise.py)
    (aten_pointwise.BINARY, ("Tensor", "Scalar", "out", "Scalar_out", "Tensor_out",
                             "Tensor_mode", "Scalar_mode", "out_mode", "Scalar_mode_out"),
     aten_pointwise.handle_binary),
    (tuple(n + "_" for n in aten_pointwise.BINARY), ("Tensor", "Scalar", "Tensor_mode",
                                                     "Scalar_mode"),
     aten_pointwise.handle_binary),
    (aten_pointwise.UNARY, ("default", "out"), aten_pointwise.handle_unary),
    (tuple(n + "_" for n in aten_pointwise.UNARY), ("default",), aten_pointwise.handle_unary),
    (("arange",), ("default", "start", "start_step", "start_out", "out"),
     aten_pointwise.handle_arange),
]
_HANDLERS: dict[Any, Any] = {f: handler for names, which, handler in _ROUTES
                             for name in names for f in _overloads(name, which)}

ROUTED_OPS = tuple(sorted(str(f) for f in _HANDLERS))


def emulate(arch, *, formats=None, fp32_format: str = "auto", bias: str = "epilogue",
            fp16_accumulation: Optional[bool] = None, fp16_alt_impl: str = "off",
            fp8_promotion: Optional[int] = 128, record: bool = False,
            schedule=None, collectives=None) -> EmulateMode:
    """Run the matrix products inside the ``with`` block as ``arch``'s matrix units do.

    ::

        with tme.emulate("MI300X", record=True) as em:
            logits = model(tokens)
            logits.float().logsumexp(-1).sum().backward()   # backward products emulated too
        print(em.summary())

    ``arch``: an arch name or alias (``tme.archs()``) or a :class:`Spec` (every product uses
    it; operands are cast to its input format).  ``formats``: ``{op kind: format}`` with op
    kinds ``mm, addmm, bmm, baddbmm, conv, attention, scaled_mm, default`` and formats
    ``auto, native, fp64, fp32, tf32, xf32, fp16, bf16, fp8_*``.  ``fp32_format``: what
    float32 tensors use (``auto``: TF32 where PyTorch's settings allow it and the arch has
    it).  ``bias``: ``epilogue`` (cuBLAS-style, default) or ``chain`` (C seeds the
    accumulator).  ``fp16_accumulation``: None follows
    ``torch.backends.cuda.matmul.allow_fp16_accumulation``.  ``fp16_alt_impl``: ``off`` /
    ``backward`` / ``always``: run fp16 GEMMs and convolutions as bf16, as rocBLAS and
    MIOpen do on MI200 when asked (PyTorch asks in the backward pass).  ``fp8_promotion``:
    ``torch._scaled_mm`` on NVIDIA without ``use_fast_accum`` adds partial sums of this many
    K elements in fp32 (None: one chain; unverified interval).  ``record``: keep one
    :class:`Record` per call in ``.records``, with the module path, and capture the first
    top-level module call for ``.report(reference)`` (``.counts`` and ``.summary()`` always
    work).  Threads started while the block is open run under it.

    ``schedule``: how the library strings instructions together (split-K, fp8 promotion,
    tf32x3, ...): a :class:`~torch_mma_emu.Schedule`, a preset name or ``{op kind:
    schedule}``; an ``input_precision`` applies to fp32 products only (docs/schedules.md).

    PyTorch's TF32 / fp16-accumulation settings are read when ``emulate`` is called.
    Run ``.backward()`` inside the block to emulate the backward products.

    ``collectives``: ``"nccl-ring"`` / ``"nccl-tree"`` / ``"nccl-pat"`` (or the unverified
    ``"nccl-symmetric"``, ``"nccl-nvls"``, ``"nccl-nvls-tree"``, ``"nccl-collnet"``) or a
    :class:`~torch_mma_emu.preview.nccl_emu.NcclCollectives`: ``torch.distributed``'s
    all_reduce / reduce_scatter_tensor and DDP's gradient all-reduce inside the block fold
    in NCCL's order (over the process group's all_gather; docs/preview.md);
    ``"rccl-ring"`` / ``"rccl-tree"``, an :class:`~torch_mma_emu.order.msccl.MscclAlgorithm`
    or a :class:`~torch_mma_emu.preview.rccl_emu.RcclCollectives`: RCCL's.
    """
    if collectives is not None:
        from .rccl_emu import collectives_of      # NCCL's and RCCL's names
        collectives = collectives_of(collectives)
    policy = Policy(arch, formats=formats, fp32_format=fp32_format, bias=bias,
                    fp16_accumulation=fp16_accumulation, fp16_alt_impl=fp16_alt_impl,
                    schedule=schedule)
    options = dict(formats=formats, fp32_format=fp32_format, bias=bias,
                   fp16_accumulation=fp16_accumulation, fp16_alt_impl=fp16_alt_impl,
                   fp8_promotion=fp8_promotion, schedule=schedule)
    mode = EmulateMode(policy, record=record, fp8_promotion=fp8_promotion, options=options)
    mode.collectives = collectives
    return mode
