"""Derivatives of ``emulated_mm``, every product emulated on the same arch: the custom op's
registered backward, and the autograd.Function the public wrapper runs it through, which adds
what a custom op cannot declare (a jvp for forward-mode AD, a vmap rule)."""
from __future__ import annotations

import torch

from .ops_kernel import emulated_mm_op, gemm_impl, schedule_of
from .registry import DEFAULT_ARCH

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
    sched = schedule_of(kw.get("schedule"), common["c_mode"])
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


emulated_mm_op.register_autograd(_backward, setup_context=_setup_context)


# ---------------------------------------------------------------------------------------
# torch.func: the public wrapper runs the op through an autograd.Function that adds what a
# torch.library custom op cannot declare: a forward-mode formula (jvp / forward_ad) and a
# vmap rule.  Under torch.compile the custom op is called directly (Dynamo does not trace
# custom jvp rules; the op's registered autograd serves there).
# ---------------------------------------------------------------------------------------

def _call_op(A, B, C=None, scale_a=None, scale_b=None, **kw):
    return route(A, B, C, scale_a, scale_b, kw)


# ---------------------------------------------------------------------------------------
# The route of one eager call (issue 41: a 64^3 product's arithmetic is ~10% of a call that
# goes through all of it).  The autograd.Function costs ~45 us a call (torch binds its
# arguments with inspect.signature because it defines setup_context) and the custom op's
# dispatch ~20 us; each is skipped where it could add nothing:
# * the Function where no derivative can be asked for: no forward-mode AD level, no
#   torch.func transform, and grad mode off, no input requiring grad, or the call made below
#   autograd (inside a __torch_dispatch__ handler, where the outer op's autograd kernel sets
#   the result's history and would drop the Function's);
# * the custom op too where nothing could see it: plain CPU / CUDA tensors, no dispatch or
#   function mode, no profiler; gemm_impl, the op's kernel, runs directly.
# Every route gives the same bits (tests/test_ops_route.py).
# ---------------------------------------------------------------------------------------
_FWD_AD = torch.autograd.forward_ad
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_STRIDED = torch.strided
_AUTOGRAD_KEY = torch._C.DispatchKey.AutogradFunctionality
_excluded = torch._C._dispatch_tls_is_dispatch_key_excluded
_transforms_active = torch._C._are_functorch_transforms_active
_n_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled
_profiling = torch._C._autograd._profiler_enabled


def _needs_function(A, B, C) -> bool:
    """Whether the call must run through :class:`EmulatedMM` (a derivative can be asked for)."""
    if _FWD_AD._current_level >= 0 or _transforms_active():
        return True
    if not torch.is_grad_enabled() or _excluded(_AUTOGRAD_KEY):
        return False
    return A.requires_grad or B.requires_grad or (C is not None and C.requires_grad)


def _plain(t) -> bool:
    return type(t) in _PLAIN and t.layout == _STRIDED and not t.is_nested


def _direct(A, B, C, scale_a, scale_b) -> bool:
    """Whether the op's kernel can run without the op's dispatch (nothing could see it):
    dense CPU / CUDA tensors (others get the dispatcher's own errors), no mode, no profiler."""
    if not (_plain(A) and _plain(B) and (A.is_cpu or A.is_cuda)):
        return False
    for t in (C, scale_a, scale_b):
        if t is not None and not _plain(t):
            return False
    return not _n_dispatch_modes() and not _function_modes() and not _profiling()


def route(A, B, C, scale_a, scale_b, kw: dict) -> torch.Tensor:
    """``C + A @ B`` as the public wrapper runs it outside torch.compile: through
    :class:`EmulatedMM` where a derivative can be asked for, else the custom op, or its
    kernel directly (``kw``: the op's keyword arguments)."""
    if _needs_function(A, B, C):
        return EmulatedMM.apply(A, B, C, scale_a, scale_b, kw)
    if _direct(A, B, C, scale_a, scale_b):
        g = kw.get
        return gemm_impl(A, B, C, g("arch", DEFAULT_ARCH), g("in_format"), g("out_dtype"),
                         g("instruction"), g("c_mode", "chain"), scale_a, scale_b,
                         g("schedule"))
    return torch.ops.mma_emu.emulated_mm(A, B, C, scale_a, scale_b, **kw)


class EmulatedMM(torch.autograd.Function):
    """The public wrapper's route to the op (outside torch.compile): its backward, jvp and
    vmap rule."""

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
            sched = schedule_of(kw.get("schedule"), kw.get("c_mode", "chain"))
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
