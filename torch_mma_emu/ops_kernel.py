"""The custom op ``mma_emu::emulated_mm`` and its fake kernel: the arguments' checks
(devices, shapes, codes, scales), the schedule argument (its ``c_mode`` and input precision
merged in), the operands flattened to (batch, rows, cols) for the C++ op ``_gemm`` or a
schedule's program."""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple, Optional

import torch

from . import cpp
from .elementary import VALUES
from .formats import INT_OF_SIZE, Format, format_of_dtype
from .ops_spec import out_dtype_of, resolve_spec, scale_shapes_error, unscaled_spec
from .registry import DEFAULT_ARCH
from .schedule import Schedule, run_scheduled
from .spec import Spec
from .tf32 import tf32_round


def broadcast_pair(s1, s2) -> tuple:
    """``tuple(torch.broadcast_shapes(s1, s2))``, in plain Python where both hold plain ints
    (eager calls: torch's version costs ~8 us); RuntimeError where they do not broadcast."""
    t1, t2 = tuple(s1), tuple(s2)
    for d in t1 + t2:
        if type(d) is not int:                  # SymInts while tracing: torch's rules
            return tuple(torch.broadcast_shapes(s1, s2))
    if t1 == t2:
        return t1
    n = max(len(s1), len(s2))
    s1, s2 = (1,) * (n - len(t1)) + t1, (1,) * (n - len(t2)) + t2
    out = []
    for a, b in zip(s1, s2):
        if a != b and a != 1 and b != 1:
            raise RuntimeError(f"shapes {s1} and {s2} do not broadcast")
        out.append(b if a == 1 else a)
    return tuple(out)


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
        batch = broadcast_pair(A.shape[:-2], B.shape[:-2])
    except RuntimeError as e:
        raise ValueError(f"{fn}: batch dimensions {tuple(A.shape[:-2])} and "
                         f"{tuple(B.shape[:-2])} do not broadcast") from e
    out_shape = (*batch, M, N)
    if C is not None:
        try:
            ok = broadcast_pair(C.shape, out_shape) == out_shape
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(f"{fn}: C of shape {tuple(C.shape)} does not broadcast to "
                             f"the result shape {out_shape}")
    return batch, M, K, N, out_shape


def _check_devices(*ts):
    dev = ts[0].device
    if any(t is not None and t.device != dev for t in ts[1:]):
        devs = {t.device for t in ts if t is not None}
        raise ValueError(f"emulated_mm: tensors are on different devices: "
                         f"{', '.join(sorted(map(str, devs)))}")


def _check_codes(t: torch.Tensor, fmt: Format, which: str) -> None:
    if t.dtype == torch.uint8 and t.numel() and fmt.bits < 8:
        if int(t.max()) >= (1 << fmt.bits):
            raise ValueError(f"emulated_mm: {which} holds codes >= 2**{fmt.bits}, not valid "
                             f"{fmt.name} codes (one code per uint8, in the low bits)")


def _flat3(t: torch.Tensor, batch, r: int, c: int) -> torch.Tensor:
    if not batch and t.dim() == 2 and t.shape == (r, c):
        return t.unsqueeze(0)       # (the usual case: one view instead of two)
    t = t.broadcast_to((*batch, r, c))
    n = 1
    for d in batch:
        n *= d
    return t.reshape(n, r, c)


@lru_cache(maxsize=256)
def _parsed_schedule(schedule: str) -> Schedule:
    return Schedule.from_string(schedule)


def schedule_of(schedule: Optional[str], c_mode: str) -> Optional[Schedule]:
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


def gemm_impl(A, B, C, arch, in_format, out_dtype, instruction, c_mode, scale_a, scale_b,
              schedule=None):
    """The custom op's kernel (CPU and CUDA), also called directly by
    :func:`.ops_autograd.route` where nothing could see the op."""
    sched = schedule_of(schedule, c_mode)
    _check_devices(A, B, C, scale_a, scale_b)
    if (sched is None and scale_a is None and scale_b is None and type(arch) is str
            and type(in_format) in _KEYS and type(instruction) in _KEYS
            and (out_dtype is None or isinstance(out_dtype, torch.dtype))):
        return _plain(A, B, C, arch, in_format, out_dtype, instruction, c_mode)
    A, B, in_format, lo = _input_precision(sched, A, B, in_format)
    s = resolve_spec(A, B, arch, in_format, out_dtype, instruction, scale_a, scale_b)
    batch, M, K, N, out_shape = broadcast_shapes(A, B, C)
    odt = out_dtype_of(s)
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
            raise scale_shapes_error(M, N, nblk, scale_a, scale_b,
                                      f" for block size {s.block_size}")
        for name, sc in (("scale_a", scale_a), ("scale_b", scale_b)):
            try:
                ok = broadcast_pair(sc.shape[:-2], batch) == tuple(batch)
            except RuntimeError:
                ok = False
            if not ok:
                raise ValueError(f"emulated_mm: {name} has batch dimensions "
                                 f"{tuple(sc.shape[:-2])} that do not broadcast to the "
                                 f"product's batch {tuple(batch)}")
        sa3 = _flat3(scale_a, batch, M, nblk).view(torch.uint8)
        sb3 = _flat3(scale_b, batch, nblk, N).view(torch.uint8)
    if s.elementary.operands == VALUES:
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


class _Plan(NamedTuple):
    """What an unscaled, unscheduled call does with its operands, a function of the dtypes
    and arguments alone, looked up once per combination."""
    odt: torch.dtype                    # the output (and C's) dtype
    vdt: Optional[torch.dtype]          # IEEE-value ops: the operands' dtype, else None
    fmt_a: Optional[Format]             # sub-byte code formats (codes checked), else None
    fmt_b: Optional[Format]
    params: tuple                       # _gemm's parameter vector


@lru_cache(maxsize=4096)
def _plan(arch, dta, dtb, in_format, out_dtype, instruction, c_mode, cdt) -> _Plan:
    s = unscaled_spec(arch, dta, dtb, in_format, out_dtype, instruction)
    values = s.elementary.operands == VALUES
    vdt = (torch.float64 if s.out_format == "fp64" else torch.float32) if values else None
    sub = (lambda dt, f: f if dt == torch.uint8 and f.bits < 8 and not values else None)
    c_in = None
    if cdt is not None and s.c_format is not None:
        f = format_of_dtype(cdt)
        c_in = s.c_format if f is not None and f.name == s.c_format else None
    return _Plan(out_dtype_of(s), vdt, sub(dta, s.fmt_a), sub(dtb, s.fmt_b),
                 cpp.params(s, c_mode, c_in))


def _zero(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A 0-dim zero (C when none is given), on the CPU made once per dtype: a plain tensor
    (not an inference tensor, never seen by a mode) that nothing writes."""
    z = _ZEROS.get(dtype) if device.type == "cpu" else None
    if z is None:
        if device.type != "cpu" or torch._C._len_torch_dispatch_stack():  # (a mode could fake it)
            return torch.zeros((), dtype=dtype, device=device)
        with torch.inference_mode(False), torch.no_grad():
            z = _ZEROS[dtype] = torch.zeros((), dtype=dtype, device=device)
    return z


_ZEROS: dict = {}


def _plain(A, B, C, arch, in_format, out_dtype, instruction, c_mode):
    """gemm_impl without scales or a schedule: the same steps, the per-dtype work cached."""
    p = _plan(arch, A.dtype, B.dtype, in_format, out_dtype, instruction, c_mode,
              None if C is None else C.dtype)
    batch, M, K, N, out_shape = broadcast_shapes(A, B, C)
    if C is not None and not C.dtype.is_floating_point:
        raise TypeError(f"emulated_mm: C has dtype {C.dtype}; it must be a floating tensor")
    Cc = _zero(p.odt, A.device) if C is None else C if C.dtype == p.odt else C.to(p.odt)
    a3 = _flat3(A, batch, M, K)
    b3 = _flat3(B, batch, K, N)
    c3 = _flat3(Cc, batch, M, N)
    if p.vdt is not None:
        a3, b3 = a3.to(p.vdt), b3.to(p.vdt)
    else:       # (the kernels read codes by element size: no integer view needed)
        if p.fmt_a is not None:
            _check_codes(A, p.fmt_a, "A")
        if p.fmt_b is not None:
            _check_codes(B, p.fmt_b, "B")
    return cpp.call("_gemm", a3, b3, c3, None, None, p.params).reshape(out_shape)


_KEYS = (str, type(None))


def _c_in(s: Spec, C) -> Optional[str]:
    """The format C came in where the instruction reads it as it is (``Spec.c_format``:
    Volta's m8n8k4.f32.f16.f16.f16 takes an fp16 C, docs/model.md 6.4); None otherwise."""
    if C is None or s.c_format is None:
        return None
    f = format_of_dtype(C.dtype)
    return s.c_format if f is not None and f.name == s.c_format else None


@torch.library.custom_op("mma_emu::emulated_mm", mutates_args=())
def emulated_mm_op(A: torch.Tensor, B: torch.Tensor, C: Optional[torch.Tensor] = None,
                    scale_a: Optional[torch.Tensor] = None, scale_b: Optional[torch.Tensor] = None,
                    *, arch: str = DEFAULT_ARCH, in_format: Optional[str] = None,
                    out_dtype: Optional[torch.dtype] = None, instruction: Optional[str] = None,
                    c_mode: str = "chain", schedule: Optional[str] = None) -> torch.Tensor:
    return gemm_impl(A, B, C, arch, in_format, out_dtype, instruction, c_mode, scale_a, scale_b,
                     schedule)


@emulated_mm_op.register_fake
def _(A, B, C=None, scale_a=None, scale_b=None, *, arch=DEFAULT_ARCH, in_format=None,
      out_dtype=None, instruction=None, c_mode="chain", schedule=None):
    sched = schedule_of(schedule, c_mode)
    if sched is not None and sched.input_precision is not None:
        _input_precision(sched.replace(input_precision="ieee"), A, B, in_format)  # checks
        in_format = "fp32" if sched.input_precision == "ieee" else "tf32"
    s = resolve_spec(A, B, arch, in_format, out_dtype, instruction, scale_a, scale_b)
    _check_devices(A, B, C, scale_a, scale_b)
    *_, out_shape = broadcast_shapes(A, B, C)
    return A.new_empty(out_shape, dtype=out_dtype_of(s))
