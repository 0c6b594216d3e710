"""Process-wide changes held while at least one block needs them, with reference counts.

An ``emulate`` block is per thread (a dispatch mode lives on its thread's mode stack), but
some of what it must change to see every product is process-wide: PyTorch settings,
Inductor's tables, functions of PyTorch and torchao replaced by wrappers.  Each such change
is a :class:`Switch`: the first holder (in any thread) switches it on and saves what was
there, later holders only count, and the last to leave restores what was saved, also when
the block raises or the holders leave in another order than they came (threads).  Each
switch says what it changes; wrappers it installs do what the original does whenever the
switch is off, so a copy of one kept somewhere (a table copied while a block was open) is
harmless after the last block closes.

The switches of an ``emulate`` block (:data:`EMULATE`, held by preview/mode.py):

* :data:`MHA_FASTPATH`, :data:`INDUCTOR_SETTINGS`, :data:`PRODUCT_DECOMPS`: PyTorch paths
  that would turn products into kernels or generated code that never reach the mode;
* :data:`FLEX_COMPILE`, :data:`FLEX_CPU_GRAD`, :data:`FLEX_LOWERING`: flex attention
  compiled by Inductor, and its refusal of CPU inputs that require grad;
* :data:`THREAD_START` (through :data:`THREADS`): threads started inside a block run under it.

Held per call or per block elsewhere: :data:`ONEDNN_OFF` (preview/functions.py: CPU RNNs),
:data:`TORCHAO_GPU_CHECKS` (preview/torchao_checks.py); the same :class:`Switch` counts the
Triton interpreter seam (triton/hook.py) and the process-wide module hooks
(preview/module_hooks.py), whose changes are theirs to describe.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import threading
import warnings
from typing import Any, Callable, Iterator, Optional

import torch

__all__ = ["Switch", "Patches", "patch_switch", "hold", "enter_all", "leave_all", "EMULATE",
           "MHA_FASTPATH", "INDUCTOR_SETTINGS", "PRODUCT_DECOMPS", "FLEX_COMPILE",
           "FLEX_CPU_GRAD", "FLEX_LOWERING", "THREAD_START", "THREADS", "ONEDNN_OFF",
           "TORCHAO_GPU_CHECKS", "holds_flex", "torchao_answers", "torchao_checks"]

_MISSING = object()


class Patches:
    """What a switch replaced (attributes, mapping entries, settings), undone in reverse
    order.  A wrapper (``mine=True``) is put back only where it is still the current value:
    a change made on top of it by someone else is theirs to undo."""

    def __init__(self):
        self.undos: list = []

    def set(self, owner, name: str, value, *, mine: bool = True) -> None:
        if isinstance(owner, type):     # a class: an inherited attribute is deleted on undo
            old = owner.__dict__.get(name, _MISSING)
        else:
            old = getattr(owner, name, _MISSING)

        def undo():
            if mine and getattr(owner, name, _MISSING) is not value:
                return
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
        setattr(owner, name, value)
        self.undos.append(undo)

    def item(self, mapping, key, value) -> None:
        old = mapping.get(key, _MISSING)

        def undo():
            if mapping.get(key, _MISSING) is not value:
                return
            if old is _MISSING:
                del mapping[key]
            else:
                mapping[key] = old
        mapping[key] = value
        self.undos.append(undo)

    def setting(self, get: Callable[[], Any], put: Callable[[Any], None], value) -> None:
        """A setting read and written by functions (``torch.backends`` flags)."""
        old = get()
        put(value)
        self.undos.append(lambda: put(old))

    def undo(self) -> None:
        """Undo all (the rest still when one raises; the first error is raised after)."""
        err = None
        while self.undos:
            try:
                self.undos.pop()()
            except BaseException as e:  # noqa: B902 (re-raised below)
                err = err or e
        if err is not None:
            raise err


class Switch:
    """A process-wide change held while at least one holder (any thread) is inside.

    ``on()`` makes the change and returns what ``off(saved)`` needs to restore it (it
    undoes its own partial work if it raises); ``again(saved)``, if given, runs for each
    later holder (to extend the change, e.g. to modules imported since).  ``changes`` says
    what it changes, for the reader and for ``repr``.  ``per_thread()``, if given and true,
    says the change is the calling thread's only (a setting PyTorch keeps per thread):
    then each thread counts, switches and restores for itself."""

    def __init__(self, name: str, changes: str, on: Callable[[], Any],
                 off: Callable[[Any], None], again: Optional[Callable[[Any], None]] = None,
                 per_thread: Optional[Callable[[], bool]] = None):
        self.name, self.changes = name, changes
        self._on, self._off, self._again = on, off, again
        self._per_thread = per_thread
        self.lock = threading.RLock()
        self._shared = _Count()
        self._local = threading.local()

    def _count(self) -> "_Count":
        if self._per_thread is not None and self._per_thread():
            c = getattr(self._local, "count", None)
            if c is None:
                c = self._local.count = _Count()
            return c
        return self._shared

    @property
    def depth(self) -> int:
        """Holders now: in any thread, or in the calling one for a per-thread change."""
        return self._count().depth

    @property
    def saved(self) -> Any:
        return self._count().saved

    def enter(self) -> None:
        with self.lock:
            c = self._count()
            if c.depth == 0:
                c.saved = self._on()
            elif self._again is not None:
                self._again(c.saved)
            c.depth += 1

    def leave(self) -> None:
        with self.lock:
            c = self._count()
            if c.depth <= 0:
                raise RuntimeError(f"switch {self.name}: left more often than entered")
            c.depth -= 1
            if c.depth == 0:
                saved, c.saved = c.saved, None
                self._off(saved)

    def adopt(self) -> None:
        """In a thread started inside a block (it runs under the block until it ends): a
        per-thread change is made there too, and dies with the thread; a process-wide one
        is already there."""
        if self._per_thread is not None and self._per_thread():
            self.enter()

    def __enter__(self):
        self.enter()
        return self

    def __exit__(self, *exc):
        self.leave()

    @property
    def is_on(self) -> bool:
        return self.depth > 0

    def __repr__(self) -> str:
        return f"<Switch {self.name} depth={self.depth}: {self.changes}>"


class _Count:
    """How many hold a switch, and what its ``on()`` saved."""

    def __init__(self):
        self.depth = 0
        self.saved: Any = None


def _patching(install: Callable[[Patches], None]) -> Callable[[], Patches]:
    """``on`` for a switch made of patches: what ``install`` replaced is undone if it raises."""
    def on() -> Patches:
        p = Patches()
        try:
            install(p)
        except BaseException:
            p.undo()
            raise
        return p
    return on


def patch_switch(name: str, changes: str, install: Callable[[Patches], None],
                 again: Optional[Callable[[Patches], None]] = None,
                 per_thread: Optional[Callable[[], bool]] = None) -> Switch:
    return Switch(name, changes, _patching(install), Patches.undo, again, per_thread)


def enter_all(switches) -> None:
    """Enter ``switches`` in order; those entered are left again if a later one raises."""
    entered = []
    try:
        for s in switches:
            s.enter()
            entered.append(s)
    except BaseException:
        leave_all(entered)
        raise


def leave_all(switches) -> None:
    """Leave ``switches`` in reverse order, all of them also when one raises (the first
    error is raised after)."""
    err = None
    for s in reversed(list(switches)):
        try:
            s.leave()
        except BaseException as e:  # noqa: B902 (re-raised below)
            err = err or e
    if err is not None:
        raise err


@contextlib.contextmanager
def hold(switches) -> Iterator[None]:
    """Hold ``switches`` for the ``with`` body (:func:`enter_all`, :func:`leave_all`)."""
    enter_all(switches)
    try:
        yield
    finally:
        leave_all(switches)


def _ours(wrapper: Callable, original: Callable) -> Callable:
    """Mark ``wrapper`` (of ``original``) as one of ours: a later switch-on does not wrap it
    again, and ``__wrapped__`` leads to the original."""
    wrapper._mma_emu_keeps = True
    wrapper.__wrapped__ = original
    return wrapper


def _module(name: str):
    """The module, or None where this build of PyTorch lacks it (no Inductor, no flex).
    PyTorch's own deprecation warnings while it imports (torch 2.13's Inductor imports
    torch.utils.mkldnn, whose ``@torch.jit.script_method`` warns) are not the user's to
    read; under ``-W error`` they would also fail the import and drop the patch."""
    if name in sys.modules:        # (imported: no warnings to hold back)
        return sys.modules[name]
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.")
            return importlib.import_module(name)
    except Exception:  # noqa: BLE001 (any failure to import: the feature is absent)
        return None


def _replace(p: Patches, owner, name: str, wrap: Callable[[Callable], Callable]) -> None:
    """``owner.name = wrap(original)``, unless owner or the attribute is missing or it is
    one of ours already."""
    fn = getattr(owner, name, None) if owner is not None else None
    if fn is not None and not getattr(fn, "_mma_emu_keeps", False):
        p.set(owner, name, _ours(wrap(fn), fn))


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
    aot_config = _module("torch._functorch.config")
    ind_config = _module("torch._inductor.config")
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
def _config_per_thread() -> bool:
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
    per_thread=_config_per_thread)


def _product_decomps(p: Patches) -> None:
    dec = _module("torch._inductor.decomposition")
    if dec is None:       # no Inductor in this build: nothing to keep
        return
    tables = [dec.decompositions]
    if hasattr(dec, "fast_random_decomps"):
        tables.append(dec.fast_random_decomps())      # a cached copy of the table
    for table in tables:
        for op, fn in list(table.items()):
            pkt = getattr(op, "overloadpacket", None)
            if pkt is not None and getattr(pkt, "__name__", "") in ("mm", "bmm", "addmm") \
                    and not getattr(fn, "_mma_emu_keeps", False):
                p.item(table, op, _stepping_aside(fn))


def _stepping_aside(fn):
    def decomp(*args, **kwargs):
        if PRODUCT_DECOMPS.is_on:
            return NotImplemented
        return fn(*args, **kwargs)
    return _ours(decomp, fn)


PRODUCT_DECOMPS = patch_switch(
    "Inductor product decompositions", "Inductor's decompositions of mm / bmm / addmm (K = 1 "
    "outer products, CPU dot products and tiny addmm become pointwise code that never "
    "reaches the mode, torch/_inductor/decomposition.py) return NotImplemented: the op stays "
    "a library call", _product_decomps)


# -- flex attention -----------------------------------------------------------------------
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
    return patch_switch(name, changes, lambda p: _replace(p, _module(module), attr, wrap))


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
    registers = _module("torch._inductor.kernel.flex.flex_attention")
    lowering = _module("torch._inductor.lowering")
    if registers is None or lowering is None:   # no Inductor / flex lowering in this build
        return
    lowerings = lowering.lowerings
    for hop in _flex_ops():
        fn = lowerings.get(hop)
        if fn is None or getattr(fn, "_mma_emu_keeps", False):
            continue

        def lower(*args, _fn=fn, _hop=hop, **kwargs):
            if FLEX_LOWERING.is_on:
                for block in THREADS.blocks("mode"):
                    block._note_native(_hop, (), "compiled by Inductor into its own kernel: "
                                       "its products are not emulated (compile with "
                                       "backend='aot_eager', or call it eagerly)")
            return _fn(*args, **kwargs)
        p.item(lowerings, hop, _ours(lower, fn))


FLEX_LOWERING = patch_switch(
    "flex attention lowering", "Inductor's lowerings of the flex-attention operators: should "
    "one still run inside a block (a path FLEX_COMPILE misses), every open emulate block "
    "records a native call and warns, by name", _flex_lowering)


# -- threads started inside a block -------------------------------------------------------
class ThreadHook:
    """Threads started inside an open block run under it: the emulating dispatch mode of
    ``emulate`` (preview/mode.py) and the Triton block of ``torch_mma_emu.triton.emulate``
    (triton/hook.py) are per-thread state, and Python threads do not inherit it.

    While at least one block of any kind is open, :data:`THREAD_START` has
    ``threading.setprofile`` install a function that the threading module runs in each new
    thread before its ``run()``: it removes itself and makes the new thread adopt, for each
    kind, the innermost block of that kind open at that moment (in any thread: the function
    cannot tell which thread started the new one).  Kinds are adopted separately, so a
    ``triton.emulate`` block nested in ``emulate`` (or the other way round) reaches the
    thread with both.  Threads and pools started before the block keep running without it.
    """

    def __init__(self):
        self.open: list = []          # (kind, block, adopt), most recent last (any thread)
        self.lock = threading.Lock()
        # the profile function THREAD_START found: kept after it closes, so a thread that
        # starts late with ours (the threading module read it while a block was open) still
        # runs with what it would have had
        self.prev: Optional[Callable] = None

    def enter(self, kind: str, block, adopt: Callable) -> None:
        """``block`` (of ``kind``) is open: threads started from now on call
        ``adopt(block)`` first while it is the innermost open block of its kind."""
        with self.lock:
            self.open.append((kind, block, adopt))
        THREAD_START.enter()

    def leave(self, block) -> None:
        with self.lock:
            for i in range(len(self.open) - 1, -1, -1):
                if self.open[i][1] is block:
                    del self.open[i]
                    break
            else:
                return
        THREAD_START.leave()

    def blocks(self, kind: str) -> list:
        """The open blocks of ``kind`` (any thread), outermost first."""
        with self.lock:
            return [b for k, b, _ in self.open if k == kind]

    def start(self, frame, event, arg):
        prev = self.prev
        sys.setprofile(prev)          # runs once per thread
        with self.lock:
            inner = {}
            for kind, block, adopt in self.open:
                inner[kind] = (block, adopt)
        for block, adopt in inner.values():
            adopt(block)
        if prev is not None:
            return prev(frame, event, arg)
        return None


THREADS = ThreadHook()
_START = THREADS.start              # one bound method, compared by identity


def _thread_start_on():
    saved = THREADS.prev = threading.getprofile()
    threading.setprofile(_START)
    return saved


def _thread_start_off(saved) -> None:
    if threading.getprofile() is _START:
        threading.setprofile(saved)


THREAD_START = Switch(
    "thread start", "threading.setprofile: threads started while a block is open first adopt "
    "the innermost open block of each kind (ThreadHook); the profile function found is "
    "restored unless someone replaced ours", _thread_start_on, _thread_start_off)


EMULATE = (MHA_FASTPATH, INDUCTOR_SETTINGS, PRODUCT_DECOMPS, FLEX_COMPILE, FLEX_CPU_GRAD,
           FLEX_LOWERING)
"""What an ``emulate`` block holds while open (THREAD_START is held through THREADS)."""


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
                _replace(p, mod, name, functools.partial(_answering, want))
    _replace(p, torch.cuda, "is_available", functools.partial(_answering, None))


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
