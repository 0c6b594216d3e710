"""The same product on the real hardware, to A/B against ``emulated_mm``.

``native_mm(A, B, C, backend=...)`` takes the operands the way ``emulated_mm`` does (batch
broadcast, C broadcastable to (..., M, N), ``in_format``, ``out_dtype``) and runs them on the
GPU:

``backend="cublas"``  torch's cuBLAS GEMMs: ``baddbmm`` (fp16/bf16 with ``out_dtype``, tf32
                      with TF32 enabled for the call, fp32 with it disabled, fp64), and
                      ``torch._scaled_mm`` (unit scales) for fp8.  cuBLAS starts from zero
                      and adds C in its epilogue (beta = 1): compare with
                      ``emulated_mm(..., c_mode="epilogue")``.  It may also split K.
``backend="triton"``  ``torch_mma_emu.triton_kernels.matmul``: the canonical chain (C is the
                      initial accumulator, K ascending, no split-K); ``c_mode="epilogue"``
                      adds C at the end instead.
``backend="mma"``     the instruction-level kernel (``mma_instruction``): every output tile
                      runs single MMA instructions along K, accumulator fed back as C.

``mma_instruction(A, B, C, instruction=...)`` runs one instruction kind (``mma.sync`` on
sm80+, ``wgmma`` on sm90a) on a small product; with K equal to the instruction's K each output
is exactly one instruction's result.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Optional

import torch

from . import _C, cpp  # noqa: F401  (_C registers the CUDA ops where the build has them)
from .formats import FLOAT_DTYPES, INT_OF_SIZE, OUT_DTYPES, default_out, format_pair, out_format
from .isa import KERNEL_OUTPUTS, KERNEL_TYPES, KERNELS
from .ops import broadcast_shapes
from .registry import instruction_spec  # noqa: F401  (public here: the native kernels' model)

__all__ = ["native_mm", "mma_instruction", "device_arch", "instructions_for", "instruction_spec",
           "INSTRUCTIONS", "BACKENDS"]

BACKENDS = ("cublas", "triton", "mma")

# the formats with a native path -> operand dtype; float32 tensors need in_format ("tf32"
# or "fp32")
_DTYPES = {n: FLOAT_DTYPES[n] for n in ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8_e4m3",
                                        "fp8_e5m2")}
# the instruction kernels: name -> instructions.Kernel (kind code of csrc/cuda/mma_instr.cu,
# K, rows per tile, input formats, minimum compute capability, needs the sm_90a build)
INSTRUCTIONS = KERNELS


def _need_cuda(name: str, *ts) -> None:
    for t in ts:
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: operands must be torch.Tensors, got {type(t).__name__}")
    devs = {t.device for t in ts if t is not None}
    if any(d.type != "cuda" for d in devs):
        raise ValueError(f"{name} needs a CUDA device: got tensors on "
                         f"{', '.join(sorted(map(str, devs)))} (emulated_mm runs on the CPU)")
    if len(devs) > 1:
        raise ValueError(f"{name}: tensors are on different devices: "
                         f"{', '.join(sorted(map(str, devs)))}")


def device_arch(device=None) -> str:
    """The arch name of a CUDA device as the registry spells it ("sm80", "sm90", ...)."""
    if not torch.cuda.is_available():
        raise RuntimeError("device_arch: no CUDA device")
    from .registry import nvidia_arch_name
    return nvidia_arch_name(torch.cuda.get_device_capability(device))


def _format(t: torch.Tensor, name: Optional[str], which: str, fn: str) -> str:
    if name is not None:
        if name not in _DTYPES:
            raise ValueError(f"{fn}: in_format={name!r} has no native path; supported: "
                             f"{', '.join(_DTYPES)}")
        if _DTYPES[name] != t.dtype:
            raise TypeError(f"{fn}: in_format={name!r} takes {_DTYPES[name]} tensors, {which} "
                            f"is {t.dtype}")
        return name
    if t.dtype == torch.float32:
        raise ValueError(f"{fn}: float32 inputs need in_format='tf32' (tensor cores) or 'fp32' "
                         "(IEEE, CUDA cores)")
    for k, dt in _DTYPES.items():
        if dt == t.dtype:
            return k
    raise TypeError(f"{fn}: {which} has dtype {t.dtype}; supported: "
                    f"{', '.join(sorted({str(d) for d in _DTYPES.values()}))}")


def _formats(A, B, in_format, fn):
    fa_n, fb_n = format_pair(in_format, f"{fn}: ") or (None, None)
    fa = _format(A, fa_n, "A", fn)
    fb = _format(B, fb_n, "B", fn)
    if fa != fb and not (fa.startswith("fp8") and fb.startswith("fp8")):
        raise ValueError(f"{fn}: A is {fa} and B is {fb}; only fp8 formats mix")
    return fa, fb


def _out_dtype(fa: str, out_dtype, fn) -> torch.dtype:
    odt = out_dtype or OUT_DTYPES[default_out(fa)]
    out = out_format(odt, f"{fn}: ")          # raises for a dtype that is no accumulator
    ok = KERNEL_OUTPUTS.get(fa, (default_out(fa),))     # fp16 and fp8 also accumulate in fp16
    if out not in ok:
        raise ValueError(f"{fn}: {fa} inputs accumulate in "
                         f"{' or '.join(str(OUT_DTYPES[o]) for o in ok)}, not {odt}")
    return odt


def _flat3(t, batch, r, c):
    n = 1
    for d in batch:
        n *= d
    return t.broadcast_to((*batch, r, c)).reshape(n, r, c)


@contextmanager
def tf32_matmul(enabled: bool):
    """cuBLAS fp32 GEMMs with TF32 on or off for the duration (new API where torch has it:
    mixing it with the legacy allow_tf32 flag raises)."""
    m = torch.backends.cuda.matmul
    if hasattr(m, "fp32_precision"):
        old = m.fp32_precision
        m.fp32_precision = "tf32" if enabled else "ieee"
        try:
            yield
        finally:
            m.fp32_precision = old
        return
    old = m.allow_tf32
    m.allow_tf32 = enabled
    try:
        yield
    finally:
        m.allow_tf32 = old


def _cublas(A3, B3, C3, fa, fb, odt, fp8_fast_accum):
    if fa.startswith("fp8"):
        Bt, M, K = A3.shape
        N = B3.shape[2]
        if M % 16 or K % 16 or N % 16:
            raise ValueError(f"native_mm(backend='cublas'): cuBLAS fp8 GEMMs need M, K, N "
                             f"multiples of 16, got {M}, {K}, {N}")
        one = torch.ones((), dtype=torch.float32, device=A3.device)
        outs = []
        for i in range(Bt):
            b = B3[i].t().contiguous().t()  # column-major, as cuBLASLt wants
            outs.append(torch._scaled_mm(A3[i].contiguous(), b, scale_a=one, scale_b=one,
                                         out_dtype=odt, use_fast_accum=fp8_fast_accum))
        D = torch.stack(outs)
        return D if C3 is None else D + C3
    with tf32_matmul(fa == "tf32"):
        if odt != A3.dtype:  # fp16/bf16 inputs, wider output: the out_dtype overloads
            if C3 is None:
                return torch.bmm(A3, B3, out_dtype=odt)
            return torch.baddbmm(C3, A3, B3, out_dtype=odt)
        if C3 is None:
            return torch.bmm(A3, B3)
        return torch.baddbmm(C3, A3, B3)


def native_mm(A: torch.Tensor, B: torch.Tensor, C: Optional[torch.Tensor] = None, *,
              backend: str = "cublas", in_format: Optional[str] = None,
              out_dtype: Optional[torch.dtype] = None, c_mode: Optional[str] = None,
              instruction: Optional[str] = None, fp8_fast_accum: bool = True) -> torch.Tensor:
    """``D = C + A @ B`` on this GPU's own hardware, with ``emulated_mm``'s conventions.

    ``backend``: "cublas" (C added in the epilogue; ``c_mode`` must be None or "epilogue"),
    "triton" (``c_mode`` "chain", the default, or "epilogue") or "mma" (the instruction kernel,
    chain only; ``instruction`` picks one of ``INSTRUCTIONS``).  ``in_format``: "tf32" or
    "fp32" for float32 tensors ("fmtA,fmtB" for mixed fp8).  ``out_dtype``: float32 (default;
    float64 for fp64), or float16 for fp16/fp8 inputs.  ``fp8_fast_accum``: cuBLAS fp8 with
    ``use_fast_accum`` (accumulation stays in the tensor core; False lets cuBLASLt promote
    partial sums to fp32 every few K blocks).  Raises ValueError for CPU tensors.
    """
    fn = "native_mm"
    if backend not in BACKENDS:     # the arguments first: they are wrong on any machine
        raise ValueError(f"{fn}: backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    _need_cuda(fn, A, B, C)
    fa, fb = _formats(A, B, in_format, fn)
    odt = _out_dtype(fa, out_dtype, fn)
    if C is not None and not C.dtype.is_floating_point:
        raise TypeError(f"{fn}: C has dtype {C.dtype}; it must be a floating tensor")
    batch, M, K, N, out_shape = broadcast_shapes(A, B, C, fn)
    a3, b3 = _flat3(A, batch, M, K), _flat3(B, batch, K, N)
    c3 = None if C is None else _flat3(C.to(odt), batch, M, N)
    if backend == "cublas":
        if c_mode not in (None, "epilogue"):
            raise ValueError(f"{fn}: cuBLAS adds C in its epilogue (beta = 1); c_mode='chain' "
                             "needs backend='triton' or 'mma'")
        D = _cublas(a3, b3, c3, fa, fb, odt, fp8_fast_accum)
    elif backend == "triton":
        from .triton_kernels import matmul
        mode = c_mode or "chain"
        if fa == "fp64":
            raise ValueError(f"{fn}: the Triton kernels have no fp64 path")
        fmt = fa if fa == fb else f"{fa},{fb}"
        D = matmul(a3, b3, c3, in_format=fmt, out_dtype=odt, c_mode=mode)
    else:
        if c_mode not in (None, "chain"):
            raise ValueError(f"{fn}: the instruction kernel feeds C as the accumulator "
                             "(c_mode='chain')")
        fmt = fa if fa == fb else f"{fa},{fb}"
        D = torch.stack([mma_instruction(a3[i], b3[i], None if c3 is None else c3[i],
                                         in_format=fmt, out_dtype=odt, instruction=instruction)
                         for i in range(a3.shape[0])]) if a3.shape[0] else \
            torch.empty((0, M, N), dtype=odt, device=A.device)
    return D.reshape(out_shape)


def instructions_for(in_format: str, device=None) -> list[str]:
    """Instructions of ``INSTRUCTIONS`` this device runs for ``in_format`` (preferred first)."""
    try:
        cap = torch.cuda.get_device_capability(device)
    except (AssertionError, RuntimeError) as e:    # torch without CUDA, or no device
        raise RuntimeError("instructions_for: no CUDA device here; the native instruction "
                           "kernels need an NVIDIA GPU (sm70 or newer)") from e
    names = [n for n, k in KERNELS.items() if in_format in k.inputs and k.runs_on(cap)]
    # sm90: wgmma first (what cuBLAS, CUTLASS and Triton use there; ptxas compiles fp8
    # mma.sync on sm90 to fp16 conversions + HMMA); then k16 before k8
    names.sort(key=lambda n: (not KERNELS[n].sm90a, n == "mma.m16n8k8"))
    return names


def mma_instruction(A: torch.Tensor, B: torch.Tensor, C: Optional[torch.Tensor] = None, *,
                    in_format: Optional[str] = None, out_dtype: Optional[torch.dtype] = None,
                    instruction: Optional[str] = None) -> torch.Tensor:
    """``D = C + A @ B`` (2-D) through single MMA instructions of one kind.

    K must be a multiple of the instruction's K (``INSTRUCTIONS``); M and N are zero-padded
    to the tile.  Each output tile runs K / k instructions in ascending K, the accumulator
    kept in registers (K == k: one instruction per output).  ``instruction``: a key of
    ``INSTRUCTIONS`` (default: the first of ``instructions_for(format)``: wgmma on sm90,
    mma.sync elsewhere).  Needs the CUDA build; wgmma needs it built for sm_90a
    (TORCH_CUDA_ARCH_LIST=9.0a).
    """
    fn = "mma_instruction"
    _need_cuda(fn, A, B, C)
    if A.dim() != 2 or B.dim() != 2:
        raise ValueError(f"{fn}: A (M, K) and B (K, N) must be 2-D, got {tuple(A.shape)} and "
                         f"{tuple(B.shape)}")
    fa, fb = _formats(A, B, in_format, fn)
    if fa not in KERNEL_TYPES:
        raise ValueError(f"{fn}: no tensor-core instruction takes {fa} inputs; supported: "
                         f"{', '.join(KERNEL_TYPES)}")
    odt = _out_dtype(fa, out_dtype, fn)
    if not hasattr(torch.ops.mma_emu, "_mma_instr"):
        raise RuntimeError(f"{fn}: this build of torch_mma_emu has no CUDA kernels; rebuild "
                           "with a CUDA build of torch and nvcc (bash scripts/build_ext.sh)")
    if instruction is None:
        cands = instructions_for(fa, A.device)
        if not cands:
            raise ValueError(f"{fn}: {device_arch(A.device)} has no tensor-core instruction for "
                             f"{fa} (fp8 needs sm89+)")
        instruction = cands[0]
    if instruction not in KERNELS:
        raise ValueError(f"{fn}: unknown instruction {instruction!r}; known: "
                         f"{', '.join(KERNELS)}")
    kern = KERNELS[instruction]
    ik, tm, fmts = kern.k, kern.rows, kern.inputs
    if fa not in fmts or fb not in fmts:
        raise ValueError(f"{fn}: {instruction} takes {' or '.join(fmts)} inputs, got {fa} x {fb}")
    if fa != fb and not fa.startswith("fp8"):
        raise ValueError(f"{fn}: {instruction} needs one input format")
    if not kern.runs_on(torch.cuda.get_device_capability(A.device)):
        raise ValueError(f"{fn}: {instruction} does not run on {device_arch(A.device)}")
    if odt == torch.float16 and fa == "bf16":
        raise ValueError(f"{fn}: bf16 instructions accumulate in float32")
    M, K = A.shape
    K2, N = B.shape
    if K != K2:
        raise ValueError(f"{fn}: K differs: {tuple(A.shape)} @ {tuple(B.shape)}")
    if K % ik:
        raise ValueError(f"{fn}: K = {K} is not a multiple of {instruction}'s K = {ik} (zero "
                         "padding would add instructions the emulated chain does not run)")
    if C is not None and tuple(C.shape) != (M, N):
        C = C.broadcast_to((M, N))
    Mp, Np = -(-M // tm) * tm, -(-N // 8) * 8
    a = torch.zeros((Mp, K), dtype=A.dtype, device=A.device)
    a[:M] = A
    b = torch.zeros((Np, K), dtype=B.dtype, device=B.device)
    b[:N] = B.t()
    c = torch.zeros((Mp, Np), dtype=odt, device=A.device)
    if C is not None:
        c[:M, :N] = C.to(odt)
    if Mp == 0 or Np == 0:
        return torch.empty((M, N), dtype=odt, device=A.device)
    cfg = [kern.kind, KERNEL_TYPES[fa], KERNEL_TYPES[fb], 0 if odt == torch.float32 else 1]
    d = cpp.call("_mma_instr", a.view(INT_OF_SIZE[a.element_size()]),
                 b.view(INT_OF_SIZE[b.element_size()]), c, cfg)
    return d[:M, :N]
