"""Integer, logic, predicate, conversion and floating-point instructions, vectorised over a
CTA's threads: each handler reads operands through the machine (``m.val``: uint64 arrays of
register bits), computes, and writes through ``m.put`` where the thread executes.  Floating
point is bit-exact in every rounding mode (``fround``); the approximate MUFU instructions
use the models of ``gpu_math`` (alu_float)."""
from __future__ import annotations

import numpy as np

from . import fround as fr
from .errors import Unsupported

U64 = np.uint64
IGNORED = {"uni", "aligned", "sync", "volatile", "relaxed", "acquire", "release", "acq_rel",
           "weak", "gpu", "sys", "cta", "cluster", "nc", "ca", "cg", "cs", "lu", "cv", "wb",
           "wt", "approx", "full", "ftz", "sat", "rn", "rz", "rm", "rp", "rni", "rzi", "rmi",
           "rpi", "lo", "hi", "wide", "NaN", "cc", "shiftamt", "clamp", "wrap", "l", "r"}
FLOATS = ("f16", "bf16", "f32", "f64")


def width(t: str) -> int:
    digits = "".join(ch for ch in t if ch.isdigit())
    return int(digits) if digits else 32


def mask_of(w: int):
    return U64((1 << w) - 1) if w < 64 else U64(0xFFFFFFFFFFFFFFFF)


def signed(v, w):
    v = (v & mask_of(w)).astype(np.int64)
    return (v << (64 - w)) >> (64 - w) if w < 64 else v


def ty_of(parts):
    return parts[-1]


def _ival(m, tok, t):
    w = width(t)
    v = m.val(tok) & mask_of(w)
    return signed(v, w) if t[0] == "s" else v


def _iput(m, dst, r, t, act):
    w = width(t)
    m.put(dst, np.asarray(r).astype(np.int64).astype(U64) & mask_of(w)
          if np.asarray(r).dtype.kind == "i" else np.asarray(r, U64) & mask_of(w), act)


# ---------------------------------------------------------------- integers
def _int2(fn):
    def h(m, parts, o, act):
        t = ty_of(parts)
        if t in FLOATS or t.endswith("x2"):
            return FLOAT[parts[0]](m, parts, o, act)
        if t == "pred":
            return m.put(o[0], fn(m.val(o[1]) & U64(1), m.val(o[2]) & U64(1)) & U64(1), act)
        a, b = _ival(m, o[1], t), _ival(m, o[2], t)
        if "sat" in parts and parts[0] in ("add", "sub"):
            r = np.clip(fn(a, b).astype(np.int64), -2**31, 2**31 - 1)
        else:
            with np.errstate(over="ignore"):
                r = fn(a, b)
        _iput(m, o[0], r, t, act)
    return h


def i_mul(m, parts, o, act):
    t = ty_of(parts)
    if t in FLOATS or t.endswith("x2"):
        return FLOAT["mul"](m, parts, o, act)
    _mulop(m, parts, o, act, None)


def i_mad(m, parts, o, act):
    t = ty_of(parts)
    if t in FLOATS or t.endswith("x2"):
        return FLOAT["fma"](m, parts, o, act)
    if "cc" in parts or parts[0] == "madc":
        raise Unsupported("mad.cc / madc (carry chains)")
    _mulop(m, parts, o, act, o[3])


def _mulop(m, parts, o, act, addend):
    t = ty_of(parts)
    w = width(t)
    a, b = _ival(m, o[1], t), _ival(m, o[2], t)
    if "wide" in parts:
        ow = 2 * w
        with np.errstate(over="ignore"):
            r = a.astype(np.int64) * b.astype(np.int64) if t[0] == "s" else a * b
    elif "hi" in parts:
        ow = w
        if w == 64:
            r = np.array([((int(x) * int(y)) >> 64) for x, y in zip(a, b)], dtype=object)
            r = np.array([int(x) & 0xFFFFFFFFFFFFFFFF for x in r], U64)
        else:
            r = (a.astype(np.int64) * b.astype(np.int64)) >> w if t[0] == "s" else (a * b) >> U64(w)
    else:
        ow = w
        with np.errstate(over="ignore"):
            r = a * b
    r = np.asarray(r).astype(np.int64).astype(U64) if np.asarray(r).dtype.kind == "i" else np.asarray(r, U64)
    if addend is not None:
        with np.errstate(over="ignore"):
            r = r + m.val(addend)
    m.put(o[0], r & mask_of(ow), act)


def i_div(m, parts, o, act):
    t = ty_of(parts)
    if t in FLOATS:
        return FLOAT["div"](m, parts, o, act)
    a, b = _ival(m, o[1], t), _ival(m, o[2], t)
    if t[0] == "s":
        bb = np.where(b == 0, 1, b)
        q = np.abs(a) // np.abs(bb) * np.sign(a) * np.sign(bb)    # C: toward zero
        r = np.where(b == 0, -1, q)
    else:
        r = np.where(b == 0, mask_of(width(t)), a // np.where(b == 0, U64(1), b))
    _iput(m, o[0], r, t, act)


def i_rem(m, parts, o, act):
    t = ty_of(parts)
    a, b = _ival(m, o[1], t), _ival(m, o[2], t)
    if t[0] == "s":
        bb = np.where(b == 0, 1, b)
        r = np.where(b == 0, a, np.sign(a) * (np.abs(a) % np.abs(bb)))
    else:
        r = np.where(b == 0, a, a % np.where(b == 0, U64(1), b))
    _iput(m, o[0], r, t, act)


def _shift(left):
    def h(m, parts, o, act):
        t = ty_of(parts)
        w = width(t)
        a = _ival(m, o[1], t)
        n = np.minimum(m.val(o[2]) & U64(0xFFFFFFFF), U64(w))
        if left:
            r = np.where(n >= w, U64(0), (a.astype(U64) << np.minimum(n, U64(63))))
        elif t[0] == "s":
            r = a >> np.minimum(n, U64(63)).astype(np.int64)
        else:
            r = np.where(n >= w, U64(0), a >> np.minimum(n, U64(63)))
        _iput(m, o[0], r, t, act)
    return h


def i_shf(m, parts, o, act):
    """shf.{l,r}.{wrap,clamp}.b32 d, a, b, c: the funnel {b:a} shifted by c."""
    a, b = m.val(o[1]) & U64(0xFFFFFFFF), m.val(o[2]) & U64(0xFFFFFFFF)
    c = m.val(o[3]) & U64(0xFFFFFFFF)
    n = c & U64(31) if "wrap" in parts else np.minimum(c, U64(32))
    both = (b << U64(32)) | a
    r = (both << n) >> U64(32) if parts[1] == "l" else both >> n
    m.put(o[0], r & U64(0xFFFFFFFF), act)


def i_abs(m, parts, o, act):
    t = ty_of(parts)
    if t in FLOATS:
        return FLOAT["abs"](m, parts, o, act)
    _iput(m, o[0], np.abs(_ival(m, o[1], t)), t, act)


def i_neg(m, parts, o, act):
    t = ty_of(parts)
    if t in FLOATS or t.endswith("x2"):
        return FLOAT["neg"](m, parts, o, act)
    _iput(m, o[0], -_ival(m, o[1], t).astype(np.int64), t, act)


def i_not(m, parts, o, act):
    t = ty_of(parts)
    if t == "pred":
        return m.put(o[0], (m.val(o[1]) & U64(1)) ^ U64(1), act)
    _iput(m, o[0], ~m.val(o[1]), t, act)


def i_cnot(m, parts, o, act):
    _iput(m, o[0], (_ival(m, o[1], ty_of(parts)) == 0).astype(U64), ty_of(parts), act)


def i_popc(m, parts, o, act):
    v = m.val(o[1]) & mask_of(width(ty_of(parts)))
    r = np.zeros_like(v)
    for k in range(width(ty_of(parts))):
        r += (v >> U64(k)) & U64(1)
    m.put(o[0], r, act)


def i_clz(m, parts, o, act):
    w = width(ty_of(parts))
    v = m.val(o[1]) & mask_of(w)
    r = np.full(v.shape, w, U64)
    for k in range(w):                       # highest set bit wins
        r = np.where((v >> U64(k)) & U64(1), U64(w - 1 - k), r)
    m.put(o[0], r, act)


def i_bfind(m, parts, o, act):
    t = ty_of(parts)
    w = width(t)
    v = m.val(o[1]) & mask_of(w)
    if t[0] == "s":
        v = np.where(signed(v, w) < 0, ~v & mask_of(w), v)
    r = np.full(v.shape, 0xFFFFFFFF, U64)
    for k in range(w):
        hit = ((v >> U64(k)) & U64(1)).astype(bool)
        r = np.where(hit, U64(w - 1 - k if "shiftamt" in parts else k), r)
    m.put(o[0], r, act)


def i_brev(m, parts, o, act):
    w = width(ty_of(parts))
    v = m.val(o[1])
    r = np.zeros_like(v)
    for k in range(w):
        r |= ((v >> U64(k)) & U64(1)) << U64(w - 1 - k)
    m.put(o[0], r, act)


def i_bfe(m, parts, o, act):
    t = ty_of(parts)
    w = width(t)
    a = m.val(o[1]) & mask_of(w)
    pos = np.minimum(m.val(o[2]) & U64(0xFF), U64(w))
    ln = np.minimum(m.val(o[3]) & U64(0xFF), U64(w))
    field = np.where(pos >= w, U64(0), a >> np.minimum(pos, U64(63)))
    keep = np.where(ln >= 64, U64(0xFFFFFFFFFFFFFFFF), (U64(1) << np.minimum(ln, U64(63))) - U64(1))
    v = field & keep
    if t[0] == "s":       # sign bit: bit min(pos + len - 1, w - 1) of a
        sb = np.minimum(pos + ln - U64(1), U64(w - 1))
        s = ((a >> sb) & U64(1)).astype(bool) & (ln > 0)
        v = np.where(s, v | (~keep), v)
    m.put(o[0], v & mask_of(w), act)


def i_bfi(m, parts, o, act):
    w = width(ty_of(parts))
    a, b = m.val(o[1]), m.val(o[2]) & mask_of(w)
    pos = np.minimum(m.val(o[3]) & U64(0xFF), U64(63))
    ln = np.minimum(m.val(o[4]) & U64(0xFF), U64(w))
    keep = np.where(ln >= 64, U64(0xFFFFFFFFFFFFFFFF), (U64(1) << ln) - U64(1)) << pos
    m.put(o[0], ((b & ~keep) | ((a << pos) & keep)) & mask_of(w), act)


def i_prmt(m, parts, o, act):
    """prmt.b32 (default mode): byte i of d is byte (c >> 4i) & 7 of {b, a}, or its sign
    replicated when bit 3 of the selector is set."""
    if parts != ["prmt", "b32"]:
        raise Unsupported(".".join(parts) + " (prmt modes other than the default)")
    ab = (m.val(o[1]) & U64(0xFFFFFFFF)) | ((m.val(o[2]) & U64(0xFFFFFFFF)) << U64(32))
    c = m.val(o[3])
    out = np.zeros_like(ab)
    for i in range(4):
        sel = (c >> U64(4 * i)) & U64(15)
        byte = (ab >> ((sel & U64(7)) * U64(8))) & U64(0xFF)
        sign = np.where(byte & U64(0x80), U64(0xFF), U64(0))
        out |= np.where(sel & U64(8), sign, byte) << U64(8 * i)
    m.put(o[0], out, act)


def i_lop3(m, parts, o, act):
    a, b, c = (m.val(x) for x in o[1:4])
    lut = int(m.val(o[4])[0]) & 0xFF
    r = np.zeros_like(a)
    for k in range(8):
        if lut >> k & 1:
            r |= (a if k & 4 else ~a) & (b if k & 2 else ~b) & (c if k & 1 else ~c)
    m.put(o[0], r & U64(0xFFFFFFFF), act)


def i_sad(m, parts, o, act):
    t = ty_of(parts)
    a, b = _ival(m, o[1], t), _ival(m, o[2], t)
    r = np.where(a > b, a - b, b - a)
    with np.errstate(over="ignore"):
        _iput(m, o[0], r.astype(U64) + m.val(o[3]), t, act)


# ---------------------------------------------------------------- compare and select
_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
        "gt": np.greater, "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal,
        "hi": np.greater, "hs": np.greater_equal}


def compare(m, cmp, t, a_tok, b_tok):
    if t in FLOATS:
        a, b = fr.from_bits(m.val(a_tok), t), fr.from_bits(m.val(b_tok), t)
        nan = np.isnan(a) | np.isnan(b)
        with np.errstate(invalid="ignore"):
            if cmp in ("num", "nan"):
                return ~nan if cmp == "num" else nan
            if cmp.endswith("u") and cmp[:-1] in _CMP:
                return _CMP[cmp[:-1]](a, b) | nan
            return _CMP[cmp](a, b) & ~nan if cmp != "ne" else (a != b) & ~nan
    if cmp not in _CMP:
        raise Unsupported(f"setp.{cmp}.{t}")
    return _CMP[cmp](_ival(m, a_tok, t), _ival(m, b_tok, t))


def _pred(m, tok):
    if tok.startswith("!"):
        return (m.val(tok[1:]) & U64(1)) == 0
    return (m.val(tok) & U64(1)).astype(bool)


def i_setp(m, parts, o, act):
    r = compare(m, parts[1], ty_of(parts), o[1], o[2])
    if len(parts) > 3 and parts[2] in ("and", "or", "xor"):
        c = _pred(m, o[3])
        r = {"and": r & c, "or": r | c, "xor": r ^ c}[parts[2]]
        rn = {"and": ~r & c, "or": ~r | c, "xor": ~r ^ c}[parts[2]]
    else:
        rn = ~r
    d = o[0].split("|")
    m.put(d[0], r.astype(U64), act)
    if len(d) > 1:
        m.put(d[1], rn.astype(U64), act)


def i_set(m, parts, o, act):
    r = compare(m, parts[1], parts[-1], o[1], o[2])
    dt = parts[2]
    v = fr.to_bits(r.astype(np.float64), dt) if dt in FLOATS else np.where(r, mask_of(32), U64(0))
    m.put(o[0], v, act)


def i_selp(m, parts, o, act):
    m.put(o[0], np.where(_pred(m, o[3]), m.val(o[1]), m.val(o[2])), act)


def i_slct(m, parts, o, act):
    t = parts[-1]
    c = fr.from_bits(m.val(o[3]), "f32") >= 0 if t == "f32" else _ival(m, o[3], t) >= 0
    m.put(o[0], np.where(c, m.val(o[1]), m.val(o[2])), act)


def i_mov(m, parts, o, act):
    dst, src = o[0], o[1]
    t = ty_of(parts)
    if dst.startswith("{"):                         # unpack into halves
        items = [x.strip() for x in dst.strip("{}").split(",")]
        w = width(t) // len(items)
        v = m.val(src)
        for k, h in enumerate(items):
            if h != "_":
                m.put(h, (v >> U64(w * k)) & mask_of(w), act)
    elif src.startswith("{"):
        items = [x.strip() for x in src.strip("{}").split(",")]
        w = width(t) // len(items)
        v = np.zeros(m.n, U64)
        for k, h in enumerate(items):
            v |= (m.val(h) & mask_of(w)) << U64(w * k)
        m.put(dst, v, act)
    else:
        v = m.val(src)
        m.put(dst, v & mask_of(width(t)) if t != "pred" else v & U64(1), act)


from .alu_float import FLOAT  # noqa: E402  (the float table needs the helpers above)

HANDLERS = {
    "add": _int2(lambda a, b: a + b), "sub": _int2(lambda a, b: a - b),
    "and": _int2(lambda a, b: a & b), "or": _int2(lambda a, b: a | b),
    "xor": _int2(lambda a, b: a ^ b), "min": _int2(np.minimum), "max": _int2(np.maximum),
    "mul": i_mul, "mad": i_mad, "div": i_div, "rem": i_rem, "shl": _shift(True),
    "shr": _shift(False), "shf": i_shf, "abs": i_abs, "neg": i_neg, "not": i_not,
    "cnot": i_cnot, "popc": i_popc, "clz": i_clz, "bfind": i_bfind, "brev": i_brev,
    "bfe": i_bfe, "bfi": i_bfi, "prmt": i_prmt, "lop3": i_lop3, "sad": i_sad,
    "setp": i_setp, "set": i_set, "selp": i_selp, "slct": i_slct, "mov": i_mov,
}
for _k, _h in FLOAT.items():
    HANDLERS.setdefault(_k, _h)
