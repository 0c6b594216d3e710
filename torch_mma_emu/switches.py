"""Process-wide changes held while at least one block needs them, with reference counts:
the mechanism, not the changes.

An ``emulate`` block is per thread (a dispatch mode lives on its thread's mode stack), but
some of what it must change to see every product is process-wide: PyTorch settings,
Inductor's tables, functions of PyTorch and torchao replaced by wrappers.  Each such change
is a :class:`Switch`: the first holder (in any thread) switches it on and saves what was
there, later holders only count, and the last to leave restores what was saved, also when
the block raises or the holders leave in another order than they came (threads).  Each
switch says what it changes; wrappers it installs (:func:`ours`) do what the original does
whenever the switch is off, so a copy of one kept somewhere (a table copied while a block
was open) is harmless after the last block closes.

This module holds the mechanism (:class:`Switch`, :class:`Patches`, :func:`patch_switch`,
:func:`hold`) and the one switch every kind of block shares: :data:`THREAD_START`, held
through :data:`THREADS`, so that threads started inside a block run under it.  The changes
themselves belong to their users: the preview's (``emulate``'s PyTorch, Inductor, flex and
torchao patches) are in preview/patches.py, the Triton interpreter seam in triton/hook.py,
the process-wide module hooks in preview/module_hooks.py.
"""
from __future__ import annotations

import contextlib
import importlib
import sys
import threading
import warnings
from typing import Any, Callable, Iterator, Optional


__all__ = ["Switch", "Patches", "patch_switch", "hold", "enter_all", "leave_all", "ours",
           "is_ours", "optional_module", "ThreadHook", "THREAD_START", "THREADS"]

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

    def wrap(self, owner, name: str, wrap: Callable[[Callable], Callable]) -> None:
        """``owner.name = wrap(original)`` (marked :func:`ours`), unless owner or the
        attribute is missing or it is one of ours already."""
        fn = getattr(owner, name, None) if owner is not None else None
        if fn is not None and not is_ours(fn):
            self.set(owner, name, ours(wrap(fn), fn))

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


def ours(wrapper: Callable, original: Callable) -> Callable:
    """Mark ``wrapper`` (of ``original``) as one of ours: a later switch-on does not wrap it
    again (:func:`is_ours`), and ``__wrapped__`` leads to the original."""
    wrapper._mma_emu_keeps = True
    wrapper.__wrapped__ = original
    return wrapper


def is_ours(fn) -> bool:
    """Whether ``fn`` is a wrapper marked by :func:`ours`."""
    return bool(getattr(fn, "_mma_emu_keeps", False))


def optional_module(name: str):
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
