"""``torch._scaled_mm`` and ``F.scaled_mm`` (``_scaled_mm_v2``) under ``emulate``: which
scaling recipe a call uses, and its operands and scales in the form ``emulated_mm`` takes.

PyTorch's scaled products come in five recipes (``torch.nn.functional.ScalingType``):

* **tensorwise**: fp8 operands, one fp32 scale each, applied to the fp32 accumulator;
* **rowwise**: fp8 operands, fp32 scales (M, 1) and (1, N), applied the same way;
* **MX** (``BlockWise1x32``): fp8 or fp4 (``float4_e2m1fn_x2``) operands with one E8M0 scale
  per 32 elements along K, applied inside the instruction (Blackwell ``kind::mxf8f6f4`` /
  ``mxf4``);
* **NVFP4** (``BlockWise1x16``): fp4 operands with one UE4M3 scale per 16 elements, inside
  the instruction, and in ``F.scaled_mm`` an optional fp32 per-tensor scale on top;
* **blockwise 1x128 / 128x128** (DeepSeek-V3 style): fp8 operands with fp32 scales per 1x128
  (A) and 128x128 or 1x128 (B) block, applied to each 128-long K block's fp32 partial sum.

cuBLAS takes MX / NVFP4 scales in its 128x4 tile layout ("swizzled", ``SWIZZLE_32_4_4``):
``unswizzle`` undoes it.  fp4 operands come packed two per byte along K: ``unpack_fp4``
gives ``emulated_mm``'s one code per byte (packed_layouts.py holds both).  The mode's
handler of ``torch._scaled_mm`` / ``F.scaled_mm`` is at the end (``run_scaled`` serves the
grouped form too, grouped.py).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Optional

import torch

from ..formats import format_of_dtype
from ..ops import emulated_mm, round_result
from ..packed_layouts import ceil_div, swizzled_numel, unpack_fp4, unswizzle  # noqa: F401
from ..registry import ARCHS, CUBLASLT_SCALED_MM, arch_of_capability
from .dispatch_args import bind, phase
from .gemm import run_product
from .scaled_epilogue import cublaslt_epilogue

# torch.nn.functional.ScalingType / SwizzleType values (_scaled_mm_v2 takes them as ints)
TENSORWISE, ROWWISE, BLOCK_1X16, BLOCK_1X32, BLOCK_1X128, BLOCK_128X128 = range(6)
NO_SWIZZLE, SWIZZLE_32_4_4 = 0, 1
RECIPE_NAMES = {TENSORWISE: "TensorWise", ROWWISE: "RowWise", BLOCK_1X16: "BlockWise1x16",
                BLOCK_1X32: "BlockWise1x32", BLOCK_1X128: "BlockWise1x128",
                BLOCK_128X128: "BlockWise128x128"}

_FP4 = getattr(torch, "float4_e2m1fn_x2", None)
_E8M0 = getattr(torch, "float8_e8m0fnu", None)

ALLOWED = ("tensorwise (fp32 scales of one element), rowwise (fp32 scales (M, 1) and (1, N)), "
           "MX (fp8/fp4 operands, float8_e8m0fnu scales per 32 K elements), NVFP4 (fp4 "
           "operands, float8_e4m3fn scales per 16 K elements), MX and NVFP4 scales in cuBLAS's "
           "swizzled layout; blockwise (fp8 operands, fp32 scales 1x128 x 128x128: (M, K/128) "
           "and (K/128, N/128); 128x128 x 1x128: (M/128, K/128) and (K/128, N); 1x128 x "
           "1x128: (M, K/128) and (K/128, N))")


def is_fp8(dtype: torch.dtype) -> bool:
    f = format_of_dtype(dtype)
    return f is not None and f.name.startswith("fp8")


def block_scaled_archs() -> list[str]:
    """Archs with MX / NVFP4 instructions (registry rows with a scale format)."""
    from ..registry import archs, rows_for
    return [a for a in archs() if any(r.scale_format for r in rows_for(a))]


class NotEmulated(Exception):
    """A scaled product the emulator does not model; the message says why."""


@dataclass
class ScaledProduct:
    """One scaled product, ready for ``emulated_mm``.

    ``A`` (M, K), ``B`` (K, N): fp8 tensors or uint8 fp4 codes (``in_format`` says);
    ``block_a`` (M, K/bs), ``block_b`` (K/bs, N): MX / NVFP4 scales for the instruction;
    ``kblock_a`` (M, K/128), ``kblock_b`` (K/128, N): blockwise fp32 scales per K block;
    ``post``: fp32 factor on the accumulator ((M, N)-broadcastable; tensorwise / rowwise /
    NVFP4's global scales)."""

    recipe: str
    label: str
    A: torch.Tensor
    B: torch.Tensor
    in_format: Optional[str] = None
    block_a: Optional[torch.Tensor] = None
    block_b: Optional[torch.Tensor] = None
    kblock_a: Optional[torch.Tensor] = None
    kblock_b: Optional[torch.Tensor] = None
    post: Optional[torch.Tensor] = None


# -- recognising the recipe ---------------------------------------------------------------
def _operand(t: torch.Tensor, name: str, dim: int):
    """(codes for emulated_mm, format name); fp4 is unpacked along K (``dim``)."""
    if _FP4 is not None and t.dtype == _FP4:
        return unpack_fp4(t, dim), "fp4_e2m1"
    if is_fp8(t.dtype):
        return t, format_of_dtype(t.dtype).name
    raise NotEmulated(f"{name} is {t.dtype}; scaled products take float8 or "
                      "float4_e2m1fn_x2 operands")


def _in_format(fa: str, fb: str) -> Optional[str]:
    if "fp4_e2m1" not in (fa, fb):
        return None                       # the fp8 dtypes say it
    return fa if fa == fb else f"{fa},{fb}"


def _block(scale, rows, K, bs, swizzle, name):
    """(rows, K/bs) block scales from cuBLAS's tile layout."""
    if swizzle != SWIZZLE_32_4_4:
        raise ValueError(f"{name}: MX / NVFP4 scales on NVIDIA GPUs are taken in cuBLAS's "
                         "128x4 tile layout only (SWIZZLE_32_4_4, what torch._scaled_mm "
                         "assumes); NO_SWIZZLE is for AMD GPUs, which no emulated arch "
                         "with block scales is")
    if not scale.is_contiguous():
        raise ValueError(f"{name}: MX / NVFP4 scales must be contiguous (cuBLAS reads them in "
                         "memory order)")
    cols = ceil_div(K, bs)
    want = swizzled_numel(rows, cols)
    if scale.numel() != want:
        raise ValueError(f"{name}: {scale.numel()} scales given; the swizzled (128x4 tile) "
                         f"layout of ({rows}, {cols}) block scales has {want} (round_up("
                         f"{rows}, 128) * round_up({cols}, 4)); plain (rows, K/{bs}) scales "
                         "must first be rearranged as PyTorch's to_blocked() does")
    return unswizzle(scale, rows, cols)


def _is_fp32_tensor_scale(s):
    return s.dtype == torch.float32 and s.numel() == 1


def _kblock_shapes(M, K, N, v2=False) -> dict:
    """Blockwise scale shapes per recipe pair as PyTorch reads them: (A's, B's, transposed),
    where ``transposed`` says the tensors are stored K-block-last and are read ``.t()``
    (``F.scaled_mm`` keeps B's 1x128 and A's 128x128 scales that way, the latter padded to
    a multiple of 4 K blocks, as is B's 128x128; ``torch._scaled_mm`` takes A's scales as
    (rows, K/128) and B's as (K/128, cols))."""
    kb, mb, nb = ceil_div(K, 128), ceil_div(M, 128), ceil_div(N, 128)
    if not v2:
        return {(BLOCK_128X128, BLOCK_1X128): ((mb, kb), (kb, N), (False, False)),
                (BLOCK_1X128, BLOCK_128X128): ((M, kb), (kb, nb), (False, False)),
                (BLOCK_1X128, BLOCK_1X128): ((M, kb), (kb, N), (False, False))}
    l4 = ceil_div(kb, 4) * 4
    return {(BLOCK_128X128, BLOCK_1X128): ((l4, mb), (N, kb), (True, True)),
            (BLOCK_1X128, BLOCK_128X128): ((M, kb), (l4, nb), (False, False)),
            (BLOCK_1X128, BLOCK_1X128): ((M, kb), (N, kb), (False, True))}


def recipe_v1(A, B, sa, sb) -> tuple[int, int]:
    """The (recipe_a, recipe_b) that ``torch._scaled_mm`` infers from its scale tensors, in
    PyTorch's order (``get_joint_scaling``)."""
    M, N = A.shape[0], B.shape[1]
    fp4 = _FP4 is not None and A.dtype == _FP4
    K = A.shape[1] * (2 if fp4 else 1)
    if sa.dtype == torch.float32 and sb.dtype == torch.float32 and not fp4:
        if sa.numel() == 1 and sb.numel() == 1:
            return TENSORWISE, TENSORWISE
        if tuple(sa.shape) == (M, 1) and tuple(sb.shape) == (1, N):
            return ROWWISE, ROWWISE
        for pair, (want_a, want_b, _) in _kblock_shapes(M, K, N).items():
            if tuple(sa.shape) == want_a and tuple(sb.shape) == want_b:
                return pair
    if _E8M0 is not None and sa.dtype == _E8M0 and sb.dtype == _E8M0:
        return BLOCK_1X32, BLOCK_1X32
    if sa.dtype == torch.float8_e4m3fn and sb.dtype == torch.float8_e4m3fn:
        return BLOCK_1X16, BLOCK_1X16
    raise NotEmulated(f"scales {tuple(sa.shape)} {sa.dtype} and {tuple(sb.shape)} {sb.dtype} "
                      f"for A {tuple(A.shape)} {A.dtype}, B {tuple(B.shape)} {B.dtype} match no "
                      f"recipe; emulate models {ALLOWED}")


def build(A, B, scales_a, recipes_a, swizzles_a, scales_b, recipes_b, swizzles_b, *,
          v2: bool = False) -> ScaledProduct:
    """The product ``A (M, K[/2]) @ B (K[/2], N)`` with these scales, recipes (ints) and
    swizzles (ints; an empty list is NO_SWIZZLE), as ``torch._scaled_mm`` (``v2=False``)
    or ``F.scaled_mm`` reads them."""
    if A.dim() != 2 or B.dim() != 2:
        raise ValueError(f"scaled mm: A and B must be matrices, got {tuple(A.shape)} and "
                         f"{tuple(B.shape)}")
    Au, fa = _operand(A, "A", 1)
    Bu, fb = _operand(B, "B", 0)
    if Au.shape[1] != Bu.shape[0]:
        raise ValueError(f"scaled mm: A {tuple(A.shape)} and B {tuple(B.shape)} have different "
                         "K")
    M, K, N = Au.shape[0], Au.shape[1], Bu.shape[1]
    ra, rb = list(recipes_a), list(recipes_b)
    if len(scales_a) != len(ra) or len(scales_b) != len(rb):
        raise ValueError("scaled mm: one recipe per scale tensor")
    fmt = _in_format(fa, fb)
    names = " x ".join(dict.fromkeys((fa, fb)))

    def swz(lst, i):
        return lst[i] if i < len(lst) else NO_SWIZZLE

    # NVFP4's second level: an fp32 per-tensor scale after the block scales
    post = []
    for scales, recipes in ((scales_a, ra), (scales_b, rb)):
        if len(recipes) == 2 and recipes[0] == BLOCK_1X16 and recipes[1] == TENSORWISE:
            if not _is_fp32_tensor_scale(scales[1]):
                raise ValueError("scaled mm: the TensorWise scale after BlockWise1x16 must be "
                                 "one fp32 element")
            post.append(scales[1].reshape(()))
            recipes.pop()
        elif len(recipes) != 1:
            raise NotEmulated(f"scale recipes {[RECIPE_NAMES.get(r, r) for r in recipes]}: "
                              f"emulate models {ALLOWED}")
    if len(post) == 1:
        raise ValueError("scaled mm: NVFP4's global (TensorWise) scale is given for both "
                         "operands or for neither")
    pair = (ra[0], rb[0])
    sa, sb = scales_a[0], scales_b[0]
    if pair == (TENSORWISE, TENSORWISE) or pair == (ROWWISE, ROWWISE):
        if fmt is not None:
            raise NotEmulated("fp4 operands need block scales (MX or NVFP4)")
        if sa.dtype != torch.float32 or sb.dtype != torch.float32:
            raise ValueError(f"scaled mm: {RECIPE_NAMES[pair[0]]} scales must be float32, got "
                             f"{sa.dtype} and {sb.dtype}")
        if pair[0] == TENSORWISE:
            if sa.numel() != 1 or sb.numel() != 1:
                raise ValueError(f"scaled mm: TensorWise scales have one element, got "
                                 f"{tuple(sa.shape)} and {tuple(sb.shape)}")
            post_ab = (sa * sb).reshape(())
        else:
            if tuple(sa.shape) != (M, 1) or tuple(sb.shape) != (1, N):
                raise ValueError(f"scaled mm: RowWise scales are ({M}, 1) and (1, {N}), got "
                                 f"{tuple(sa.shape)} and {tuple(sb.shape)}")
            post_ab = sa * sb
        recipe = "rowwise" if pair[0] == ROWWISE else "tensorwise"
        return ScaledProduct(recipe, names, Au, Bu, post=post_ab)
    if pair in ((BLOCK_1X32, BLOCK_1X32), (BLOCK_1X16, BLOCK_1X16)):
        bs = 32 if pair[0] == BLOCK_1X32 else 16
        want = _E8M0 if bs == 32 else torch.float8_e4m3fn
        if sa.dtype != want or sb.dtype != want:
            raise ValueError(f"scaled mm: {RECIPE_NAMES[pair[0]]} scales must be {want}, got "
                             f"{sa.dtype} and {sb.dtype}")
        if bs == 16 and fmt != "fp4_e2m1":
            raise NotEmulated("BlockWise1x16 (NVFP4) scales take fp4 operands on both sides")
        blk_a = _block(sa, M, K, bs, swz(swizzles_a, 0), "scale_a")
        blk_b = _block(sb, N, K, bs, swz(swizzles_b, 0), "scale_b").t()
        kind = "MX" if bs == 32 else "NVFP4"
        label = f"{kind} {names}" if kind == "MX" else "NVFP4"
        g = None
        if post:
            g = post[0] * post[1]             # cuBLAS alpha
            label += " (x global scale)"
        return ScaledProduct(kind, label, Au, Bu, fmt, blk_a, blk_b.contiguous(), post=g)
    if post:
        raise NotEmulated("a TensorWise second scale is modelled after BlockWise1x16 only")
    shapes = _kblock_shapes(M, K, N, v2)
    if pair in shapes:
        if fmt is not None:
            raise NotEmulated("blockwise 1x128 / 128x128 scales take fp8 operands")
        if sa.dtype != torch.float32 or sb.dtype != torch.float32:
            raise ValueError(f"scaled mm: blockwise scales must be float32, got {sa.dtype} "
                             f"and {sb.dtype}")
        want_a, want_b, (ta, tb) = shapes[pair]
        if tuple(sa.shape) != want_a or tuple(sb.shape) != want_b:
            raise ValueError(f"scaled mm: {RECIPE_NAMES[pair[0]]} x {RECIPE_NAMES[pair[1]]} "
                             f"scales are {want_a} and {want_b}"
                             + (" (F.scaled_mm's layouts)" if v2 else "") + ", got "
                             f"{tuple(sa.shape)} and {tuple(sb.shape)}")
        kb = ceil_div(K, 128)
        sa = sa[:kb].t() if ta else sa                 # -> (M or M/128, K/128)
        sb = sb.t() if tb else sb[:kb]                 # -> (K/128, N or N/128)
        ka = sa if pair[0] == BLOCK_1X128 else sa.repeat_interleave(128, dim=0)[:M]
        kbb = sb if pair[1] == BLOCK_1X128 else sb.repeat_interleave(128, dim=1)[:, :N]
        blk = lambda r: "1x128" if r == BLOCK_1X128 else "128x128"  # noqa: E731
        return ScaledProduct("blockwise", f"{names} ({blk(pair[0])} x {blk(pair[1])} scales)",
                             Au, Bu, kblock_a=ka, kblock_b=kbb)
    raise NotEmulated(f"scale recipes {RECIPE_NAMES.get(pair[0], pair[0])} x "
                      f"{RECIPE_NAMES.get(pair[1], pair[1])}: emulate models {ALLOWED}")


# -- under emulate: torch._scaled_mm / F.scaled_mm (fp8 and fp4 with scales) -------------------
def handle_scaled_mm(mode, func, args, kwargs):
    """``torch._scaled_mm`` and ``F.scaled_mm`` (aten ``_scaled_mm_v2``): the recipe
    (:func:`build`), then :func:`run_scaled`."""
    a = bind(func, args, kwargs)
    A, B, out = a["self"], a["mat2"], a.get("out")
    arch = mode.policy.arch_name
    if mode.policy.choice("scaled_mm") == "native":
        mode.record(func, "scaled_mm", "native", [A.shape, B.shape], "policy: native")
        return func(*args, **kwargs)
    v2 = func.overloadpacket.__name__ == "_scaled_mm_v2"
    if not v2 and out is not None and a.get("out_dtype") not in (None, out.dtype):
        raise RuntimeError(f"{func}: out_dtype must match output matrix type "
                           f"({a['out_dtype']} vs out {out.dtype})")    # as PyTorch
    out_dtype = out.dtype if out is not None else (a.get("out_dtype") or A.dtype)
    scale_result = a.get("scale_result") if not v2 and is_fp8(out_dtype) else None
    if scale_result is not None and cublaslt_arch(mode.policy) is None:
        return _native(mode, func, args, kwargs, A, B, "scale_result (the fp8 output scale) "
                       "is modelled on " + ", ".join(CUBLASLT_SCALED_MM) + " only")
    # (cuBLAS ignores scale_result for other outputs)
    cdim = list(a.get("contraction_dim") or [])
    if cdim not in ([], [1, 0], [-1, 0]):
        raise ValueError(f"emulate({arch}): {func}: contraction_dim={cdim} is not modelled "
                         "(A's last and B's first dimension: [] or [1, 0]); "
                         "formats={'scaled_mm': 'native'} runs it natively")
    try:
        if v2:
            sp = build(A, B, a["scale_a"], a["recipe_a"], a["swizzle_a"] or [],
                       a["scale_b"], a["recipe_b"], a["swizzle_b"] or [], v2=True)
        else:
            sa, sb = a["scale_a"], a["scale_b"]
            ra, rb = recipe_v1(A, B, sa, sb)
            sp = build(A, B, [sa], [ra], [SWIZZLE_32_4_4], [sb], [rb], [SWIZZLE_32_4_4])
    except NotEmulated as e:
        raise ValueError(f"emulate({arch}): {func}: {e}; "
                         "formats={'scaled_mm': 'native'} runs it natively") from None
    # PyTorch runs these recipes of F.scaled_mm on one compute capability only
    only = (9, 0) if sp.recipe == "blockwise" else \
        (10, 0) if sp.label == "MX fp4_e2m1" else None
    if v2 and only is not None and mode.policy.spec is None and \
            ARCHS[mode.policy.arch].capability != only:
        raise ValueError(f"emulate({arch}): F.scaled_mm runs {sp.label.split(' (')[0]} "
                         f"({sp.recipe}) products on {arch_of_capability(only)} only "
                         "(PyTorch raises on other GPUs)")
    return run_scaled(mode, func, sp, a.get("bias"), out_dtype, a.get("use_fast_accum"), out,
                      scale_result=scale_result, cublaslt=not v2)


def _native(mode, func, args, kwargs, A, B, why):
    """A scaled product the emulator does not model: native, recorded, warned (every call:
    its numbers are this machine's, not the arch's)."""
    mode.record(func, "scaled_mm", "native", [A.shape, B.shape], why)
    warnings.warn(f"emulate({mode.policy.arch_name}): {func} runs natively ({why}); "
                  "its result is this machine's, not the emulated arch's", stacklevel=4)
    return func(*args, **kwargs)


def cublaslt_arch(policy) -> Optional[str]:
    """The arch whose cuBLASLt ``torch._scaled_mm`` epilogue is modelled
    (registry.CUBLASLT_SCALED_MM), when the policy emulates one; else None."""
    if policy.spec is None and policy.arch in CUBLASLT_SCALED_MM:
        return policy.arch
    return None


def _choose(policy, sp: ScaledProduct, out_dtype, fast_accum):
    """(schedule, label) of the per-call choice given for scaled_mm, or (None, "")."""
    chooser = policy.chooser_for("scaled_mm")
    if chooser is None or sp.recipe != "tensorwise":
        return None, ""
    from ..schedule import as_schedule
    table_arch = getattr(chooser, "arch", None)      # a recorded table's GPU (cublaslt.py)
    if table_arch is not None and policy.spec is None and table_arch != policy.arch:
        raise ValueError(f"emulate({policy.arch_name}): the split-K table {chooser.name} "
                         f"was recorded on {chooser.gpu} ({table_arch}); emulate that arch, "
                         "or give a callable / Schedule for scaled_mm")
    M, K, N = sp.A.shape[0], sp.A.shape[1], sp.B.shape[1]
    got = chooser(M, N, K, sp.A.dtype, sp.B.dtype, out_dtype, bool(fast_accum))
    if got is None:
        return None, ""
    sched = as_schedule(got)
    return sched, f" (chosen: {sched.describe()})"


def run_scaled(mode, func, sp: ScaledProduct, bias, out_dtype, fast_accum, out, *,
               scale_result=None, cublaslt: bool = False):
    """One recognised scaled product under ``mode``: block scales inside the instruction
    (MX / NVFP4), per 128-long K block (blockwise), or on the fp32 accumulator with NVIDIA's
    fp32 promotion every ``mode.fp8_promotion`` K elements (unless ``use_fast_accum``).
    ``cublaslt``: a ``torch._scaled_mm`` call, whose tensorwise products on the archs of
    registry.CUBLASLT_SCALED_MM take cuBLASLt's epilogue (scaled_epilogue.py) and the
    policy's per-call split-K choice."""
    shapes = [tuple(sp.A.shape), tuple(sp.B.shape)]
    policy = mode.policy
    nvidia = policy.spec is None and ARCHS[policy.arch].vendor == "nvidia"
    epilogue = cublaslt and sp.recipe == "tensorwise" and cublaslt_arch(policy) is not None
    chosen, chosen_label = _choose(policy, sp, out_dtype, fast_accum) if cublaslt else \
        (None, "")
    sched = chosen if chosen is not None else policy.schedule_for("scaled_mm")
    M = sp.A.shape[0]
    if epilogue and sp.A.shape[1] == 0:      # K = 0: torch zero-fills, no scale applied
        mode.record(func, "scaled_mm", "cuBLASLt epilogue (K = 0: zeros)", shapes)
        D = torch.zeros((M, sp.B.shape[1]), dtype=out_dtype, device=sp.A.device)
        if out is not None:
            out.resize_(D.shape)
            return out.copy_(D)
        return D
    # a schedule given for scaled_mm decides the accumulation (its promote_every or none)
    # whatever the call's use_fast_accum says, in both directions
    step = mode.fp8_promotion if (nvidia and not fast_accum and sched is None) else None
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
                part = emulated_mm(sp.A[:, k0:k0 + 128], sp.B[k0:k0 + 128], arch=policy.arch)
                part = part * (sp.kblock_a[:, j:j + 1] * sp.kblock_b[j:j + 1])
                acc = part if acc is None else acc + part
        else:
            plan = mode.plan("scaled_mm", sp.A, sp.B, phase())
            if chosen is not None and not plan.native:
                plan = replace(plan, schedule=None if chosen.is_plain else chosen.to_string())
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
            if sched is not None:
                label += f" (schedule {policy.schedule_name('scaled_mm')})" + chosen_label
    except (ValueError, TypeError) as e:   # (TypeError: a Spec that takes other inputs)
        hint = ""      # (an arch's own message names the archs with block scales)
        if sp.block_a is not None and policy.spec is not None:
            from ..registry import archs_text
            hint = (f"; block-scaled ({sp.recipe}) products need a Spec that takes block "
                    f"scales, as the registry's for {archs_text(block_scaled_archs())} do")
        why = str(e).removeprefix("emulate: ")      # (the policy's own prefix, said once)
        raise type(e)(f"emulate({policy.arch_name}): {func} ({sp.recipe} scales): "
                      f"{why}{hint}") from None
    if epilogue:
        mode.record(func, "scaled_mm", label + " (cuBLASLt epilogue)", shapes)
        D = cublaslt_epilogue(acc, sp.post, out_dtype, scale_result, bias)
        if out is not None:
            out.resize_(D.shape)
            return out.copy_(D)
        return D
    D = acc if sp.post is None else acc * sp.post
    if bias is not None:
        D = D + bias.to(torch.float32)
    mode.record(func, "scaled_mm", label, shapes)
    D = round_result(D, out_dtype)
    if out is not None:
        out.resize_(D.shape)
        return out.copy_(D)
    return D
