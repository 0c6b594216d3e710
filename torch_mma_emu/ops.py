"""The public op ``torch.ops.mma_emu.emulated_mm``: argument checks, spec resolution, fake
kernel and autograd.  The arithmetic runs in the C++ op ``torch.ops.mma_emu._gemm``
(CPU and CUDA kernels over one header-only core, csrc/core).

The op in four modules, this one the public face (import from here): :mod:`.ops_spec`
(which Spec a call means), :mod:`.ops_kernel` (the custom op, its checks and fake kernel),
:mod:`.ops_autograd` (backward, jvp, vmap), :mod:`.ops_round` (``round_result``)."""
from __future__ import annotations

from typing import Optional

import torch

from .formats import OUT_DTYPES, out_format
from .ops_autograd import route
from .ops_kernel import broadcast_shapes  # noqa: F401  (the native paths' shape checks)
from .ops_round import round_result  # noqa: F401
from .ops_spec import FP4_DTYPE, resolve_spec  # noqa: F401
from .registry import DEFAULT_ARCH
from .schedule import as_schedule
from .spec import Spec

__all__ = ["emulated_mm", "resolve_spec"]


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
    if scale_a is not None or scale_b is not None or A.dtype == FP4_DTYPE or B.dtype == FP4_DTYPE:
        from .packed_layouts import adapt       # torchao / cuBLAS layouts
        A, B, in_format = adapt(A, B, scale_a, scale_b, in_format, arch)
    sched = as_schedule(schedule)
    kw = dict(arch=arch, in_format=in_format, out_dtype=out_dtype, instruction=instruction,
              c_mode=c_mode, schedule=None if sched is None else sched.to_string())
    if torch.compiler.is_compiling():
        return torch.ops.mma_emu.emulated_mm(A, B, C, scale_a, scale_b, **kw)
    for name, t in (("A", A), ("B", B), ("C", C), ("scale_a", scale_a), ("scale_b", scale_b)):
        if t is not None and (t.layout != torch.strided or t.is_nested):  # (eager: Dynamo bans .layout)
            raise TypeError(f"emulated_mm: {name} must be a dense (strided) tensor, got "
                            f"{'a nested tensor' if t.is_nested else t.layout}; call .to_dense() "
                            "first")
    return route(A, B, C, scale_a, scale_b, kw)
