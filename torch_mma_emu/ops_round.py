"""``round_result``: a result's rounding to its storage dtype as the op
``mma_emu::round_to``, which no compiler fuses away (why: below)."""
from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake

# ---------------------------------------------------------------------------------------
# The rounding of a result to its storage dtype, kept where a compiler would drop it.  A GPU
# kernel writes its fp32 accumulators as bf16 / fp16; emulated, that is ``D.to(dtype)``
# after the op, and Inductor fuses such a cast into the next pointwise op and skips the
# rounding (the consumer reads the fp32 value: torch 2.11-2.14 by default), so a compiled
# model would not compute what the GPU does.  While a graph is traced the cast is this
# op of its own, which Inductor calls and cannot see into; eager code casts as before.
# ---------------------------------------------------------------------------------------

@torch.library.custom_op("mma_emu::round_to", mutates_args=())
def _round_to_op(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x.to(dtype, copy=True)


@_round_to_op.register_fake
def _(x, dtype):
    return torch.empty_like(x, dtype=dtype)


def _round_to_setup(ctx, inputs, output):
    ctx.in_dtype = inputs[0].dtype


_round_to_op.register_autograd(lambda ctx, g: (g.to(ctx.in_dtype), None),
                               setup_context=_round_to_setup)


def round_result(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x.to(dtype)`` as a kernel's store: a rounding no compiler fuses away."""
    if x.dtype == dtype:
        return x
    if torch.compiler.is_compiling() or is_fake(x):
        return _round_to_op(x, dtype)
    return x.to(dtype)
