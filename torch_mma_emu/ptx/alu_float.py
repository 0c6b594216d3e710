"""Floating-point instructions and conversions of the interpreter, bit-exact: every result
is the exact value (a float64 plus its exact error, or a rational where float64 cannot
carry it) rounded once in the instruction's mode (``.rn/.rz/.rm/.rp``), with ``.ftz``
(fp32 subnormal inputs and results to signed zero), ``.sat`` ([0, 1], NaN to +0) and
NVIDIA's canonical NaN.  The ``.approx`` / ``div.full`` instructions use ``gpu_math``."""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from .. import gpu_math
from ..gpu_math import ieee, mufu
from . import fround as fr
from .errors import Unsupported

U64 = np.uint64
MODES = ("rn", "rz", "rm", "rp")
_FLOATS = ("f16", "bf16", "f32", "f64")


def _mode(parts, default="rn"):
    return next((p for p in parts if p in MODES), default)


_WIDTH = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}


def _lanes(t):
    """(lane format, lanes, lane width) of a float type (``f16x2``: two 16-bit lanes)."""
    if t.endswith("x2"):
        return t[:-2], 2, 16
    if t not in _WIDTH:
        raise Unsupported(f"float type .{t}")
    return t, 1, _WIDTH[t]


def _exact(kind, xs):
    """Per element with rationals: (float64 nearest, float64 of the exact error)."""
    s = np.zeros(len(xs[0]))
    err = np.zeros(len(xs[0]))
    with np.errstate(all="ignore"):
        for i in range(len(s)):
            v = [float(x[i]) for x in xs]
            if not all(np.isfinite(v)) or (kind == "div" and v[1] == 0) or \
                    (kind == "sqrt" and v[0] < 0):
                s[i] = {"div": lambda: np.float64(v[0]) / np.float64(v[1]),
                        "sqrt": lambda: np.sqrt(np.float64(v[0])),
                        "mul": lambda: np.float64(v[0]) * v[1],
                        "fma": lambda: np.float64(v[0]) * v[1] + v[2]}[kind]()
                continue
            if kind == "sqrt":
                s[i] = np.sqrt(v[0])
                d = Fraction(v[0]) - Fraction(s[i]) ** 2
                err[i] = 0.0 if d == 0 else (np.ldexp(1.0, -1074) if d > 0 else -np.ldexp(1.0, -1074))
                continue
            F = [Fraction(x) for x in v]
            e = {"div": lambda: F[0] / F[1], "mul": lambda: F[0] * F[1],
                 "fma": lambda: F[0] * F[1] + F[2]}[kind]()
            s[i] = float(e)
            err[i] = float(e - Fraction(s[i]))
            if e == 0 and kind == "fma":
                s[i] = v[0] * v[1] + v[2]          # the sign of an exact zero
    return s, err


def _compute(kind, base, xs, mode):
    """(s, err) of the exact result for operands as float64 arrays of format ``base``."""
    with np.errstate(all="ignore"):
        if kind in ("add", "sub"):
            b = xs[1] if kind == "add" else -xs[1]
            s, err = fr.two_sum(xs[0], b)
            if mode == "rm":                       # x + (-x) is -0 when rounding down
                s = np.where((s == 0) & (err == 0) & ~((xs[0] == 0) & (b == 0)), -0.0, s)
            return s, err
        if kind == "mul" and base != "f64":
            return xs[0] * xs[1], np.zeros_like(xs[0])            # exact in float64
        if kind == "fma" and base != "f64":
            s, err = fr.two_sum(xs[0] * xs[1], xs[2])
            return s, err
        if kind in ("div", "sqrt") and base != "f64" and mode == "rn":
            s = xs[0] / xs[1] if kind == "div" else np.sqrt(xs[0])
            return s, np.zeros_like(s)             # double rounding innocuous: 53 >= 2p + 2
        if kind in ("mul", "fma", "div", "sqrt"):
            if base == "f64" and mode == "rn" and kind in ("mul", "div", "sqrt"):
                s = {"mul": lambda: xs[0] * xs[1], "div": lambda: xs[0] / xs[1],
                     "sqrt": lambda: np.sqrt(xs[0])}[kind]()
                return s, np.zeros_like(s)
            return _exact(kind, xs)
    raise Unsupported(kind)


def _finish(r, base, parts):
    if "ftz" in parts and base == "f32":
        r = fr.flush(r, "f32")
    if "sat" in parts:
        r = np.where(np.isnan(r), 0.0, np.clip(r, 0.0, 1.0)) + 0.0
    return fr.to_bits(r, base)


def _arith(kind, nin):
    def h(m, parts, o, act):
        t = parts[-1]
        if t not in _FLOATS and t not in ("f16x2", "bf16x2"):
            raise Unsupported(".".join(parts))
        base, lanes, w = _lanes(t)
        mode = _mode(parts)
        out = np.zeros(m.n, U64)
        for k in range(lanes):
            sh = U64(w * k)
            xs = [fr.from_bits(m.val(x) >> sh, base) for x in o[1:1 + nin]]
            if "ftz" in parts and base == "f32":
                xs = [fr.flush(x, "f32") for x in xs]
            if kind == "rcp":
                kind2, xs = "div", [np.ones_like(xs[0]), xs[0]]
            else:
                kind2 = kind
            s, err = _compute(kind2, base, xs, mode)
            r = fr.f64_directed(s, err, mode) if base == "f64" else fr.round_to(s, err, base, mode)
            out |= (_finish(r, base, parts) & fr_mask(w)) << sh
        m.put(o[0], out, act)
    return h


def fr_mask(w):
    return U64((1 << w) - 1) if w < 64 else U64(0xFFFFFFFFFFFFFFFF)


def _gpu_math(name):
    """``ex2/lg2/rcp/rsqrt/sqrt/sin/cos/tanh.approx``, ``div.full/approx`` (f32, with or
    without ``.ftz``) by ``gpu_math``'s models of the SASS ptxas emits; a model that is not
    bit-exact is recorded in the launch's ``approximate`` set."""
    exact = _arith(name, 1 if name != "div" else 2) if name in ("rcp", "sqrt", "div") else None

    def h(m, parts, o, act):
        key = ".".join(parts)
        if len(parts) < 2 or parts[1] not in ("approx", "full"):
            if exact is None:
                raise Unsupported(key)
            return exact(m, parts, o, act)
        rec = gpu_math.FUNCTIONS.get(key)
        if rec is None:
            raise Unsupported(key + " (no gpu_math model)")
        xs = [fr.from_bits(m.val(x), "f32").astype(np.float32) for x in o[1:1 + rec.arity]]
        r = gpu_math.evaluate(key, *xs)
        if not rec.exact:
            m.L.approximate.add(key)
        m.put(o[0], mufu.bits(np.asarray(r, np.float32)).astype(U64), act)
    return h


def _sign(op):
    def h(m, parts, o, act):
        t = parts[-1]
        base, lanes, w = _lanes(t)
        out = np.zeros(m.n, U64)
        top = U64(1 << (w - 1))
        for k in range(lanes):
            sh = U64(w * k)
            v = (m.val(o[1]) >> sh) & fr_mask(w)
            if "ftz" in parts and base == "f32":
                v = fr.to_bits(fr.flush(fr.from_bits(v, "f32"), "f32"), "f32")
            v = v & ~top if op == "abs" else v ^ top
            out |= (v & fr_mask(w)) << sh
        m.put(o[0], out, act)
    return h


def _minmax(op):
    def h(m, parts, o, act):
        base, lanes, w = _lanes(parts[-1])
        out = np.zeros(m.n, U64)
        for k in range(lanes):
            sh = U64(w * k)
            a, b = (fr.from_bits(m.val(x) >> sh, base) for x in o[1:3])
            if "ftz" in parts and base == "f32":
                a, b = fr.flush(a, "f32"), fr.flush(b, "f32")
            if base == "f32":
                r = ieee.minmax(a.astype(np.float32), b.astype(np.float32), op,
                                "NaN" in parts).astype(np.float64)
            else:
                pick_b = (b > a) if op == "max" else (b < a)
                zeros = (a == 0) & (b == 0)
                pick_b |= zeros & (~np.signbit(b) if op == "max" else np.signbit(b))
                na, nb = np.isnan(a), np.isnan(b)
                r = np.where(na, b, np.where(nb, a, np.where(pick_b, b, a)))
                if "NaN" in parts:
                    r = np.where(na | nb, np.nan, r)
            out |= (fr.to_bits(r, base) & fr_mask(w)) << sh
        m.put(o[0], out, act)
    return h


def _testp(m, parts, o, act):
    x = fr.from_bits(m.val(o[1]), parts[-1])
    tiny = np.ldexp(1.0, fr.FORMATS.get(parts[-1], (0, -1022))[1])
    r = {"finite": np.isfinite(x), "infinite": np.isinf(x), "number": ~np.isnan(x),
         "notanumber": np.isnan(x), "normal": np.isfinite(x) & (np.abs(x) >= tiny),
         "subnormal": (x != 0) & (np.abs(x) < tiny)}[parts[1]]
    m.put(o[0], r.astype(U64), act)


def _copysign(m, parts, o, act):
    t = parts[-1]
    w = 64 if t == "f64" else 32
    top = U64(1 << (w - 1))
    m.put(o[0], (m.val(o[2]) & ~top & fr_mask(w)) | (m.val(o[1]) & top), act)


def i_cvt(m, parts, o, act):
    q = [p for p in parts[1:] if p not in ("ftz", "sat")]
    dst, src = q[-2], q[-1]
    sat = "sat" in parts
    if dst.endswith("x2") and src == "f32":          # cvt.rn.f16x2.f32 d, a, b: a on top
        base = dst[:-2]
        hi, lo = (fr.round_to(fr.from_bits(m.val(x), "f32"), 0.0, base, _mode(parts))
                  for x in o[1:3])
        m.put(o[0], (fr.to_bits(hi, base) << U64(16)) | fr.to_bits(lo, base), act)
        return
    if dst not in _INTS + _FLOATS or src not in _INTS + _FLOATS or len(q) > 4:
        raise Unsupported(".".join(parts))
    v = m.val(o[1])
    if src in _FLOATS:
        x = fr.from_bits(v, src)
        if "ftz" in parts and src == "f32":
            x = fr.flush(x, "f32")
        if dst in _INTS:
            irm = next((p for p in parts if p in ("rni", "rzi", "rmi", "rpi")), None)
            if irm is None:
                raise Unsupported(".".join(parts) + " (float to integer needs .rni/.rzi/.rmi/.rpi)")
            with np.errstate(all="ignore"):
                r = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[irm](x)
            lo, hi = _range(dst)
            r = np.where(np.isnan(r), 0.0, np.clip(r, lo, hi))
            ints = np.array([int(z) for z in r], dtype=object)
            m.put(o[0], np.array([z & ((1 << _bits(dst)) - 1) for z in ints], U64), act)
            return
        irm = next((p for p in parts if p in ("rni", "rzi", "rmi", "rpi")), None)
        if irm is not None:                              # round to an integral float
            with np.errstate(all="ignore"):
                x = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[irm](x)
        s, err = x, np.zeros_like(x)
    else:
        ints = _ints(v, src)
        if _bits(src) <= 32 and dst not in _INTS:         # exact in float64
            s, err = ints.astype(np.float64), np.zeros(len(ints))
        else:
            s = np.array([float(z) for z in ints], np.float64)
            err = np.array([float(z - int(f)) for z, f in zip(ints, s)], np.float64)
        if dst in _INTS:                                  # integer to integer
            lo, hi = _range(dst)
            if sat:
                ints = np.array([min(max(z, int(lo)), int(hi)) for z in ints], dtype=object)
            m.put(o[0], np.array([z & ((1 << _bits(dst)) - 1) for z in ints], U64), act)
            return
    mode = _mode(parts)
    r = fr.f64_directed(s, err, mode) if dst == "f64" else fr.round_to(s, err, dst, mode)
    m.put(o[0], _finish(r, dst, parts), act)


_INTS = ("u8", "s8", "u16", "s16", "u32", "s32", "u64", "s64", "b8", "b16", "b32", "b64")


def _bits(t):
    return int(t[1:])


def _range(t):
    b = _bits(t)
    return (-(2.0 ** (b - 1)), 2.0 ** (b - 1) - 1) if t[0] == "s" else (0.0, 2.0 ** b - 1)


def _ints(v, t):
    b = _bits(t)
    out = [int(z) & ((1 << b) - 1) for z in v]
    if t[0] == "s":
        out = [z - (1 << b) if z >> (b - 1) else z for z in out]
    return np.array(out, dtype=object)


FLOAT = {"add": _arith("add", 2), "sub": _arith("sub", 2), "mul": _arith("mul", 2),
         "fma": _arith("fma", 3), "abs": _sign("abs"), "neg": _sign("neg"),
         "min": _minmax("min"), "max": _minmax("max"), "testp": _testp,
         "copysign": _copysign, "cvt": i_cvt,
         **{k: _gpu_math(k) for k in ("rcp", "sqrt", "rsqrt", "ex2", "lg2", "tanh", "sin",
                                      "cos", "div")}}
