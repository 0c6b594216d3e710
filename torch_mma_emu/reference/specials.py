"""Special values of the fused operations, in one place (docs/model.md section 3).

Checked before any arithmetic of an elementary operation, on its chunk's inputs and scales:

* any NaN input (a, b, c, or a scale used by the chunk) -> NaN;
* ``inf * 0`` -> NaN; an infinite factor times finite nonzero ones -> signed infinity;
* infinities of both signs among the products and c -> NaN; otherwise that infinity;
* ``tr_fdpa`` only: a finite product with ``|a*b| >= 2**128`` overflows to a signed infinity
  (seed 003 section 4.2) and then takes part in the rules above.

The IEEE-style operations (``fma``, ``ftz_addmul``, the epilogue addition) do not use this
module: they follow IEEE 754 step by step (see :mod:`.ieee`).
"""
from __future__ import annotations

from typing import Sequence

from .values import NAN, Decoded, XVal, pow2, x_inf

TR_PRODUCT_OVERFLOW = pow2(128)


def special_result(products: Sequence[Sequence[Decoded]], c: Decoded,
                   scales: Sequence[Decoded] = (), overflow_at=None) -> XVal | None:
    """The special result of a fused operation, or ``None`` when the ordinary path applies.

    ``products``: for each product, the factors that form it (a_k, b_k, and for scaled
    operations the scales applied to it).  ``scales``: every scale code the chunk uses (a NaN
    scale poisons the chunk even where its elements are zero).  ``overflow_at``: magnitude at
    which a finite product overflows to infinity (``tr_fdpa``: ``2**128``), or ``None``.
    """
    factors_nan = any(f.is_nan for p in products for f in p)
    if factors_nan or c.is_nan or any(s.is_nan for s in scales):
        return NAN
    pos_inf = neg_inf = False
    for p in products:
        sign = 0
        for f in p:
            sign ^= f.sign
        has_inf = any(f.is_inf for f in p)
        has_zero = any(f.is_finite and f.sig == 0 for f in p)
        if has_inf and has_zero:
            return NAN                                  # inf * 0
        if has_inf:
            inf_sign = sign
        elif overflow_at is not None:
            mag = 1
            for f in p:
                mag *= f.sig * pow2(f.exp)
            if mag >= overflow_at:
                inf_sign = sign                         # finite product overflows
            else:
                continue
        else:
            continue
        if inf_sign:
            neg_inf = True
        else:
            pos_inf = True
    if c.is_inf:
        if c.sign:
            neg_inf = True
        else:
            pos_inf = True
    if pos_inf and neg_inf:
        return NAN
    if pos_inf:
        return x_inf(0)
    if neg_inf:
        return x_inf(1)
    return None
