"""The public op ``torch.ops.mma_emu.emulated_mm``: argument checks, spec resolution, fake
kernel and autograd.  The arithmetic runs in the C++ op ``torch.ops.mma_emu._gemm``
(CPU and CUDA kernels over one header-only core, csrc/core)."""
from __future__ import annotations

from functools import lru_cache
from typing import Optional

import torch
from torch._subclasses.fake_tensor import is_fake

from . import cpp
from .formats import (INT_OF_SIZE, OPERAND_DTYPES, OUT_DTYPES, Format, format_of_dtype,
                      format_pair, formats_of_dtype, get_format, out_format, scale_format_of_dtype,
                      scales_text)
from .registry import DEFAULT_ARCH, spec as _registry_spec
from .schedule import Schedule, as_schedule, run_scheduled
from .tf32 import tf32_round
from .spec import Spec, as_spec

__all__ = ["emulated_mm", "resolve_spec"]

_FP4 = getattr(torch, "float4_e2m1fn_x2", None)


def _operand_format(t: torch.Tensor, in_format: Optional[str], which: str) -> Format:
    """Input format of an operand: its dtype, or ``in_format`` where the dtype is ambiguous."""
    if t.dtype == _FP4 and _FP4 is not None:
        raise TypeError(f"emulated_mm: {which} is packed float4_e2m1fn_x2: tme.emulated_mm "
                        "unpacks it; the op takes one uint8 code per element "
                        "(torch_mma_emu.preview.scaled.unpack_fp4(t, dim of K)) with "
                        "in_format='fp4_e2m1'")
    if not t.dtype.is_floating_point and t.dtype != torch.uint8:
        raise TypeError(f"emulated_mm: {which} has dtype {t.dtype}; allowed: float64, float32, "
                        "float16, bfloat16, float8 dtypes, or uint8 codes with in_format")
    if in_format is not None:
        fmt = get_format(in_format)
        allowed = formats_of_dtype(t.dtype)
        if fmt.name in allowed:
            return fmt
        fits = ", ".join(allowed)
        raise TypeError(f"emulated_mm: in_format={fmt.name!r} does not fit {which} of dtype "
                        f"{t.dtype} (allowed: {fits}); give 'fmtA,fmtB' when A and B differ, "
                        "or leave in_format out for dtypes that fix their format")
    fmt = format_of_dtype(t.dtype)
    if fmt is None:
        raise TypeError(f"emulated_mm: {which} holds uint8 codes; say which format with "
                        "in_format='fp4_e2m1' / 'fp6_e2m3' / 'fp6_e3m2' / 'fp8_*'")
    return fmt


def _spec_operand_format(t: torch.Tensor, want: str, which: str) -> Format:
    """The format a Spec (passed as ``arch``, no ``in_format``) takes for an operand, when
    the operand's dtype can hold it."""
    own = format_of_dtype(t.dtype) if t.dtype.is_floating_point else None
    if want in formats_of_dtype(t.dtype):
        return get_format(want)
    fits = [str(dt) for dt in OPERAND_DTYPES if want in formats_of_dtype(dt)]
    raise TypeError(f"emulated_mm: the Spec given as arch takes {want} for {which}, but {which} "
                    f"has dtype {t.dtype}" + (f" ({own.name})" if own is not None else "")
                    + f"; give {which} as {' or '.join(fits) or 'a tensor of that format'}")


def _scale_format(t: Optional[torch.Tensor]) -> Optional[str]:
    if t is None:
        return None
    sf = scale_format_of_dtype(t.dtype)
    if sf is not None:
        return sf
    raise TypeError(f"emulated_mm: scales have dtype {t.dtype}; allowed: torch.float8_e8m0fnu "
                    "or uint8 codes (MX, ue8m0) and torch.float8_e4m3fn (NVFP4, ue4m3)")


@lru_cache(maxsize=4096)
def _cached_spec(arch: str, fa: str, fb: str, out: Optional[str], instruction: Optional[str],
                 scale_format: Optional[str], block: Optional[int]) -> Spec:
    return _registry_spec(arch, fa, out, in_format_b=fb, instruction=instruction,
                          scale_format=scale_format, block_size=block)


def _out_name(out_dtype: Optional[torch.dtype]) -> Optional[str]:
    return out_format(out_dtype, "emulated_mm: ")


def resolve_spec(A: torch.Tensor, B: torch.Tensor, arch: str = DEFAULT_ARCH,
                 in_format: Optional[str] = None, out_dtype: Optional[torch.dtype] = None,
                 instruction: Optional[str] = None, scale_a: Optional[torch.Tensor] = None,
                 scale_b: Optional[torch.Tensor] = None) -> Spec:
    """The :class:`Spec` ``emulated_mm`` uses for these operands (raises what is allowed).
    ``arch``: a name or alias, a Spec, or its string (as the op receives it: parsed once)."""
    if not isinstance(arch, (str, Spec)):
        raise TypeError(f"emulated_mm: arch must be an arch name or a Spec, got {type(arch)}")
    sp = as_spec(arch)
    if in_format is None and sp is not None:   # the Spec says the formats
        fa = _spec_operand_format(A, sp.fmt_a.name, "A")
        fb = _spec_operand_format(B, sp.fmt_b.name, "B")
    else:
        fmt_a, fmt_b = format_pair(in_format, "emulated_mm: ") or (None, None)
        fa = _operand_format(A, fmt_a, "A")
        fb = _operand_format(B, fmt_b, "B")
    sf = _scale_format(scale_a)
    if (scale_a is None) != (scale_b is None):
        raise ValueError("emulated_mm: give both scale_a and scale_b, or neither")
    if sf is not None and _scale_format(scale_b) != sf:
        raise TypeError("emulated_mm: scale_a and scale_b must have the same scale format")
    block = None
    if sf is not None:
        K = A.shape[-1]
        if A.dim() >= 2 and B.dim() >= 2 and (
                scale_a.dim() < 2 or scale_b.dim() < 2 or scale_a.shape[-2] != A.shape[-2]
                or scale_b.shape[-1] != B.shape[-1]):
            raise _scale_shapes_error(A.shape[-2], B.shape[-1], "nblk", scale_a, scale_b,
                                      f", nblk = ceil(K / block) = ceil({K} / 32) (MX) or "
                                      f"ceil({K} / 16) (NVFP4)")
        nblk = scale_a.shape[-1] if scale_a.dim() >= 1 else -1
        cands = [bs for bs in (32, 16) if -(-K // bs) == nblk]
        if not cands:
            raise ValueError(f"emulated_mm: scale_a has {nblk} blocks along K = {K}; expected "
                             f"ceil(K / block) for a block size of 32 (MX) or 16 (NVFP4)")
        block = None if K == 0 else (cands[0] if sf == "ue8m0" else cands[-1])
    if sp is not None:
        _check_custom(sp, fa, fb, sf, out_dtype)
        return sp
    return _cached_spec(arch, fa.name, fb.name, _out_name(out_dtype), instruction, sf, block)


def _scale_shapes_error(M, N, nblk, scale_a, scale_b, why: str) -> ValueError:
    return ValueError(f"emulated_mm: scales must have shapes (..., {M}, {nblk}) and "
                      f"(..., {nblk}, {N}){why}; got {tuple(scale_a.shape)} and "
                      f"{tuple(scale_b.shape)}")


def _check_custom(s: Spec, fa: Format, fb: Format, sf, out_dtype) -> None:
    if s.fmt_a.name != fa.name or s.fmt_b.name != fb.name:
        raise TypeError(f"emulated_mm: the spec takes {s.fmt_a.name} x {s.fmt_b.name} inputs, "
                        f"got {fa.name} x {fb.name}")
    if s.scale_format != sf:
        raise TypeError(f"emulated_mm: the spec takes {scales_text(s.scale_format)}, got "
                        f"{scales_text(sf)} (scale_a / scale_b)")
    if out_dtype is not None and _out_name(out_dtype) != s.out_format:
        raise TypeError(f"emulated_mm: the spec produces {s.out_format}, out_dtype={out_dtype}")


def _out_dtype(s: Spec) -> torch.dtype:
    return OUT_DTYPES[s.out_format]


def broadcast_shapes(A, B, C, fn="emulated_mm"):
    """(batch, M, K, N, out_shape) of ``C + A @ B`` with broadcast batch dimensions; a clear
    ValueError naming ``fn`` otherwise (shared with the native paths)."""
    if A.dim() < 2 or B.dim() < 2:
        raise ValueError(f"{fn}: A and B need at least 2 dimensions (..., M, K) and "
                         f"(..., K, N); got {tuple(A.shape)} and {tuple(B.shape)}")
    M, K = A.shape[-2:]
    K2, N = B.shape[-2:]
    if K != K2:
        raise ValueError(f"{fn}: shapes {tuple(A.shape)} and {tuple(B.shape)} cannot be "
                         f"multiplied (K = {K} vs {K2})")
    try:
        batch = tuple(torch.broadcast_shapes(A.shape[:-2], B.shape[:-2]))
    except RuntimeError as e:
        raise ValueError(f"{fn}: batch dimensions {tuple(A.shape[:-2])} and "
                         f"{tuple(B.shape[:-2])} do not broadcast") from e
    out_shape = (*batch, M, N)
    if C is not None:
        try:
            ok = tuple(torch.broadcast_shapes(C.shape, out_shape)) == out_shape
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(f"{fn}: C of shape {tuple(C.shape)} does not broadcast to "
                             f"the result shape {out_shape}")
    return batch, M, K, N, out_shape


def _check_devices(*ts):
    devs = {t.device for t in ts if t is not None}
    if len(devs) > 1:
        raise ValueError(f"emulated_mm: tensors are on different devices: "
                         f"{', '.join(sorted(map(str, devs)))}")


def _check_codes(t: torch.Tensor, fmt: Format, which: str) -> None:
    if t.dtype == torch.uint8 and t.numel() and fmt.bits < 8:
        if int(t.max()) >= (1 << fmt.bits):
            raise ValueError(f"emulated_mm: {which} holds codes >= 2**{fmt.bits}, not valid "
                             f"{fmt.name} codes (one code per uint8, in the low bits)")


def _flat3(t: torch.Tensor, batch, r: int, c: int) -> torch.Tensor:
    t = t.broadcast_to((*batch, r, c))
    n = 1
    for d in batch:
        n *= d
    return t.reshape(n, r, c)


@lru_cache(maxsize=256)
def _parsed_schedule(schedule: str) -> Schedule:
    return Schedule.from_string(schedule)


def _schedule_of(schedule: Optional[str], c_mode: str) -> Optional[Schedule]:
    """The Schedule to run (None: the plain chain), with emulated_mm's c_mode merged in."""
    if c_mode not in ("chain", "epilogue"):
        raise ValueError(f"emulated_mm: c_mode must be 'chain' or 'epilogue', got {c_mode!r}")
    if schedule is None:
        return None
    sched = _parsed_schedule(schedule)
    if c_mode == "epilogue" and sched.c_mode == "chain" and sched.tree is None:
        sched = sched.replace(c_mode="epilogue")
    return None if sched.is_plain else sched


def _input_precision(sched: Optional[Schedule], A, B, in_format):
    """(A, B, in_format, lo) after the schedule's input_precision (fp32 inputs only)."""
    ip = sched.input_precision if sched is not None else None
    if ip is None:
        return A, B, in_format, None
    if A.dtype != torch.float32 or B.dtype != torch.float32:
        raise TypeError(f"emulated_mm: input_precision={ip!r} applies to float32 inputs, got "
                        f"{A.dtype} and {B.dtype}")
    if in_format not in (None, "fp32", "tf32"):
        raise ValueError(f"emulated_mm: in_format={in_format!r} conflicts with the "
                         f"schedule's input_precision={ip!r}")
    if ip == "ieee":
        return A, B, "fp32", None
    if ip == "tf32_rn":
        return tf32_round(A, "rne"), tf32_round(B, "rne"), "tf32", None
    if ip == "tf32x3":
        # hi / lo parts made K block by K block (schedule_partials._tf32x3_chain)
        return A, B, "tf32", True
    return A, B, "tf32", None


def _gemm_impl(A, B, C, arch, in_format, out_dtype, instruction, c_mode, scale_a, scale_b,
               schedule=None):
    sched = _schedule_of(schedule, c_mode)
    _check_devices(A, B, C, scale_a, scale_b)
    A, B, in_format, lo = _input_precision(sched, A, B, in_format)
    s = resolve_spec(A, B, arch, in_format, out_dtype, instruction, scale_a, scale_b)
    batch, M, K, N, out_shape = broadcast_shapes(A, B, C)
    odt = _out_dtype(s)
    if C is not None and not C.dtype.is_floating_point:
        raise TypeError(f"emulated_mm: C has dtype {C.dtype}; it must be a floating tensor")
    Cc = (C.to(odt) if C is not None else torch.zeros((), dtype=odt, device=A.device))
    a3 = _flat3(A, batch, M, K)
    b3 = _flat3(B, batch, K, N)
    c3 = _flat3(Cc, batch, M, N)
    sa3 = sb3 = None
    if s.scaled:
        nblk = -(-K // s.block_size)
        if scale_a.shape[-2:] != (M, nblk) or scale_b.shape[-2:] != (nblk, N):
            raise _scale_shapes_error(M, N, nblk, scale_a, scale_b,
                                      f" for block size {s.block_size}")
        for name, sc in (("scale_a", scale_a), ("scale_b", scale_b)):
            try:
                ok = tuple(torch.broadcast_shapes(sc.shape[:-2], batch)) == tuple(batch)
            except RuntimeError:
                ok = False
            if not ok:
                raise ValueError(f"emulated_mm: {name} has batch dimensions "
                                 f"{tuple(sc.shape[:-2])} that do not broadcast to the "
                                 f"product's batch {tuple(batch)}")
        sa3 = _flat3(scale_a, batch, M, nblk).view(torch.uint8)
        sb3 = _flat3(scale_b, batch, nblk, N).view(torch.uint8)
    if s.op in ("fma", "ftz_addmul"):
        vdt = torch.float64 if s.out_format == "fp64" else torch.float32
        a3, b3 = a3.to(vdt), b3.to(vdt)
    else:
        _check_codes(A, s.fmt_a, "A")
        _check_codes(B, s.fmt_b, "B")
        a3 = a3.view(INT_OF_SIZE[a3.element_size()])
        b3 = b3.view(INT_OF_SIZE[b3.element_size()])
    if sched is not None:
        d = run_scheduled(sched, s, a3, b3, c3, C is not None, lo,
                          (sa3, sb3) if s.scaled else None)
        return d.reshape(out_shape)
    d = cpp.gemm(s, a3, b3, c3, sa3, sb3, c_mode, _c_in(s, C))
    return d.reshape(out_shape)


def _c_in(s: Spec, C) -> Optional[str]:
    """The format C came in where the instruction reads it as it is (``Spec.c_format``:
    Volta's m8n8k4.f32.f16.f16.f16 takes an fp16 C, docs/model.md 6.4); None otherwise."""
    if C is None or s.c_format is None:
        return None
    f = format_of_dtype(C.dtype)
    return s.c_format if f is not None and f.name == s.c_format else None


@torch.library.custom_op("mma_emu::emulated_mm", mutates_args=())
def _emulated_mm_op(A: torch.Tensor, B: torch.Tensor, C: Optional[torch.Tensor] = None,
                    scale_a: Optional[torch.Tensor] = None, scale_b: Optional[torch.Tensor] = None,
                    *, arch: str = DEFAULT_ARCH, in_format: Optional[str] = None,
                    out_dtype: Optional[torch.dtype] = None, instruction: Optional[str] = None,
                    c_mode: str = "chain", schedule: Optional[str] = None) -> torch.Tensor:
    return _gemm_impl(A, B, C, arch, in_format, out_dtype, instruction, c_mode, scale_a, scale_b,
                      schedule)


@_emulated_mm_op.register_fake
def _(A, B, C=None, scale_a=None, scale_b=None, *, arch=DEFAULT_ARCH, in_format=None,
      out_dtype=None, instruction=None, c_mode="chain", schedule=None):
    sched = _schedule_of(schedule, c_mode)
    if sched is not None and sched.input_precision is not None:
        _input_precision(sched.replace(input_precision="ieee"), A, B, in_format)  # checks
        in_format = "fp32" if sched.input_precision == "ieee" else "tf32"
    s = resolve_spec(A, B, arch, in_format, out_dtype, instruction, scale_a, scale_b)
    _check_devices(A, B, C, scale_a, scale_b)
    *_, out_shape = broadcast_shapes(A, B, C)
    return A.new_empty(out_shape, dtype=_out_dtype(s))


# ---------------------------------------------------------------------------------------
# autograd: the backward products are emulated on the same arch
# ---------------------------------------------------------------------------------------

def _setup_context(ctx, inputs, keyword_only_inputs, output):
    A, B, C, scale_a, _ = inputs
    ctx.save_for_backward(A, B)
    ctx.scaled = scale_a is not None
    ctx.kw = dict(keyword_only_inputs)
    ctx.c_shape = None if C is None else C.shape
    ctx.c_dtype = None if C is None else C.dtype


def _reduce_to(g: torch.Tensor, shape) -> torch.Tensor:
    while g.dim() > len(shape):
        g = g.sum(0)
    for i, n in enumerate(shape):
        if n == 1 and g.shape[i] != 1:
            g = g.sum(i, keepdim=True)
    return g


def _backward(ctx, grad, mm=None):
    """Gradients of ``C + A @ B``; ``mm``: how to call the emulated product (the custom op
    by default; the autograd.Function from its own backward, so that vmap / jacrev use
    its batching rule)."""
    mm = mm or torch.ops.mma_emu.emulated_mm
    A, B = ctx.saved_tensors
    kw = ctx.kw
    if ctx.scaled:
        raise NotImplementedError("emulated_mm: gradients through block-scaled (MX/NVFP4) "
                                  "products are not supported")
    for t in (A, B):
        if t.dtype not in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
            raise NotImplementedError(f"emulated_mm: gradients for {t.dtype} inputs are not "
                                      "supported (float64/32/16 and bfloat16 are)")
    common = dict(arch=kw["arch"], in_format=kw.get("in_format"), instruction=kw.get("instruction"),
                  c_mode=kw.get("c_mode", "chain"), out_dtype=kw.get("out_dtype"))
    # Backward products: the schedule's accumulation (split-K, promotion, input precision)
    # without alpha/beta (applied in torch); a tree fits only the forward K, so tree
    # schedules run the plain chain backward.
    sched = _schedule_of(kw.get("schedule"), common["c_mode"])
    alpha = beta = 1.0
    if sched is not None:
        alpha, beta = sched.alpha, (sched.beta if sched.c_mode == "epilogue" else 1.0)
        if sched.tree is None:
            common["schedule"] = sched.replace(alpha=1.0, beta=1.0, c_mode=None).to_string()
            common["c_mode"] = "chain"
    gA = gB = gC = None
    if ctx.needs_input_grad[0]:
        gA = mm(grad.to(A.dtype), B.mT, **common)
        gA = _reduce_to(gA * alpha if alpha != 1.0 else gA, A.shape).to(A.dtype)
    if ctx.needs_input_grad[1]:
        gB = mm(A.mT, grad.to(B.dtype), **common)
        gB = _reduce_to(gB * alpha if alpha != 1.0 else gB, B.shape).to(B.dtype)
    if ctx.c_shape is not None and ctx.needs_input_grad[2]:
        gC = _reduce_to(grad * beta if beta != 1.0 else grad, ctx.c_shape).to(ctx.c_dtype)
    return gA, gB, gC, None, None


_emulated_mm_op.register_autograd(_backward, setup_context=_setup_context)


# ---------------------------------------------------------------------------------------
# The rounding of a result to its storage dtype, kept where a compiler would drop it.  A GPU
# kernel writes its fp32 accumulators as bf16 / fp16; emulated, that is ``D.to(dtype)``
# after the op, and Inductor fuses such a cast into the next pointwise op and skips the
# rounding (the consumer reads the fp32 value: torch 2.11-2.14 by default), so a compiled
# model would not compute what the GPU does.  While a graph is traced the cast is this
# op of its own, which Inductor calls and cannot see into; eager code casts as before.
# ---------------------------------------------------------------------------------------

@torch.library.custom_op("mma_emu::round_to", mutates_args=())
def _round_to_op(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x.to(dtype, copy=True)


@_round_to_op.register_fake
def _(x, dtype):
    return torch.empty_like(x, dtype=dtype)


def _round_to_setup(ctx, inputs, output):
    ctx.in_dtype = inputs[0].dtype


_round_to_op.register_autograd(lambda ctx, g: (g.to(ctx.in_dtype), None),
                               setup_context=_round_to_setup)


def round_result(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x.to(dtype)`` as a kernel's store: a rounding no compiler fuses away."""
    if x.dtype == dtype:
        return x
    if torch.compiler.is_compiling() or is_fake(x):
        return _round_to_op(x, dtype)
    return x.to(dtype)


# ---------------------------------------------------------------------------------------
# torch.func: the public wrapper runs the op through an autograd.Function that adds what a
# torch.library custom op cannot declare: a forward-mode formula (jvp / forward_ad) and a
# vmap rule.  Under torch.compile the custom op is called directly (Dynamo does not trace
# custom jvp rules; the op's registered autograd serves there).
# ---------------------------------------------------------------------------------------

def _call_op(A, B, C=None, scale_a=None, scale_b=None, **kw):
    return _EmulatedMM.apply(A, B, C, scale_a, scale_b, kw)


class _EmulatedMM(torch.autograd.Function):
    @staticmethod
    def forward(A, B, C, scale_a, scale_b, kw):
        return torch.ops.mma_emu.emulated_mm(A, B, C, scale_a, scale_b, **kw)

    @staticmethod
    def setup_context(ctx, inputs, output):
        A, B, C, scale_a, scale_b, kw = inputs
        _setup_context(ctx, (A, B, C, scale_a, scale_b), kw, output)
        ctx.save_for_forward(A, B)
        ctx.out_dtype, ctx.out_shape = output.dtype, output.shape

    @staticmethod
    def backward(ctx, grad):
        gA, gB, gC, _, _ = _backward(ctx, grad, mm=_call_op)
        return gA, gB, gC, None, None, None

    @staticmethod
    def jvp(ctx, tA, tB, tC, t_sa, t_sb, _kw):
        """d(C + A @ B) = dC + dA @ B + A @ dB, each product emulated on the same arch
        (as the backward's); block-scaled and code (uint8) inputs have no tangent rule."""
        A, B = ctx.saved_tensors
        if ctx.scaled or t_sa is not None or t_sb is not None:
            raise NotImplementedError("emulated_mm: forward-mode AD (jvp) through "
                                      "block-scaled (MX/NVFP4) products is not supported")
        kw = dict(ctx.kw)
        out = None
        if tA is not None:
            out = _call_op(tA.to(A.dtype), B, **kw)
        if tB is not None:
            t = _call_op(A, tB.to(B.dtype), **kw)
            out = t if out is None else out + t
        if tC is not None:
            tc = tC.to(ctx.out_dtype)
            sched = _schedule_of(kw.get("schedule"), kw.get("c_mode", "chain"))
            if sched is not None and sched.c_mode == "epilogue" and sched.beta != 1.0:
                tc = tc * sched.beta     # d(alpha A@B + beta C) / dC
            out = tc.expand(ctx.out_shape).clone() if out is None else out + tc
        return out

    @staticmethod
    def vmap(info, in_dims, A, B, C, scale_a, scale_b, kw):
        """Batching rule: the vmapped dimension becomes one more broadcast batch dimension
        of the op (A (..., M, K), B (..., K, N), C and scales broadcast)."""
        ops = (A, B, C, scale_a, scale_b)
        dims = in_dims[:5]

        def batch_rank(x, d, core):
            return 0 if x is None else x.dim() - (d is not None) - core
        nb = max(batch_rank(A, dims[0], 2), batch_rank(B, dims[1], 2),
                 batch_rank(C, dims[2], 2), batch_rank(scale_a, dims[3], 2),
                 batch_rank(scale_b, dims[4], 2), 0)

        def prep(x, d, expand=False):
            if x is None:
                return None
            if d is None:     # A and B span the result's batch; C and scales broadcast
                x = x.unsqueeze(0)
                x = x.expand(info.batch_size, *x.shape[1:]) if expand else x
            else:
                x = x.movedim(d, 0)
            while x.dim() - 1 < nb + 2:
                x = x.unsqueeze(1)
            return x
        out = _call_op(*(prep(x, d, i < 2) for i, (x, d) in enumerate(zip(ops, dims))), **kw)
        return out, 0


def _spec_string(spec: Spec) -> str:
    """``spec.to_string()``, computed when the Spec was made: while Dynamo traces it reads the
    cached string as a constant guarded by value, so a Spec that differs recompiles.  (Not
    ``assume_constant_result``: Dynamo before torch 2.13 cannot take a frozen dataclass as
    its argument, and tracing the encoder would turn an int field symbolic.)"""
    return spec.to_string()


_OP_DOC = """mma_emu::emulated_mm(A, B, C=None, scale_a=None, scale_b=None, *, arch="sm90",
in_format=None, out_dtype=None, instruction=None, c_mode="chain", schedule=None) -> Tensor

D = C + A @ B bit for bit as arch's matrix unit (NVIDIA Tensor Core, AMD Matrix Core)
computes it.  The custom op behind torch_mma_emu.emulated_mm (which documents every argument
and also takes a Spec as arch): fake kernel and autograd registered, CPU and CUDA kernels,
works under torch.compile(fullgraph=True).  arch: an arch name or alias (tme.archs()) or a
serialised Spec ("spec:..."); in_format: "tf32"/"xf32" for float32, "fp4_e2m1"/"fp6_e2m3"/
"fp6_e3m2" for uint8 codes, "fmtA,fmtB" when A and B differ; out_dtype: float32 (default),
float16, float64 (fp64 inputs); c_mode: "chain" (C is the initial accumulator) or "epilogue";
scale_a (..., M, ceil(K/bs)) / scale_b (..., ceil(K/bs), N): MX (E8M0) or NVFP4 (E4M3) block
scales; schedule: a serialised Schedule ("schedule:...", docs/schedules.md) or None.  Bad
arguments raise ValueError / TypeError saying what is allowed."""
torch.ops.mma_emu.emulated_mm.__doc__ = _OP_DOC   # help(torch.ops.mma_emu.emulated_mm)
torch.ops.mma_emu.emulated_mm.default.__doc__ = _OP_DOC


def emulated_mm(A: torch.Tensor, B: torch.Tensor, C: Optional[torch.Tensor] = None, *,
                arch=DEFAULT_ARCH, in_format: Optional[str] = None,
                out_dtype: Optional[torch.dtype] = None, instruction: Optional[str] = None,
                c_mode: str = "chain", scale_a: Optional[torch.Tensor] = None,
                scale_b: Optional[torch.Tensor] = None, schedule=None) -> torch.Tensor:
    """``D = C + A @ B`` exactly as ``arch``'s matrix unit computes it.

    A (..., M, K) and B (..., K, N), batch dimensions broadcast as in ``torch.matmul``; C
    broadcastable to (..., M, N), default zero.  The input format comes from the dtype;
    ``in_format`` picks it where the dtype is ambiguous ("tf32"/"xf32" for float32,
    "fp4_e2m1"/"fp6_e2m3"/"fp6_e3m2" for uint8 codes); "fmtA,fmtB" gives A and B
    different formats (e.g. "fp6_e2m3,fp4_e2m1").  ``arch`` is a name or alias
    (``tme.archs()``) or a :class:`Spec`.  ``out_dtype`` is float32 by default (float64 for
    fp64 inputs).  ``instruction`` picks a non-default instruction where an arch has several.
    ``c_mode="epilogue"`` accumulates A@B from zero and adds C at the end (BLAS style).
    ``scale_a`` (..., M, ceil(K/32|16)) and ``scale_b`` (..., ceil(K/..), N) are MX (E8M0) or
    NVFP4 (E4M3) block scales.  ``schedule``: how a library strings the instructions
    together (split-K, fp8 promotion, alpha/beta epilogue, tf32x3, or a revealed FPRev
    tree): a :class:`Schedule`, a preset name (``tme.schedule.presets()``) or a SumTree;
    see docs/schedules.md.  This calls the custom op ``torch.ops.mma_emu.emulated_mm``.
    """
    if isinstance(arch, Spec):
        arch = _spec_string(arch)
    if not isinstance(arch, str):
        raise TypeError(f"emulated_mm: arch must be an arch name (tme.archs()) or a Spec, "
                        f"got {type(arch).__name__}")
    for name, v in (("in_format", in_format), ("instruction", instruction)):
        if v is not None and not isinstance(v, str):
            raise TypeError(f"emulated_mm: {name} must be a str or None, got "
                            f"{type(v).__name__} {v!r:.40}")
    if not isinstance(c_mode, str):
        raise TypeError(f"emulated_mm: c_mode must be 'chain' or 'epilogue', got "
                        f"{type(c_mode).__name__} {c_mode!r:.40}")
    if isinstance(out_dtype, str):
        out_dtype = OUT_DTYPES[out_format(out_dtype, "emulated_mm: ")]
    elif out_dtype is not None and not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"emulated_mm: out_dtype must be a torch.dtype, got {out_dtype!r}")
    for name, t in (("A", A), ("B", B), ("C", C), ("scale_a", scale_a), ("scale_b", scale_b)):
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"emulated_mm: {name} must be a torch.Tensor, got {type(t).__name__}")
    if type(A) is not torch.Tensor or type(B) is not torch.Tensor:
        from .sharding import register          # a DTensor: its rule (sharding.py)
        register()
    if scale_a is not None or scale_b is not None or A.dtype == _FP4 or B.dtype == _FP4:
        from .packed_layouts import adapt       # torchao / cuBLAS layouts
        A, B, in_format = adapt(A, B, scale_a, scale_b, in_format, arch)
    sched = as_schedule(schedule)
    kw = dict(arch=arch, in_format=in_format, out_dtype=out_dtype, instruction=instruction,
              c_mode=c_mode, schedule=None if sched is None else sched.to_string())
    if torch.compiler.is_compiling():
        return torch.ops.mma_emu.emulated_mm(A, B, C, scale_a, scale_b, **kw)
    return _EmulatedMM.apply(A, B, C, scale_a, scale_b, kw)
