"""Independent, slow, exact reference model of the matrix units (a test oracle).

Pure Python, exact arithmetic only (ints and ``fractions.Fraction``), written straight from
the papers (seed 003 Algorithms 1-11) and docs/model.md, without looking at the C++ core.  It
exists to be compared against ``torch_mma_emu``'s kernels in differential tests.

Layout:

* :mod:`.values`    decoding codes to exact values; extended reals (NaN, +-inf, signed zeros)
* :mod:`.rounding`  RZ_F / RD_F, the one "round a rational to a float format" function, rho,
                    encoding to bit patterns
* :mod:`.specials`  the special-value rules of the fused operations
* :mod:`.ieee`      IEEE add / mul / fma and FTZ on extended reals
* :mod:`.elementary_ops`       the eight elementary operations
* :mod:`.gemm`      :func:`elementary`, :func:`dot` (the chain), :func:`mm`, tensor helpers

API (all codes are non-negative Python ints; outputs are codes of ``spec.out_format``):

``elementary(spec, a_codes, b_codes, c_code, scale_a_codes=None, scale_b_codes=None)``
``dot(spec, a_codes, b_codes, c_code, scale_a_codes=None, scale_b_codes=None, c_mode="chain")``
``mm(spec, A, B, C=None, scale_a=None, scale_b=None, c_mode="chain") -> torch.Tensor``
"""
from .gemm import (codes_to_tensor, dot, elementary, epilogue_add, mm, scales_per_chunk,
                   tensor_to_codes)
from .rounding import apply_rho, encode, rd_f, round_float, round_to, rz_f
from .values import Decoded, XVal, decode

__all__ = [
    "elementary", "dot", "mm", "epilogue_add", "scales_per_chunk",
    "tensor_to_codes", "codes_to_tensor",
    "decode", "encode", "round_float", "round_to", "apply_rho", "rz_f", "rd_f",
    "Decoded", "XVal",
    "value_code", "code_value",
]


def value_code(fmt, value, mode: str = "rne") -> int:
    """Code of ``fmt`` for a number (int, float, Fraction, or ``float('inf')``/``nan``).

    Finite values are rounded with ``mode`` ("rne" or "rz") using the format's range
    (IEEE-style formats); values exactly representable in a small format encode exactly.
    """
    import math
    from fractions import Fraction

    from ..formats import get_format
    from .values import NAN, x_fin, x_inf

    f = get_format(fmt)
    if isinstance(value, float) and math.isnan(value):
        return encode(f, NAN)
    if isinstance(value, float) and math.isinf(value):
        return encode(f, x_inf(1 if value < 0 else 0))
    neg_zero = isinstance(value, float) and value == 0 and math.copysign(1.0, value) < 0
    v = Fraction(value)
    if f.container_bits == 32:  # tf32 / xf32: an fp32 word (must hold a tf32 value exactly)
        code = encode("fp32", x_fin(v, zero_sign=int(neg_zero)))
        if code & 0x1FFF:
            raise ValueError(f"{value} is not representable in {f.name}")
        return code
    if f.nan_style == "ieee":
        return encode(f, round_to(f, v, mode, zero_sign=int(neg_zero)))
    return encode(f, x_fin(v, zero_sign=int(neg_zero)))


def code_value(fmt, code):
    """Exact value of a code: a Fraction, or float inf / nan (signed zeros lose their sign)."""
    from ..formats import decode_value, get_format

    return decode_value(get_format(fmt), code)
