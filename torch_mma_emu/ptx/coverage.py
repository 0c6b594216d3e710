"""Static instruction coverage: which opcodes of a PTX module the interpreter cannot run.
A listed opcode is certainly missing; an unlisted one may still raise at run time for a
qualifier or operand form not modelled (:class:`~.errors.Unsupported` names it then)."""
from __future__ import annotations

from collections import Counter

from .. import gpu_math
from . import alu, alu_float, carry
from .machine import ASSERT_FUNCS, NOOPS
from .tensor_core import TENSOR
from .warp import WARP

CONTROL = {"bra", "ret", "exit", "bar", "barrier", "ld", "ldu", "st", "atom", "red", "cvta",
           "cp", "trap", "brkpt"}


def _missing(parts, ops=()) -> bool:
    head = parts[0]
    if head == "call":                  # only the device assert's call is modelled
        return not any(o in ASSERT_FUNCS for o in ops)
    q = set(parts[1:])
    if carry.handler(parts) is not None:
        return parts[-1] not in ("u32", "s32", "b32") or "wide" in q
    if head not in CONTROL | NOOPS | set(WARP) | set(alu.HANDLERS) | set(alu_float.FLOAT) \
            | set(TENSOR):
        return True
    if q & {"approx", "full"} and ".".join(parts) not in gpu_math.FUNCTIONS:
        return True
    if head == "cvt" and q & {"e4m3x2", "e5m2x2", "e2m1x2", "tf32", "relu", "satfinite",
                              "e2m3x2", "e3m2x2", "ue8m0x2"}:
        return True
    if head == "ld" and "const" in q:   # st.param: a call's arguments (with __assertfail)
        return True
    return head == "prmt" and len(parts) > 2


def missing(module) -> dict:
    """{kernel: Counter of opcodes the interpreter cannot run}, kernels with none left out."""
    out = {}
    for name, k in module.kernels.items():
        c = Counter(ins.op for ins in k.body if _missing(ins.parts, ins.ops))
        if c:
            out[name] = c
    return out


def opcodes(module) -> Counter:
    """Every opcode of the module with its count (all kernels)."""
    return Counter(ins.op for k in module.kernels.values() for ins in k.body)
