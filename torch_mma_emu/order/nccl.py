"""NCCL's reduction orders and arithmetic (modelled version: NCCL 2.30.7, NVIDIA/nccl).

Every function returns an :class:`~.ranges.Ranges` over the element positions of the
collective's input (leaves of each tree: the ranks 0..nranks-1), and :func:`reduce_values`
folds the ranks' values in those orders with NCCL's arithmetic.  Facts, read from the NCCL
sources (cited as "NCCL 2.30.7 src/..."):

* Ring allreduce (src/device/all_reduce.h runRing): in loop L of a channel, chunk c is sent
  first by ring position c+1, reduced by c+2, ... and finished by position c: the chain
  x[R[c+1]] + x[R[c+2]] + ... + x[R[c]] (R: the ring, from rank 0, the ``Channel cc/NN :
  0 a b ...`` log line, src/graph/rings.cc).  In the last loop of a channel the chunk is
  alignUp(divUp(rem, nranks), 16 / sizeof(T)) elements, so trailing chunks can be empty.
* Ring reduce-scatter (src/device/reduce_scatter.h): block d (rank d's output) starts at
  the rank after d on the ring and ends with d, whatever the chunking.  Ring reduce
  (src/device/reduce.h): starts after the root, ends with the root.
* Tree allreduce (src/device/all_reduce.h runTreeUpDown / runTreeSplit): each node adds its
  own value, then what its children (tree->down[0..2]) send, in order; the tree of a channel
  is in the ``Trees [c] d0/d1/d2->r->up`` log lines (src/init.cc) or built as NCCL builds
  it: a chain inside each node and a double binary tree between the nodes
  (src/graph/trees.cc ncclGetBtree / ncclGetDtree: tree 1 mirrors tree 0 for an even node
  count and shifts it by one for an odd one; src/graph/connect.cc: tree 1 on channel
  c + nChannels, a node's own chain child first, then the node children).
* Channel split (src/enqueue.cc scheduleCollTasksToPlan, one collective in the plan) in
  cells of 32 KiB of traffic, the "cbd" parts lo / mid / hi (src/include/device.h
  ncclCollCbdPart), chunk sizes from calcCollChunking (src/enqueue.cc) aligned to the
  protocol grain (16 B LL, 1920 B LL128, 512 B Simple; ncclProtoGrainSize).
* Arithmetic (src/device/reduce_kernel.h): one rounding per hop in the element type (fp16
  ``__hadd``; bf16 added in float and rounded; fp32 / fp64 plain).  AVG on floats is
  PreMulSum: every input times RN(1/nranks) in the element type (the scalar is
  ``float(1.0 / nRanks)`` converted to the type, src/enqueue.cc), then summed; AVG on
  integers is SumPostDiv (sum, then divide by nranks).  fp8 (e4m3 / e5m2, sm90+ only):
  every hop through half and back (:func:`fp8_add`).

PAT is in :mod:`.nccl_pat`; NVLS / NVLS_Tree, CollNet (one exact node, unverified) and the
symmetric kernels in :mod:`.nccl_extra`.  Not modelled: NCCL's choice of algorithm /
protocol / channel count from its cost tables (the caller pins them, as ``NCCL_ALGO``,
``NCCL_PROTO``, ``NCCL_MIN_NCHANNELS`` = ``NCCL_MAX_NCHANNELS`` do on a real run).
"""
from __future__ import annotations

import re
from typing import Optional, Sequence

import numpy as np

from . import arith
from .ranges import Ranges
from .tree import SumTree

VERSION = "2.30.7"
ALGOS = ("ring", "tree")
PROTOS = ("simple", "ll", "ll128")
OPS = ("sum", "avg", "premul_sum")
FUNCS = ("all_reduce", "reduce_scatter", "reduce")
# NCCL 2.30.7 src/include/device.h: NCCL_STEPS, WARP_SIZE, LL128 line of 16 uint64, 15 data
_STEPS, _WARP, _LL128_LINE, _LL128_DATA = 8, 32, 16, 15
# ncclProtoGrainSize: LL 16 B, LL128 WARP_SIZE * 8 / 16 * 15 * 8 B, Simple 512 B
GRAIN = {"ll": 16, "ll128": _WARP * 8 // _LL128_LINE * _LL128_DATA * 8, "simple": 512}
# src/init.cc DEFAULT_LL_BUFFSIZE (8 lines x 512 threads x 8 steps x 16 B),
# DEFAULT_LL128_BUFFSIZE (120 x 640 x 8 x 8 B), DEFAULT_BUFFSIZE (4 MiB)
BUFFSIZE = {"ll": 8 * 512 * _STEPS * 16, "ll128": 120 * 640 * _STEPS * 8, "simple": 1 << 22}
# src/include/collectives.h: chunk steps of the Simple ring (ALLREDUCE_CHUNKSTEPS = 4,
# REDUCESCATTER_CHUNKSTEPS = 4, REDUCE_CHUNKSTEPS = 1)
CHUNK_STEPS = {"all_reduce": _STEPS // 2, "reduce_scatter": _STEPS // 2, "reduce": 1}
_MIN_TRAFFIC = 32 << 10        # scheduleCollTasksToPlan MinTrafficPerChannel
MAX_CHANNELS = 64              # src/include/device.h MAXCHANNELS
_ELEM = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2}


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def check_choice(name, value, allowed):
    if value not in allowed:
        raise ValueError(f"NCCL {name} must be one of {', '.join(allowed)}, got {value!r}")


def check_positive(name, value, least=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an int >= {least}, got {value!r}")


def element_size(dtype) -> int:
    """Bytes of an element: the float formats of :mod:`.arith`, fp8, or a NumPy / torch
    integer."""
    if fp8_format(dtype) is not None:
        return 1
    try:
        return _ELEM[arith.fmt_of(dtype)]
    except ValueError:
        name = str(dtype).replace("torch.", "")
        if re.fullmatch(r"u?int(8|16|32|64)", name):
            return int(name.lstrip("uint")) // 8
        raise ValueError(f"NCCL dtype must be float64/32/16, bfloat16, float8_e4m3fn/e5m2 or "
                         f"an integer type, got "
                         f"{dtype!r}") from None


def chunk_size(func: str, algo: str, proto: str, nbytes: int, nranks: int,
               nnodes: int = 1) -> int:
    """calcCollChunking (NCCL 2.30.7 src/enqueue.cc) for Ring, Tree and PAT, one channel, the
    default buffer sizes: the chunk in bytes, a multiple of the protocol grain."""
    step = BUFFSIZE[proto] // _STEPS
    steps = CHUNK_STEPS[func] if (proto == "simple" and algo == "ring") else 1
    size = step * steps
    if proto == "ll":
        size //= 2
    if proto == "ll128":
        size = size // _LL128_LINE * _LL128_DATA
    if algo == "pat" and func == "reduce_scatter":       # one channel's global bytes
        while size * 16 > nbytes and size > 65536:
            size //= 2
    if algo == "tree" and proto == "ll128":
        ppn = nranks / nnodes
        nsteps = 1 + (nnodes.bit_length() - 1) + 0.1 * ppn
        while nbytes // size < nsteps * 64 / ppn and size > 131072:
            size //= 2
        while nbytes // size < nsteps * 16 / ppn and size > 32768:
            size //= 2
    return size // GRAIN[proto] * GRAIN[proto]


def channel_parts(func: str, count: int, dtype, nranks: int, proto: str, nchannels: int,
                  algo: str = "ring", nnodes: int = 1, comm_channels: Optional[int] = None) -> list:
    """The cbd channel split of one collective alone in its plan (NCCL 2.30.7 src/enqueue.cc
    scheduleCollTasksToPlan, src/include/device.h ncclCollCbdPart): ``[(channel, offset,
    count, chunk_count), ...]`` in elements of the per-rank count (for reduce_scatter: the
    count each rank receives).  ``nchannels``: the collective's channels (NCCL's
    ``nMaxChannels`` after its small-message reduction); ``comm_channels``: the
    communicator's (default the same)."""
    comm_channels = nchannels if comm_channels is None else comm_channels
    for name, v in (("nchannels", nchannels), ("comm_channels", comm_channels)):
        check_positive(name, v)
        if v > MAX_CHANNELS:
            raise ValueError(f"NCCL has at most {MAX_CHANNELS} channels (MAXCHANNELS), "
                             f"{name} = {v}")
    if nchannels > comm_channels:
        raise ValueError(f"nchannels ({nchannels}) cannot exceed comm_channels "
                         f"({comm_channels})")
    esize = element_size(dtype)
    per_byte = {"all_reduce": 2, "reduce_scatter": nranks}.get(func, 1)   # TrafficPerByte
    if proto == "ll":
        per_byte *= 4
    traffic = max(_MIN_TRAFFIC, count * esize * per_byte)
    per_channel = _div_up(traffic // nchannels, 16) * 16
    cell = _div_up(_div_up(_MIN_TRAFFIC, per_byte), 16) * 16
    per_cell = cell // esize
    cells = _div_up(count * esize, cell)
    cell_traffic = cell * per_byte
    cells_per_ch = min(cells, _div_up(per_channel, cell_traffic))
    first = 0
    lo = cells if comm_channels == 1 else min(cells, _div_up(per_channel, cell_traffic))
    mid = (cells - lo) // cells_per_ch
    hi = (cells - lo) % cells_per_ch
    if comm_channels < (lo != 0) + mid + (hi != 0):      # overflowed the channels
        mid = comm_channels - 2
        cells_per_ch = (cells - lo) // (mid + 1)
        hi = cells_per_ch + (cells - lo) % (mid + 1)
    if hi == 0 and mid != 0:
        hi, mid = cells_per_ch, mid - 1
    if lo == 0:
        first = 1
        if mid == 0:
            lo, hi = hi, 0
        else:
            lo, mid = cells_per_ch, mid - 1
    c_mid = cells_per_ch * per_cell if mid else 0
    c_lo, c_hi = lo * per_cell, hi * per_cell
    extra = cells * per_cell - count
    if c_hi:
        c_hi -= extra
    else:
        c_lo -= extra
    global_per_elem = esize * (nranks if func == "reduce_scatter" else 1)
    grain_elems = GRAIN[proto] // esize

    def chunk(n):
        return chunk_size(func, algo, proto, global_per_elem * n, nranks, nnodes) \
            // GRAIN[proto] * grain_elems
    parts, at, ch = [], 0, first
    for n in [c_lo] * (c_lo != 0) + [c_mid] * mid + [c_hi] * (hi != 0):
        parts.append((ch, at, n, chunk(n)))
        at, ch = at + n, ch + 1
    return parts


def _chain(nranks: int, order: Sequence[int]) -> SumTree:
    nodes, acc = [], order[0]
    for r in order[1:]:
        nodes.append(("add", [acc, r]))
        acc = nranks + len(nodes) - 1
    return SumTree(nranks, nodes, root=acc)


def parse_ring(line: str) -> list:
    """The ring of a ``Channel cc/NN : 0 a b ...`` log line (NCCL 2.30.7 src/graph/rings.cc,
    printed by rank 0 with NCCL_DEBUG=INFO): the ranks in ring order from rank 0."""
    m = re.search(r"Channel\s+\d+/\d+\s*:\s*([\d\s]+)$", line.strip())
    if not m:
        raise ValueError(f"not an NCCL ring line ('Channel cc/NN : 0 a b ...'): {line[:80]!r}")
    ring = [int(t) for t in m.group(1).split()]
    if sorted(ring) != list(range(len(ring))) or ring[0] != 0:
        raise ValueError(f"an NCCL ring lists every rank once from rank 0, got {ring}")
    return ring


def _rings(rings, nranks: int, nchannels: int) -> list:
    if rings is None:
        return [list(range(nranks))] * nchannels
    rings = [parse_ring(r) if isinstance(r, str) else list(r) for r in rings]
    for r in rings:
        if sorted(r) != list(range(nranks)):
            raise ValueError(f"a ring lists every rank 0..{nranks - 1} once, got {r}")
    return [rings[c % len(rings)] for c in range(nchannels)]


def ring_allreduce(nranks: int, count: int, dtype="float32", *, proto="simple",
                   nchannels: int = 1, rings=None, comm_channels: Optional[int] = None,
                   parts=None, last_align: Optional[int] = None) -> Ranges:
    """The per-position trees of NCCL's ring allreduce (see the module docstring).
    ``parts`` / ``last_align`` serve other libraries with the same ring kernel (RCCL,
    :mod:`.rccl`): a channel split ``[(channel, offset, count, chunk_count), ...]`` in
    place of :func:`channel_parts`, and the last loop's chunk alignment in elements in
    place of NCCL's ``16 / sizeof(T)``."""
    check_positive("nranks", nranks, 2)
    check_positive("count", count)
    check_positive("nchannels", nchannels)
    check_choice("protocol", proto, PROTOS)
    esize = element_size(dtype)
    align = 16 // esize if last_align is None else last_align
    check_positive("last_align", align)
    if parts is None:
        parts = channel_parts("all_reduce", count, dtype, nranks, proto, nchannels,
                              comm_channels=comm_channels)
    rs = _rings(rings, nranks, max([nchannels] + [p[0] for p in parts]) + 1)
    chains: dict = {}
    pieces = []                       # (start, stop, tree), empty chunks left out
    for ch, off, n, chunk in parts:
        ring = rs[ch]
        loop = nranks * chunk
        for start in range(0, n, loop):
            rem = n - start
            cc = chunk if rem >= loop else _div_up(_div_up(rem, nranks), align) * align
            for c in range(nranks):
                lo, hi = start + c * cc, min(start + (c + 1) * cc, rem + start)
                if lo >= hi:
                    continue
                key = (tuple(ring), c)
                if key not in chains:
                    chains[key] = _chain(nranks, [ring[(c + 1 + k) % nranks]
                                                  for k in range(nranks)])
                pieces.append((off + lo, off + hi, chains[key]))
    return merged(pieces)


def merged(pieces) -> Ranges:
    """``[(start, stop, tree), ...]`` in order as Ranges, neighbours with one tree joined."""
    out: list = []
    for s, e, t in pieces:
        if out and out[-1][2] == t and out[-1][1] == s:
            out[-1][1] = e
        else:
            out.append([s, e, t])
    return Ranges(tuple(p) for p in out)


def ring_reduce_scatter(nranks: int, count: int, *, rings=None) -> Ranges:
    """NCCL's ring reduce-scatter of ``count`` elements per rank: positions of block d (rank
    d's output, ``d*count ...``) sum from the rank after d on the ring to d."""
    check_positive("nranks", nranks, 2)
    check_positive("count", count)
    ring = _rings(rings, nranks, 1)[0]
    pos = {r: i for i, r in enumerate(ring)}
    out = []
    for d in range(nranks):
        order = [ring[(pos[d] + 1 + k) % nranks] for k in range(nranks)]
        out.append((d * count, (d + 1) * count, _chain(nranks, order)))
    return Ranges(out)


def ring_reduce(nranks: int, count: int, root: int = 0, *, rings=None) -> Ranges:
    """NCCL's ring reduce to ``root``: from the rank after the root to the root."""
    check_positive("nranks", nranks, 2)
    check_positive("count", count)
    if not 0 <= root < nranks:
        raise ValueError(f"root must be a rank 0..{nranks - 1}, got {root!r}")
    ring = _rings(rings, nranks, 1)[0]
    i = ring.index(root)
    return Ranges([(0, count, _chain(nranks, [ring[(i + 1 + k) % nranks]
                                              for k in range(nranks)]))])


def btree(nnodes: int, node: int) -> tuple:
    """(up, down0, down1) of ``node`` in NCCL's binary tree over ``nnodes`` (NCCL 2.30.7
    src/graph/trees.cc ncclGetBtree; -1: none): the lowest set bit b of the node picks the
    parent (node ^ b) | 2b (or node ^ b past the end), the children node -/+ b/2 (the upper
    one lowered until it exists); node 0 is the root with one child."""
    bit = 1
    while bit < nnodes and not bit & node:
        bit <<= 1
    if node == 0:
        return -1, -1, (bit >> 1 if nnodes > 1 else -1)
    up = (node ^ bit) | (bit << 1)
    if up >= nnodes:
        up = node ^ bit
    low = bit >> 1
    d0 = -1 if low == 0 else node - low
    d1 = -1 if low == 0 else node + low
    while d1 >= nnodes:
        d1 = -1 if low == 0 else node + low
        low >>= 1
    return up, d0, d1


def dtree(nnodes: int, node: int) -> tuple:
    """The two trees' (up, down0, down1) of ``node`` (ncclGetDtree): tree 0 the binary tree,
    tree 1 its mirror (even node count) or its shift by one (odd)."""
    t0 = btree(nnodes, node)
    if nnodes % 2:
        t = btree(nnodes, (node - 1 + nnodes) % nnodes)
        return t0, tuple(-1 if v == -1 else (v + 1) % nnodes for v in t)
    t = btree(nnodes, nnodes - 1 - node)
    return t0, tuple(-1 if v == -1 else nnodes - 1 - v for v in t)


def default_trees(nnodes: int, gpus_per_node: int = 1) -> list:
    """NCCL's two trees for ranks ``node * gpus_per_node + i`` (the intra-node order of the
    tree graph taken as rank order): ``[tree0, tree1]``, each ``{rank: (up, [downs])}``
    (src/graph/connect.cc ncclTopoPreset, connectTrees, pattern TREE: a node's first GPU
    talks to the other nodes, the others form a chain below it; the chain child comes first
    in ``down``, then the node children)."""
    check_positive("nnodes", nnodes)
    check_positive("gpus_per_node", gpus_per_node)
    out = []
    for which in (0, 1):
        tree = {}
        for node in range(nnodes):
            base = node * gpus_per_node
            for i in range(gpus_per_node):
                up = base + i - 1 if i else -1
                down = [base + i + 1] if i + 1 < gpus_per_node else []
                tree[base + i] = (up, down)
            up, d0, d1 = dtree(nnodes, node)[which]
            head = tree[base]
            tree[base] = (up * gpus_per_node if up != -1 else -1,
                          head[1] + [d * gpus_per_node for d in (d0, d1) if d != -1])
        out.append(tree)
    return out


def parse_trees(lines: Sequence[str]) -> dict:
    """Channel -> tree ``{rank: (up, [downs])}`` from every rank's ``Trees [c]
    d0/d1/d2->rank->up ...`` log line (NCCL 2.30.7 src/init.cc, NCCL_DEBUG=INFO)."""
    trees: dict = {}
    for line in lines:
        got = re.findall(r"\[(\d+)\]\s*(-?\d+)/(-?\d+)/(-?\d+)->(\d+)->(-?\d+)", line)
        if not got:
            raise ValueError(f"not an NCCL Trees line ('Trees [c] d0/d1/d2->r->up'): "
                             f"{line[:80]!r}")
        for c, d0, d1, d2, r, up in got:
            downs = [int(d) for d in (d0, d1, d2) if int(d) != -1]
            trees.setdefault(int(c), {})[int(r)] = (int(up), downs)
    for c, t in trees.items():
        _tree_sum(t, len(t))          # checks it
    return trees


def _tree_sum(tree: dict, nranks: int) -> SumTree:
    """The SumTree of a reduce-up tree: each rank adds its own value, then its children's
    sums in ``down`` order."""
    if sorted(tree) != list(range(nranks)):
        raise ValueError(f"a tree lists every rank 0..{nranks - 1}, got {sorted(tree)}")
    roots = [r for r, (up, _) in tree.items() if up == -1]
    if len(roots) != 1:
        raise ValueError(f"a tree has one root (up = -1), got {roots}")
    for r, (up, downs) in tree.items():
        for d in downs:
            if d not in tree or tree[d][0] != r:
                raise ValueError(f"rank {r} lists child {d}, whose parent is not {r}")
    nodes: list = []
    memo: dict = {}
    order, stack = [], [roots[0]]
    while stack:                       # children before parents, iteratively
        r = stack.pop()
        order.append(r)
        stack.extend(tree[r][1])
    if len(order) != nranks:
        raise ValueError("the tree does not reach every rank from its root")
    for r in reversed(order):
        acc = r
        for d in tree[r][1]:
            nodes.append(("add", [acc, memo[d]]))
            acc = nranks + len(nodes) - 1
        memo[r] = acc
    return SumTree(nranks, nodes, root=memo[roots[0]])


def tree_allreduce(nranks: int, count: int, dtype="float32", *, proto="simple",
                   nchannels: int = 2, trees=None, nnodes: Optional[int] = None,
                   comm_channels: Optional[int] = None, parts=None) -> Ranges:
    """The per-position trees of NCCL's tree allreduce: channel c's part reduced up the
    tree of channel c (``trees``: channel -> ``{rank: (up, [downs])}``, e.g. from
    :func:`parse_trees`; default :func:`default_trees` of ``nnodes`` nodes (default: one
    GPU each), tree 0 on the first half of the channels, tree 1 on the second).
    ``parts``: a channel split in place of :func:`channel_parts` (as for
    :func:`ring_allreduce`)."""
    check_positive("nranks", nranks, 2)
    check_positive("count", count)
    check_positive("nchannels", nchannels)
    check_choice("protocol", proto, PROTOS)
    nnodes = nranks if nnodes is None else nnodes
    if trees is None:
        if nranks % nnodes:
            raise ValueError(f"nranks ({nranks}) must be a multiple of nnodes ({nnodes})")
        if nchannels % 2:
            raise ValueError("NCCL's tree channels come in pairs (tree 0 on c, tree 1 on c + "
                             f"nChannels/2): nchannels must be even, got {nchannels}")
        pair = default_trees(nnodes, nranks // nnodes)
        trees = {c: pair[c >= nchannels // 2] for c in range(nchannels)}
    sums = {c: _tree_sum(t, nranks) for c, t in trees.items()}
    pieces = []
    if parts is None:
        parts = channel_parts("all_reduce", count, dtype, nranks, proto, nchannels, "tree",
                              nnodes, comm_channels)
    for ch, off, n, _ in parts:
        if ch not in sums:
            raise ValueError(f"no tree given for channel {ch}")
        pieces.append((off, off + n, sums[ch]))
    return merged(pieces)


def avg_scalar(nranks: int, fmt: str) -> np.ndarray:
    """PreMulSum's scalar: ``float(1.0 / nRanks)`` converted to the element type (NCCL 2.30.7
    src/enqueue.cc; fp64 keeps the double), on the native carrier of ``fmt``."""
    return premul_scalar(1.0 / nranks, fmt)


def premul_scalar(factor: float, fmt: str) -> np.ndarray:
    """A PreMulSum scalar ``factor`` (a double) in the element type: to float, then to the
    type (fp64 keeps the double).  PyTorch's ``ReduceOp.PREMUL_SUM(factor)`` hands NCCL
    ``static_cast<T>(double_factor)`` (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp
    ``unpackPreMulSum``; c10's Half / BFloat16 convert through float), AVG
    ``float(1.0 / nRanks)`` (NCCL src/enqueue.cc): the same double rounding."""
    if fmt == "f64":
        return np.array(float(factor))
    return arith.round_f32(np.array(np.float32(factor)), fmt)


# fp8 element types (NCCL reduces them on sm90+ only: src/enqueue.cc refuses below)
FP8 = {"float8_e4m3fn": "e4m3", "e4m3": "e4m3", "float8_e5m2": "e5m2", "e5m2": "e5m2"}


def fp8_format(dtype) -> Optional[str]:
    """``"e4m3"`` / ``"e5m2"`` for an fp8 dtype (torch or name), else None."""
    return FP8.get(str(dtype).replace("torch.", ""))


def fp8_round(x, fmt8: str) -> np.ndarray:
    """float64 values rounded to nearest even into e4m3 / e5m2 with saturation to the
    largest finite value (infinities too; any NaN becomes the positive NaN, code 0x7F): the
    ``__nv_fp8_*`` constructors' ``__NV_SATFINITE`` conversion (cuda_fp8.hpp; checked
    against it for every hop, scripts/regen_nccl_fp8.py); returned as float64."""
    import torch
    dt = torch.float8_e4m3fn if fmt8 == "e4m3" else torch.float8_e5m2
    big = torch.finfo(dt).max
    t = torch.from_numpy(np.asarray(x, np.float64).copy()).clamp(-big, big)
    out = t.to(dt).to(torch.float64).numpy()
    return np.where(np.isnan(out), np.nan, out)    # NaN: the positive one, code 0x7F


def fp8_add(a, b, fmt8: str) -> np.ndarray:
    """One fp8 hop on sm90+ (NCCL 2.30.7 src/device/reduce_kernel.h FuncSum on
    ``__nv_fp8_*``: ``__nv_fp8(__hadd(__half(x), __half(y)))``): both to half (exact), the
    half sum rounded, then rounded to the fp8 type with saturation."""
    with np.errstate(over="ignore", invalid="ignore"):
        h = np.asarray(a).astype(np.float16) + np.asarray(b).astype(np.float16)
    return fp8_round(h.astype(np.float64), fmt8)


def fp8_premul(x, factor: float, fmt8: str) -> np.ndarray:
    """PreMulSum's pre-op on fp8 (sm90+): the scalar ``float(factor)`` converted to the fp8
    type (src/enqueue.cc ``__nv_cvt_float_to_fp8(..., __NV_SATFINITE, ...)``), widened to
    half; each input times it in half (``__hmul``), rounded to the fp8 type
    (src/device/reduce_kernel.h Apply_PreOp of FuncPreMulSum)."""
    s = fp8_round(np.float64(np.float32(factor)), fmt8)
    with np.errstate(over="ignore", invalid="ignore"):
        prod = np.asarray(x).astype(np.float16) * np.float16(s)
    return fp8_round(prod.astype(np.float64), fmt8)


def exact_round(cols, fmt: str) -> np.ndarray:
    """The exact sum of the rows of ``cols`` (float64 values) at every column, rounded once
    into ``fmt`` (f64 / f32 / f16 / bf16 / e4m3 / e5m2), as float64 values.  Columns whose
    float64 sum is exact (checked with error-free TwoSum) round from it; the others (f32,
    bf16, f64 only: fp8 and f16 sums of a few thousand terms are exact in float64) from
    fractions; a column with an infinity or NaN gets the IEEE sum."""
    from fractions import Fraction

    from .evaluator import round_exact
    cols = np.asarray(cols, np.float64)
    total, inexact = cols[0].copy(), np.zeros(cols.shape[1], bool)
    with np.errstate(over="ignore", invalid="ignore"):
        for v in cols[1:]:
            s = total + v
            bp = s - total
            inexact |= ((total - (s - bp)) + (v - bp)) != 0
            total = s
    finite = np.isfinite(cols).all(axis=0)
    name = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16"}.get(fmt)
    for k in np.nonzero(inexact & finite)[0]:
        total[k] = round_exact(sum((Fraction(float(v)) for v in cols[:, k]), Fraction(0)),
                               name or "float16")
    if fmt in FP8.values():
        return fp8_round(total, fmt)
    return total if fmt == "f64" else arith.widen(arith.narrow(total, fmt), fmt)


def reduce_values(ranges: Ranges, x, dtype=None, op: str = "sum",
                  factor: Optional[float] = None, acc: Optional[str] = None) -> np.ndarray:
    """Fold the ranks' values ``x`` (``(nranks, numel)``: row r is rank r's input at the
    positions ``ranges`` covers) in the ranges' orders with NCCL's arithmetic; returns the
    ``(numel,)`` result in ``dtype`` (floats: NumPy float64/32/16 or bf16 as its uint16
    bits, widened to float64 when ``dtype`` is bf16; fp8 (``float8_e4m3fn`` /
    ``float8_e5m2``): float64 values; integers: their NumPy type).
    ``op``: ``"sum"``, ``"avg"`` (PreMulSum on floats, SumPostDiv on integers) or
    ``"premul_sum"`` (floats: every input times ``factor`` in the type, then the sum).
    Every hop rounds to the type (fp8: through half, :func:`fp8_add`) unless ``acc="f32"``:
    a float32 accumulator rounded to the type once at the end (the symmetric kernels).
    Multi-term ``"exact"`` nodes (NVLS, CollNet) are summed exactly and rounded once."""
    check_choice("op", op, OPS)
    if acc not in (None, "f32"):
        raise ValueError(f"acc must be None (every hop in the type) or 'f32', got {acc!r}")
    if (op == "premul_sum") != (factor is not None):
        raise ValueError("factor goes with op='premul_sum' (and only with it)")
    import torch
    if isinstance(x, torch.Tensor):
        dtype = x.dtype if dtype is None else dtype
        x = x.detach().cpu()
        x = x.to(torch.float64).numpy() if x.is_floating_point() else x.numpy()
    x = np.asarray(x)
    dtype = x.dtype if dtype is None else dtype
    if x.ndim != 2 or x.shape[1] != ranges.numel:
        raise ValueError(f"x must be (nranks, {ranges.numel}), got {x.shape}")
    n = x.shape[0]
    fmt8 = fp8_format(dtype)
    try:
        fmt = fmt8 or arith.fmt_of(dtype)
    except ValueError:
        fmt = None
    if fmt is None and op == "premul_sum":
        raise ValueError(f"premul_sum is modelled on floating types, got {dtype}")
    if fmt is None:                                   # integers: wrapping sums, exact
        ints = x.astype(np.dtype(str(dtype).replace("torch.", "")))
        out = ints.sum(axis=0, dtype=ints.dtype)
        if op == "avg":                               # SumPostDiv: C division, to zero
            q = np.abs(out.astype(np.int64)) // n
            out = np.where(out < 0, -q, q).astype(ints.dtype)
        return out
    if fmt8:
        xs = fp8_round(x.astype(np.float64), fmt8)
        if op != "sum":
            xs = fp8_premul(xs, 1.0 / n if op == "avg" else factor, fmt8)
        add = (lambda a, b: fp8_add(a, b, fmt8)) if acc is None else arith.op("add", "f32")
    else:
        xs = arith.narrow(x.astype(np.float64), fmt)
        if op != "sum":                               # PreMulSum: x * RN(1/n), rounded
            s = arith.widen(avg_scalar(n, fmt) if op == "avg" else premul_scalar(factor, fmt),
                            fmt)
            prod = arith.widen(xs, fmt) * s           # exact in float64 below fp64
            xs = arith.narrow(prod, fmt) if fmt != "f64" else prod
        add = arith.op("add", fmt if acc is None or fmt == "f64" else "f32")
    if acc is not None and fmt != "f64":              # leaves on the float32 carrier
        xs = (xs if fmt8 else arith.widen(xs, fmt)).astype(np.float32)
    parts = []
    for s0, e0, tree in ranges:
        if tree.n != n:
            raise ValueError(f"the order is over {tree.n} ranks, x has {n}")
        v, = fold_ranks(tree, xs[:, s0:e0], add, fmt)
        if acc is not None and fmt != "f64":          # the accumulator to the type, once
            v = fp8_round(v.astype(np.float64), fmt8) if fmt8 else \
                arith.round_f32(v.astype(np.float32), fmt)
        parts.append(v)
    out = np.concatenate(parts)
    return arith.widen(out, fmt) if fmt == "bf16" else out


def fold_ranks(tree: SumTree, xs: np.ndarray, add, fmt: Optional[str] = None) -> tuple:
    """One tree over the ranks (rows of ``xs``) at every column; multi-term nodes summed
    exactly and rounded once into the carrier's format (``fmt`` for fp8 carriers)."""
    from .evaluator import fold
    carrier = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32",
               np.dtype(np.float16): "f16", np.dtype(np.uint16): "bf16"}.get(xs.dtype)
    if xs.dtype == np.float64 and fmt in FP8.values():
        carrier = fmt

    def multi(kind, cols):
        vals = np.stack([arith.widen(c[0], carrier) if carrier == "bf16" else
                         np.asarray(c[0], np.float64) for c in cols])
        r = exact_round(vals, carrier)
        return ((arith.narrow(r, carrier) if carrier in ("bf16", "f16", "f32") else r),)
    return fold(tree, (xs.T,), lambda a, b: (add(a[0], b[0]),), multi=multi)
