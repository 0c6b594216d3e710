"""PyTorch's CUDA reduction launch configuration (``setReduceConfig`` in
``ATen/native/cuda/Reduce.cuh``, torch 2.13.0), as a pure function of the reduction's
iteration layout and the device.

The facts, read from the header shipped in torch 2.13.0's wheels (the CPU and CUDA wheels
are the same commit) - here restated, not copied:

* ``set_block_dimension``: at most 512 threads (``MAX_NUM_THREADS / output_vec_size``);
  ``block_width = min(dim0_pow2, 32)``, ``block_height = min(dim1_pow2, max / block_width)``,
  then ``block_width = min(dim0_pow2, max / block_height)``; ``dimK_pow2`` is the largest
  power of two <= dimK, capped at the maximum.
* the reduced dimension is the fastest (``block_x`` reduces) when every dimension is
  reduced or the input's stride of iteration dim 0 is below that of the first kept one;
  it is vectorised along the input (``vectorize_input``, ``dim0 /= input_vec_size``) when
  that stride is one element, ``dim0 >= 128`` and one reduced dimension remains;
  otherwise, with a unit stride, along the output (``get_output_vec_size``: 4, halved until
  it divides the base address in elements, the first kept size and the kept strides).
* lanes split the input (``input_mult[0]``) or the outputs; warps split the input when
  ``values_per_thread >= min(16 * block_height, 256)``; CTAs split it when warps do,
  ``values_per_thread >= 256`` and the grid fits ``SMs * (maxThreadsPerSM / threads)``:
  ``ctas = max(min(ceil(target / grid), ceil(vpt / 16)), ceil(vpt / 256))``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

# the float dtypes every kernel model takes: 16- and 32-bit floats, whose math runs in float
# (ATen's opmath_t); the sums add float64
FLOATS = (torch.float32, torch.float16, torch.bfloat16)
WARP = 32
MAX_THREADS = 512
MIN_VALUES_PER_THREAD = 16      # CUDA (ROCm: 128)
MAX_VALUES_PER_THREAD = 256


def _last_pow2(n: int) -> int:
    return 1 << (max(int(n), 1).bit_length() - 1)


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Layout:
    """A reduction as TensorIterator presents it: ``num_outputs`` x ``num_inputs``; the
    number of reduced iteration dimensions after coalescing; the input's element stride of
    iteration dim 0 and of the first kept dim (None when all are reduced); for output
    vectorisation the input's base offset (elements), the first kept size and the kept
    strides (elements)."""
    num_outputs: int
    num_inputs: int
    num_reduce_dims: int
    ndim: int
    stride0: int
    stride_kept0: int | None
    base_offset: int = 0
    kept_size0: int = 1
    kept_strides: tuple = ()


@dataclass(frozen=True)
class ReduceConfig:
    num_outputs: int
    num_inputs: int
    block_width: int
    block_height: int
    vectorize_input: bool
    input_vec_size: int
    output_vec_size: int
    fastest: bool                 # block_x reduces (lanes split the input)
    warp_split: bool              # block_y reduces (warps split the input)
    ctas_per_output: int
    step_input: int
    step_output: int
    sms: int
    max_threads_per_sm: int
    vt0: int = 4

    @property
    def num_threads(self) -> int:
        return self.block_width * self.block_height

    @property
    def grid(self) -> tuple[int, int]:
        return (_div_up(self.num_outputs // self.output_vec_size, self.step_output),
                self.ctas_per_output)

    def describe(self) -> str:
        v = (f"vectorised x{self.input_vec_size}" if self.vectorize_input else
             f"output vec {self.output_vec_size}" if self.output_vec_size > 1 else
             "not vectorised")
        return (f"block {self.block_width}x{self.block_height}, {v}, "
                f"{'lanes' if self.fastest else 'warps'} split the input"
                f"{', warps too' if self.fastest and self.warp_split else ''}, "
                f"grid {self.grid[0]}x{self.grid[1]} "
                f"({self.sms} SMs x {self.max_threads_per_sm} threads)")


def output_vec_size(layout: Layout) -> int:
    vec = 4
    for n in (layout.base_offset, layout.kept_size0, *layout.kept_strides):
        while int(n) % vec:
            vec //= 2
    return vec


def set_reduce_config(layout: Layout, *, input_vec_size: int, sms: int,
                      max_threads_per_sm: int, vt0: int = 4) -> ReduceConfig:
    """``setReduceConfig<arg_t, scalar_t, vt0, input_vec_size>`` for ``layout`` on a device
    with ``sms`` multiprocessors of ``max_threads_per_sm`` threads."""
    M, N = layout.num_outputs, layout.num_inputs
    if layout.ndim > 0:
        fastest = (layout.num_reduce_dims == layout.ndim or
                   layout.stride0 < layout.stride_kept0)
        dim0, dim1 = (N, M) if fastest else (M, N)
        unit = (layout.stride0 if fastest else layout.stride_kept0) == 1
    else:
        fastest, dim0, dim1, unit = True, 1, 1, True
    vec_in, ovs = False, 1
    if unit:
        if fastest and dim0 >= 128 and layout.num_reduce_dims == 1:
            vec_in = True
            dim0 //= input_vec_size
        elif not fastest:
            ovs = output_vec_size(layout)
            dim0 //= ovs
    mx = MAX_THREADS // ovs
    d0 = _last_pow2(dim0) if dim0 < mx else mx
    d1 = _last_pow2(dim1) if dim1 < mx else mx
    bw = min(d0, WARP)
    bh = min(d1, mx // bw)
    bw = min(d0, mx // bh)
    step_in, step_out = 1, 1
    if layout.ndim == 0 or fastest:
        step_in *= bw
    else:
        step_out *= bw
    vpt = _div_up(N, step_in)
    warp_split = vpt >= min(bh * 16, MAX_VALUES_PER_THREAD)
    if warp_split:
        step_in *= bh
    else:
        step_out *= bh
    ctas = 1
    blocks_per_sm = max_threads_per_sm // (bw * bh)
    target = sms * blocks_per_sm
    grid = _div_up(M // ovs, step_out)
    vpt = _div_up(N, step_in)
    if warp_split and vpt >= MAX_VALUES_PER_THREAD and grid <= target:
        ctas = max(min(_div_up(target, grid), _div_up(vpt, MIN_VALUES_PER_THREAD)),
                   _div_up(vpt, MAX_VALUES_PER_THREAD))
        if ctas > 1:
            step_in *= ctas
    return ReduceConfig(M, N, bw, bh, vec_in, input_vec_size, ovs, fastest, warp_split,
                        ctas, step_in, step_out, sms, max_threads_per_sm, vt0)
