"""RCCL's reduction orders and arithmetic (modelled version: RCCL 2.21.5, ROCm/rccl, the
release for ROCm 6.3.0; ``makefiles/version.mk``).

RCCL runs NCCL's ring and tree kernels with NCCL 2.21's older work split; the structure
is :mod:`.nccl`'s (reused through its public functions), the split and chunking are
RCCL's (cited as "RCCL 2.21.5 src/..."):

* Ring allreduce (src/device/all_reduce.h runRing, lines 16-207): chunk c of a loop is
  sent by ring position c+1 (``chunk = ringIx + nranks - 1``), reduced by c+2, ...,
  finished by position c, as in NCCL; in the last loop of a channel the chunk is
  ``args->lastChunkCount`` (line 75).  Reduce-scatter (src/device/reduce_scatter.h 40-56)
  and the tree (all_reduce.h runTreeUpDown / runTreeSplit, src/graph/trees.cc 31-113,
  src/graph/connect.cc connectTrees 284-368: tree 1 on channels c + nChannels) are NCCL's,
  and so is a step's fold: own value first, then the peers in order
  (src/device/common_kernel.h reduceCopyPacks 97-131).
* Channel split (src/enqueue.cc scheduleCollTasksToPlan 812-938): a collective alone in
  its plan goes through addCBDCollToPlan (lines 483-564): ``maxBytesPerChannel =
  alignUp(divUp(bytes, nChannels), 16)`` (line 903), and channel c, in order, takes
  ``min(alignUp(divUp(maxBytesPerChannel, sizeof(T)), alignCount), remaining)`` elements
  (line 507).  With a tuner plugin that fixes nChannels (``userTuned``, line 1650) it goes
  through addTunedCollToPlan (376-479): ``countPerChannels = alignUp(divUp(count,
  nChannels), alignCount)`` on channels 0, 1, ... (lines 398-436), the same split for one
  collective (alignCount * sizeof(T) is a multiple of 16 bytes).
* alignCount (computeCollAlignCount, lines 265-275): Simple ``NCCL_SIMPLE_ALIGNMENT /
  sizeof(T)`` with ``NCCL_SIMPLE_ALIGNMENT = WARP_SIZE * 8 * 16`` bytes
  (src/include/enqueue.h 17; WARP_SIZE 64 on CDNA: 8192 B); LL and LL128
  ``8 / sizeof(T) * nThreads`` (nThreads: ``maxThreads[algo][proto]``, 256 unless
  ``NCCL_NTHREADS`` / ``NCCL_LL128_NTHREADS``; src/graph/tuning.cc 305-325).
* Chunk (computeCollChunkInfo, lines 1844-1913, ring allreduce): ``buffSize / NCCL_STEPS``
  times ALLREDUCE_CHUNKSTEPS (4) for Simple; LL half a step; LL128 a step times 7/8
  (NCCL_LL128_LINEELEMS 8, DATAELEMS 7); buffer sizes src/init.cc 837-839 (LL 8 lines x
  256 threads x 8 steps x 16 B, LL128 28 x 256 x 8 x 8 B, Simple 4 MiB).  The last loop's
  chunk: ``alignUp(divUp(workCount % (nRanks * chunkCount), nRanks), alignCount)``
  (computeCollLastChunkInfo, lines 277-296) -- NCCL 2.30.7 aligns it to 16 bytes, RCCL to
  alignCount: with Simple, a small message lies in chunk 0 whole (``ring_allreduce`` of
  10 fp32 on 3 ranks: one chain x1 + x2 + x0, where NCCL has three).
* Arithmetic (src/device/reduce_kernel.h): fp16 ``__hadd``; bf16 on AMD
  ``(hip_bfloat16)((float)x + (float)y)`` (line 260; HIP's hip_bfloat16(float), ROCm/clr
  amd_hip_bfloat16.h float_to_bfloat16, rounds to nearest even; a NaN keeps its payload
  there, the model gives the canonical NaN); fp8 ``rccl_float8(float(x) + float(y))`` / ``rccl_bfloat8`` (lines 267-272): the
  float sum clipped to the format's largest finite value (``rccl_float8_downcast_clipping``,
  src/include/rccl_float8.h 47-48, 364-366) and rounded to nearest even into the FNUZ
  formats (e4m3 bias 8, max 240; e5m2 bias 16, max 57344; no infinities, NaN 0x80).
  AVG: PreMulSum with ``float(1.0 / nRanks)`` in the type (src/enqueue.cc 2006-2040), on
  integers SumPostDiv -- as NCCL.  f16 / bf16 / f32 / f64 folds are
  :func:`.nccl.reduce_values`'.

Not modelled: RCCL's choice of algorithm / protocol / channels (tuning tables, the MI300
``pivotA2ANumBiRings`` override to Tree/LL below 2.2 MB, enqueue.cc 1697-1712), several
collectives in one plan (they share maxBytesPerChannel), MSCCL (:mod:`.msccl` parses its
XML algorithms), MSCCL++, CollNet, NVLS.  Verified only against the source text: no AMD
GPU was available.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from . import nccl
from .ranges import Ranges

VERSION = "2.21.5"
ALGOS = nccl.ALGOS
PROTOS = nccl.PROTOS
_STEPS = 8                                  # src/include/device.h:32 NCCL_STEPS
WARP_SIZE = 64                              # CDNA wavefront (device.h:63 warpSize)
SIMPLE_ALIGNMENT = WARP_SIZE * 8 * 16       # src/include/enqueue.h:17, bytes
LL_ALIGNMENT_PER_THREAD = 8                 # enqueue.h:15 sizeof(uint64_t)
BYTES_ALIGNMENT = 16                        # enqueue.h:18
NTHREADS = 256                              # device.h:68-87 NCCL_*_MAX_NTHREADS
# src/init.cc 837-839: DEFAULT_LL_BUFFSIZE, DEFAULT_LL128_BUFFSIZE, DEFAULT_BUFFSIZE
BUFFSIZE = {"ll": 8 * 256 * _STEPS * 16, "ll128": 28 * 256 * _STEPS * 8, "simple": 1 << 22}
ALLREDUCE_CHUNKSTEPS = _STEPS // 2          # src/include/collectives.h:16
MAX_CHANNELS = 128                          # device.h:65 MAXCHANNELS
# src/include/comm.h 40-42 NCCL_{LL,LL128,SIMPLE}_THREAD_THRESHOLD (tuning.cc 589-595: the
# ring's LL one times nRanks)
THREAD_THRESHOLD = {"ll": 8, "ll128": 8, "simple": 64}
# RCCL's fp8 (rccl_float8 / rccl_bfloat8): the FNUZ formats, largest finite value
FP8 = {"float8_e4m3fnuz": 240.0, "float8_e5m2fnuz": 57344.0}


def _align_up(a: int, b: int) -> int:
    return -(-a // b) * b


def align_count(proto: str, esize: int, nthreads: int = NTHREADS) -> int:
    """computeCollAlignCount (RCCL 2.21.5 src/enqueue.cc 265-275) in elements."""
    nccl.check_choice("protocol", proto, PROTOS)
    nccl.check_positive("nthreads", nthreads)
    if proto == "simple":
        return max(1, SIMPLE_ALIGNMENT // esize)
    return max(1, LL_ALIGNMENT_PER_THREAD // esize) * nthreads


def chunk_count(proto: str, esize: int) -> int:
    """The ring allreduce chunk in elements (computeCollChunkInfo, src/enqueue.cc
    1844-1913, pattern RingTwice: no size reduction)."""
    nccl.check_choice("protocol", proto, PROTOS)
    size = BUFFSIZE[proto] // _STEPS * (ALLREDUCE_CHUNKSTEPS if proto == "simple" else 1)
    if proto == "ll":
        size //= 2
    if proto == "ll128":
        size = size // 8 * 7
    return size // esize


def element_size(dtype) -> int:
    """Bytes of an element: :func:`.nccl.element_size`, plus RCCL's two fp8 formats."""
    name = str(dtype).replace("torch.", "")
    return 1 if name in FP8 else nccl.element_size(dtype)


def collective_channels(count: int, dtype, nranks: int, algo: str = "ring",
                        proto: str = "simple", comm_channels: int = 1,
                        nthreads: int = NTHREADS) -> int:
    """The channels one collective uses out of the communicator's ``comm_channels``
    (``NCCL_MIN_NCHANNELS`` = ``NCCL_MAX_NCHANNELS``): getChannnelThreadInfo (RCCL 2.21.5
    src/enqueue.cc 1657-1686) drops one channel while ``bytes < nc * nThreads *
    threadThreshold`` (AMD keeps the threads).  Not modelled: the MI300 override to
    Tree / LL below 2.2 MB without NCCL_ALGO / NCCL_PROTO (lines 1697-1712)."""
    nccl.check_positive("comm_channels", comm_channels)
    nccl.check_choice("algorithm", algo, ALGOS)
    nccl.check_choice("protocol", proto, PROTOS)
    nbytes = count * element_size(dtype)
    threshold = threshold_of(algo, proto, nranks)
    nc = comm_channels
    while nc >= 2 and nbytes < nc * nthreads * threshold:
        nc -= 1
    return nc


def threshold_of(algo: str, proto: str, nranks: int) -> int:
    """threadThresholds[algo][proto] (src/graph/tuning.cc 589-595)."""
    return THREAD_THRESHOLD[proto] * (nranks if (algo, proto) == ("ring", "ll") else 1)


def channel_parts(count: int, dtype, nranks: int, proto: str = "simple", nchannels: int = 1,
                  *, algo: str = "ring", nthreads: int = NTHREADS) -> list:
    """RCCL's channel split of one allreduce alone in its plan: ``[(channel, offset,
    count, chunk_count, last_chunk_count), ...]`` in elements (addCBDCollToPlan).
    ``nchannels``: the collective's channels (``NCCL_MIN_NCHANNELS`` =
    ``NCCL_MAX_NCHANNELS`` pins them)."""
    nccl.check_positive("count", count)
    nccl.check_positive("nranks", nranks, 2)
    nccl.check_positive("nchannels", nchannels)
    nccl.check_choice("algorithm", algo, ALGOS)
    if nchannels > MAX_CHANNELS:
        raise ValueError(f"RCCL has at most {MAX_CHANNELS} channels (MAXCHANNELS), "
                         f"nchannels = {nchannels}")
    esize = element_size(dtype)
    align = align_count(proto, esize, nthreads)
    chunk = chunk_count(proto, esize)
    max_bytes = _align_up(-(-count * esize // nchannels), BYTES_ALIGNMENT)
    per = _align_up(-(-max_bytes // esize), align)
    out, at, ch = [], 0, 0
    while at < count:
        n = min(per, count - at)
        rem = n % (nranks * chunk) if algo == "ring" else 0
        last = _align_up(-(-rem // nranks), align) if algo == "ring" else chunk
        out.append((ch, at, n, chunk, last))
        at, ch = at + n, ch + 1
    return out


def ring_allreduce(nranks: int, count: int, dtype="float32", *, proto: str = "simple",
                   nchannels: int = 1, rings=None, nthreads: int = NTHREADS) -> Ranges:
    """The per-position trees of RCCL's ring allreduce (module docstring): NCCL's ring
    chains over RCCL's channel split and last-chunk alignment."""
    esize = element_size(dtype)
    parts = channel_parts(count, dtype, nranks, proto, nchannels, nthreads=nthreads)
    return nccl.ring_allreduce(nranks, count, _size_alias(esize), proto=proto,
                               nchannels=nchannels, rings=rings,
                               parts=[p[:4] for p in parts],
                               last_align=align_count(proto, esize, nthreads))


def tree_allreduce(nranks: int, count: int, dtype="float32", *, proto: str = "simple",
                   nchannels: int = 2, trees=None, nnodes: Optional[int] = None,
                   nthreads: int = NTHREADS, comm_channels: Optional[int] = None) -> Ranges:
    """The per-position trees of RCCL's tree allreduce: NCCL's double binary tree (or the
    given ``trees``, e.g. :func:`.nccl.parse_trees` of RCCL's ``Trees`` log lines) over
    RCCL's channel split.  ``comm_channels``: the communicator's channels when the
    collective uses fewer (:func:`collective_channels`): tree 0 on the first half of the
    communicator's channels, tree 1 on the rest (src/graph/connect.cc 284-368)."""
    esize = element_size(dtype)
    if trees is None and comm_channels is not None:
        nccl.check_positive("comm_channels", comm_channels, max(2, nchannels))
        nodes = nranks if nnodes is None else nnodes
        if nranks % nodes:
            raise ValueError(f"nranks ({nranks}) must be a multiple of nnodes ({nodes})")
        if comm_channels % 2:
            raise ValueError("RCCL's tree channels come in pairs: comm_channels must be "
                             f"even, got {comm_channels}")
        pair = nccl.default_trees(nodes, nranks // nodes)
        trees = {c: pair[c >= comm_channels // 2] for c in range(comm_channels)}
    parts = channel_parts(count, dtype, nranks, proto, nchannels, algo="tree",
                          nthreads=nthreads)
    return nccl.tree_allreduce(nranks, count, _size_alias(esize), proto=proto,
                               nchannels=nchannels, trees=trees, nnodes=nnodes,
                               parts=[p[:4] for p in parts])


def ring_reduce_scatter(nranks: int, count: int, *, rings=None) -> Ranges:
    """RCCL's ring reduce-scatter (src/device/reduce_scatter.h 40-56): NCCL's order."""
    return nccl.ring_reduce_scatter(nranks, count, rings=rings)


def _size_alias(esize: int) -> str:
    """A dtype name of ``esize`` bytes that :mod:`.nccl` knows (it only needs the size)."""
    return {1: "int8", 2: "float16", 4: "float32", 8: "float64"}[esize]


def fp8_round(x: np.ndarray, dtype) -> np.ndarray:
    """float32 values to RCCL's fp8 (``rccl_float8`` e4m3 FNUZ / ``rccl_bfloat8`` e5m2
    FNUZ) as float64: finite values clipped to the largest finite value, then rounded to
    nearest even (src/include/rccl_float8.h 364-380: fmed3 clip, cvt_pk_fp8_f32)."""
    import torch
    name = str(dtype).replace("torch.", "")
    top = FP8[name]
    x = np.asarray(x, np.float32)
    with np.errstate(invalid="ignore"):
        clipped = np.where(np.isnan(x), x, np.clip(x, -top, top)).astype(np.float32)
    t = torch.from_numpy(np.ascontiguousarray(clipped)).to(getattr(torch, name))
    return t.to(torch.float64).numpy()


def reduce_values(ranges: Ranges, x, dtype=None, op: str = "sum",
                  factor: Optional[float] = None) -> np.ndarray:
    """Fold the ranks' values ``x`` (``(nranks, numel)``) in ``ranges``' orders with
    RCCL's arithmetic.  fp16 / bf16 / fp32 / fp64 / integers: :func:`.nccl.reduce_values`
    (RCCL's arithmetic is the same there); fp8 (``torch.float8_e4m3fnuz`` /
    ``float8_e5m2fnuz``, or their names with ``x`` in float64): every hop the float32 sum
    clipped and rounded back (:func:`fp8_round`); AVG / PREMUL_SUM multiply each input by
    the scalar rounded to fp8 first.  Returns float64 values for fp8."""
    import torch
    if isinstance(x, torch.Tensor):
        dtype = x.dtype if dtype is None else dtype
    name = str(dtype).replace("torch.", "")
    if name not in FP8:
        return nccl.reduce_values(ranges, x, dtype, op, factor=factor)
    nccl.check_choice("op", op, nccl.OPS)
    if (op == "premul_sum") != (factor is not None):
        raise ValueError("factor goes with op='premul_sum' (and only with it)")
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().to(torch.float64).numpy()
    x = np.asarray(x, np.float64)
    if x.ndim != 2 or x.shape[1] != ranges.numel:
        raise ValueError(f"x must be (nranks, {ranges.numel}), got {x.shape}")
    n = x.shape[0]
    xs = fp8_round(x.astype(np.float32), name)
    if op != "sum":                       # PreMulSum: rccl_float8(float(x) * float(s))
        s = fp8_round(np.float32(1.0 / n if op == "avg" else factor), name)
        xs = fp8_round((xs * s).astype(np.float32), name)

    def add(a, b):
        return fp8_round(a.astype(np.float32) + b.astype(np.float32), name)
    parts = []
    for s0, e0, tree in ranges:
        if tree.n != n:
            raise ValueError(f"the order is over {tree.n} ranks, x has {n}")
        v, = nccl.fold_ranks(tree, xs[:, s0:e0], add)
        parts.append(v)
    return np.concatenate(parts)
