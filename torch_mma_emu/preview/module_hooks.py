"""One pair of process-wide module hooks shared by every recording block, each call handed
to the listeners of the thread that made it.

``nn.Module`` forward hooks registered with ``register_module_forward_(pre_)hook`` are
process-wide, but an ``emulate`` block belongs to the threads that run under it (the one
that entered it and those it adopted).  Registering a pair of hooks per block let a block
record modules run by other threads, and PyTorch writes a global hook's ``with_kwargs``
flag one statement after the hook itself, so a module called in another thread at that
moment ran the hook without ``kwargs`` (``TypeError: _post() missing 'out'``).

Here the hooks are installed once while at least one listener exists (a reference-counted
``switches.Switch``), accept both call forms, and call only the listeners registered for the
calling thread.  Hooks do nothing while Dynamo traces (they would be traced into the
compiled code).
"""
from __future__ import annotations

import threading
from typing import Protocol

import torch
from torch.nn.modules import module as nn_module
from torch.nn.modules.module import (register_module_forward_hook,
                                     register_module_forward_pre_hook)

from ..switches import Switch

__all__ = ["Listener", "add_listener", "remove_listener", "listener_count"]


class Listener(Protocol):
    def pre(self, mod, args) -> None: ...

    def post(self, mod, args, kwargs, out) -> None: ...


class _Hub:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_thread: dict[int, list] = {}
        self.hooks = Switch(
            "module hooks", "register_module_forward_pre_hook / register_module_forward_hook "
            "(with_kwargs): one process-wide pair while a listener exists",
            self._register, self._unregister)

    @property
    def count(self) -> int:
        return self.hooks.depth

    def _register(self) -> list:
        return [register_module_forward_pre_hook(self._pre),
                register_module_forward_hook(self._post, with_kwargs=True)]

    @staticmethod
    def _unregister(handles: list) -> None:
        for h in handles:
            h.remove()
            # the handle of a global with_kwargs hook leaves its flag behind (torch 2.13),
            # which makes torch.compile(module) warn about global hooks
            getattr(nn_module, "_global_forward_hooks_with_kwargs", {}).pop(h.id, None)

    def add(self, listener, tid: int) -> None:
        with self.lock:
            self.hooks.enter()
            # a new list each time: a hook running in that thread iterates the old one
            self.by_thread[tid] = self.by_thread.get(tid, []) + [listener]

    def remove(self, listener, tid: int) -> None:
        with self.lock:
            ls = self.by_thread.get(tid, [])
            if listener not in ls:
                return
            rest = [x for x in ls if x is not listener]
            if rest:
                self.by_thread[tid] = rest
            else:
                self.by_thread.pop(tid, None)
            self.hooks.leave()

    def _pre(self, mod, args):
        if torch.compiler.is_compiling():
            return
        for ls in self.by_thread.get(threading.get_ident(), ()):
            ls.pre(mod, args)

    def _post(self, mod, args, *rest):
        # (mod, args, kwargs, out), or (mod, args, out) when another thread called a module
        # between PyTorch's registration of this hook and of its with_kwargs flag
        if torch.compiler.is_compiling():
            return
        kwargs, out = rest if len(rest) == 2 else ({}, rest[0])
        for ls in self.by_thread.get(threading.get_ident(), ()):
            ls.post(mod, args, kwargs, out)


_HUB = _Hub()


def add_listener(listener: Listener, tid: int | None = None) -> None:
    """Call ``listener.pre`` / ``listener.post`` for module calls made in thread ``tid``
    (default: the calling thread)."""
    _HUB.add(listener, threading.get_ident() if tid is None else tid)


def remove_listener(listener: Listener, tid: int | None = None) -> None:
    _HUB.remove(listener, threading.get_ident() if tid is None else tid)


def listener_count() -> int:
    """Listeners registered (all threads); the hooks are installed while it is > 0."""
    return _HUB.count
