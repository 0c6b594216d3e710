"""Matrix instructions: ``ldmatrix`` (m8n8, x1 / x2 / x4, ``.trans``), ``mma.sync`` with the
PTX ISA's register fragments and its product computed by the arch registry's model of the
instruction (``ops.emulated_mm`` with the instruction's id, one call per instruction for all
its warps), and ``wgmma`` with its result given by the caller (the operand descriptors are
not read).  The arch comes from the launch (``Launch.arch``): a product is what that arch's
matrix unit computes, so ``mma.sync`` refuses to run without one.

Fragments (PTX ISA, "Matrix fragments for mma.m16n8k16" and "mma.m16n8k8"): lane l has
group g = l // 4 and t = l % 4.  m16n8k16 (f16 / bf16): A regs (g, 2t), (g + 8, 2t),
(g, 2t + 8), (g + 8, 2t + 8), each two elements along k; B regs k = 2t and 2t + 8 (two
along k), n = g; C / D (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).  m16n8k8 tf32:
A regs (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); B regs k = t and t + 4, n = g."""
from __future__ import annotations

import re

import numpy as np

from .errors import Unsupported

U64 = np.uint64

# (shape, A/B type) -> (instruction id of isa.py, torch dtype name, in_format)
_MMA = {("m16n8k16", "f16"): ("hmma.16816", "float16", None),
        ("m16n8k16", "bf16"): ("hmma.16816", "bfloat16", None),
        ("m16n8k8", "tf32"): ("hmma.1684", "float32", "tf32")}


def _regs(op: str) -> list:
    return [x.strip() for x in op.strip("{} ").split(",")]


def i_ldmatrix(cta, parts, o, act):
    """ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16: lanes 8i .. 8i + 7 give the
    row addresses of matrix i; lane l receives row l // 4, columns 2 (l % 4) and + 1 (with
    ``.trans``: rows 2 (l % 4) and + 1 of column l // 4)."""
    if "m8n8" not in parts or "b16" not in parts:
        raise Unsupported("ldmatrix." + ".".join(parts[1:]) + " (m8n8 .b16 only)")
    count = int(next(x for x in parts if re.fullmatch(r"x\d", x))[1:])
    dsts = _regs(o[0])
    sym, a = cta.address(o[1])
    space = "shared" if sym in (None, "shared") else sym
    t = np.arange(cta.n)
    warp0, lane = t - t % 32, t % 32
    src = lambda r: np.minimum(warp0 + r, cta.n - 1)  # noqa: E731  (lane holding the row)
    for m, d in enumerate(dsts[:count]):
        if "trans" in parts:
            lo = cta.mem.read(space, a[src(8 * m + 2 * (lane % 4))] + U64(2) * (lane // 4).astype(U64),
                              2, act, cta.who)
            hi = cta.mem.read(space, a[src(8 * m + 2 * (lane % 4) + 1)] + U64(2) * (lane // 4).astype(U64),
                              2, act, cta.who)
            v = lo | (hi << U64(16))
        else:
            v = cta.mem.read(space, a[src(8 * m + lane // 4)] + U64(4) * (lane % 4).astype(U64),
                             4, act, cta.who)
        cta.put(d, v, act)


def _half(v, h, dtype):
    import torch
    bits = ((v >> U64(16 * h)) & U64(0xFFFF)).astype(np.uint16).astype(np.int16)
    return torch.from_numpy(bits).view(getattr(torch, dtype))


def _f32(v):
    import torch
    return torch.from_numpy((v & U64(0xFFFFFFFF)).astype(np.uint32).view(np.int32)).view(torch.float32)


def i_mma(cta, parts, o, act):
    """mma.sync.aligned.{m16n8k16 (f16, bf16), m16n8k8 (tf32)}.row.col.f32.X.X.f32: every
    warp's A, B, C gathered from its lanes' fragments, D = the arch's instruction model."""
    import torch

    from ..ops import emulated_mm
    q = [p for p in parts[1:] if p not in ("sync", "aligned")]
    shape = q[0]
    key = (shape, q[-2] if len(q) >= 6 else "")
    if len(q) != 7 or q[1:3] != ["row", "col"] or q[3] != "f32" or q[6] != "f32" \
            or q[4] != q[5] or key not in _MMA:
        raise Unsupported("mma." + ".".join(parts[1:]) + " (modelled: m16n8k16 f16 / bf16 "
                          "and m16n8k8 tf32, row.col, f32 accumulators)")
    arch = getattr(cta.L, "arch", None)
    if arch is None:
        raise Unsupported("mma.sync needs the arch whose matrix unit computes it "
                          "(Launch.arch / Module.launch(arch=...))")
    iid, dtype, in_format = _MMA[key]
    regs = [_regs(x) for x in o[:4]]
    n = cta.n
    aw = act.reshape(-1, 32) if n % 32 == 0 else None
    if aw is None or (aw.any(axis=1) != aw.all(axis=1)).any():
        raise Unsupported("mma.sync executed by part of a warp")
    warps = np.nonzero(aw.all(axis=1))[0]
    idx = (warps[:, None] * 32 + np.arange(32)).reshape(-1)
    W = len(warps)
    lane = np.arange(32)
    g, t = np.tile(lane // 4, W), np.tile(lane % 4, W)
    w = np.repeat(np.arange(W), 32)
    K = 16 if shape == "m16n8k16" else 8
    tdt = getattr(torch, dtype)
    A = torch.zeros(W, 16, K, dtype=tdt)
    B = torch.zeros(W, K, 8, dtype=tdt)
    C = torch.zeros(W, 16, 8, dtype=torch.float32)
    for i, r in enumerate(regs[1]):
        v = cta.val(r)[idx]
        row = g + 8 * (i % 2)
        if K == 16:
            col = 2 * t + 8 * (i // 2)
            A[w, row, col], A[w, row, col + 1] = _half(v, 0, dtype), _half(v, 1, dtype)
        else:
            A[w, row, t + 4 * (i // 2)] = _f32(v)
    for i, r in enumerate(regs[2]):
        v = cta.val(r)[idx]
        if K == 16:
            k = 2 * t + 8 * i
            B[w, k, g], B[w, k + 1, g] = _half(v, 0, dtype), _half(v, 1, dtype)
        else:
            B[w, t + 4 * i, g] = _f32(v)
    for i, r in enumerate(regs[3]):
        C[w, g + 8 * (i // 2), 2 * t + i % 2] = _f32(cta.val(r)[idx])
    D = emulated_mm(A, B, C, arch=arch, in_format=in_format, out_dtype=torch.float32,
                    instruction=iid)
    for i, r in enumerate(regs[0]):
        out = np.zeros(n, U64)
        vals = D[w, g + 8 * (i // 2), 2 * t + i % 2].contiguous().view(torch.int32).numpy()
        out[idx] = vals.view(np.uint32).astype(U64)
        cta.put(r, out, act)


def i_wgmma(cta, parts, o, act):
    """``wgmma.mma_async`` of one m64nN tile over one warpgroup (128 threads) whose result
    the caller gives (``Launch.wgmma``: a (64, N) array; the operand descriptors are not
    read): register i of lane l of warp w holds row 16 w + l // 4 + 8 (i // 2 % 2), column
    2 (l % 4) + i % 2 + 8 (i // 4).  fence / commit_group / wait_group: no-ops (one CTA's
    threads run to each instruction together)."""
    if parts[1] in ("fence", "commit_group", "wait_group"):
        return
    given = getattr(cta.L, "wgmma", None)
    if parts[1] != "mma_async" or given is None or cta.n != 128:
        raise Unsupported("wgmma." + ".".join(parts[1:]) + " (only one m64nN tile over 4 "
                          "warps, with its result given)")
    X = np.asarray(given, np.float32)
    t = np.arange(cta.n)
    w, lane = t // 32, t % 32
    for i, r in enumerate(_regs(o[0])):
        row = 16 * w + lane // 4 + 8 * ((i // 2) % 2)
        col = 2 * (lane % 4) + i % 2 + 8 * (i // 4)
        cta.put(r, X[row, col].view(np.uint32).astype(U64), act)


TENSOR = {"ldmatrix": i_ldmatrix, "mma": i_mma, "wgmma": i_wgmma}
