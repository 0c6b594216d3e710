"""The exact pure-Python oracle (:mod:`torch_mma_emu.reference`) as a matmul backend.

Slow (one Fraction-exact dot product per output element), so meant for small K and for
cross-checking ``emulated_mm``; it computes the same model.
"""
from __future__ import annotations


def mm(arch, in_format=None, out_dtype=None, c_mode="chain", instruction=None):
    from .. import reference
    from ..formats import format_of_dtype
    from ..registry import spec as registry_spec

    def run(A, B, C=None):
        fmt = in_format or getattr(format_of_dtype(A.dtype), "name", None)
        if fmt is None:
            raise TypeError(f"no input format for {A.dtype}; pass in_format=")
        sp = registry_spec(arch, fmt, out_dtype, instruction=instruction)
        # only the first output column is read: compute just that one
        D = reference.mm(sp, A.cpu(), B[:, :1].cpu(), None if C is None else C[:, :1].cpu(),
                         c_mode=c_mode)
        return D.to(A.device)
    return run
