"""Matrix multiplication targets: D = A @ B (+ C), summing over K.

Row i of A carries probe i (B is all ones, so the summands of D[i, 0] are A[i, :]); the m
rows of one product answer m probes, after seed 003's Step 1 has confirmed that identical
rows give identical outputs.  With ``with_c=True`` the accumulator input C is summand K
(the last leaf), which shows whether C enters at the start of the chain or in an epilogue.

Backends: ``"torch"`` (torch.matmul / torch.addmm), ``"emulated"``
(:func:`torch_mma_emu.emulated_mm` on any arch), ``"reference"`` (the exact pure-Python
oracle, slow), ``"cublas"`` / ``"triton"`` (:func:`torch_mma_emu.native_mm`, CUDA only),
or any callable ``mm(A, B)`` / ``mm(A, B, C)``.
"""
from __future__ import annotations

import torch

from ...limits import check
from ...ops import emulated_mm
from ...registry import DEFAULT_ARCH
from ...spec import arch_label
from ..probes import ProbeValues, check_dtype
from .base import RowsTarget
from .torch_ops import as_device, check_n

BACKENDS = ("torch", "emulated", "reference", "cublas", "triton")


def _native(backend):
    if not torch.cuda.is_available():
        raise RuntimeError(f"backend={backend!r} runs on the GPU, but CUDA is not available")
    from ...native import native_mm     # Triton imports are slow: on first use
    return lambda A, B, C=None: native_mm(A, B, C, backend=backend)


def resolve_mm(backend, *, arch=DEFAULT_ARCH, in_format=None, out_dtype=None, c_mode="chain",
               instruction=None, mm_kwargs=None):
    """(callable mm(A, B, C=None), label, ieee) for a backend name or callable."""
    kw = dict(mm_kwargs or {})
    if callable(backend):
        name = getattr(backend, "__name__", "mm")
        return (lambda A, B, C=None: backend(A, B) if C is None else backend(A, B, C)), name, True
    if backend == "torch":
        return (lambda A, B, C=None: torch.matmul(A, B) if C is None else torch.addmm(C, A, B)), \
            "torch.matmul", True
    if backend == "emulated":

        def mm(A, B, C=None):
            return emulated_mm(A, B, C, arch=arch, in_format=in_format, out_dtype=out_dtype,
                       c_mode=c_mode, instruction=instruction, **kw)
        return mm, f"emulated_mm(arch={arch_label(arch)})", False
    if backend == "reference":
        from .. import reference_adapter
        return reference_adapter.mm(arch, in_format, out_dtype, c_mode, instruction), \
            f"reference.mm(arch={arch_label(arch)})", False
    if backend in ("cublas", "triton"):
        return _native(backend), f"native_mm(backend={backend})", False
    raise ValueError(f"backend must be one of {BACKENDS} or a callable mm(A, B[, C]), "
                     f"got {backend!r}")


class MatmulTarget(RowsTarget):
    def __init__(self, m, n, k, *, backend="torch", dtype=torch.float32, device="cpu",
                 out_dtype=None, with_c=False, arch=DEFAULT_ARCH, in_format=None, c_mode="chain",
                 instruction=None, mm_kwargs=None, values=None, big=None, unit=None,
                 pack=None, batch=True):
        m, n, k = check_n(m, "m"), check_n(n, "n"), check_n(k, "k")
        check("reveal_n", k, "k")
        check("elements", max(m, n) * k,
              f"the elements of A ({m} x {k}) or B ({k} x {n})")
        dtype = check_dtype(dtype)
        dev = as_device(device)
        mm, label, ieee = resolve_mm(backend, arch=arch, in_format=in_format,
                                     out_dtype=out_dtype, c_mode=c_mode,
                                     instruction=instruction, mm_kwargs=mm_kwargs)
        self.out_dtype = out_dtype or (torch.float64 if dtype == torch.float64 else
                                       torch.float32 if backend != "torch" else dtype)
        if pack is None:
            pack = ieee and dev.type == "cpu"
        if values is None:
            values = ProbeValues.for_dtype(dtype, self.out_dtype, big=big, unit=unit, pack=pack)
            if backend in ("emulated", "reference"):
                values = _fit_to_spec(values, arch, dtype, out_dtype, in_format, instruction,
                                      unit_given=unit is not None, n=k + bool(with_c))
        super().__init__(k + bool(with_c), m if batch else 1, dtype, dev, values,
                         f"{label} [{m}x{k}] @ [{k}x{n}]" + (" + C" if with_c else ""),
                         rows=m)
        self.mm, self.k, self.ncols, self.with_c = mm, k, n, with_c
        self._B = torch.ones(k, n, dtype=dtype, device=dev)

    def eval_rows(self, X: torch.Tensor) -> torch.Tensor:
        A = X[:, :self.k].contiguous()
        if self.with_c:
            C = X[:, self.k:].to(self.out_dtype).expand(-1, self.ncols).contiguous()
            D = self.mm(A, self._B, C)
        else:
            D = self.mm(A, self._B)
        return D[:, 0]


# significand bits (hidden bit included) of the accumulators the output conversions use
_RHO_BITS = {"rz_fp32": 24, "rz_e8m13": 14, "rne_fp32": 24, "rne_fp16": 11, "rne_fp64": 53}
# c (the running sum) is a term of the truncated fused sum
_FUSED_C_OPS = ("t_fdpa", "st_fdpa", "gst_fdpa")
# truncated sum of the products, then c added in a separate rounded step (AMD CDNA3)
_FUSED_ROUNDED_C_OPS = ("tr_fdpa", "gtr_fdpa")


def _fit_to_spec(values, arch, dtype, out_dtype, in_format, instruction, unit_given, n=1):
    """Probe values for a known model (emulated / reference): a normal unit where the
    instruction flushes subnormal inputs, and a clear :class:`ProbeRangeError` where big
    cannot swamp the units of a probe with ``n`` summands (K, plus C with ``with_c``).

    Units are summed among themselves before they meet big (a chain carries the sum of
    every earlier chunk into the fused sum holding a mask on the last summand), so what
    must vanish next to big is up to ``n * unit``, not one unit:

    * T-FDPA (c is a term of the fused sum, aligned at big's exponent and truncated to
      ``keep = max(F, F2)`` fraction bits): ``n * unit * 2**keep <= big`` (a positive sum
      below big's last kept bit is truncated away), and one unit next to big within a
      chunk: ``unit * 2**(keep + 1) <= big``;
    * TR-/GTR-FDPA (products truncated, then c added in a separate rounded step): the same
      one-unit condition for the products, and ``n * unit * 2**(p + 1) <= big`` with ``p``
      the significand bits of the accumulator;
    * IEEE-rounded accumulation (FMA, FTZ-AddMul, E-FDPA's rounding into the accumulator):
      ``n * unit * 2**(p + 1) <= big`` (half an ulp of the binade just below big, where
      ``-big + units`` lands).

    E.g. fp8 e4m3 (big/unit <= 2**17) against 13 kept bits allows n <= 16, and fp16 with
    flushed subnormals (unit 2**-14, big/unit = 2**29) into fp32 allows n <= 16."""
    from ..errors import ProbeRangeError
    from ...formats import format_of_dtype, get_format
    from ...registry import spec as registry_spec
    fmt = get_format(in_format) if in_format else format_of_dtype(dtype)
    sp = registry_spec(arch, fmt.name, out_dtype, instruction=instruction)
    if sp.flush_inputs and not unit_given:
        values = ProbeValues(values.big, 2.0 ** fmt.emin, values.capacity, values.mask_levels)
    big, unit = values.big, values.unit
    keep = max(sp.F, sp.F2)
    p = _RHO_BITS.get(sp.rho, 53)
    if sp.op in _FUSED_C_OPS + _FUSED_ROUNDED_C_OPS and big / unit < 2.0 ** (keep + 1):
        # a unit aligned to big's exponent is truncated away iff big/unit >= 2**(keep + 1)
        raise ProbeRangeError(
            f"{arch_label(arch)} {fmt.name} keeps {keep} fraction bits in its fused sum, but "
            f"big/unit = {big / unit:g} < 2**{keep + 1}: probes could not "
            f"swamp the units (the {fmt.name} range is too narrow for this instruction)")
    if sp.op in _FUSED_C_OPS:
        bits, what = keep, f"keeps {keep} fraction bits in its fused sum"
    else:
        bits, what = p + 1, f"rounds the running sum to {p} significant bits ({sp.rho})"
    if n * unit * 2.0 ** bits > big:
        most = int(big / (unit * 2.0 ** bits))
        raise ProbeRangeError(
            f"{arch_label(arch)} {fmt.name} {what}, but big/(n*unit) = {big:g}/({n}*{unit:g}) = "
            f"{big / (n * unit):g} < 2**{bits}: the sum of the units before a mask would "
            f"survive next to big, so probes could not swamp the units (the {fmt.name} "
            f"range is too narrow for this instruction with {n} summands; at most {most} "
            "summands fit, e.g. a smaller k)")
    return values
