"""Running csrc/cuda/gemm_cuda.cu's kernels (nvcc's sm_80 PTX) in the PTX interpreter, the
way ``gemm_cuda`` launches them: its by-value structs (Params, FormatDesc, View3, Planes,
Scales) packed as bytes from the parameter vector the CPU path uses (``cpp.params``), the
decoded planes in global memory reached through the structs' pointers.

Struct layouts (csrc/core/params.h, csrc/gemm.h, gemm_cuda.cu; the host and the device ABI
agree: natural alignment, little endian):
  FormatDesc  7 x int32                                                    28 bytes
  Params      12 x int32, u64 nan_bits @48, 4 FormatDesc @56, 8 x int32   200 bytes
  View3       ptr base, int64 s0, s1, s2 (byte strides), int32 esize       40 bytes
  Planes      ptr sig, exp, cls, flags, int64 rows, Kp                     48 bytes
"""
from __future__ import annotations

import gzip
import re
import struct
from pathlib import Path

import numpy as np

from torch_mma_emu import ptx
from torch_mma_emu.cpp import LAYOUT

PTX_FILE = Path(__file__).parent / "data" / "cuda_ptx" / "gemm_cuda_sm80.ptx.gz"
THREADS, KT, BM = 256, 32, 32             # gemm_cuda.cu: kThreads, kKT, kBM (= kBN)
RHO = {n: i for i, n in enumerate(LAYOUT["rhos"])}
OPS = {n: i for i, n in enumerate(LAYOUT["ops"])}
FP32_DESC = (2, 8, 23, 127, 0, 1, 0)      # gemm_cuda.cu kFp32Desc / kFp16Desc
FP16_DESC = (5, 5, 10, 15, 0, 1, 0)


def named(vec) -> dict:
    return dict(zip(LAYOUT["params"], (int(v) for v in vec)))


def fmt_desc(p: dict, f: str) -> tuple:
    return tuple(p[f"{f}_{k}"] for k in ("code", "ebits", "mbits", "bias", "nan_style",
                                         "signed", "container"))


def pack_params(vec) -> bytes:
    """Params as params.h's parse_params fills it from the vector."""
    p = named(vec)
    head = [p[n] for n in ("op", "L", "F", "F2", "rho", "P", "G", "block", "emax_floor",
                           "align_rd", "flush_inputs", "epilogue")]
    nan = ((p["nan_hi"] & 0xFFFFFFFF) << 32) | (p["nan_lo"] & 0xFFFFFFFF)
    fmts = sum((fmt_desc(p, f) for f in ("fa", "fb", "fo", "fs")), ())
    tail = [p[n] for n in ("passes", "pass_width", "c_final", "zero_exp", "zero_plus",
                           "group_keep", "tr_renorm", "c_emin")]
    out = struct.pack("<12iQ28i8i", *head, nan, *fmts, *tail)
    assert len(out) == 200
    return out


def fast_plan(p: dict):
    """fast_tfdpa.h fast_tfdpa_plan: (ok, wide, G)."""
    if p["op"] != OPS["t_fdpa"] or p["passes"] > 1 or p["c_final"] or p["c_emin"] > -(1 << 20):
        return False, False, 0
    if p["L"] not in (4, 8, 16, 32):
        return False, False, 0
    g = p["F"] - (p["fa_mbits"] + p["fb_mbits"])
    if g < 0 or p["F"] > 29:
        return False, False, 0
    lg = (p["L"] - 1).bit_length()
    return True, p["F"] + 2 + lg > 31, g


def has_fixed(L: int, rho: int) -> bool:
    return ((rho == RHO["rz_fp32"] and L in (8, 16)) or (rho == RHO["rz_e8m13"] and L in (16, 32))
            or (rho == RHO["rne_fp16"] and L in (8, 16, 32)))


def kernel_for(vec, values_dtype=np.float32) -> str:
    """The suffix (after the anonymous namespace) of the mangled kernel gemm_cuda launches."""
    p = named(vec)
    if p["op"] in (OPS["fma"], OPS["ftz_addmul"]):
        return "values_kernelI" + ("d" if values_dtype == np.float64 else "f") + "EE"
    ok, wide, _ = fast_plan(p)
    if ok:
        rho = p["rho"]
        std = (fmt_desc(p, "fo") == FP16_DESC if rho == RHO["rne_fp16"] else
               fmt_desc(p, "fo") == FP32_DESC if rho in (RHO["rz_fp32"], RHO["rz_e8m13"])
               else False)
        r = rho if (not wide and std and has_fixed(p["L"], rho)) else -1
        rs = f"n{-r}" if r < 0 else str(r)
        return f"fast_tfdpa_kernelILi{p['L']}ELb{int(wide)}ELi{rs}EE"
    return f"generic_kernelILi{p['op']}EE"


def codes(fmt: str, shape, g, special: str | None):
    """Random codes of ``fmt`` (finite values; one infinity or NaN planted if asked)."""
    import torch

    from torch_mma_emu.formats import INT_OF_SIZE, get_format, storage_dtype, value_table
    f = get_format(fmt)
    sd = storage_dtype(f)
    if f.bits > 8:                        # fp16, bf16, tf32 / xf32 (fp32 codes), fp32, fp64
        t = torch.randn(shape, generator=g, dtype=torch.float64).to(sd)
        if special:
            t[(0,) * len(shape)] = float("inf") if special == "inf" else float("nan")
        return t.view(INT_OF_SIZE[t.element_size()])
    table = value_table(fmt)
    finite = torch.nonzero(torch.isfinite(table) & (table.abs() < 1e4)).flatten()
    codes = finite[torch.randint(len(finite), shape, generator=g)]
    if special:
        hit = torch.nonzero(torch.isinf(table) if special == "inf" else torch.isnan(table)).flatten()
        if len(hit):
            codes[(0, 1) + (3,) * (len(shape) - 2)] = hit[0]
    return codes.to(INT_OF_SIZE[torch.empty((), dtype=sd).element_size()])


def _kernels(mod, suffix):
    hits = [n for n in mod.kernels if re.search(r"\d" + re.escape(suffix), n)]
    return hits


def load_module(text: str | None = None, keep=None):
    """The PTX module (default: the committed file); ``keep``: name fragments, only the
    kernels whose names hold one are parsed (nvcc inlines every device function into its
    kernels, so an entry stands alone)."""
    if text is None:
        text = gzip.decompress(PTX_FILE.read_bytes()).decode()
    if keep is not None:
        parts = re.split(r"\n(?=(?:\.visible |\.weak )?\.entry )", text)
        text = "\n".join(parts[:1] + [p for p in parts[1:]
                                      if any(k in p.split("(", 1)[0] for k in keep)])
    return ptx.Module(text)


def blocks_for(work: int, per: int) -> int:
    return max(1, min(-(-work // per), 1 << 20))


class _Mem:
    """The launch's global buffers by name (in a fixed order, so each keeps its address)."""

    def __init__(self):
        self.bufs = {}

    def add(self, name, arr):
        self.bufs[name] = np.ascontiguousarray(arr)
        return ptx.buffer_address(len(self.bufs) - 1)


def storage_view(t):
    """(flat uint8 array of the storage ``t`` spans from its first element, its strides in
    bytes): a tensor's own layout (expanded, transposed, batch-strided) as the kernel sees it
    through a View3.  NumPy arrays are taken as they are (their strides too)."""
    import torch
    if isinstance(t, np.ndarray):
        t = torch.from_numpy(t)
    es = t.element_size()
    if t.numel() == 0:
        return np.zeros(8, np.uint8), (0,) * t.dim()
    if min(t.stride()) < 0:
        raise ValueError("negative strides")
    span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    flat = torch.as_strided(t, (span,), (1,), t.storage_offset()).contiguous()
    return flat.view(torch.uint8).numpy().copy(), tuple(st * es for st in t.stride())


def view3_of(mem, name, t) -> bytes:
    """A View3 over ``t``'s storage placed in ``mem`` as buffer ``name``."""
    buf, st = storage_view(t)
    es = t.element_size() if hasattr(t, "element_size") else t.itemsize
    return struct.pack("<Q3qi4x", mem.add(name, buf), *st, es)


def _np(t):
    return t.numpy() if hasattr(t, "numpy") else t


def run_values(mod, a3, b3, c3, vec, max_steps):
    """gemm_values: one thread per output, A and B^T contiguous copies in c's dtype (as the
    host makes them), C read through its own strides."""
    Bt, M, K = a3.shape
    N = b3.shape[2]
    a3, b3 = _np(a3), _np(b3)
    cdt = _np(c3).dtype
    suffix = kernel_for(vec, cdt)
    (name,) = _kernels(mod, suffix)
    bt = np.ascontiguousarray(b3.transpose(0, 2, 1))
    out = np.zeros((Bt, M, N), cdt)
    cbuf, cst = storage_view(c3)
    cs = [np.int64(x // cdt.itemsize) for x in cst]
    st = mod.launch(name, blocks_for(Bt * M * N, THREADS), THREADS,
                    [pack_params(vec), np.ascontiguousarray(a3), bt, cbuf.view(cdt),
                     *cs, out, np.int64(Bt), np.int64(M), np.int64(N), np.int32(K)],
                    max_steps=max_steps)
    return out, suffix, [st]


def run_gemm(mod, a3, b3, c3, vec, sa3=None, sb3=None, max_steps=50_000_000):
    """gemm_cuda in the interpreter: a3 (B, M, K), b3 (B, K, N) integer codes (values for
    fma / ftz_addmul), c3 (B, M, N) in the output dtype, block scales sa3 (B, M, nblk) /
    sb3 (B, nblk, N); NumPy arrays or torch tensors of any strides (each read through a
    View3 of its own strides, as the host passes them).  Returns (out, kernel suffix,
    [Stats])."""
    p = named(vec)
    if p["op"] in (OPS["fma"], OPS["ftz_addmul"]):
        return run_values(mod, a3, b3, c3, vec, max_steps)
    Bt, M, K = a3.shape
    N = b3.shape[2]
    Kp = -(-K // KT) * KT
    mem = _Mem()
    views = {"a": view3_of(mem, "a", a3), "b": view3_of(mem, "b", b3),
             "c": view3_of(mem, "c", c3)}
    out = np.zeros((Bt, M, N), _np(c3).dtype)
    planes = {}
    for side, rows in (("A", M), ("B", N)):
        n = max(1, Bt * rows * Kp)
        addrs = [mem.add(f"{side}.sig", np.zeros(n, np.int32)),
                 mem.add(f"{side}.exp", np.zeros(n, np.int32)),
                 mem.add(f"{side}.cls", np.zeros(n, np.uint8)),
                 mem.add(f"{side}.flags", np.zeros(max(1, Bt * rows), np.int32))]
        planes[side] = struct.pack("<4Q2q", *addrs, rows, Kp)
    stats = []
    dec = _kernels(mod, "decode_kernelE")
    assert len(dec) == 1, dec
    for side, v, transposed, f, rows in (("A", views["a"], False, "fa", M),
                                         ("B", views["b"], True, "fb", N)):
        total = Bt * rows * Kp
        fd = struct.pack("<7i", *fmt_desc(p, f))
        stats.append(mod.launch(dec[0], blocks_for(total, THREADS), THREADS,
                                [v, np.int64(0),
                                 np.uint8(transposed), fd, np.int64(Bt), np.int64(K),
                                 planes[side]], buffers=mem.bufs, max_steps=max_steps))
    scales = struct.pack("<4Qq", 0, 0, 0, 0, 0)
    if sa3 is not None:            # block scales: decode_scales_kernel, Dec = 12 bytes
        nblk = sa3.shape[2]
        dec_s = _kernels(mod, "decode_scales_kernelE")
        ptrs = {}
        for side, arr, transposed, rows in (("sa", sa3, False, M), ("sb", sb3, True, N)):
            sv = view3_of(mem, side, arr)
            ptrs[side] = (mem.add(f"{side}.dec", np.zeros(max(1, Bt * rows * nblk * 12), np.uint8)),
                          mem.add(f"{side}.flags", np.zeros(max(1, Bt * rows), np.int32)))
            stats.append(mod.launch(
                dec_s[0], blocks_for(Bt * rows * nblk, THREADS), THREADS,
                [sv, np.int64(0), np.uint8(transposed),
                 struct.pack("<7i", *fmt_desc(p, "fs")), np.int64(Bt), np.int64(rows),
                 np.int64(nblk), np.uint64(ptrs[side][0]), np.uint64(ptrs[side][1])],
                buffers=mem.bufs, max_steps=max_steps))
        scales = struct.pack("<4Qq", ptrs["sa"][0], ptrs["sb"][0], ptrs["sa"][1],
                             ptrs["sb"][1], nblk)
    suffix = kernel_for(vec)
    names = _kernels(mod, suffix)
    if not names:
        raise LookupError(f"kernel {suffix} is not in the PTX file")
    tail = [views["c"], np.int64(0), np.int64(Bt), np.int64(M), np.int64(N), np.int32(K), out,
            np.int32(out.itemsize)]
    if suffix.startswith("fast"):
        ok, wide, G = fast_plan(p)
        tiles = Bt * -(-M // BM) * -(-N // BM)
        args = [pack_params(vec), np.int32(G), planes["A"], planes["B"]] + tail
        grid = max(1, min(tiles, 1 << 20))
    else:
        args = [pack_params(vec), planes["A"], planes["B"], scales] + tail
        grid = blocks_for(Bt * M * N, THREADS)
    stats.append(mod.launch(names[0], grid, THREADS, args, buffers=mem.bufs,
                            max_steps=max_steps))
    return out, suffix, stats
