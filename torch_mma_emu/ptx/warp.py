"""Warp-level instructions: ``shfl.sync`` (idx / up / down / bfly, with the clamp and
segment mask of its ``c`` operand and the optional validity predicate), ``vote.sync``
(ballot / any / all / uni), ``activemask`` and ``redux.sync``.  A warp is 32 consecutive
linear thread indices; the lanes voting are the ones executing the instruction.  A source
lane that does not execute gives its register's current value (the PTX ISA: undefined)."""
from __future__ import annotations

import numpy as np

from .errors import Unsupported

U64 = np.uint64


def _per_warp(cta, lane_vals, reduce):
    n = cta.n
    pad = (-n) % 32
    v = np.concatenate([lane_vals, np.zeros(pad, lane_vals.dtype)]).reshape(-1, 32)
    r = reduce(v)
    return np.repeat(r, 32)[:n]


def i_shfl(cta, parts, o, act):
    mode = parts[2] if parts[1] == "sync" else parts[1]
    v = cta.val(o[1])
    b = cta.val(o[2]).astype(np.int64) & 31
    c = cta.val(o[3]).astype(np.int64)
    t = np.arange(cta.n)
    lane = t % 32
    seg = (c >> 8) & 31
    max_lane = (lane & seg) | (c & 31 & ~seg)
    min_lane = lane & seg
    if mode == "bfly":
        j = lane ^ b
        ok = j <= max_lane
    elif mode == "idx":
        j = min_lane | (b & ~seg)
        ok = j <= max_lane
    elif mode == "down":
        j = lane + b
        ok = j <= max_lane
    elif mode == "up":
        j = lane - b
        ok = j >= max_lane
    else:
        raise Unsupported("shfl mode " + mode)
    j = np.where(ok, j, lane)
    src = np.minimum(t - lane + j, cta.n - 1)
    d = o[0].split("|")
    cta.put(d[0], v[src], act)
    if len(d) > 1:
        cta.put(d[1], ok.astype(U64), act)


def _pred(cta, tok):
    if tok.startswith("!"):
        return (cta.val(tok[1:]) & U64(1)) == 0
    return (cta.val(tok) & U64(1)).astype(bool)


def i_vote(cta, parts, o, act):
    mode = parts[2] if parts[1] == "sync" else parts[1]
    p = _pred(cta, o[1]) & act
    lane = np.arange(cta.n) % 32
    if mode == "ballot":
        bits = np.where(p, U64(1) << lane.astype(U64), U64(0))
        r = _per_warp(cta, bits, lambda v: np.bitwise_or.reduce(v, axis=1))
    else:
        yes = _per_warp(cta, p.astype(np.int64), lambda v: v.sum(axis=1))
        on = _per_warp(cta, act.astype(np.int64), lambda v: v.sum(axis=1))
        r = {"any": yes > 0, "all": yes == on, "uni": (yes == 0) | (yes == on)}[mode]
    cta.put(o[0], np.asarray(r).astype(U64), act)


def i_activemask(cta, parts, o, act):
    lane = np.arange(cta.n) % 32
    bits = np.where(act, U64(1) << lane.astype(U64), U64(0))
    cta.put(o[0], _per_warp(cta, bits, lambda v: np.bitwise_or.reduce(v, axis=1)), act)


def i_redux(cta, parts, o, act):
    op, t = parts[2], parts[-1]
    v = cta.val(o[1]) & U64(0xFFFFFFFF)
    if t == "s32":
        v = ((v.astype(np.int64) << 32) >> 32)
    ident = {"add": 0, "and": -1 if t == "s32" else 0xFFFFFFFF, "or": 0, "xor": 0,
             "min": np.iinfo(np.int64).max, "max": np.iinfo(np.int64).min}
    if op not in ident:
        raise Unsupported(".".join(parts))
    x = np.where(act, v.astype(np.int64), ident[op])
    f = {"add": np.add, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
         "min": np.minimum, "max": np.maximum}[op]
    r = _per_warp(cta, x, lambda a: f.reduce(a, axis=1))
    cta.put(o[0], (r.astype(np.int64).astype(U64)) & U64(0xFFFFFFFF), act)


WARP = {"shfl": i_shfl, "vote": i_vote, "activemask": i_activemask, "redux": i_redux}
