"""The memories of a launch: global buffers (the kernel's array arguments, each at its own
fake base address, every access checked against its bytes), per-CTA shared memory, per-thread
local memory and the parameter block.  Generic addresses (``cvta``) place shared and local
memory in windows above every global buffer."""
from __future__ import annotations

import numpy as np

from .errors import MemoryFault

U64 = np.uint64
STRIDE = 1 << 40                  # global buffer i at (i + 1) * STRIDE
SHARED_WIN = 1 << 56              # generic address of shared offset 0
LOCAL_WIN = 2 << 56               # generic address of local offset 0
WINDOW = 1 << 56


def buffer_address(i: int) -> int:
    """The global address of byte 0 of buffer ``i`` of a launch: the ``buffers`` given to
    ``Module.launch`` first (in their order), then the pointer arguments."""
    return (i + 1) * STRIDE


def gather(buf2d_rows, cols: np.ndarray, w: int) -> np.ndarray:
    """Little-endian values of ``w`` bytes at ``cols`` of each row (rows, k) -> uint64."""
    out = np.zeros(len(cols), U64)
    for j in range(w):
        out |= buf2d_rows[:, j].astype(U64) << U64(8 * j)
    return out


class Memory:
    """Where the bytes are; ``where`` says who is accessing for the error messages."""

    def __init__(self, buffers: list, names: list, kernel: str):
        self.buffers, self.names, self.kernel = buffers, names, kernel
        self.smem = np.zeros(0, np.uint8)
        self.local = np.zeros((0, 0), np.uint8)

    def base(self, i: int) -> int:
        return buffer_address(i)

    def _fault(self, what, addr, thread, why):
        raise MemoryFault(f"{self.kernel}: {what} of address {int(addr):#x} by thread "
                          f"{thread}: {why}")

    def _check(self, space, addr, w, act, who, what):
        if not act.any():
            return
        bad = act & (addr % U64(w) != 0)
        if bad.any():
            t = int(np.argmax(bad))
            self._fault(what, addr[t], who(t), f"misaligned for a {w}-byte {space} access")
        size = {"shared": len(self.smem), "local": self.local.shape[1]}[space]
        bad = act & (addr + U64(w) > U64(size))
        if bad.any():
            t = int(np.argmax(bad))
            self._fault(what, addr[t], who(t), f"outside {space} memory ({size} bytes)")

    def read(self, space, addr, w, act, who):
        out = np.zeros(len(addr), U64)
        if space == "global":
            for i, idx in self._buffers(addr, w, act, who, "load"):
                off = (addr[idx] % U64(STRIDE)).astype(np.int64)
                out[idx] = gather(self.buffers[i][off[:, None] + np.arange(w)], off, w)
            return out
        self._check(space, addr, w, act, who, "load")
        idx = np.nonzero(act)[0]
        off = addr[idx].astype(np.int64)[:, None] + np.arange(w)
        rows = self.smem[off] if space == "shared" else self.local[idx[:, None], off]
        out[idx] = gather(rows, off, w)
        return out

    def write(self, space, addr, w, v, act, who):
        """Stores in ascending thread order: of two threads writing one address, the
        higher thread index's value stays."""
        byts = [((v >> U64(8 * j)) & U64(0xFF)).astype(np.uint8) for j in range(w)]
        if space == "global":
            for i, idx in self._buffers(addr, w, act, who, "store"):
                off = (addr[idx] % U64(STRIDE)).astype(np.int64)
                for j in range(w):
                    self.buffers[i][off + j] = byts[j][idx]
            return
        self._check(space, addr, w, act, who, "store")
        idx = np.nonzero(act)[0]
        off = addr[idx].astype(np.int64)
        for j in range(w):
            if space == "shared":
                self.smem[off + j] = byts[j][idx]
            else:
                self.local[idx, off + j] = byts[j][idx]

    def _buffers(self, addr, w, act, who, what):
        bi = (addr // U64(STRIDE)).astype(np.int64) - 1
        off = addr % U64(STRIDE)
        for i in np.unique(bi[act]):
            idx = np.nonzero(act & (bi == i))[0]
            if not 0 <= i < len(self.buffers) or self.buffers[i] is None:
                self._fault("global " + what, addr[idx[0]], who(idx[0]),
                            "outside every argument buffer")
            size = len(self.buffers[i])
            bad = (off[idx] + U64(w) > U64(size)) | (off[idx] % U64(w) != 0)
            if bad.any():
                t = idx[int(np.argmax(bad))]
                why = (f"misaligned for a {w}-byte access" if int(off[t]) % w else
                       f"past the end of argument {self.names[i]} ({size} bytes, offset "
                       f"{int(off[t])})")
                self._fault("global " + what, addr[t], who(t), why)
            yield i, idx

    def split_generic(self, addr, act):
        """A generic access -> [(space, address in that space, mask)]."""
        out = []
        loc = act & (addr >= U64(LOCAL_WIN)) & (addr < U64(LOCAL_WIN + WINDOW))
        sh = act & (addr >= U64(SHARED_WIN)) & (addr < U64(SHARED_WIN + WINDOW))
        gl = act & ~loc & ~sh
        if gl.any():
            out.append(("global", addr, gl))
        if sh.any():
            out.append(("shared", addr - U64(SHARED_WIN), sh))
        if loc.any():
            out.append(("local", addr - U64(LOCAL_WIN), loc))
        return out
