"""Run a small PTX routine (an inlined libdevice function: ``__nv_logf``, ``__nv_erff``, ...)
elementwise on NumPy arrays, each instruction with its model in this package: the bits the
GPU computes wherever every instruction on the path is bit-exact.

Supported: 32-bit float, integer and predicate instructions without memory access, and
forward branches (if-conversion: each lane follows its own path, registers are merged by
the lanes active at each write).  :func:`routine` cuts the computation of one stored value
out of a kernel's PTX (the instructions it depends on, and every branch).  A lane that
reaches anything else (local memory, a backward branch, 64-bit arithmetic: libdevice's
slow paths, e.g. ``__nv_sinf`` for |x| >= 105615) is given up (:func:`run_lanes`), and the
caller computes it otherwise; the other lanes still get the GPU's bits.
"""
from __future__ import annotations

import re

import numpy as np

from . import FUNCTIONS, ieee
from .mufu import flush

_LINE = re.compile(r"^(?:@(!?)(%\w+)\s+)?([a-z][\w.]*)\s*([^;]*);")
_LABEL = re.compile(r"^(\$?[\w.$]+):")


class Unsupported(ValueError):
    """An instruction or a control flow this evaluator does not run."""


def _parse(lines):
    out = []
    for raw in lines:
        # nvcc wraps inline-asm conversions in braces: "{  cvt.rn.f16.f32 %rs1, %f2;}"
        line = raw.split("//")[0].strip().lstrip("{").rstrip("}").strip()
        if not line or line.startswith("."):
            continue
        m = _LABEL.match(line)
        if m and not _LINE.match(line):
            out.append(("label", m.group(1), None, ()))
            continue
        m = _LINE.match(line)
        if not m:
            continue
        guard = (m.group(2), m.group(1) == "!") if m.group(2) else None
        ops = tuple(o.strip().strip("{}").strip() for o in m.group(4).split(",")) \
            if m.group(4).strip() else ()
        out.append((m.group(3), ops, guard, ()))
    return out


def routine(ptx: str):
    """(instructions, input register, output register) of the value a one-load, one-store
    kernel computes: from the ``ld.global`` of its input to the ``st.global`` of its result."""
    prog, srcs, dst = routine_n(ptx)
    return prog, srcs[0], dst


def routine_n(ptx: str):
    """(instructions, input registers, output register) of a kernel with one or more loads
    and one store (a binary ATen lambda ``out[i] = f(a[i], b[i])`` has two): the loads'
    destination registers in program order, and the instructions the stored value depends
    on between the first load and the store (loads left out)."""
    lines = ptx.splitlines()
    start = next(i for i, l in enumerate(lines) if "ld.global" in l)
    stop = next(i for i, l in enumerate(lines) if "st.global" in l and i > start)
    instrs = _parse(lines[start:stop + 1])
    srcs = tuple(ins[1][0] for ins in instrs if ins[0].startswith("ld.global"))
    rest = [ins for ins in instrs if not ins[0].startswith("ld.global")]
    store, body = rest[-1], rest[:-1]
    dst = store[1][-1]
    needed, keep = {dst}, []
    for ins in reversed(body):
        op, ops, guard, _ = ins
        if op == "label" or op.split(".")[0] == "bra":      # bra, bra.uni
            keep.append(ins)
            if guard:
                needed.add(guard[0])
            continue
        if ops and ops[0] in needed:
            keep.append(ins)
            needed |= {o for o in ops[1:] if o.startswith("%")}
            if guard:
                needed.add(guard[0])
    keep.reverse()
    return keep, srcs, dst


def entry(ptx: str, name: str) -> str:
    """The text of kernel ``name`` (``.entry name(``) in a PTX module of several kernels."""
    m = re.search(r"\.entry\s+" + re.escape(name) + r"\s*\(", ptx)
    if m is None:
        raise ValueError(f"no kernel {name!r} in this PTX")
    nxt = re.search(r"\.entry\s+\w+\s*\(", ptx[m.end():])
    return ptx[m.start():m.end() + nxt.start() if nxt else len(ptx)]


def _imm(tok: str, n: int):
    if tok.startswith("0f"):
        return np.full(n, int(tok[2:], 16), np.uint32)
    return np.full(n, np.int64(int(tok, 0)) & 0xFFFFFFFF, np.uint32)


def _f(b):
    return b.view(np.float32)


def _b(f):
    return np.ascontiguousarray(f, dtype=np.float32).view(np.uint32)


def _s(b):
    return b.view(np.int32)


_CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
        "eq": np.equal, "ne": np.not_equal, "lo": np.less, "ls": np.less_equal,
        "hi": np.greater, "hs": np.greater_equal}


def _setp(op, a, b):
    parts = op.split(".")
    cmp, ty = parts[1], parts[-1]
    if ty != "f32":
        x, y = (_s(a), _s(b)) if ty == "s32" else (a, b)
        return _CMP[cmp](x, y)
    fa, fb = _f(a), _f(b)
    if "ftz" in parts:
        fa, fb = flush(fa), flush(fb)
    nan = np.isnan(fa) | np.isnan(fb)
    if cmp in ("num", "nan"):
        return ~nan if cmp == "num" else nan
    unordered = cmp.endswith("u") and cmp[:-1] in _CMP
    with np.errstate(invalid="ignore"):
        r = _CMP[cmp[:-1] if unordered else cmp](fa, fb)
    return (r | nan) if unordered else (r & ~nan)


def half_bits(f, fmt: str) -> np.ndarray:
    """float32 -> the 16 bits of ``fmt`` (``f16`` / ``bf16``) rounded to nearest even, as
    ``cvt.rn.f16.f32`` / ``cvt.rn.bf16.f32``; NaN gives the canonical 0x7FFF."""
    f = np.ascontiguousarray(f, dtype=np.float32)
    if fmt == "f16":
        with np.errstate(over="ignore"):
            h = f.astype(np.float16).view(np.uint16).astype(np.uint32)
    else:
        b = f.view(np.uint32)
        h = ((b + np.uint32(0x7FFF) + ((b >> 16) & 1)) >> 16).astype(np.uint32)
    return np.where(np.isnan(f), np.uint32(0x7FFF), h).astype(np.uint32)


def half_value(h, fmt: str) -> np.ndarray:
    """The float32 value of 16-bit ``f16`` / ``bf16`` patterns (exact)."""
    h = np.asarray(h).astype(np.uint32) & np.uint32(0xFFFF)
    if fmt == "f16":
        return h.astype(np.uint16).view(np.float16).astype(np.float32)
    return (h << 16).astype(np.uint32).view(np.float32)


def _cvt(op, a):
    parts = op.split(".")
    dst, src = parts[-2], parts[-1]
    if src == "f32" and dst in ("f16", "bf16") and "rn" in parts:
        return half_bits(_f(a), dst)
    if dst == "f32" and src in ("f16", "bf16"):
        return _b(half_value(a, src))
    if dst == src == "f32":                 # to an integer value and / or saturated to [0, 1]
        f = flush(_f(a)) if "ftz" in parts else _f(a).copy()
        rnd = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}
        for p in parts[1:-2]:
            if p in rnd:
                f = rnd[p](f).astype(np.float32)
        if "sat" in parts:
            f = np.where(np.isnan(f), np.float32(0), np.clip(f, 0, 1)).astype(np.float32)
        return _b(f)
    if dst == "f32" and src in ("s32", "u32"):
        v = (_s(a) if src == "s32" else a).astype(np.float64)
        return _b(v.astype(np.float32))
    if src == "f32" and dst in ("s32", "u32"):
        f = _f(a).astype(np.float64)
        if "ftz" in parts:
            f = flush(_f(a)).astype(np.float64)
        mode = parts[1]
        r = {"rzi": np.trunc, "rni": np.rint, "rmi": np.floor, "rpi": np.ceil}[mode](f)
        lo, hi = (-2.0 ** 31, 2.0 ** 31 - 1) if dst == "s32" else (0.0, 2.0 ** 32 - 1)
        r = np.where(np.isnan(r), 0, np.clip(r, lo, hi))
        return (r.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32)
    raise Unsupported(op)


def _float(op, vals):
    parts = op.split(".")
    ftz = "ftz" in parts
    name = parts[0]
    fs = [_f(v) for v in vals]
    if name in ("add", "sub", "mul") and parts[-1] == "f32" \
            and all(p in ("rn", "ftz", "f32", name) for p in parts):
        return _b(getattr(ieee, name)(fs[0], fs[1], ftz))
    if name == "fma" and "rn" in parts:
        return _b(ieee.fma(fs[0], fs[1], fs[2], ftz))
    if name == "fma" and parts[1] in ("rm", "rp", "rz"):
        return _b(ieee.fma_directed(fs[0], fs[1], fs[2], parts[1], ftz))
    if name == "copysign":           # copysign d, a, b: b's magnitude with a's sign
        return (vals[1] & np.uint32(0x7FFFFFFF)) | (vals[0] & np.uint32(0x80000000))
    if name in ("neg", "abs"):
        b = _b(flush(fs[0])) if ftz else vals[0]
        return b ^ np.uint32(0x80000000) if name == "neg" else b & np.uint32(0x7FFFFFFF)
    if op in FUNCTIONS:
        with np.errstate(all="ignore"):     # signalling NaNs are operands, not errors
            return _b(FUNCTIONS[op].fn(*fs))
    raise Unsupported(op)


_INT = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "and": np.bitwise_and,
        "or": np.bitwise_or, "xor": np.bitwise_xor, "mul": lambda a, b: a * b}


def _int(op, vals):
    parts = op.split(".")
    name = parts[0]
    if name in _INT and parts[-1] in ("s32", "u32", "b32") and (name != "mul" or
                                                                "lo" in parts):
        with np.errstate(over="ignore"):
            return _INT[name](vals[0], vals[1]).astype(np.uint32)
    if name == "not" and parts[-1] == "b32":
        return ~vals[0]
    if name == "shl" and parts[-1] == "b32":
        s = np.minimum(vals[1], 32)
        return np.where(s >= 32, 0, vals[0] << (s & 31)).astype(np.uint32)
    if name == "shr" and parts[-1] in ("u32", "b32", "s32"):
        s = np.minimum(vals[1], 32)
        if parts[-1] == "s32":
            return (_s(vals[0]) >> np.minimum(s, 31).astype(np.int32)).view(np.uint32)
        return np.where(s >= 32, 0, vals[0] >> (s & 31)).astype(np.uint32)
    raise Unsupported(op)


def run(prog, src: str, dst: str, x: np.ndarray) -> np.ndarray:
    """The routine ``prog`` (from :func:`routine`) on float32 ``x``: float32 results;
    raises :class:`Unsupported` if any lane meets an instruction this does not run."""
    out, dead = run_lanes(prog, src, dst, x)
    if dead.any():
        raise Unsupported(dead_reason[0] if dead_reason else "unsupported code")
    return out


dead_reason: list = []        # why the last run_lanes gave lanes up (the first reason)


def run_lanes(prog, src, dst: str, x):
    """(float32 results, lanes given up): a lane that reaches an instruction this does not
    run (local memory, a backward branch: libdevice's slow paths) is given up, the others
    run to the end.  A routine that loads 16-bit values (``ld.global.u16``: an f16 / bf16
    kernel) takes ``x`` as uint16 bit patterns; its 16-bit result comes back in the low half
    of each float32's bits (``.view(np.uint32) & 0xFFFF``).  Several inputs
    (:func:`routine_n`): ``src`` a tuple of registers and ``x`` a tuple of equal-sized
    arrays."""
    srcs, xs = ((src,), (x,)) if isinstance(src, str) else (tuple(src), tuple(x))
    regs = {}
    for s_, x in zip(srcs, xs):
        x = np.asarray(x)
        if x.dtype == np.uint16:
            x = np.ascontiguousarray(x.reshape(-1).astype(np.uint32)).view(np.float32)
        x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
        regs[s_] = x.view(np.uint32).copy()
    n = x.size
    preds: dict = {}
    active = np.ones(n, bool)
    dead = np.zeros(n, bool)
    pending: dict = {}
    seen: set = set()
    labels = {ins[1] for ins in prog if ins[0] == "label"}
    dead_reason.clear()

    def val(tok):
        if tok in regs:
            return regs[tok]
        if tok.startswith("%"):
            raise Unsupported(f"register {tok} read before it is written")
        try:
            return _imm(tok, n)
        except ValueError:
            raise Unsupported(f"operand {tok!r}") from None

    def give_up(lanes, why):
        nonlocal active, dead
        dead |= lanes
        active = active & ~lanes
        if not dead_reason:
            dead_reason.append(why)

    for op, ops, guard, _ in prog:
        if op == "label":
            seen.add(ops)
            active = active | pending.pop(ops, np.zeros(n, bool))
            continue
        lanes = active
        if guard:
            p = preds.get(guard[0])
            if p is None:
                give_up(lanes, f"predicate {guard[0]} read before it is written")
                continue
            lanes = active & (~p if guard[1] else p)
        if not lanes.any():
            continue
        if op.split(".")[0] == "bra":
            if ops[0] not in labels or ops[0] in seen:
                give_up(lanes, "a backward branch or one out of the routine")
                continue
            pending[ops[0]] = pending.get(ops[0], np.zeros(n, bool)) | lanes
            active = active & ~lanes
            continue
        try:
            _step(op, ops, lanes, regs, preds, val, n)
        except Unsupported as e:
            give_up(lanes, str(e))
    for lanes in pending.values():
        give_up(lanes, "a branch to a label after the result")
    return regs.get(dst, np.zeros(n, np.uint32)).view(np.float32), dead


def _step(op, ops, lanes, regs, preds, val, n):
    if op == "ret":
        raise Unsupported("ret inside the routine")
    d, args = ops[0], ops[1:]
    if op.startswith("setp."):
        new = _setp(op, val(args[0]), val(args[1]))
        preds[d] = np.where(lanes, new, preds.get(d, np.zeros(n, bool)))
        return
    if op == "not.pred":
        preds[d] = np.where(lanes, ~preds[args[0]], preds.get(d, np.zeros(n, bool)))
        return
    if op.startswith("selp."):
        if args[2] not in preds:
            raise Unsupported(f"predicate {args[2]} read before it is written")
        new = np.where(preds[args[2]], val(args[0]), val(args[1]))
    elif op in ("mov.b32", "mov.f32", "mov.u32", "mov.s32"):
        new = val(args[0])
    elif op.startswith("cvt."):
        new = _cvt(op, val(args[0]))
    elif op in ("neg.f16", "neg.bf16", "abs.f16", "abs.bf16"):
        v = val(args[0])
        new = v ^ np.uint32(0x8000) if op.startswith("neg") else v & np.uint32(0x7FFF)
    elif op in ("mov.b16", "mov.u16"):
        new = val(args[0])
    elif op.endswith(".f32"):
        new = _float(op, [val(a) for a in args])
    else:
        new = _int(op, [val(a) for a in args])
    regs[d] = np.where(lanes, new, regs.get(d, np.zeros(n, np.uint32))).astype(np.uint32)


def exact(prog) -> bool:
    """Whether every float instruction of ``prog`` has a bit-exact model."""
    for op, *_ in prog:
        if op in FUNCTIONS and not FUNCTIONS[op].exact:
            return False
    return True
