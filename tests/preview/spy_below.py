"""A spy dispatch mode entered *outside* ``emulate`` (below it on the mode stack): it sees
what the emulating mode lets through, i.e. the emulated products (``mma_emu.emulated_mm``)
and every product that runs natively.  Tests pair it with a deliberately coarse spec
(``tme.spec("sm90", "bf16").replace(F=3)``) so that an emulated result is visibly different
from a native one."""
from __future__ import annotations

from collections import Counter

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode

import torch_mma_emu as tme

# aten ops that multiply matrices (what may not pass the emulating mode unrecorded)
PRODUCTS = {"mm", "addmm", "bmm", "baddbmm", "_addmm_activation", "matmul", "linear",
            "convolution", "convolution_backward", "_scaled_mm", "_scaled_mm_v2",
            "_grouped_mm", "_scaled_grouped_mm", "mv", "dot", "addmv", "addbmm", "addr",
            "_int_mm", "_scaled_dot_product_flash_attention_for_cpu",
            "_scaled_dot_product_flash_attention_for_cpu_backward",
            "_scaled_dot_product_efficient_attention",
            "_scaled_dot_product_efficient_attention_backward", "mkldnn_rnn_layer",
            "flex_attention", "flex_attention_backward"}


def coarse(arch: str = "sm90", fmt: str = "bf16"):
    """A spec whose products are visibly not native (3 fraction bits of alignment)."""
    return tme.spec(arch, fmt).replace(F=3)


class BelowSpy(TorchDispatchMode):
    """Counts ``emulated`` products and ``escaped`` native ones (by op name)."""

    supports_higher_order_operators = True

    def __init__(self):
        super().__init__()
        self.escaped: Counter = Counter()
        self.emulated = 0
        self.other: Counter = Counter()        # non-aten ops that got here

    @classmethod
    def ignore_compile_internals(cls) -> bool:     # sees the compiled code's calls only
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(isinstance(a, torch.Tensor) and (isinstance(a, FakeTensor) or a.is_meta)
               for a in args):
            return func(*args, **kwargs)      # shape propagation (the handlers' restride, dispatch_args.py)
        if isinstance(func, torch._ops.HigherOrderOperator):
            name = func.name()
        else:
            name = func.overloadpacket.__name__
            ns = func.namespace
            if ns == "mma_emu" and name == "emulated_mm":
                self.emulated += 1
            elif ns not in ("aten", "prims", "mma_emu"):
                self.other[f"{ns}::{name}"] += 1
        if name in PRODUCTS:
            self.escaped[name] += 1
        return func(*args, **kwargs)


def native_records(em) -> Counter:
    """The ops ``em`` recorded as native, by aten name (``mm``, ``_grouped_mm``, ...)."""
    out: Counter = Counter()
    for (op, _phase, fmt), n in em.counts.items():
        if fmt == "native":
            out[op.split(".")[1] if op.startswith("aten.") else op] += n
    return out
