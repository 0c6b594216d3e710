"""Extended-precision integer arithmetic with the condition-code carry flag (PTX ISA
"Extended-Precision Integer Arithmetic Instructions"), 32-bit: ``add.cc`` / ``addc{.cc}``,
``sub.cc`` / ``subc{.cc}`` (the flag is the borrow), ``mad{.lo,.hi}.cc`` /
``madc{.lo,.hi}{.cc}``.  The flag is one bit per thread, kept in the pseudo-register
``%%cc``; an instruction without ``.cc`` leaves it.  libdevice's sin / cos argument reduction
(Payne-Hanek) is written with these."""
from __future__ import annotations

import numpy as np

from .errors import Unsupported

U64 = np.uint64
_M32 = U64(0xFFFFFFFF)
CC = "%%cc"


def _types(parts):
    t = parts[-1]
    if t not in ("u32", "s32", "b32"):
        raise Unsupported(".".join(parts) + " (the carry chain is modelled for 32 bits)")


def i_carry(cta, parts, o, act):
    _types(parts)
    head = parts[0]
    cf = cta.val(CC) & U64(1) if head in ("addc", "subc", "madc") else np.zeros(cta.n, U64)
    a, b = cta.val(o[1]) & _M32, cta.val(o[2]) & _M32
    if head in ("add", "addc"):
        full = a + b + cf
    elif head in ("sub", "subc"):
        full = a + (b ^ _M32) + (U64(1) - cf)          # a - b - borrow, carry = not borrow
    else:                                              # mad / madc .lo / .hi
        if "wide" in parts:
            raise Unsupported(".".join(parts))
        c = cta.val(o[3]) & _M32
        if parts[-1][0] == "s":
            p = (a.astype(np.int64) << 32 >> 32) * (b.astype(np.int64) << 32 >> 32)
            p = p.astype(U64)
        else:
            p = a * b                                  # < 2^64: exact in uint64
        part = (p >> U64(32)) if "hi" in parts else (p & _M32)
        full = part + c + cf
    cta.put(o[0], full & _M32, act)
    if "cc" in parts:
        out = (full >> U64(32)) & U64(1)
        if head in ("sub", "subc"):
            out = U64(1) - out                         # the borrow
        cta.put(CC, out, act)


def handler(parts):
    """The handler of an instruction that reads or writes the carry flag, else None."""
    if parts[0] in ("addc", "subc", "madc") or (
            parts[0] in ("add", "sub", "mad") and "cc" in parts):
        return i_carry
    return None
