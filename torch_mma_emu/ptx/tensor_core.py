"""Matrix instructions: ``ldmatrix`` (m8n8, x1 / x2 / x4, ``.trans``), ``mma.sync`` and
``wgmma`` (A in registers, B through a no-swizzle shared-memory descriptor) with the PTX ISA's
register fragments, each product computed by the registry's model of the instruction on the
launch's arch (``native.instruction_spec``: the model a GPU's instruction kernel is compared
with; ``cpp.gemm``, one call per instruction for all its warps).  The arch comes from the
launch (``Launch.arch``), so the matrix instructions refuse to run without one.

Fragments (PTX ISA, "Matrix fragments for mma.m16n8k*", "Register fragments for wgmma"):
lane l has group g = l // 4 and t = l % 4; a register holds e = 4 / (element bytes)
elements.  A: register j holds row g (j even) or g + 8 (j odd), columns t e + (0 .. e-1),
+ K / 2 for j >= 2 (m16n8k16 f16: (g, 2t), (g + 8, 2t), (g, 2t + 8), (g + 8, 2t + 8);
m16n8k8 tf32: (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); m16n8k32 fp8: (g, 4t ..),
(g + 8, 4t ..), (g, 4t + 16 ..), (g + 8, 4t + 16 ..)).  B: register j holds column n = g,
rows t e + (0 .. e-1) + j K / 2.  C / D: element i at (g + 8 (i // 2 % 2), 8 (i // 4) + 2t
+ i % 2), one per f32 register, two per f16 register; wgmma's warp w of the group adds
16 w to A's and D's rows."""
from __future__ import annotations

import re

import numpy as np

from .errors import Unsupported

U64 = np.uint64


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


# PTX operand type -> element format; the instruction kernel of isa.KERNELS (csrc/cuda/
# mma_instr.cu) whose registry model computes a (family, shape K, format) instruction
_FMT = {"f16": "fp16", "bf16": "bf16", "tf32": "tf32", "e4m3": "fp8_e4m3", "e5m2": "fp8_e5m2"}
_KERNEL = {("mma", 16, "fp16"): "mma.m16n8k16", ("mma", 16, "bf16"): "mma.m16n8k16",
           ("mma", 8, "fp16"): "mma.m16n8k8", ("mma", 8, "bf16"): "mma.m16n8k8",
           ("mma", 8, "tf32"): "mma.m16n8k8.tf32",
           ("mma", 32, "fp8_e4m3"): "mma.m16n8k32", ("mma", 32, "fp8_e5m2"): "mma.m16n8k32",
           ("wgmma", 16, "fp16"): "wgmma.m64n8k16", ("wgmma", 16, "bf16"): "wgmma.m64n8k16",
           ("wgmma", 8, "tf32"): "wgmma.m64n8k8.tf32",
           ("wgmma", 32, "fp8_e4m3"): "wgmma.m64n8k32", ("wgmma", 32, "fp8_e5m2"): "wgmma.m64n8k32"}
_ESIZE = {"fp16": 2, "bf16": 2, "tf32": 4, "fp8_e4m3": 1, "fp8_e5m2": 1}
_CODE = {1: np.uint8, 2: np.int16, 4: np.int32}
_SPECS: dict = {}


def _spec(arch, family, k, fa, fb, acc):
    """The registry's model of the instruction on ``arch`` (native.instruction_spec: the
    row the instruction kernel's results are compared with on a GPU), cached."""
    key = (arch, family, k, fa, fb, acc)
    if key not in _SPECS:
        from ..registry import instruction_spec
        kern = _KERNEL.get((family, k, fa))
        if kern is None or (family, k, fb) not in _KERNEL:
            raise Unsupported(f"{family} k{k} {fa} x {fb}: no instruction model")
        try:
            spec, why = instruction_spec(arch, fa, acc, kern, in_format_b=fb)
        except ValueError as e:
            raise Unsupported(f"{kern} on {arch}: {e}") from None
        if spec is None:
            raise Unsupported(f"{kern} {fa} x {fb} -> {acc} on {arch}: {why}")
        _SPECS[key] = spec
    return _SPECS[key]


def _a_pos(g, t, i, epr, k):
    """(row, col) of A element i of a lane (group g, thread t) in a 16-row fragment, for
    every mma.m16n8kK / wgmma register-A type (PTX ISA): register j = i // epr holds rows
    g (j even) or g + 8 (j odd), columns t * epr + i % epr, + K / 2 for j >= 2."""
    j = i // epr
    return g + 8 * (j % 2), t * epr + i % epr + (k // 2) * (j // 2)


def _b_k(t, i, epr, k):
    """k of B element i (column n = g): register j holds k = t * epr + i % epr + K / 2 j."""
    return t * epr + i % epr + (k // 2) * (i // epr)


def _elements(v, e, es):
    return ((v >> U64(8 * es * e)) & U64((1 << (8 * es)) - 1))


def _lanes(idx, rows):
    """Per thread of ``idx``: group g, t, its matrix (warp, or warpgroup for 64 rows) and
    the first row of its warp's 16 in that matrix."""
    pos = np.arange(len(idx))
    lane = pos % 32
    per = 32 * (rows // 16)
    return lane // 4, lane % 4, pos // per, 16 * ((pos // 32) % (rows // 16))


def _gather_a(cta, regs, idx, fa, k, rows):
    """A codes (W, rows, k) from the 16-row fragments of the threads ``idx``."""
    es = _ESIZE[fa]
    epr = 4 // es
    g, t, w, r0 = _lanes(idx, rows)
    A = np.zeros((len(idx) // (32 * (rows // 16)), rows, k), _CODE[es])
    for j, r in enumerate(regs):
        v = cta.val(r)[idx]
        for e in range(epr):
            row, col = _a_pos(g, t, j * epr + e, epr, k)
            A[w, r0 + row, col] = _elements(v, e, es).astype(_CODE[es])
    return A


def _acc_pos(g, t, i, r0):
    """(row, col) of accumulator element i (mma: 16 x 8; wgmma: 16 rows of a warp, N wide)."""
    return r0 + g + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * t + i % 2


def _gather_c(cta, regs, idx, acc, W, rows, n):
    g, t, w, r0 = _lanes(idx, rows)
    if acc == "fp32":
        C = np.zeros((W, rows, n), np.uint32)
        for i, r in enumerate(regs):
            row, col = _acc_pos(g, t, i, r0)
            C[w, row, col] = cta.val(r)[idx].astype(np.uint32)
        return C.view(np.float32)
    C = np.zeros((W, rows, n), np.uint16)
    for j, r in enumerate(regs):
        v = cta.val(r)[idx]
        for h in range(2):
            row, col = _acc_pos(g, t, 2 * j + h, r0)
            C[w, row, col] = _elements(v, h, 2).astype(np.uint16)
    return C.view(np.float16)


def _scatter_d(cta, regs, idx, D, acc, rows, act):
    g, t, w, r0 = _lanes(idx, rows)
    if acc == "fp32":
        bits = D.view(np.uint32)
        for i, r in enumerate(regs):
            out = np.zeros(cta.n, U64)
            row, col = _acc_pos(g, t, i, r0)
            out[idx] = bits[w, row, col].astype(U64)
            cta.put(r, out, act)
        return
    bits = D.view(np.uint16)
    for j, r in enumerate(regs):
        out = np.zeros(cta.n, U64)
        for h in range(2):
            row, col = _acc_pos(g, t, 2 * j + h, r0)
            out[idx] |= bits[w, row, col].astype(U64) << U64(16 * h)
        cta.put(r, out, act)


def _product(cta, family, k, fa, fb, acc, A, B, C):
    """D = the registry's model of one instruction per matrix of the batch (codes in, the
    accumulator's bits out): ``cpp.gemm`` of the instruction's spec with C as the chain's
    initial accumulator."""
    import torch

    from .. import cpp
    arch = getattr(cta.L, "arch", None)
    if arch is None:
        raise Unsupported(f"{family} needs the arch whose matrix unit computes it "
                          "(Launch.arch / Module.launch(arch=...))")
    spec = _spec(arch, family, k, fa, fb, acc)
    return cpp.gemm(spec, torch.from_numpy(A), torch.from_numpy(B),
                    torch.from_numpy(np.ascontiguousarray(C))).numpy()


def _whole_groups(cta, act, what, size=32):
    """The threads of the warps (size 32) or warpgroups (128) that run the instruction:
    each whole, else Unsupported."""
    aw = act.reshape(-1, size) if cta.n % size == 0 else None
    if aw is None or (aw.any(axis=1) != aw.all(axis=1)).any():
        raise Unsupported(f"{what} executed by part of a {'warp' if size == 32 else 'warpgroup'}")
    groups = np.nonzero(aw.all(axis=1))[0]
    return (groups[:, None] * size + np.arange(size)).reshape(-1), len(groups)


def i_mma(cta, parts, o, act):
    """mma.sync.aligned.m16n8k{8,16,32}.row.col.{f32,f16}.A.B.{f32,f16} (A, B: f16 / bf16
    (k8, k16), tf32 (k8), e4m3 / e5m2 (k32)): every warp's A, B, C gathered from its lanes'
    fragments, D = the registry's model of the instruction on the launch's arch."""
    q = [p for p in parts[1:] if p not in ("sync", "aligned")]
    m = re.fullmatch(r"m16n8k(\d+)", q[0]) if q else None
    if m is None or len(q) != 7 or q[1:3] != ["row", "col"] or q[3] != q[6] \
            or q[3] not in ("f32", "f16") or q[4] not in _FMT or q[5] not in _FMT:
        raise Unsupported("mma." + ".".join(parts[1:]) + " (modelled: m16n8k8 / k16 f16, "
                          "bf16, m16n8k8 tf32, m16n8k32 e4m3 / e5m2; row.col, D and C alike)")
    k, fa, fb = int(m.group(1)), _FMT[q[4]], _FMT[q[5]]
    acc = "fp32" if q[3] == "f32" else "fp16"
    if k * _ESIZE[fa] not in (16, 32):
        raise Unsupported("mma." + ".".join(parts[1:]) + " (shape and type do not fit)")
    regs = [_regs(x) for x in o[:4]]
    idx, W = _whole_groups(cta, act, "mma.sync")
    A = _gather_a(cta, regs[1], idx, fa, k, 16)
    es = _ESIZE[fb]
    epr = 4 // es
    g, t, w, _ = _lanes(idx, 16)
    B = np.zeros((W, k, 8), _CODE[es])
    for j, r in enumerate(regs[2]):
        v = cta.val(r)[idx]
        for e in range(epr):
            B[w, _b_k(t, j * epr + e, epr, k), g] = _elements(v, e, es).astype(_CODE[es])
    C = _gather_c(cta, regs[3], idx, acc, W, 16, 8)
    D = _product(cta, "mma", k, fa, fb, acc, A, B, C)
    _scatter_d(cta, regs[0], idx, D, acc, 16, act)


def _desc_b(cta, desc, n, k, es):
    """B (k x n codes) read from shared memory through a wgmma matrix descriptor (PTX ISA,
    "Matrix Descriptor Format"): start address bits 0-13, leading byte offset 16-29 (between
    core matrices along K), stride byte offset 32-45 (along N), all >> 4; base offset
    49-51 and swizzle 62-63 must be 0 (no swizzle, K-major): element (kk, nn) at byte
    start + (b // 16) LBO + (nn // 8) SBO + (nn % 8) 16 + b % 16, b = kk * es."""
    d = int(desc)
    start, lbo, sbo = (d & 0x3FFF) << 4, ((d >> 16) & 0x3FFF) << 4, ((d >> 32) & 0x3FFF) << 4
    if (d >> 49) & 7 or (d >> 62) & 3:
        raise Unsupported(f"wgmma descriptor {d:#x}: swizzle or base offset (only the "
                          "no-swizzle K-major layout is modelled)")
    if n > 8 and lbo != sbo:
        raise Unsupported("wgmma descriptor with N > 8 and distinct leading / stride byte "
                          "offsets (which one steps along N is not checked against a GPU)")
    kk, nn = np.meshgrid(np.arange(k), np.arange(n), indexing="ij")
    b = kk * es
    addr = (start + (b // 16) * lbo + (nn // 8) * sbo + (nn % 8) * 16 + b % 16).reshape(-1)
    raw = cta.mem.read("shared", addr.astype(U64), es, np.ones(addr.size, bool),
                       lambda i: f"wgmma B element {i}")
    return raw.astype(_CODE[es]).reshape(k, n)


def i_wgmma(cta, parts, o, act):
    """``wgmma.mma_async.sync.aligned.m64nNkK.{f32,f16}.A.B`` over warpgroups of 128
    threads: A from registers (each warp 16 rows, the mma.sync fragment of its type), B
    through its shared-memory descriptor (``_desc_b``), scale-d from the predicate operand,
    D = the registry's model on the launch's arch; or, where the launch gives the result
    (``Launch.wgmma``: a (64, N) array), that result (descriptors not read).  D: register i
    of lane l of warp w holds row 16 w + l // 4 + 8 (i // 2 % 2), column 2 (l % 4) + i % 2
    + 8 (i // 4) (f16: two per register).  fence / commit_group / wait_group: no-ops (one
    CTA's threads run to each instruction together)."""
    if parts[1] in ("fence", "commit_group", "wait_group"):
        return
    given = getattr(cta.L, "wgmma", None)
    if given is not None:
        if parts[1] != "mma_async" or cta.n != 128:
            raise Unsupported("wgmma." + ".".join(parts[1:]) + " (a given result: one "
                              "m64nN tile over 4 warps)")
        X = np.asarray(given, np.float32)
        t = np.arange(cta.n)
        w, lane = t // 32, t % 32
        for i, r in enumerate(_regs(o[0])):
            row = 16 * w + lane // 4 + 8 * ((i // 2) % 2)
            col = 2 * (lane % 4) + i % 2 + 8 * (i // 4)
            cta.put(r, X[row, col].view(np.uint32).astype(U64), act)
        return
    q = [p for p in parts[1:] if p not in ("sync", "aligned")]
    m = re.fullmatch(r"m64n(\d+)k(\d+)", q[1]) if len(q) > 1 else None
    if q[0] != "mma_async" or m is None or len(q) != 5 or q[2] not in ("f32", "f16") \
            or q[3] not in _FMT or q[4] not in _FMT or not o[1].strip().startswith("{"):
        raise Unsupported("wgmma." + ".".join(parts[1:]) + " (modelled: mma_async m64nNkK "
                          "with A in registers, B by a no-swizzle descriptor)")
    n, k, fa, fb = int(m.group(1)), int(m.group(2)), _FMT[q[3]], _FMT[q[4]]
    acc = "fp32" if q[2] == "f32" else "fp16"
    scale_ab = [x.strip() for x in o[4:6]]
    trans = [x.strip() for x in o[6:]]
    if scale_ab != ["1", "1"] or trans not in ([], ["0"], ["0", "0"]):
        raise Unsupported(f"wgmma imm-scale-a/b {scale_ab} / imm-trans {trans} (modelled: "
                          "1, 1 and no transpose)")
    idx, G = _whole_groups(cta, act, "wgmma", 128)
    A = _gather_a(cta, _regs(o[1]), idx, fa, k, 64)
    desc = cta.val(o[2].strip())[idx]
    scale_d = cta.val(o[3].strip())[idx]
    es = _ESIZE[fb]
    B = np.zeros((G, k, n), _CODE[es])
    keep = np.zeros(G, bool)
    for gi in range(G):
        grp = slice(128 * gi, 128 * (gi + 1))
        if len(set(desc[grp].tolist())) != 1 or len(set(scale_d[grp].tolist())) != 1:
            raise Unsupported("wgmma with a descriptor or scale-d that differs over the warpgroup")
        B[gi] = _desc_b(cta, desc[grp][0], n, k, es)
        keep[gi] = bool(scale_d[grp][0])
    C = _gather_c(cta, _regs(o[0]), idx, acc, G, 64, n)
    C[~keep] = 0
    D = _product(cta, "wgmma", k, fa, fb, acc, A, B, C)
    _scatter_d(cta, _regs(o[0]), idx, D, acc, 64, act)


TENSOR = {"ldmatrix": i_ldmatrix, "mma": i_mma, "wgmma": i_wgmma}
