"""Row-wise Triton kernels whose bits come from everything around a dot: reductions in the
compiled order, contraction of a multiply and an add into one fma, and the GPU's approximate
functions (issue 30).  One row per program, the whole row in one block:

* :func:`row_sum`: ``tl.sum(x, 1) * scale + shift`` (the tail contracts into ``fma.rn.f32``
  on NVIDIA with ``enable_fp_fusion``, Triton's default);
* :func:`softmax`: ``tl.exp(x - max) / tl.sum(...)`` (``ex2.approx`` after a multiply by
  log2(e), ``div.full.f32``);
* :func:`layer_norm`: mean, variance, ``1 / tl.sqrt(var + eps)`` (no affine);
* :func:`exp2_div`: ``tl.exp2(x) / y`` elementwise (``ex2.approx.ftz.f32``, ``div.full``).

Used by the GPU step ``triton`` (torch_mma_emu/hw/triton_programs.py: natively against
``torch_mma_emu.triton.emulate`` bit for bit) and the tests.  Rows may start anywhere (a
view such as ``buf[:, 1:]``): Triton's launcher specialises on whether the data pointer is
16-byte aligned, and the compiled layout (with it the order of a reduction) changes.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _row_sum_kernel(x_ptr, y_ptr, n, stride, scale, shift, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + offs, mask=offs < n, other=0.0)
    s = tl.sum(x.to(tl.float32), axis=0)
    tl.store(y_ptr + row, s * scale + shift)


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(x_ptr + row * stride + offs, mask=ok, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n + offs, e / tl.sum(e, axis=0), mask=ok)


@triton.jit
def _layer_norm_kernel(x_ptr, y_ptr, n, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(x_ptr + row * stride + offs, mask=ok, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n
    d = tl.where(ok, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / n
    tl.store(y_ptr + row * n + offs, d * (1 / tl.sqrt(var + eps)), mask=ok)


@triton.jit
def _exp2_div_kernel(x_ptr, d_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(x_ptr + offs, mask=ok, other=0.0)
    d = tl.load(d_ptr + offs, mask=ok, other=1.0)
    tl.store(y_ptr + offs, tl.exp2(x) / d, mask=ok)


def _rows(x: torch.Tensor, what: str):
    if x.dim() != 2 or x.stride(1) != 1:
        raise ValueError(f"triton_kernels.{what}: x must be 2-D with contiguous rows, got "
                         f"shape {tuple(x.shape)} strides {x.stride()}")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"triton_kernels.{what}: x must be float32, float16 or bfloat16, got "
                        f"{x.dtype}")
    return x.shape[0], x.shape[1], triton.next_power_of_2(x.shape[1])


def row_sum(x: torch.Tensor, scale: float = 0.1, shift: float = 1.0, *,
            num_warps: int = 4) -> torch.Tensor:
    """``x.sum(1) * scale + shift`` in fp32, one program per row of the 2-D ``x``."""
    R, n, block = _rows(x, "row_sum")
    y = torch.empty(R, dtype=torch.float32, device=x.device)
    _row_sum_kernel[(R,)](x, y, n, x.stride(0), scale, shift, BLOCK=block, num_warps=num_warps)
    return y


def softmax(x: torch.Tensor, *, num_warps: int = 4) -> torch.Tensor:
    """Row softmax of the 2-D ``x``, in fp32."""
    R, n, block = _rows(x, "softmax")
    y = torch.empty((R, n), dtype=torch.float32, device=x.device)
    _softmax_kernel[(R,)](x, y, n, x.stride(0), BLOCK=block, num_warps=num_warps)
    return y


def layer_norm(x: torch.Tensor, eps: float = 1e-5, *, num_warps: int = 4) -> torch.Tensor:
    """Row layer norm of the 2-D ``x`` (no affine), in fp32."""
    R, n, block = _rows(x, "layer_norm")
    y = torch.empty((R, n), dtype=torch.float32, device=x.device)
    _layer_norm_kernel[(R,)](x, y, n, x.stride(0), eps, BLOCK=block, num_warps=num_warps)
    return y


def exp2_div(x: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """``2^x / d`` elementwise for fp32 tensors of one shape."""
    if x.dtype != torch.float32 or d.dtype != torch.float32 or x.shape != d.shape:
        raise TypeError("triton_kernels.exp2_div: x and d must be float32 tensors of one shape")
    x, d = x.contiguous().view(-1), d.contiguous().view(-1)
    y = torch.empty_like(x)
    _exp2_div_kernel[(triton.cdiv(x.numel(), 1024),)](x, d, y, x.numel(), BLOCK=1024)
    return y
