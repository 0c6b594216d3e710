"""What PyTorch does around flex attention that would keep it from the mode, changed while
an ``emulate`` block is open (in any thread, as the other compile switches of mode.py).

* **Inductor** compiles ``flex_attention`` into its own kernel (a C++ or Triton template)
  whose products never reach a dispatch mode.  ``torch.compile(flex_attention)`` is the
  recommended use, and what transformers' ``attn_implementation="flex_attention"`` calls.
  While a block is open, an Inductor compilation of a graph that holds the flex-attention
  operators is done as ``backend="aot_eager"`` instead: the compiled code calls the
  operators at run time, the mode emulates them (flex.py), and the results are eager's.
  (The rest of that graph runs as aot_eager's aten ops too, not Inductor's fused code.)
  Should Inductor's flex lowering still run inside a block (a path this misses), it records a
  native call in every open block and warns, by name.
* **No backward on CPU**: PyTorch refuses flex attention on CPU inputs that require grad
  ("FlexAttention does not support backward on CPU"), eager and compiled, before anything
  runs.  The preview models a GPU, which has the backward; while a block is open the check
  lets CPU inputs through, and the backward operator, which reaches the mode, is emulated
  (flex.py).  Run ``.backward()`` inside the block: outside it PyTorch's own math backward
  would run natively.

Both are installed once per process (on the first block) and do what PyTorch does whenever
no block is open.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

__all__ = ["install", "holds_flex"]

_SWITCHES = None            # mode._SWITCHES: its depth counts the open blocks (any thread)
_ON_LOWERING: Optional[Callable] = None
_INSTALLED = False


def _open() -> bool:
    return _SWITCHES is not None and _SWITCHES.depth > 0


def _flex_ops() -> tuple:
    hop = torch.ops.higher_order
    return tuple(getattr(hop, n) for n in ("flex_attention", "flex_attention_backward")
                 if hasattr(hop, n))


def holds_flex(gm) -> bool:
    """Whether an FX graph (or one of its subgraphs) calls a flex-attention operator."""
    ops = _flex_ops()
    mods = gm.modules() if isinstance(gm, torch.nn.Module) else ()
    return any(node.op == "call_function" and node.target in ops
               for mod in mods if isinstance(mod, torch.fx.GraphModule)
               for node in mod.graph.nodes)


def install(switches, on_lowering: Callable) -> None:
    """Once per process.  ``switches``: mode.py's process-wide switches (``depth`` > 0 while a
    block is open); ``on_lowering(hop)``: called when Inductor lowers a flex operator inside
    a block (records and warns)."""
    global _SWITCHES, _ON_LOWERING, _INSTALLED
    _SWITCHES, _ON_LOWERING = switches, on_lowering
    if _INSTALLED:
        return
    _INSTALLED = True
    _let_cpu_grad_through()
    _compile_flex_eagerly()
    _watch_lowering()


def _let_cpu_grad_through() -> None:
    try:
        import torch.nn.attention.flex_attention as fa
    except ImportError:         # no flex attention in this build
        return
    check = getattr(fa, "_validate_device", None)
    if check is None or getattr(check, "_mma_emu_keeps", False):
        return

    def validate_device(query, key, value):
        if _open() and query.device.type == "cpu":
            return None       # the GPU being previewed has the backward (emulated)
        return check(query, key, value)
    validate_device._mma_emu_keeps = True
    validate_device.__wrapped__ = check
    fa._validate_device = validate_device


def _compile_flex_eagerly() -> None:
    try:
        import torch._inductor.compile_fx as cfx
    except Exception:  # no Inductor in this build
        return
    compile_fx = cfx.compile_fx
    if getattr(compile_fx, "_mma_emu_keeps", False):
        return

    def compile_fx_or_eager(model_, example_inputs_, *args, **kwargs):
        if _open() and holds_flex(model_):
            from torch._dynamo.backends.debugging import aot_eager
            return aot_eager(model_, example_inputs_)
        return compile_fx(model_, example_inputs_, *args, **kwargs)
    compile_fx_or_eager._mma_emu_keeps = True
    compile_fx_or_eager.__wrapped__ = compile_fx
    cfx.compile_fx = compile_fx_or_eager


def _watch_lowering() -> None:
    try:
        import torch._inductor.kernel.flex.flex_attention  # noqa: F401 (registers it)
        from torch._inductor.lowering import lowerings
    except Exception:  # no Inductor / flex lowering in this build
        return
    for hop in _flex_ops():
        fn = lowerings.get(hop)
        if fn is None or getattr(fn, "_mma_emu_keeps", False):
            continue

        def lower(*args, _fn=fn, _hop=hop, **kwargs):
            if _open() and _ON_LOWERING is not None:
                _ON_LOWERING(_hop)
            return _fn(*args, **kwargs)
        lower._mma_emu_keeps = True
        lowerings[hop] = lower
