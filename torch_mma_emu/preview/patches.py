"""The process-wide patches of the preview: what an ``emulate`` block changes in PyTorch,
Inductor and torchao so that every product reaches its dispatch mode, each a reference
counted :class:`~torch_mma_emu.switches.Switch` (the mechanism, ../switches.py).

Held by every ``emulate`` block (:data:`EMULATE`, preview/mode.py):

* :data:`MHA_FASTPATH`, :data:`INDUCTOR_SETTINGS`, :data:`PRODUCT_DECOMPS`: PyTorch paths
  that would turn products into kernels or generated code that never reach the mode;
* :data:`FLEX_COMPILE`, :data:`FLEX_CPU_GRAD`, :data:`FLEX_LOWERING`: flex attention
  compiled by Inductor, and its refusal of CPU inputs that require grad.

Threads started inside a block run under it through ``switches.THREADS`` (shared with the
Triton block).  Held per call or per block elsewhere: :data:`ONEDNN_OFF` (functions.py: CPU
RNNs) and :data:`TORCHAO_GPU_CHECKS` (:func:`torchao_checks`, torchao_checks.py).
"""
from __future__ import annotations

import contextlib
import functools
import sys
from typing import Callable, Iterator, Optional

import torch

from ..switches import THREADS, Patches, Switch, ours, is_ours, optional_module, patch_switch

__all__ = ["EMULATE", "MHA_FASTPATH", "INDUCTOR_SETTINGS", "PRODUCT_DECOMPS", "FLEX_COMPILE",
           "FLEX_CPU_GRAD", "FLEX_LOWERING", "ONEDNN_OFF", "TORCHAO_GPU_CHECKS", "flex_ops",
           "holds_flex", "inductor_config_per_thread", "torchao_answers", "torchao_checks"]


# -- PyTorch settings that would hide products -------------------------------------------
def _mha_fastpath(p: Patches) -> None:
    mha = getattr(torch.backends, "mha", None)
    if mha is not None and hasattr(mha, "get_fastpath_enabled"):
        p.setting(mha.get_fastpath_enabled, mha.set_fastpath_enabled, False)


MHA_FASTPATH = patch_switch(
    "mha fast path", "torch.backends.mha fast path off: nn.MultiheadAttention / "
    "TransformerEncoderLayer inference kernels (_native_multi_head_attention, ...) whose "
    "inner products never reach a dispatch mode", _mha_fastpath)


def _inductor_settings(p: Patches) -> None:
    aot_config = optional_module("torch._functorch.config")
    ind_config = optional_module("torch._inductor.config")
    if aot_config is None or ind_config is None:  # no Inductor in this build: nothing to switch
        return
    values = [(ind_config, "max_autotune_gemm_backends", "ATEN"),
              (getattr(ind_config, "cpp", None), "weight_prepack", False),
              (ind_config, "fx_graph_cache", False),
              (aot_config, "enable_autograd_cache", False)]
    for mod, name, value in values:
        if mod is not None and hasattr(mod, name):
            p.set(mod, name, value, mine=False)


@functools.lru_cache(maxsize=None)
def inductor_config_per_thread() -> bool:
    """Whether Inductor's settings are per thread: PyTorch's config modules keep a user's
    value in a ContextVar (torch 2.12-2.14, not 2.11; a new thread starts with the defaults)."""
    try:
        import torch._inductor.config as ind_config
        entry = ind_config._config["fx_graph_cache"]
    except Exception:  # no Inductor, or another layout: treat as process-wide
        return False
    from contextvars import ContextVar
    return isinstance(getattr(entry, "user_override", None), ContextVar)


INDUCTOR_SETTINGS = patch_switch(
    "Inductor settings", "Inductor compiling inside a block: GEMM autotuning may pick only "
    "the library call (max_autotune_gemm_backends='ATEN'), no prepacked oneDNN Linear / conv "
    "(cpp.weight_prepack), and the FX graph / AOT autograd caches are off (their keys do not "
    "include the decomposition table, so they could serve code compiled outside a block); "
    "per thread where PyTorch keeps these settings per thread (each thread with a block, "
    "and each thread started inside one, gets them)", _inductor_settings,
    per_thread=inductor_config_per_thread)


def _product_decomps(p: Patches) -> None:
    dec = optional_module("torch._inductor.decomposition")
    if dec is None:       # no Inductor in this build: nothing to keep
        return
    tables = [dec.decompositions]
    if hasattr(dec, "fast_random_decomps"):
        tables.append(dec.fast_random_decomps())      # a cached copy of the table
    for table in tables:
        for op, fn in list(table.items()):
            pkt = getattr(op, "overloadpacket", None)
            if pkt is not None and getattr(pkt, "__name__", "") in ("mm", "bmm", "addmm") \
                    and not is_ours(fn):
                p.item(table, op, _stepping_aside(fn))


def _stepping_aside(fn):
    def decomp(*args, **kwargs):
        if PRODUCT_DECOMPS.is_on:
            return NotImplemented
        return fn(*args, **kwargs)
    return ours(decomp, fn)


PRODUCT_DECOMPS = patch_switch(
    "Inductor product decompositions", "Inductor's decompositions of mm / bmm / addmm (K = 1 "
    "outer products, CPU dot products and tiny addmm become pointwise code that never "
    "reaches the mode, torch/_inductor/decomposition.py) return NotImplemented: the op stays "
    "a library call", _product_decomps)


# -- flex attention -----------------------------------------------------------------------
def flex_ops() -> tuple:
    hop = torch.ops.higher_order
    return tuple(getattr(hop, n) for n in ("flex_attention", "flex_attention_backward")
                 if hasattr(hop, n))


def holds_flex(gm) -> bool:
    """Whether an FX graph (or one of its subgraphs) calls a flex-attention operator."""
    ops = flex_ops()
    mods = gm.modules() if isinstance(gm, torch.nn.Module) else ()
    return any(node.op == "call_function" and node.target in ops
               for mod in mods if isinstance(mod, torch.fx.GraphModule)
               for node in mod.graph.nodes)


def _compile_fx_or_eager(compile_fx):
    def compile_fx_or_eager(model_, example_inputs_, *args, **kwargs):
        if FLEX_COMPILE.is_on and holds_flex(model_):
            from torch._dynamo.backends.debugging import aot_eager
            return aot_eager(model_, example_inputs_)
        return compile_fx(model_, example_inputs_, *args, **kwargs)
    return compile_fx_or_eager


def _validate_device_but_cpu_grad(check):
    def validate_device(query, key, value):
        if FLEX_CPU_GRAD.is_on and query.device.type == "cpu":
            return None       # the GPU being previewed has the backward (emulated)
        return check(query, key, value)
    return validate_device


def _replacing(name: str, changes: str, module: str, attr: str, wrap) -> Switch:
    """A switch that replaces ``module.attr`` by ``wrap(original)`` (where both exist)."""
    return patch_switch(name, changes, lambda p: p.wrap(optional_module(module), attr, wrap))


FLEX_COMPILE = _replacing(
    "flex attention compile", "torch._inductor.compile_fx.compile_fx: a graph that holds the "
    "flex-attention operators is compiled as backend='aot_eager' (the compiled code calls "
    "the operators at run time and the mode emulates them; the rest of that graph runs as "
    "aot_eager's aten ops too); other graphs as before",
    "torch._inductor.compile_fx", "compile_fx", _compile_fx_or_eager)
FLEX_CPU_GRAD = _replacing(
    "flex attention CPU grad", "torch.nn.attention.flex_attention._validate_device: CPU inputs "
    "that require grad pass (PyTorch refuses them: 'FlexAttention does not support backward "
    "on CPU'); the preview models a GPU, which has the backward, and the backward operator "
    "reaches the mode", "torch.nn.attention.flex_attention", "_validate_device",
    _validate_device_but_cpu_grad)


def _flex_lowering(p: Patches) -> None:
    registers = optional_module("torch._inductor.kernel.flex.flex_attention")
    lowering = optional_module("torch._inductor.lowering")
    if registers is None or lowering is None:   # no Inductor / flex lowering in this build
        return
    lowerings = lowering.lowerings
    for hop in flex_ops():
        fn = lowerings.get(hop)
        if fn is None or is_ours(fn):
            continue

        def lower(*args, _fn=fn, _hop=hop, **kwargs):
            if FLEX_LOWERING.is_on:
                for block in THREADS.blocks("mode"):
                    block.record_native(_hop, (), "compiled by Inductor into its own kernel: "
                                        "its products are not emulated (compile with "
                                        "backend='aot_eager', or call it eagerly)")
            return _fn(*args, **kwargs)
        p.item(lowerings, hop, ours(lower, fn))


FLEX_LOWERING = patch_switch(
    "flex attention lowering", "Inductor's lowerings of the flex-attention operators: should "
    "one still run inside a block (a path FLEX_COMPILE misses), every open emulate block "
    "records a native call and warns, by name", _flex_lowering)


EMULATE = (MHA_FASTPATH, INDUCTOR_SETTINGS, PRODUCT_DECOMPS, FLEX_COMPILE, FLEX_CPU_GRAD,
           FLEX_LOWERING)
"""What an ``emulate`` block holds while open (switches.THREAD_START is held through
switches.THREADS)."""


# -- held per call or per block elsewhere -------------------------------------------------
ONEDNN_OFF = patch_switch(
    "oneDNN off", "torch._C._set_mkldnn_enabled(False) around CPU RNN calls: PyTorch's oneDNN "
    "RNN kernel (mkldnn_rnn_layer) would hide the products, its cell-by-cell code issues "
    "addmm / mm (torch.backends.mkldnn.flags would also set oneDNN's TF32 flag, with a "
    "warning)", lambda p: p.setting(torch._C._get_mkldnn_enabled,
                                    torch._C._set_mkldnn_enabled, False))


_CAPS: list = []                    # (token, (major, minor)) of the open gpu_checks_pass blocks


def torchao_answers() -> tuple:
    """The compute capability torchao's patched checks answer for: the innermost (most
    recently opened, any thread) ``gpu_checks_pass`` block's."""
    with TORCHAO_GPU_CHECKS.lock:
        return _CAPS[-1][1] if _CAPS else (0, 0)


def _torchao_checks(p: Patches) -> None:
    import re
    check = re.compile(r"^is_sm_at_least_(\d+)(\d)$")
    for modname, mod in list(sys.modules.items()):
        if mod is None or not (modname == "torchao" or modname.startswith("torchao.")):
            continue
        for name, fn in list(vars(mod).items()):
            m = check.match(name)
            if m and callable(fn):
                want = (int(m.group(1)), int(m.group(2)))
                p.wrap(mod, name, functools.partial(_answering, want))
    p.wrap(torch.cuda, "is_available", functools.partial(_answering, None))


def _answering(want: Optional[tuple], fn: Callable) -> Callable:
    """``fn`` answering as the held arch would (``want`` None: CUDA is available)."""
    def answer(*args, **kwargs) -> bool:
        if not TORCHAO_GPU_CHECKS.is_on:
            return fn(*args, **kwargs)
        return True if want is None else torchao_answers() >= want
    return answer


TORCHAO_GPU_CHECKS = patch_switch(
    "torchao GPU checks", "torchao's is_sm_at_least_* (in every loaded torchao module that "
    "imported them) answer for the innermost gpu_checks_pass block's arch, and "
    "torch.cuda.is_available() answers True; modules loaded while held are patched by the "
    "next block", _torchao_checks, again=_torchao_checks)


@contextlib.contextmanager
def torchao_checks(cap: tuple) -> Iterator[None]:
    """Hold :data:`TORCHAO_GPU_CHECKS` answering for compute capability ``cap``."""
    token = object()
    with TORCHAO_GPU_CHECKS.lock:
        _CAPS.append((token, cap))
    try:
        with TORCHAO_GPU_CHECKS:
            yield
    finally:
        with TORCHAO_GPU_CHECKS.lock:
            _CAPS[:] = [e for e in _CAPS if e[0] is not token]
