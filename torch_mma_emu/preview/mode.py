"""``emulate(arch)``: a TorchDispatchMode that runs the matrix products of any PyTorch code
as ``arch``'s matrix units compute them.

What reaches a dispatch mode is the aten level below autograd: ``matmul`` / ``linear`` /
``einsum`` arrive as ``mm`` / ``addmm`` / ``bmm`` (+ views), convolutions as
``aten.convolution`` (and ``convolution_backward``), ``scaled_dot_product_attention`` as a
fused kernel (``_scaled_dot_product_flash_attention_for_cpu`` on CPU; flash / efficient /
cuDNN variants on CUDA) and its backward op.  Autograd records the usual nodes above the
mode; their backward ops (``mm``, ``convolution_backward``, the attention backward) come
back through the mode when ``.backward()`` runs inside the context, and are emulated too.

Under ``torch.compile`` the mode asks to be ignored while compiling
(``ignore_compile_internals``): Dynamo traces normally (fullgraph works), and the compiled
code's library calls (``mm.out``, ``addmm.out``, ``convolution``, attention kernels) come
through the mode at run time.  With ``backend="aot_eager"`` the results are those of eager
mode bit for bit; with Inductor, GEMMs it turns into generated code (K = 1 outer products,
max-autotune templates) stay native, as they would not use a matrix unit on a GPU either.
"""
from __future__ import annotations

import threading
import warnings
from typing import Any, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .attention import attention_backward, attention_forward
from .conv import conv_backward, conv_forward, conv_transpose
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

# Matrix-like ops that stay native (they do not run on matrix units in PyTorch's GPU
# paths, or have no emulation here); counted so that users see them.
_WATCH_NATIVE = {"mv", "dot", "vdot", "addmv", "addbmm", "addr", "_int_mm", "_weight_int8pack_mm",
                 "linalg_vecdot", "_native_multi_head_attention", "_transformer_encoder_layer_fwd",
                 "_scaled_mm_v2", "_grouped_mm", "_scaled_grouped_mm", "_trilinear",
                 "_cdist_forward", "mkldnn_rnn_layer", "_cudnn_rnn", "miopen_rnn"}


_FASTPATH = {"depth": 0, "saved": None}
_FASTPATH_LOCK = threading.Lock()


def _fastpath_off() -> None:
    mha = getattr(torch.backends, "mha", None)
    if mha is None or not hasattr(mha, "get_fastpath_enabled"):
        return
    with _FASTPATH_LOCK:
        if _FASTPATH["depth"] == 0:
            _FASTPATH["saved"] = mha.get_fastpath_enabled()
            mha.set_fastpath_enabled(False)
        _FASTPATH["depth"] += 1


def _fastpath_restore() -> None:
    mha = getattr(torch.backends, "mha", None)
    if mha is None or not hasattr(mha, "get_fastpath_enabled"):
        return
    with _FASTPATH_LOCK:
        _FASTPATH["depth"] -= 1
        if _FASTPATH["depth"] == 0:
            mha.set_fastpath_enabled(_FASTPATH["saved"])


def _bind(func, args, kwargs) -> dict:
    out = {}
    for i, a in enumerate(func._schema.arguments):
        if i < len(args):
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            out[a.name] = None
    return out


def _phase() -> str:
    return "backward" if torch._C._current_autograd_node() is not None else "forward"


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


class EmulateMode(TorchDispatchMode):
    """The mode behind :func:`emulate`.  ``counts`` / ``records`` / ``summary()`` say
    which ops were emulated, in which format, in which phase."""

    # Higher-order operators (flex_attention, ...) reach the mode; they run natively and
    # are recorded instead of raising.
    supports_higher_order_operators = True

    def __init__(self, policy: Policy, *, record: bool = False,
                 fp8_promotion: Optional[int] = 128):
        super().__init__()
        self.policy = policy
        self.recorder = Recorder(keep=record)
        if fp8_promotion is not None and (not isinstance(fp8_promotion, int)
                                          or fp8_promotion <= 0):
            raise ValueError("fp8_promotion must be None (no promotion) or a positive number "
                             f"of K elements, got {fp8_promotion!r}")
        self.fp8_promotion = fp8_promotion
        self._warned: set = set()

    # nn.MultiheadAttention / TransformerEncoderLayer have fused inference kernels whose
    # inner products never reach a dispatch mode: switch that fast path off in the block.
    # The switch is process-wide while the mode is per thread: the first block to enter (in
    # any thread) saves it, the last to leave restores it.
    def __enter__(self):
        _fastpath_off()
        try:
            return super().__enter__()
        except BaseException:
            _fastpath_restore()
            raise

    def __exit__(self, exc_type, exc_val, exc_tb):
        try:
            return super().__exit__(exc_type, exc_val, exc_tb)
        finally:
            _fastpath_restore()

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
        self.recorder.add(Record(str(func), kind, _phase(), plan_label, self.policy.arch_name,
                                 tuple(tuple(s) for s in shapes), note))

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    # -- dispatch -------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = _HANDLERS.get(func)
        if isinstance(func, torch._ops.HigherOrderOperator):
            self._note(func, "other", "native", [a.shape for a in args
                                                if isinstance(a, torch.Tensor)],
                       "higher-order operator: runs natively")
            return func(*args, **kwargs)
        if handler is None:
            if func.overloadpacket.__name__ in _WATCH_NATIVE:
                self._note(func, "other", "native", [a.shape for a in args
                                                    if isinstance(a, torch.Tensor)],
                           "not routed: runs natively (no emulation of this op)")
            return func(*args, **kwargs)
        return handler(self, func, args, kwargs)

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
        if name == "_scaled_dot_product_efficient_attention":
            return out, lse, q.new_zeros((), **i64), q.new_zeros((), **i64)
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
        name = func.overloadpacket.__name__
        mask = a.get("attn_mask", a.get("attn_bias"))
        if mask is not None and mask.numel() == 0:
            mask = None
        plan = self._attn_plan(func, q, k, a.get("dropout_p"), [q.shape, k.shape, v.shape])
        if plan is None:
            return func(*args, **kwargs)
        dO = a.get("grad_out", a.get("grad_out_"))
        if dO is None:  # undefined output gradient (gradcheck's check_undefined_grad)
            zeros = tuple(torch.zeros_like(t) for t in (q, k, v))
            return zeros + ((None,) if name.startswith("_scaled_dot_product_efficient")
                            else ())
        dq, dk, dv, dS = attention_backward(dO, q, k, v, a["out"], a["logsumexp"], mask,
                                            bool(a.get("is_causal")), a.get("scale"),
                                            self._prod_fn(plan))
        self._note(func, "attention", plan.label, [q.shape, k.shape, v.shape])
        if name == "_scaled_dot_product_efficient_attention_backward":
            gmask = a.get("grad_input_mask") or [True] * 4
            db = None
            if len(gmask) > 3 and gmask[3] and mask is not None:
                db = dS.to(mask.dtype)
                while db.dim() > mask.dim():
                    db = db.sum(0)
                for i, n in enumerate(mask.shape):
                    if n == 1 and db.shape[i] != 1:
                        db = db.sum(i, keepdim=True)
            return dq, dk, dv, db
        return _restride((dq, dk, dv), func, args, kwargs)

    # -- torch._scaled_mm (fp8 with scales) ----------------------------------------------
    def _scaled_mm(self, func, args, kwargs):
        a = _bind(func, args, kwargs)
        A, B = a["self"], a["mat2"]
        plan = self._plan("scaled_mm", A, B, _phase())
        sa, sb = a["scale_a"], a["scale_b"]
        if (plan.native or plan.cast is not None
                or sa.dtype != torch.float32 or sb.dtype != torch.float32
                or a.get("scale_result") is not None):
            self._note(func, "scaled_mm", "native", [A.shape, B.shape],
                       "policy: native or block/other scales")
            return func(*args, **kwargs)
        out_dtype = a.get("out_dtype") or A.dtype
        nvidia = not self.policy.arch.startswith("gfx") and self.policy.spec is None
        step = self.fp8_promotion if (nvidia and not a.get("use_fast_accum")) else None
        K = A.shape[-1]
        if step is None or K <= step:
            acc = run_product(A, B, plan, out_dtype=torch.float32)
            label = plan.label
        else:
            acc = None
            for k0 in range(0, K, step):
                part = run_product(A[:, k0:k0 + step], B[k0:k0 + step], plan,
                                   out_dtype=torch.float32)
                acc = part if acc is None else acc + part
            label = f"{plan.label} (fp32 promotion every {step})"
        D = acc * (sa * sb)
        if a.get("bias") is not None:
            D = D + a["bias"].to(torch.float32)
        self._note(func, "scaled_mm", label, [A.shape, B.shape])
        D = D.to(out_dtype)
        if a.get("out") is not None:
            a["out"].resize_(D.shape)
            return a["out"].copy_(D)
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
           "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention"):
    for _f in _overloads(_k, ("default",)):
        _HANDLERS[_f] = EmulateMode._attn_fwd
    for _f in _overloads(_k + "_backward", ("default",)):
        _HANDLERS[_f] = EmulateMode._attn_bwd
for _f in _overloads("_scaled_mm", ("default", "out")):
    _HANDLERS[_f] = EmulateMode._scaled_mm

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
    :class:`Record` per call in ``.records`` (``.counts`` and ``.summary()`` always work).

    ``schedule``: how the library strings instructions together (split-K, fp8 promotion,
    tf32x3, ...): a :class:`~torch_mma_emu.Schedule`, a preset name or ``{op kind:
    schedule}``; an ``input_precision`` applies to fp32 products only (docs/schedules.md).

    PyTorch's TF32 / fp16-accumulation settings are read when ``emulate`` is called.
    Run ``.backward()`` inside the block to emulate the backward products.
    """
    policy = Policy(arch, formats=formats, fp32_format=fp32_format, bias=bias,
                    fp16_accumulation=fp16_accumulation, fp16_alt_impl=fp16_alt_impl,
                    schedule=schedule)
    return EmulateMode(policy, record=record, fp8_promotion=fp8_promotion)
