"""Running ATen's own CUDA kernels (nvcc 13.0's sm_90 PTX of torch 2.13's headers,
tests/data/aten_kernels/, scripts/regen_aten_kernel_ptx.py) in the PTX interpreter, launched
the way ATen launches them, so that their bits can be compared with the NumPy models of
torch_mma_emu.aten_cuda.

``reduce_kernel``: ``gpu_reduce_kernel`` packs a ``ReduceOp`` (ops, ident, ReduceConfig,
two OffsetCalculators, pointers, flags) and passes it by value; the byte layout of every
field is read from the PTX itself (the ``*_layout`` kernels store ``sizeof`` / ``offsetof``,
run here once), the ReduceConfig's fields from ``aten_cuda.config`` the way
``setReduceConfig`` fills them (``input_mult`` / ``output_mult`` by ``split_input`` /
``split_output``), the OffsetCalculators from TensorIterator's view of the reduction
(``aten_cuda.sums.iteration``; IntDivider's magic numbers as its host constructor computes
them).  Global memory: the input's storage, the output, the CTA staging buffer and the
semaphores (zeroed, as ``cudaMemsetAsync`` does).
"""
from __future__ import annotations

import functools
import gzip
import struct
from pathlib import Path

import numpy as np
import torch

from torch_mma_emu import ptx
from torch_mma_emu.aten_cuda import sums

PTX_FILE = Path(__file__).parent / "data" / "aten_kernels" / "aten_kernels_sm90.ptx.gz"
_TAG = {torch.float32: ("f32", "If"), torch.float16: ("f16", "IN3c104HalfE"),
        torch.bfloat16: ("bf16", "IN3c108BFloat16E")}
_LAYOUT = ("size ops ident config input_calc output_calc src dst acc_buf cta_buf semaphores "
           "base_idx accumulate final_output noutputs cfg_element_size_bytes cfg_num_inputs "
           "cfg_num_outputs cfg_step_input cfg_step_output cfg_ctas_per_output cfg_input_mult "
           "cfg_output_mult cfg_block_width cfg_block_height cfg_num_threads "
           "cfg_vectorize_input cfg_output_vec_size cfg_size ic_dims ic_sizes ic_strides "
           "ic_size oc_dims oc_sizes oc_strides oc_size max_dims").split()


@functools.lru_cache(maxsize=1)
def module() -> ptx.Module:
    return ptx.Module(gzip.decompress(PTX_FILE.read_bytes()).decode())


@functools.lru_cache(maxsize=None)
def reduce_layout(op: str, dtype: torch.dtype) -> dict:
    """``sizeof`` / ``offsetof`` of ReduceOp's fields, as the compiled code sees them."""
    out = np.zeros(len(_LAYOUT), np.uint64)
    module().launch(f"{op}_{_TAG[dtype][0]}_layout", 1, 1, [out])
    return dict(zip(_LAYOUT, (int(v) for v in out)))


def reduce_entry(op: str, dtype: torch.dtype, output_vec_size: int) -> str:
    """The mangled name of ``reduce_kernel<512 / ovs, ovs, ReduceOp<...>>`` for ``op``."""
    head = f"reduce_kernelILi{512 // output_vec_size}ELi{output_vec_size}ENS0_8ReduceOp"
    head += _TAG[dtype][1]
    ops = "SumCombine" if op == "sum" else "MeanOps"
    names = [k for k in module().kernels if head in k and ops in k]
    if len(names) != 1:
        raise LookupError(f"no single reduce_kernel for {op} {dtype} vec {output_vec_size}: "
                          f"{names}")
    return names[0]


def int_divider(d: int) -> tuple:
    """``IntDivider<unsigned int>(d)``: (divisor, m1, shift)."""
    shift = next(s for s in range(33) if (1 << s) >= d)
    m1 = ((1 << 32) * ((1 << shift) - d)) // d + 1
    return d, m1 & 0xFFFFFFFF, shift


def _calc(blob, at, lay, prefix, dims, sizes, strides):
    """Write an OffsetCalculator<len(strides[0])> at byte ``at``."""
    struct.pack_into("<i", blob, at + lay[f"{prefix}_dims"], dims)
    nargs = len(strides[0]) if strides else 1
    for i, size in enumerate(sizes):
        struct.pack_into("<3I", blob, at + lay[f"{prefix}_sizes"] + 12 * i, *int_divider(size))
        for a, s in enumerate(strides[i]):
            struct.pack_into("<I", blob, at + lay[f"{prefix}_strides"] + 4 * (i * nargs + a),
                             s & 0xFFFFFFFF)


def _mults(cfg):
    """input_mult / output_mult as setReduceConfig's split_input / split_output set them."""
    im, om = [0, 0, 0], [0, 0]
    step_in = step_out = 1
    if cfg.fastest:
        im[0], step_in = step_in, step_in * cfg.block_width
    else:
        om[0], step_out = step_out, step_out * cfg.block_width
    if cfg.warp_split:
        im[1], step_in = step_in, step_in * cfg.block_height
    else:
        om[1], step_out = step_out, step_out * cfg.block_height
    if cfg.ctas_per_output > 1:
        im[2], step_in = step_in, step_in * cfg.ctas_per_output
    assert (step_in, step_out) == (cfg.step_input, cfg.step_output)
    return im, om


def launch_reduce(x: torch.Tensor, dim, op: str, gpu, order="thread", cta_order="index"):
    """``torch.sum`` / ``torch.mean`` (``op``) of ``x`` over ``dim`` by ATen's compiled
    ``reduce_kernel`` in the interpreter on ``gpu`` (an object with ``sms`` and
    ``max_threads_per_sm``).  Returns (result tensor of the kept sizes, config, Stats)."""
    cfg = sums.config_for(x, dim, op, gpu)
    its = sums.iteration(x, dim)
    lay = reduce_layout(op, x.dtype)
    es = x.element_size()
    red = [it for it in its if it[2]]
    kept = [it for it in its if not it[2]]
    out_strides, s = [], 1
    for size, _, _ in kept:                 # the output is contiguous in TensorIterator order
        out_strides.append(s)
        s *= size
    blob = bytearray(lay["size"])
    if op == "mean":
        factor = np.float32(cfg.num_outputs) / np.float32(x.numel())
        struct.pack_into("<f", blob, lay["ops"], factor)
    struct.pack_into("<f", blob, lay["ident"], 0.0)
    c = lay["config"]
    im, om = _mults(cfg)
    for name, v in (("element_size_bytes", 4), ("num_inputs", cfg.num_inputs),
                    ("num_outputs", cfg.num_outputs), ("step_input", cfg.step_input),
                    ("step_output", cfg.step_output), ("ctas_per_output", cfg.ctas_per_output),
                    ("block_width", cfg.block_width), ("block_height", cfg.block_height),
                    ("num_threads", cfg.num_threads), ("output_vec_size", cfg.output_vec_size)):
        struct.pack_into("<i", blob, c + lay[f"cfg_{name}"], v)
    struct.pack_into("<3i", blob, c + lay["cfg_input_mult"], *im)
    struct.pack_into("<2i", blob, c + lay["cfg_output_mult"], *om)
    blob[c + lay["cfg_vectorize_input"]] = int(cfg.vectorize_input)
    _calc(blob, lay["input_calc"], lay, "ic", len(red), [r[0] for r in red],
          [[r[1] * es] for r in red])
    _calc(blob, lay["output_calc"], lay, "oc", len(kept), [k[0] for k in kept],
          [[o * es, k[1] * es] for k, o in zip(kept, out_strides)])
    # global memory: buffer 0 the input's storage, 1 the output, 2 the CTA staging, 3 semaphores
    inp = torch.empty(0, dtype=torch.uint8).set_(x.untyped_storage()).numpy().copy()
    out = np.zeros(cfg.num_outputs * es, np.uint8)
    gx, ctas = cfg.grid
    staging = 4 * cfg.num_outputs * ctas * (1 if cfg.fastest else
                                            cfg.block_width * cfg.output_vec_size)
    cta_buf = np.zeros(max(staging, 4) if ctas > 1 else 4, np.uint8)
    sem = np.zeros(max(gx, 1), np.int32)
    base = [ptx.buffer_address(i) for i in range(4)]
    struct.pack_into("<Q", blob, lay["src"], base[0] + x.storage_offset() * es)
    struct.pack_into("<Q", blob, lay["dst"], base[1])
    struct.pack_into("<Q", blob, lay["cta_buf"], base[2] if ctas > 1 else 0)
    struct.pack_into("<Q", blob, lay["semaphores"], base[3] if ctas > 1 else 0)
    blob[lay["final_output"]] = 1
    struct.pack_into("<i", blob, lay["noutputs"], 1)
    smem = _shared_memory_size(cfg)
    st = module().launch(reduce_entry(op, x.dtype, cfg.output_vec_size), (gx, ctas),
                         (cfg.block_width, cfg.block_height), [bytes(blob)],
                         dynamic_smem=smem, order=order, cta_order=cta_order,
                         buffers={"input": inp, "output": out, "cta_buf": cta_buf,
                                  "semaphores": sem})
    res = torch.from_numpy(out.view(np.int16 if es == 2 else np.int32).copy()).view(x.dtype)
    kept_shape = [size for size, _, _ in kept]
    return res, cfg, st, kept_shape


def _shared_memory_size(cfg) -> int:
    """ReduceConfig::shared_memory_size."""
    block_x = cfg.fastest
    if not cfg.warp_split and (not block_x or cfg.block_width <= 32):
        return 0
    return 4 * cfg.num_threads * cfg.output_vec_size


_SOFTMAX_T = {torch.float32: "fff", torch.float16: "N3c104HalfES2_f",
              torch.bfloat16: "N3c108BFloat16ES2_f"}


def softmax_entry(dtype: torch.dtype, log2_elements: int, log_softmax: bool,
                  half_to_float: bool = False) -> str:
    """The mangled name of ``softmax_warp_forward<T, T, float, L, log, false, 32>`` (with
    ``half_to_float``: ``<Half, float, float, ...>``)."""
    types = "N3c104HalfEff" if half_to_float else _SOFTMAX_T[dtype]
    head = (f"softmax_warp_forwardI{types}Li{log2_elements}ELb{int(log_softmax)}"
            "ELb0ELi32E")
    names = [k for k in module().kernels if head in k]
    if len(names) != 1:
        raise LookupError(f"no softmax_warp_forward for {dtype} L={log2_elements} "
                          f"log={log_softmax} in the PTX (instantiated: aten_kernels.cu)")
    return names[0]


def launch_softmax(x: torch.Tensor, log_softmax: bool = False, half_to_float: bool = False):
    """softmax / log_softmax of the rows of the 2-d contiguous ``x`` by the compiled
    ``softmax_warp_forward`` as ``dispatch_softmax_forward`` launches it (128 threads a
    block: warps of ``min(P, 32)`` lanes, 2 rows a warp where ``P <= 128``).
    Returns (result, Stats)."""
    rows, n = x.shape
    L = max(n - 1, 0).bit_length()
    P = 1 << L
    warp = min(P, 32)
    per_warp = 2 if P <= 128 else 1
    warps = 128 // warp
    blocks = -(-rows // (warps * per_warp))
    np_t = {torch.float32: np.float32, torch.float16: np.int16, torch.bfloat16: np.int16}
    src = x.contiguous().view(torch.int16 if x.element_size() == 2 else torch.float32)
    src = src.numpy().astype(np_t[x.dtype]).copy()
    dst = np.zeros(src.shape, np.float32) if half_to_float else np.zeros_like(src)
    st = module().launch(softmax_entry(x.dtype, L, log_softmax, half_to_float), blocks,
                         (warp, warps),
                         [dst, src, np.int32(rows), np.int32(n), np.int32(n), np.uint64(0),
                          np.int32(-1), np.uint8(0)])
    out = torch.from_numpy(dst)
    return (out if dst.dtype == np.float32 else out.view(x.dtype)), st


def launch_welford(x: torch.Tensor, threads: int = 512):
    """Per-row (mean, var) of the 2-d contiguous fp32 / fp16 ``x`` by ``welford_rows`` (the
    header's WelfordOps and BlockReduce, aten_kernels.cu)."""
    rows, n = x.shape
    name = "_Z12welford_rowsIfEvlPKT_PfS3_" if x.dtype == torch.float32 else \
        "_Z12welford_rowsIN3c104HalfEEvlPKT_PfS5_"
    src = x.contiguous().numpy() if x.dtype == torch.float32 else \
        x.contiguous().view(torch.int16).numpy()
    mean, var = np.zeros(rows, np.float32), np.zeros(rows, np.float32)
    st = module().launch(name, rows, threads, [np.int64(n), src.copy(), mean, var])
    return mean, var, st


def launch_block_reduce(s: np.ndarray):
    """``cuda_utils::BlockReduce`` sums of the rows of ``s`` ([R, B], one value a thread)."""
    rows, b = s.shape
    out = np.zeros(rows, np.float32)
    st = module().launch("block_reduce_sum", rows, b, [np.ascontiguousarray(s, np.float32), out])
    return out, st
