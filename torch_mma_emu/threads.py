"""Threads started inside an open block run under it: the emulating dispatch mode of
``torch_mma_emu.emulate`` (preview/mode.py) and the Triton block of
``torch_mma_emu.triton.emulate`` (triton/hook.py) are per-thread state, and Python threads do
not inherit it.

While at least one block of any kind is open, ``threading.setprofile`` installs a function
that the threading module runs in each new thread before its ``run()``: it removes itself
and makes the new thread adopt, for each kind, the innermost block of that kind open at that
moment (in any thread: the function cannot tell which thread started the new one).  Kinds
are adopted separately, so a ``triton.emulate`` block nested in ``emulate`` (or the other way
round) reaches the thread with both the mode and the innermost Triton block.  Threads and
pools started before the block keep running without it.
"""
from __future__ import annotations

import sys
import threading
from typing import Callable


class ThreadHook:
    def __init__(self):
        self.open: list = []          # (kind, block, adopt), most recent last (any thread)
        self.saved = None
        self.lock = threading.Lock()
        self.hook = self._start       # one bound method, compared by identity

    def enter(self, kind: str, block, adopt: Callable) -> None:
        """``block`` (of ``kind``) is open: threads started from now on call
        ``adopt(block)`` first while it is the innermost open block of its kind."""
        with self.lock:
            if not self.open:
                self.saved = threading.getprofile()
                threading.setprofile(self.hook)
            self.open.append((kind, block, adopt))

    def leave(self, block) -> None:
        with self.lock:
            for i in range(len(self.open) - 1, -1, -1):
                if self.open[i][1] is block:
                    del self.open[i]
                    break
            if not self.open and threading.getprofile() is self.hook:
                threading.setprofile(self.saved)
                self.saved = None

    def blocks(self, kind: str) -> list:
        """The open blocks of ``kind`` (any thread), outermost first."""
        with self.lock:
            return [b for k, b, _ in self.open if k == kind]

    def _start(self, frame, event, arg):
        prev = self.saved
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


HOOK = ThreadHook()
