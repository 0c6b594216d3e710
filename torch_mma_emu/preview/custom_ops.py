"""Ops from other libraries (``torch.library.custom_op``, ``Library.impl``) under ``emulate``.

Such an op reaches the dispatch mode whole; running it with the mode off would run every
product inside it natively and unseen (transformers' ``transformers::grouped_mm_fallback``,
its MoE experts loop, under ``torch.compile``).  So:

* an op whose kernel for the tensors' device is a Python function (custom_op, ``Library.impl``
  with a Python callable; ``CompositeExplicitAutograd`` included) is run by its own kernel
  with the mode on: the products it issues come back to the mode and are emulated;
* an op whose kernel is compiled code is opaque: it runs natively and, unless its library
  is known to multiply no matrices (collectives, the profiler, Inductor's helpers), it is
  recorded as native and warned about once per block, by name.

``CompositeImplicitAutograd`` ops of any library are split into their parts before (mode.py).
"""
from __future__ import annotations

import re

import torch

__all__ = ["OWN", "kernel_is_python", "is_opaque_and_unknown", "has_kernel"]

# namespaces the mode handles itself
OWN = frozenset({"aten", "prims", "mma_emu"})
# libraries whose compiled kernels multiply no matrices
# (``prim``: TorchScript's prims, e.g. ``prim::device``, which a FakeTensor's ``.device``
# dispatches; they are not in the dispatcher's table)
_NO_PRODUCTS = frozenset({"_c10d_functional", "_c10d_functional_autograd", "c10d", "_dtensor",
                          "profiler", "inductor", "debugprims", "rngprims", "symm_mem",
                          "fsdp", "streams", "prim"})
_CACHE: dict = {}
_LINE = re.compile(r"^(\w+)(\[alias\])?: registered at (.*?) :: ")


def has_kernel(func, key: str) -> bool:
    """Whether the dispatcher holds a kernel of ``func`` for dispatch key ``key`` (False for
    what is not an ``OpOverload`` in the dispatcher's table, e.g. TorchScript's
    ``prim::device``, for which PyTorch's lookup raises)."""
    if not isinstance(func, torch._ops.OpOverload):
        return False
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), key)
    except RuntimeError:            # "operator prim::device does not exist"
        return False


def _kernels(func) -> dict:
    """``{dispatch key: registration place}`` of an op (from the dispatcher's table)."""
    k = _CACHE.get(func)
    if k is None:
        k = {}
        try:
            dump = torch._C._dispatch_dump(func.name())
        except RuntimeError:        # not in the dispatcher's table
            dump = ""
        for line in dump.splitlines():
            m = _LINE.match(line)
            if m:
                k[m.group(1)] = m.group(3)
        _CACHE[func] = k
    return k


def _backend(args, kwargs) -> str:
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            return {"cpu": "CPU", "cuda": "CUDA"}.get(a.device.type, a.device.type.upper())
        if isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, torch.Tensor):
                    return {"cpu": "CPU", "cuda": "CUDA"}.get(b.device.type, "CPU")
    return "CPU"


def kernel_is_python(func, args, kwargs) -> str | None:
    """The dispatch key whose kernel would run for these arguments, when that kernel is a
    Python function (None otherwise)."""
    ks = _kernels(func)
    dev = _backend(args, kwargs)
    for key in (dev, "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional"):
        where = ks.get(key)
        if where is not None:
            return key if re.search(r"\.py:\d+$", where) else None
    return None


def run_own_kernel(func, key: str, args, kwargs):
    """Run the op's kernel for ``key`` (call with the mode pushed: what it issues comes back
    to the mode)."""
    backend = key if key in ("CPU", "CUDA") else _backend(args, kwargs)
    keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, backend))
    return func.redispatch(keyset, *args, **kwargs)


def is_opaque_and_unknown(func) -> bool:
    """A compiled kernel from a library that may multiply matrices inside."""
    return func.namespace not in _NO_PRODUCTS
