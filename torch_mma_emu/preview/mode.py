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
Linear); while a block is open its settings keep them library calls (``_inductor_settings``,
docs/preview.md, "torch.compile")
"""
from __future__ import annotations

import threading
import warnings
from typing import Any, Optional

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode

from .. import threads as _threads
from ..ops import emulated_mm
from ..triton import context as _triton
from . import custom_ops, flex, flex_hooks, grouped, scaled, sdpa_route
from .attention import attention_backward, attention_forward
from .attribution import LayerTracker
from .conv import conv_backward, conv_forward, conv_transpose
from .dispatch_args import bind, phase
from .functions import FunctionRouter
from .gemm import run_product
from .policy import Plan, Policy
from .records import Record, Recorder

__all__ = ["EmulateMode", "emulate"]

aten = torch.ops.aten


def _overloads(name: str, which) -> list:
    pkt = getattr(aten, name, None)
    if pkt is None:
        return []
    return [getattr(pkt, o) for o in which if o in pkt.overloads()]


_GEMM_KINDS = {"mm": ("self", "mat2", None), "addmm": ("mat1", "mat2", "self"),
               "bmm": ("self", "mat2", None), "baddbmm": ("batch1", "batch2", "self")}

# Ops that multiply matrices and stay native (they do not run on matrix units in PyTorch's
# GPU paths, have no emulation here, or are backend kernels that the switches below keep
# out of the block): each is recorded and warned about once per block, by name.
_WATCH_NATIVE = {"mv", "dot", "vdot", "addmv", "addbmm", "addr", "_int_mm", "_weight_int8pack_mm",
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
                 "qconv_pointwise", "qconv2d_pointwise"}

_CIA = "CompositeImplicitAutograd"
_DECOMPOSES: dict = {}      # op -> has a CompositeImplicitAutograd kernel (cached)


def _decomposes(func) -> bool:
    """Whether ``func`` is a composite op (``linear``, ``matmul``, ``einsum``, ``lstm``,
    ``scaled_dot_product_attention``, ...).  Such ops reach the mode un-split only where
    autograd is off for good (``torch.inference_mode``); running their decomposition with
    the mode on gives the ops that ``no_grad`` code would have sent."""
    d = _DECOMPOSES.get(func)
    if d is None:
        d = _DECOMPOSES[func] = custom_ops.has_kernel(func, _CIA)
    return d


class _ProcessSwitches:
    """PyTorch settings that would hide products from the mode, switched off while at least
    one block is open (in any thread; the settings are process-wide, the mode is per
    thread): the first block to enter saves them, the last to leave restores them.
    ``torch.backends.mha`` fast path: ``nn.MultiheadAttention`` / ``TransformerEncoderLayer``
    inference kernels (``_native_multi_head_attention``, ...) whose inner products never
    reach a dispatch mode.  (oneDNN RNN kernels are switched off per call: functions.py.)
    """

    def __init__(self):
        self.depth = 0
        self.saved: dict = {}
        self.lock = threading.Lock()

    @staticmethod
    def _settings():
        out = {}
        mha = getattr(torch.backends, "mha", None)
        if mha is not None and hasattr(mha, "get_fastpath_enabled"):
            out["mha"] = (mha.get_fastpath_enabled, mha.set_fastpath_enabled)
        out.update(_inductor_settings())
        return out

    def enter(self) -> None:
        with self.lock:
            if self.depth == 0:
                _keep_inductor_products()
                for name, (get, put) in self._settings().items():
                    self.saved[name] = get()
                    put(False)
            self.depth += 1

    def leave(self) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                for name, (get, put) in self._settings().items():
                    if name in self.saved:
                        put(self.saved.pop(name))


_SWITCHES = _ProcessSwitches()

# Inductor, compiling while a block is open, would turn some products into its own generated
# code, which never reaches the mode: its decompositions (K = 1 outer products, CPU dot
# products and tiny addmm, torch/_inductor/decomposition.py) and max-autotune's GEMM
# templates.  While a block is open the decompositions of mm / bmm / addmm step aside, GEMM
# autotuning may pick only the library call (ATen), and the compile caches are off (their
# keys do not include the decomposition table, so they could serve code compiled outside a
# block).  Code compiled before the block is recompiled inside it: Dynamo guards on the
# torch-function mode stack, which the block's router changes (docs/preview.md,
# "torch.compile").
_PRODUCT_DECOMPS = ("mm", "bmm", "addmm")
_KEEP_INSTALLED = False


def _keep_inductor_products() -> None:
    """Wrap Inductor's mm / bmm / addmm decompositions once per process: inside a block they
    return NotImplemented (the op stays a library call), outside they run as before."""
    global _KEEP_INSTALLED
    if _KEEP_INSTALLED:
        return
    flex_hooks.install(_SWITCHES, _flex_lowered)      # flex attention: compile and CPU grad
    try:
        from torch._inductor import decomposition as dec
    except Exception:  # no Inductor in this build: nothing to keep
        _KEEP_INSTALLED = True
        return
    tables = [dec.decompositions]
    if hasattr(dec, "fast_random_decomps"):
        tables.append(dec.fast_random_decomps())      # a cached copy of the table
    for table in tables:
        for op, fn in list(table.items()):
            pkt = getattr(op, "overloadpacket", None)
            if pkt is not None and getattr(pkt, "__name__", "") in _PRODUCT_DECOMPS and \
                    not getattr(fn, "_mma_emu_keeps", False):
                table[op] = _stepping_aside(fn)
    _KEEP_INSTALLED = True


def _flex_lowered(hop) -> None:
    """Inductor lowered a flex operator inside a block (flex_hooks.py): a native call in
    every open block, warned about by name."""
    for m in _THREADS.blocks("mode"):
        m._note_native(hop, (), "compiled by Inductor into its own kernel: its products are "
                                "not emulated (compile with backend='aot_eager', or call it "
                                "eagerly)")


def _stepping_aside(fn):
    def decomp(*args, **kwargs):
        if _SWITCHES.depth > 0:
            return NotImplemented
        return fn(*args, **kwargs)
    decomp._mma_emu_keeps = True
    decomp.__wrapped__ = fn
    return decomp


def _inductor_settings() -> dict:
    out = {}
    try:
        import torch._functorch.config as aot_config
        import torch._inductor.config as ind_config
    except Exception:
        return out

    def flag(mod, name, off):
        """get / put for one setting; put(False) switches it to ``off``."""
        def put(v):
            setattr(mod, name, off if v is False else v)
        if hasattr(mod, name):
            out[f"{getattr(mod, '__name__', mod)}.{name}"] = (lambda: getattr(mod, name), put)
    flag(ind_config, "max_autotune_gemm_backends", "ATEN")
    if hasattr(ind_config, "cpp"):        # freezing: no prepacked oneDNN Linear / conv
        flag(ind_config.cpp, "weight_prepack", False)
    flag(ind_config, "fx_graph_cache", False)
    flag(aot_config, "enable_autograd_cache", False)
    return out


# threads started inside a block run under its mode (and its Triton block), ../threads.py
_THREADS = _threads.HOOK


class _Reentered:
    """The mode pushed again while its handler runs (a handler runs with it popped), for
    running a composite op's decomposition through it."""

    def __init__(self, mode):
        self.mode = mode

    def __enter__(self):
        TorchDispatchMode.__enter__(self.mode)

    def __exit__(self, *exc):
        TorchDispatchMode.__exit__(self.mode, *exc)


_bind, _phase = bind, phase


def _fake(fm, t):
    if isinstance(t, torch.Tensor):
        return fm.from_tensor(t)
    if isinstance(t, (list, tuple)):
        return type(t)(_fake(fm, u) for u in t)
    return t


def _restride(result, func, args, kwargs):
    """Give the outputs the strides of PyTorch's own kernel (as its fake-tensor rule says):
    views taken by the caller and Inductor's stride assertions rely on them."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    try:
        with FakeTensorMode(allow_non_fake_inputs=True) as fm:
            ref = func(*_fake(fm, args), **{k: _fake(fm, v) for k, v in kwargs.items()})
    except Exception:  # no fake rule: keep our (contiguous) layout
        return result
    single = isinstance(result, torch.Tensor)
    outs, refs = ([result], [ref]) if single else (list(result), list(ref))
    for i, (o, r) in enumerate(zip(outs, refs)):
        if (isinstance(o, torch.Tensor) and isinstance(r, torch.Tensor)
                and o.shape == r.shape and o.stride() != r.stride()):
            outs[i] = torch.empty_strided(r.shape, r.stride(), dtype=o.dtype,
                                          device=o.device).copy_(o)
    return outs[0] if single else tuple(outs)


_PLAIN = (torch.Tensor, torch.nn.Parameter)


class EmulateMode(TorchDispatchMode):
    """The mode behind :func:`emulate`.  ``counts`` / ``records`` / ``summary()`` say
    which ops were emulated, in which format, in which phase."""

    # Higher-order operators reach the mode: flex attention is emulated (flex.py), others
    # run natively and are recorded instead of raising.
    supports_higher_order_operators = True

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

    # Entering the block also (1) switches off the PyTorch settings that would hide
    # products from the mode (_ProcessSwitches), (2) enters the function-level router
    # (functions.py: RNNs, attention with dropout), (3) makes threads started inside it run
    # under it (threads.py), (4) with record=True, tracks module paths and captures the
    # first top-level module call (attribution.py).  Leaving undoes them, also when the
    # body raises.
    def __enter__(self):
        _SWITCHES.enter()
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
            return super().__enter__()
        except BaseException:
            self._leave(entered)
            raise

    def __exit__(self, exc_type, exc_val, exc_tb):
        try:
            return super().__exit__(exc_type, exc_val, exc_tb)
        finally:
            self._leave([_THREADS, self.layer_tracker, self._router])

    def _leave(self, entered):
        try:
            if self._router in entered:
                self._router.__exit__(None, None, None)
            if self.layer_tracker is not None and self.layer_tracker in entered:
                self.layer_tracker.leave()
            if _THREADS in entered:
                _THREADS.leave(self)
        finally:
            _triton.close(getattr(self, "_triton", None))
            self._triton = None
            _SWITCHES.leave()

    def _adopt_thread(self):
        """Called in a thread started inside the block: run it under this mode (until the
        thread ends; its mode stacks are its own)."""
        self._router.__enter__()
        if self.layer_tracker is not None:
            self.layer_tracker.adopt()
        from torch.utils._python_dispatch import _push_mode
        _push_mode(self)        # its Triton block: the innermost one is adopted (threads.py)

    # -- records ------------------------------------------------------------------------
    @property
    def records(self) -> list[Record]:
        return self.recorder.records

    @property
    def counts(self):
        return self.recorder.counts

    def summary(self) -> str:
        return self.recorder.summary()

    def _note(self, func, kind, plan_label, shapes, note=""):
        lt = self.layer_tracker
        module = lt.path() if lt is not None else ""
        rec = Record(str(func), kind, _phase(), plan_label, self.policy.arch_name,
                     tuple(tuple(s) for s in shapes), note, module)
        with self._lock:
            self.recorder.add(rec)
            if lt is not None and lt.capture.active and rec.emulated and \
                    rec.phase == "forward":
                lt.capture.modules.append(module)

    def _note_native(self, func, args, why):
        """An op that multiplies matrices and runs natively: recorded, warned once."""
        self._note(func, "other", "native", [a.shape for a in args
                                            if isinstance(a, torch.Tensor)], why)
        name = str(func)
        if name not in self._warned:
            self._warned.add(name)
            warnings.warn(f"emulate({self.policy.arch_name}): {name} multiplies matrices and "
                          f"runs natively ({why}); em.records lists each call",
                          stacklevel=3)

    def report(self, reference="fp64", *, plot: Optional[str] = None):
        """Per-layer divergence of the block's first top-level module call from
        ``reference``: ``"fp64"`` (the same call in float64, natively), ``"native"`` (this
        machine in the run's dtype), an arch name / alias / Spec (the same call emulated
        there with this block's options), or another ``EmulateMode`` that ran the same
        call (``record=True``).  Returns a :class:`~.attribution.Report`; ``str(report)``
        is a table, ``plot="file.png"`` also writes a bar chart.  Needs ``record=True``."""
        from .attribution import Report, compare_outputs, reference_outputs, warn_training
        cap = self.layer_tracker.capture if self.layer_tracker is not None else None
        if cap is None:
            raise ValueError("report: use emulate(..., record=True); the block kept no "
                             "layer outputs")
        if not cap.done:
            raise ValueError("report: no module was called inside the block (the report "
                             "compares the outputs of the first top-level module call)")
        if isinstance(reference, str) or not isinstance(reference, EmulateMode):
            warn_training(cap.model)
        opts = dict(self.options)

        def factory(arch):
            return emulate(arch, **opts)
        ref, label = reference_outputs(cap, reference, factory)
        rows = compare_outputs(cap.outputs, ref, cap.types, cap.modules, cap.root_path)
        rep = Report(self.policy.arch_name, label, rows, cap.note)
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
        handler = _HANDLERS.get(func)
        if isinstance(func, torch._ops.HigherOrderOperator):
            hop = flex.HANDLERS.get(func.name())      # flex attention, forward and backward
            if hop is not None:
                return hop(self, func, args, kwargs)
            self._note_native(func, args, "higher-order operator: products inside it are "
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
            if func.overloadpacket.__name__ in _WATCH_NATIVE:
                self._note_native(func, args, "no emulation of this op")
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
            self._note_native(func, args, "a compiled kernel of another library: products "
                                          "inside it, if any, are not seen")
        return func(*args, **kwargs)

    def _plan(self, kind, a, b, phase) -> Plan:
        return self.policy.plan(kind, a.dtype, b.dtype, backward=phase == "backward")

    # -- mm / addmm / bmm / baddbmm (and .out, .dtype, in-place) ----------------------------
    def _gemm(self, func, args, kwargs):
        name = func.overloadpacket.__name__
        inplace = name.endswith("_")
        kind = name.rstrip("_")
        ka, kb, kc = _GEMM_KINDS[kind]
        a = _bind(func, args, kwargs)
        A, B, C = a[ka], a[kb], (a[kc] if kc else None)
        plan = self._plan(kind, A, B, _phase())
        if plan.native or A.dtype != B.dtype:
            self._note(func, kind, "native", [A.shape, B.shape], "policy: native")
            return func(*args, **kwargs)
        out_dtype = a.get("out_dtype") or (C.dtype if inplace else A.dtype)
        D = run_product(A, B, plan, C=C, alpha=a.get("alpha", 1), beta=a.get("beta", 1),
                        bias_mode=self.policy.bias, out_dtype=out_dtype)
        self._note(func, kind, plan.label, [A.shape, B.shape])
        target = a["self"] if inplace else a.get("out")
        if target is not None and not inplace and target.dtype != D.dtype:
            raise RuntimeError(f"{name}: expected out tensor to have dtype {D.dtype}, but got "
                               f"{target.dtype} instead")     # as PyTorch's own kernels
        if target is not None:
            if target.shape != D.shape:
                target.resize_(D.shape)
            return target.copy_(D)
        return D

    def _addmm_activation(self, func, args, kwargs):
        """``act(beta*self + alpha*mat1@mat2)``: cuBLASLt's RELU / GELU (tanh) epilogue,
        applied in the accumulator type before the one rounding to the output dtype."""
        a = _bind(func, args, kwargs)
        A, B, C = a["mat1"], a["mat2"], a["self"]
        plan = self._plan("addmm", A, B, _phase())
        if plan.native or A.dtype != B.dtype:
            self._note(func, "addmm", "native", [A.shape, B.shape], "policy: native")
            return func(*args, **kwargs)
        D = run_product(A, B, plan, C=C, alpha=a["alpha"], beta=a["beta"],
                        bias_mode=self.policy.bias, out_dtype=plan.acc_dtype)
        D = (torch.nn.functional.gelu(D, approximate="tanh") if a["use_gelu"]
             else torch.relu(D))
        self._note(func, "addmm", plan.label, [A.shape, B.shape])
        return D.to(A.dtype)

    # -- convolution ----------------------------------------------------------------------
    def _mm_fn(self, plan: Plan, out_dtype):
        def mm(A, B, C=None):
            return run_product(A, B, plan, C=C, bias_mode=self.policy.bias,
                               out_dtype=out_dtype)
        return mm

    def _conv(self, func, args, kwargs):
        a = _bind(func, args, kwargs)
        x, w, bias = a["input"], a["weight"], a["bias"]
        plan = self._plan("conv", x, w, _phase())
        if plan.native or x.dtype != w.dtype or x.dim() < 3:
            self._note(func, "conv", "native", [x.shape, w.shape], "policy: native")
            return func(*args, **kwargs)
        mm = self._mm_fn(plan, x.dtype)
        st, pad, dil = list(a["stride"]), list(a["padding"]), list(a["dilation"])
        if a["transposed"]:
            y = conv_transpose(x, w, st, pad, list(a["output_padding"]), dil, a["groups"], mm,
                               bias)
        else:
            y = conv_forward(x, w, st, pad, dil, a["groups"], mm, bias)
        self._note(func, "conv", plan.label, [x.shape, w.shape])
        if a.get("out") is not None:
            a["out"].resize_(y.shape)
            return a["out"].copy_(y)
        return _restride(y, func, args, kwargs)

    def _conv_backward(self, func, args, kwargs):
        a = _bind(func, args, kwargs)
        gy, x, w = a["grad_output"], a["input"], a["weight"]
        plan = self._plan("conv", gy, w, "backward")
        if plan.native or gy.dtype != w.dtype:
            self._note(func, "conv", "native", [gy.shape, w.shape], "policy: native")
            return func(*args, **kwargs)
        mm = self._mm_fn(plan, gy.dtype)
        gx, gw, gb = conv_backward(gy, x, w, list(a["stride"]), list(a["padding"]),
                                   list(a["dilation"]), a["transposed"],
                                   list(a["output_padding"]), a["groups"], a["output_mask"], mm)
        self._note(func, "conv", plan.label, [gy.shape, x.shape, w.shape])
        return _restride((gx, gw, gb), func, args, kwargs)

    # -- attention ------------------------------------------------------------------------
    def _prod_fn(self, plan: Plan):
        acc = plan.acc_dtype

        def prod(A, B):
            return run_product(A, B, plan, out_dtype=acc)
        return prod

    def _attn_plan(self, func, q, k, dropout_p, shapes):
        plan = self._plan("attention", q, k, _phase())
        if dropout_p and dropout_p > 0:
            key = ("dropout", str(func))
            if key not in self._warned:
                self._warned.add(key)
                warnings.warn(f"emulate: {func} with dropout_p={dropout_p} runs natively "
                              "(its random mask cannot be reproduced); use eval() or "
                              "dropout_p=0 to emulate attention", stacklevel=4)
            self._note(func, "attention", "native", shapes, "dropout")
            return None
        if plan.native or q.dtype != k.dtype:
            self._note(func, "attention", "native", shapes, "policy: native")
            return None
        return plan

    def _attn_fwd(self, func, args, kwargs):
        a = _bind(func, args, kwargs)
        q, k, v = a["query"], a["key"], a["value"]
        mask = a.get("attn_mask", a.get("attn_bias"))
        plan = self._attn_plan(func, q, k, a.get("dropout_p"), [q.shape, k.shape, v.shape])
        if plan is None:
            return func(*args, **kwargs)
        out, lse = attention_forward(q, k, v, mask, bool(a.get("is_causal")), a.get("scale"),
                                     self._prod_fn(plan))
        self._note(func, "attention", plan.label, [q.shape, k.shape, v.shape])
        lse = lse.to(torch.float32) if q.dtype != torch.float64 else lse
        return _restride(self._attn_outputs(func, q, k, out, lse), func, args, kwargs)

    @staticmethod
    def _attn_outputs(func, q, k, out, lse):
        name = func.overloadpacket.__name__
        if name == "_scaled_dot_product_flash_attention_for_cpu":
            return out, lse
        i64 = dict(dtype=torch.int64)
        Lq, Lk = q.shape[-2], k.shape[-2]
        e_i = q.new_empty(0, dtype=torch.int32)
        if name == "_scaled_dot_product_flash_attention":
            return (out, lse, e_i, e_i, Lq, Lk, q.new_zeros(2, **i64), q.new_empty(0, **i64),
                    q.new_empty(0))
        # _scaled_dot_product_cudnn_attention
        return (out, lse, e_i, e_i, Lq, Lk, q.new_zeros((), **i64), q.new_zeros((), **i64),
                q.new_empty(0))

    def _attn_bwd(self, func, args, kwargs):
        a = _bind(func, args, kwargs)
        q, k, v = a["query"], a["key"], a["value"]
        mask = a.get("attn_mask", a.get("attn_bias"))
        if mask is not None and mask.numel() == 0:
            mask = None
        plan = self._attn_plan(func, q, k, a.get("dropout_p"), [q.shape, k.shape, v.shape])
        if plan is None:
            return func(*args, **kwargs)
        dO = a.get("grad_out", a.get("grad_out_"))
        if dO is None:  # undefined output gradient (gradcheck's check_undefined_grad)
            return tuple(torch.zeros_like(t) for t in (q, k, v))
        dq, dk, dv, _ = attention_backward(dO, q, k, v, a["out"], a["logsumexp"], mask,
                                            bool(a.get("is_causal")), a.get("scale"),
                                            self._prod_fn(plan))
        self._note(func, "attention", plan.label, [q.shape, k.shape, v.shape])
        return _restride((dq, dk, dv), func, args, kwargs)

    # -- torch._scaled_mm / F.scaled_mm (fp8 and fp4 with scales) ---------------------------
    def _scaled_mm(self, func, args, kwargs):
        """``torch._scaled_mm`` and ``F.scaled_mm`` (aten ``_scaled_mm_v2``): the recipe
        (scaled.py), then ``_run_scaled``."""
        a = _bind(func, args, kwargs)
        A, B, out = a["self"], a["mat2"], a.get("out")
        if self.policy.choice("scaled_mm") == "native":
            self._note(func, "scaled_mm", "native", [A.shape, B.shape], "policy: native")
            return func(*args, **kwargs)
        v2 = func.overloadpacket.__name__ == "_scaled_mm_v2"
        if not v2 and out is not None and a.get("out_dtype") not in (None, out.dtype):
            raise RuntimeError(f"{func}: out_dtype must match output matrix type "
                               f"({a['out_dtype']} vs out {out.dtype})")    # as PyTorch
        out_dtype = out.dtype if out is not None else (a.get("out_dtype") or A.dtype)
        if not v2 and a.get("scale_result") is not None and scaled.is_fp8(out_dtype):
            return self._scaled_native(func, args, kwargs, A, B, "scale_result (the fp8 "
                                       "output scale) is not modelled")
        # (cuBLAS ignores scale_result for other outputs)
        cdim = list(a.get("contraction_dim") or [])
        if cdim not in ([], [1, 0], [-1, 0]):
            raise ValueError(f"emulate({self.policy.arch_name}): {func}: contraction_dim="
                             f"{cdim} is not modelled (A's last and B's first dimension: [] "
                             "or [1, 0]); formats={'scaled_mm': 'native'} runs it natively")
        try:
            if v2:
                sp = scaled.build(A, B, a["scale_a"], a["recipe_a"], a["swizzle_a"] or [],
                                  a["scale_b"], a["recipe_b"], a["swizzle_b"] or [], v2=True)
            else:
                sa, sb = a["scale_a"], a["scale_b"]
                ra, rb = scaled.recipe_v1(A, B, sa, sb)
                sp = scaled.build(A, B, [sa], [ra], [scaled.SWIZZLE_32_4_4],
                                  [sb], [rb], [scaled.SWIZZLE_32_4_4])
        except scaled.NotEmulated as e:
            raise ValueError(f"emulate({self.policy.arch_name}): {func}: {e}; "
                             "formats={'scaled_mm': 'native'} runs it natively") from None
        # PyTorch runs these recipes of F.scaled_mm on one GPU family only
        only = "sm90" if sp.recipe == "blockwise" else \
            "sm100" if sp.label == "MX fp4_e2m1" else None
        if v2 and only is not None and self.policy.spec is None and self.policy.arch != only:
            raise ValueError(f"emulate({self.policy.arch_name}): F.scaled_mm runs "
                             f"{sp.label.split(' (')[0]} ({sp.recipe}) products on {only} only "
                             "(PyTorch raises on other GPUs)")
        return self._run_scaled(func, sp, a.get("bias"), out_dtype, a.get("use_fast_accum"),
                                out)

    def _scaled_native(self, func, args, kwargs, A, B, why):
        """A scaled product the emulator does not model: native, recorded, warned (every
        call: its numbers are this machine's, not the arch's)."""
        self._note(func, "scaled_mm", "native", [A.shape, B.shape], why)
        warnings.warn(f"emulate({self.policy.arch_name}): {func} runs natively ({why}); "
                      "its result is this machine's, not the emulated arch's", stacklevel=4)
        return func(*args, **kwargs)

    def _run_scaled(self, func, sp: "scaled.ScaledProduct", bias, out_dtype, fast_accum, out):
        shapes = [tuple(sp.A.shape), tuple(sp.B.shape)]
        policy = self.policy
        nvidia = not policy.arch.startswith("gfx") and policy.spec is None
        step = self.fp8_promotion if (nvidia and not fast_accum) else None
        K, N = sp.A.shape[1], sp.B.shape[1]
        if bias is not None and bias.numel() != N:
            raise ValueError(f"emulate({policy.arch_name}): {func}: bias must have N = {N} "
                             f"elements, got {tuple(bias.shape)}")
        if fast_accum and sp.in_format is not None:
            raise ValueError(f"emulate({policy.arch_name}): {func}: use_fast_accum is not "
                             "available for fp4 operands (PyTorch raises)")
        try:
            if sp.block_a is not None:                   # MX / NVFP4: inside the instruction
                acc = emulated_mm(sp.A, sp.B, arch=policy.arch, in_format=sp.in_format,
                                  scale_a=sp.block_a, scale_b=sp.block_b)
                label = sp.label
            elif sp.kblock_a is not None:                # blockwise: per 128-long K block
                acc, label = None, sp.label
                for j, k0 in enumerate(range(0, K, 128)):
                    part = emulated_mm(sp.A[:, k0:k0 + 128], sp.B[k0:k0 + 128],
                                       arch=policy.arch)
                    part = part * (sp.kblock_a[:, j:j + 1] * sp.kblock_b[j:j + 1])
                    acc = part if acc is None else acc + part
            else:
                plan = self._plan("scaled_mm", sp.A, sp.B, _phase())
                label = plan.label + (" (rowwise scales)" if sp.recipe == "rowwise" else "")
                if step is None or K <= step:
                    acc = run_product(sp.A, sp.B, plan, out_dtype=torch.float32)
                else:
                    acc = None
                    for k0 in range(0, K, step):
                        part = run_product(sp.A[:, k0:k0 + step], sp.B[k0:k0 + step], plan,
                                           out_dtype=torch.float32)
                        acc = part if acc is None else acc + part
                    label += f" (fp32 promotion every {step})"
        except ValueError as e:
            hint = ""
            if sp.block_a is not None:
                hint = (f"; block-scaled ({sp.recipe}) products run on "
                        f"{', '.join(scaled.block_scaled_archs())}")
            raise ValueError(f"emulate({policy.arch_name}): {func} ({sp.recipe} scales): "
                             f"{e}{hint}") from None
        D = acc if sp.post is None else acc * sp.post
        if bias is not None:
            D = D + bias.to(torch.float32)
        self._note(func, "scaled_mm", label, shapes)
        D = D.to(out_dtype)
        if out is not None:
            out.resize_(D.shape)
            return out.copy_(D)
        return D


_HANDLERS: dict[Any, Any] = {}
for _k in ("mm", "addmm", "bmm", "baddbmm"):
    for _f in _overloads(_k, ("default", "out", "dtype", "dtype_out")):
        _HANDLERS[_f] = EmulateMode._gemm
for _f in _overloads("_addmm_activation", ("default",)):
    _HANDLERS[_f] = EmulateMode._addmm_activation
for _k in ("addmm_", "baddbmm_"):
    for _f in _overloads(_k, ("default",)):
        _HANDLERS[_f] = EmulateMode._gemm
for _f in _overloads("convolution", ("default", "out")):
    _HANDLERS[_f] = EmulateMode._conv
for _f in _overloads("convolution_backward", ("default",)):
    _HANDLERS[_f] = EmulateMode._conv_backward
for _k in ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
           "_scaled_dot_product_cudnn_attention"):
    for _f in _overloads(_k, ("default",)):
        _HANDLERS[_f] = EmulateMode._attn_fwd
    for _f in _overloads(_k + "_backward", ("default",)):
        _HANDLERS[_f] = EmulateMode._attn_bwd
# (the op sdpa_route.py calls where the target GPU runs a fused kernel and the CPU would not)
for _f in _overloads("_scaled_dot_product_efficient_attention", ("default",)):
    _HANDLERS[_f] = sdpa_route.handle_forward
for _f in _overloads("_scaled_dot_product_efficient_attention_backward", ("default",)):
    _HANDLERS[_f] = sdpa_route.handle_backward
for _k in ("_scaled_mm", "_scaled_mm_v2"):
    for _f in _overloads(_k, ("default", "out")):
        _HANDLERS[_f] = EmulateMode._scaled_mm
for _f in _overloads("_grouped_mm", ("default",)):
    _HANDLERS[_f] = grouped.handle_grouped_mm
for _f in _overloads("_scaled_grouped_mm", ("default",)):
    _HANDLERS[_f] = grouped.handle_scaled_grouped_mm

ROUTED_OPS = tuple(sorted(str(f) for f in _HANDLERS))


def emulate(arch, *, formats=None, fp32_format: str = "auto", bias: str = "epilogue",
            fp16_accumulation: Optional[bool] = None, fp16_alt_impl: str = "off",
            fp8_promotion: Optional[int] = 128, record: bool = False,
            schedule=None) -> EmulateMode:
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
    """
    policy = Policy(arch, formats=formats, fp32_format=fp32_format, bias=bias,
                    fp16_accumulation=fp16_accumulation, fp16_alt_impl=fp16_alt_impl,
                    schedule=schedule)
    options = dict(formats=formats, fp32_format=fp32_format, bias=bias,
                   fp16_accumulation=fp16_accumulation, fp16_alt_impl=fp16_alt_impl,
                   fp8_promotion=fp8_promotion, schedule=schedule)
    return EmulateMode(policy, record=record, fp8_promotion=fp8_promotion, options=options)
