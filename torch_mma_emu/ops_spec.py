"""Which :class:`Spec` an ``emulated_mm`` call means: the operands' formats (dtype,
``in_format``), the scales' format and block size, the arch or a given Spec, checked against
each other."""
from __future__ import annotations

from functools import lru_cache
from typing import Optional

import torch

from .formats import (OPERAND_DTYPES, OUT_DTYPES, Format, format_of_dtype, format_pair,
                      formats_of_dtype, get_format, out_format, scale_format_of_dtype,
                      scales_text)
from .registry import DEFAULT_ARCH, spec as _registry_spec
from .spec import Spec, as_spec

# torch's packed fp4 dtype (two e2m1 codes per byte), None on a torch without it
FP4_DTYPE = getattr(torch, "float4_e2m1fn_x2", None)


def _operand_format(t: torch.dtype, in_format: Optional[str], which: str) -> Format:
    """Input format of an operand of dtype ``t``: the dtype's, or ``in_format`` where the
    dtype is ambiguous."""
    if t == FP4_DTYPE and FP4_DTYPE is not None:
        raise TypeError(f"emulated_mm: {which} is packed float4_e2m1fn_x2: tme.emulated_mm "
                        "unpacks it; the op takes one uint8 code per element "
                        "(torch_mma_emu.preview.scaled.unpack_fp4(t, dim of K)) with "
                        "in_format='fp4_e2m1'")
    if not t.is_floating_point and t != torch.uint8:
        raise TypeError(f"emulated_mm: {which} has dtype {t}; allowed: float64, float32, "
                        "float16, bfloat16, float8 dtypes, or uint8 codes with in_format")
    if in_format is not None:
        fmt = get_format(in_format)
        allowed = formats_of_dtype(t)
        if fmt.name in allowed:
            return fmt
        fits = ", ".join(allowed)
        raise TypeError(f"emulated_mm: in_format={fmt.name!r} does not fit {which} of dtype "
                        f"{t} (allowed: {fits}); give 'fmtA,fmtB' when A and B differ, "
                        "or leave in_format out for dtypes that fix their format")
    fmt = format_of_dtype(t)
    if fmt is None:
        raise TypeError(f"emulated_mm: {which} holds uint8 codes; say which format with "
                        "in_format='fp4_e2m1' / 'fp6_e2m3' / 'fp6_e3m2' / 'fp8_*'")
    return fmt


def _spec_operand_format(t: torch.dtype, want: str, which: str) -> Format:
    """The format a Spec (passed as ``arch``, no ``in_format``) takes for an operand of dtype
    ``t``, when the dtype can hold it."""
    own = format_of_dtype(t) if t.is_floating_point else None
    if want in formats_of_dtype(t):
        return get_format(want)
    fits = [str(dt) for dt in OPERAND_DTYPES if want in formats_of_dtype(dt)]
    raise TypeError(f"emulated_mm: the Spec given as arch takes {want} for {which}, but {which} "
                    f"has dtype {t}" + (f" ({own.name})" if own is not None else "")
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
    if (scale_a is None and scale_b is None and type(in_format) in _KEYS
            and type(instruction) in _KEYS and (out_dtype is None
                                                or isinstance(out_dtype, torch.dtype))):
        # only the dtypes count: once per combination (~3 us a call otherwise)
        return unscaled_spec(arch, A.dtype, B.dtype, in_format, out_dtype, instruction)
    sp, fa, fb = _formats(arch, A.dtype, B.dtype, in_format)
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
            raise scale_shapes_error(A.shape[-2], B.shape[-1], "nblk", scale_a, scale_b,
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


_KEYS = (str, type(None))


def _formats(arch, dta: torch.dtype, dtb: torch.dtype, in_format):
    """(the Spec ``arch`` names or None, format of A, format of B)."""
    sp = as_spec(arch)
    if in_format is None and sp is not None:   # the Spec says the formats
        return sp, _spec_operand_format(dta, sp.fmt_a.name, "A"), \
            _spec_operand_format(dtb, sp.fmt_b.name, "B")
    fmt_a, fmt_b = format_pair(in_format, "emulated_mm: ") or (None, None)
    return sp, _operand_format(dta, fmt_a, "A"), _operand_format(dtb, fmt_b, "B")


@lru_cache(maxsize=4096)
def unscaled_spec(arch, dta: torch.dtype, dtb: torch.dtype, in_format: Optional[str],
                   out_dtype: Optional[torch.dtype], instruction: Optional[str]) -> Spec:
    """:func:`resolve_spec` without scales: a function of the operands' dtypes and the
    arguments alone (cached)."""
    sp, fa, fb = _formats(arch, dta, dtb, in_format)
    if sp is not None:
        _check_custom(sp, fa, fb, None, out_dtype)
        return sp
    return _cached_spec(arch, fa.name, fb.name, _out_name(out_dtype), instruction, None, None)


def _check_custom(s: Spec, fa: Format, fb: Format, sf, out_dtype) -> None:
    if s.fmt_a.name != fa.name or s.fmt_b.name != fb.name:
        raise TypeError(f"emulated_mm: the spec takes {s.fmt_a.name} x {s.fmt_b.name} inputs, "
                        f"got {fa.name} x {fb.name}")
    if s.scale_format != sf:
        raise TypeError(f"emulated_mm: the spec takes {scales_text(s.scale_format)}, got "
                        f"{scales_text(sf)} (scale_a / scale_b)")
    if out_dtype is not None and _out_name(out_dtype) != s.out_format:
        raise TypeError(f"emulated_mm: the spec produces {s.out_format}, out_dtype={out_dtype}")


def out_dtype_of(s: Spec) -> torch.dtype:
    return OUT_DTYPES[s.out_format]


def scale_shapes_error(M, N, nblk, scale_a, scale_b, why: str) -> ValueError:
    return ValueError(f"emulated_mm: scales must have shapes (..., {M}, {nblk}) and "
                      f"(..., {nblk}, {N}){why}; got {tuple(scale_a.shape)} and "
                      f"{tuple(scale_b.shape)}")
