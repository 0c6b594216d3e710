"""A GPU-free check of AMD wave reductions: evaluates the cross-lane dataflow of the LLVM IR
Triton 3.6 compiles for gfx90a / gfx942 (``llvm.amdgcn.update.dpp``, ``ds.swizzle``,
``readlane``, the
combine's ``fadd`` / ``fmul`` / ``maxnum`` / ``minnum``, bit casts) on all lanes of a CTA at
once, from given per-lane inputs.  It is the AMD counterpart of ptx_eval.py for the part
that decides the order: the tests feed the same partials to it and to reduce.py's tree.

DPP semantics (AMD's Vega / CDNA ISA manuals, "DPP_CTRL"): a wave of 64 lanes is 4 rows of
16 lanes, each row 4 banks of 4 lanes; ``quad_perm`` (0x00-0xFF) picks within each group of
4 lanes; ``row_shl:n`` (0x101-0x10F) / ``row_shr:n`` (0x111-0x11F) read lane +-n within the
row; ``row_bcast:15`` (0x142) gives lane 15 of each row to the next row; ``row_bcast:31``
(0x143) gives lane 31 to rows 2 and 3.  A lane whose row or bank is masked off keeps
``old``; a lane whose source is outside the row reads 0 with ``bound_ctrl``, else keeps
``old``.  ``poison`` is a NaN here, so a result that depends on it shows.
"""
from __future__ import annotations

import re

import numpy as np


class Unsupported(Exception):
    """An instruction or DPP control this evaluator does not model."""


_NP = {"float": np.float32, "half": np.float16, "bfloat": np.uint16, "i32": np.uint32,
       "i16": np.uint16, "i64": np.uint64}
_LINE = re.compile(r"^\s*(%[\w.]+) = (?:tail )?(.*?)(?:, !dbg !\d+)?\s*$")
_BIN = re.compile(r"^(fadd|fmul)(?: [a-z]+)* (float|half|<\d+ x float>|<\d+ x half>) "
                  r"(%[\w.]+|poison|[-\d.e+]+), (%[\w.]+|poison|[-\d.e+]+)$")
_ARG = re.compile(r"(float|half|i32|i16|i1|i64|<\d+ x \w+>)\s+(%[\w.]+|poison|[-\d.e+]+)")
_SHUF = re.compile(r"^shufflevector <(\d+) x (\w+)> (%[\w.]+|poison), <\d+ x \w+> "
                   r"(%[\w.]+|poison), <\d+ x i32> <([^>]*)>")
_VEC = re.compile(r"^<(\d+) x (\w+)>$")


def _src_lane(ctrl: int, lane: np.ndarray) -> np.ndarray:
    """Source lane within the wave for each lane (-1: outside the row, invalid)."""
    row, pos = lane // 16, lane % 16
    if ctrl <= 0xFF:
        sel = (ctrl >> (2 * (lane & 3))) & 3
        return (lane & ~3) + sel
    if 0x101 <= ctrl <= 0x10F:
        n = ctrl - 0x100
        return np.where(pos + n < 16, lane + n, -1)
    if 0x111 <= ctrl <= 0x11F:
        n = ctrl - 0x110
        return np.where(pos - n >= 0, lane - n, -1)
    if ctrl == 0x142:
        return np.where(row >= 1, (row - 1) * 16 + 15, -1)
    if ctrl == 0x143:
        return np.where(row >= 2, 31, -1)
    raise Unsupported(f"DPP control {ctrl:#x}")


def dpp(old: np.ndarray, src: np.ndarray, ctrl: int, row_mask: int, bank_mask: int,
        bound_ctrl: bool) -> np.ndarray:
    """``llvm.amdgcn.update.dpp`` on 64-lane waves (arrays of length 64 * waves)."""
    n = src.shape[0]
    t = np.arange(n)
    lane, base = t % 64, t - t % 64
    s = _src_lane(ctrl, lane)
    enabled = ((row_mask >> (lane // 16)) & 1 == 1) & ((bank_mask >> ((lane % 16) // 4)) & 1 == 1)
    valid = s >= 0
    got = src[np.where(valid, base + s, t)]
    zero = np.zeros_like(src)
    out = np.where(valid, got, zero if bound_ctrl else old)
    return np.where(enabled, out, old)


def swizzle(src: np.ndarray, offset: int) -> np.ndarray:
    """``ds_swizzle_b32``: offset bit 15 set: a quad_perm in each group of 4 lanes; else
    within each group of 32 lanes lane i reads ((i & and) | or) ^ xor (masks in offset
    bits 0-4, 5-9, 10-14)."""
    t = np.arange(src.shape[0])
    if offset & 0x8000:
        s = (t & ~3) + ((offset >> (2 * (t & 3))) & 3)
    else:
        a, o, x = offset & 0x1F, (offset >> 5) & 0x1F, (offset >> 10) & 0x1F
        s = (t & ~31) + ((((t & 31) & a) | o) ^ x)
    return src[s]


def _poison(ty: str, n: int) -> np.ndarray:
    if ty in ("float", "half"):
        return np.full(n, np.nan, _NP[ty])
    return np.full(n, 0x7FC00001 if ty == "i32" else 0x7E01, _NP[ty])


def evaluate(llir: str, start: str, values: np.ndarray) -> dict:
    """Every SSA value of ``llir`` computed from ``start`` (= ``values``, one per thread):
    the forward slice, in text order, of the supported instructions.  {name: array}."""
    env = {start: values}
    n = values.shape[0]

    def val(ty, tok):
        v = _VEC.match(ty)
        if v:
            if tok == "poison":
                return np.stack([_poison(v.group(2), n)] * int(v.group(1)), axis=1)
            return env.get(tok) if tok.startswith("%") else None
        if tok == "poison":
            return _poison(ty, n)
        if tok.startswith("%"):
            return env.get(tok)
        return np.full(n, float(tok) if ty in ("float", "half") else int(tok),
                       _NP.get(ty, np.float32))
    for line in llir.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        name, rhs = m.groups()
        toks = re.findall(r"%[\w.]+", rhs)
        if not any(t in env for t in toks):
            continue
        sv = _SHUF.match(rhs)
        if sv:            # a lane's columns from two vectors; one not in the slice: poison
            w, ty = int(sv.group(1)), sv.group(2)
            a, b = (env.get(t, np.stack([_poison(ty, n)] * w, axis=1))
                    for t in (sv.group(3), sv.group(4)))
            both = np.concatenate([a, b], axis=1)
            picks = [m.strip().split()[-1] for m in sv.group(5).split(",")]
            cols = [both[:, int(k)] if k.isdigit() else _poison(ty, n) for k in picks]
            env[name] = np.stack(cols, axis=1)
            continue
        b = _BIN.match(rhs)
        found = ([(b.group(2), b.group(3)), (b.group(2), b.group(4))] if b
                 else _ARG.findall(rhs))
        args = list(found)
        vs = [val(ty, tok) for ty, tok in args]
        if any(v is None for v in vs):
            continue
        op = rhs.split()[0]
        if not vs:
            raise Unsupported(f"operands of: {line.strip()[:100]}")
        if "update.dpp" in rhs:
            ints = [int(x) for x in re.findall(r"i32 (\d+)", rhs)[-3:]]
            bc = rhs.rstrip(")").endswith("true")
            env[name] = dpp(vs[0], vs[1], *ints, bc)
        elif "ds.swizzle" in rhs:
            env[name] = swizzle(vs[0], int(args[1][1]))
        elif "readlane" in rhs:
            lane = int(args[1][1])
            v = vs[0].reshape(-1, 64)
            env[name] = np.repeat(v[:, lane], 64)
        elif op in ("fadd", "fmul"):
            with np.errstate(all="ignore"):
                env[name] = vs[0] + vs[1] if op == "fadd" else vs[0] * vs[1]
        elif "llvm.maxnum" in rhs or "llvm.minnum" in rhs:
            env[name] = (np.fmax if "maxnum" in rhs else np.fmin)(vs[0], vs[1])
        elif op == "bitcast":
            to = rhs.split(" to ")[-1].strip()
            to = _VEC.match(to).group(2) if _VEC.match(to) else to
            env[name] = vs[0].view(_NP[to])
        elif op in ("sext", "zext", "trunc"):
            to = rhs.split(" to ")[-1].strip()
            x = vs[0]
            if op == "sext":
                x = x.view(np.int16).astype(np.int32).view(np.uint32)
            env[name] = x.astype(_NP[to])
        elif op == "extractelement":
            k = int(rhs.rsplit(" ", 1)[-1])
            env[name] = vs[0][:, k] if vs[0].ndim == 2 else vs[0]
        elif op == "insertelement":
            k = int(rhs.rsplit(" ", 1)[-1])
            if vs[0].ndim == 2:
                out = vs[0].copy()
                out[:, k] = vs[1]
                env[name] = out
            else:
                env[name] = vs[1]
        else:
            raise Unsupported(f"{op}: {line.strip()[:100]}")
    return env
