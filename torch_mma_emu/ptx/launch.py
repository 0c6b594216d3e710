"""Launching a kernel: arguments to the parameter block and global buffers, the shared and
local memories laid out, every CTA of the grid run (:func:`launch`)."""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .errors import PTXError, Unsupported
from .machine import CTA, run_cta
from .memory import Memory

_INT = {"u8": "<u1", "s8": "<i1", "u16": "<u2", "s16": "<i2", "u32": "<u4", "s32": "<i4",
        "u64": "<u8", "s64": "<i8", "b8": "<u1", "b16": "<u2", "b32": "<u4", "b64": "<u8",
        "f32": "<f4", "f64": "<f8", "f16": "<f2"}


@dataclass
class Stats:
    ctas: int
    steps: int                  # scheduler steps (instructions issued for a set of threads)
    thread_instructions: int    # instructions times the threads that executed them
    seconds: float
    approximate: tuple = ()     # instructions run whose gpu_math model is not bit-exact
    executed: dict = field(default_factory=dict)   # opcode -> thread-instructions run

    @property
    def rate(self) -> float:
        """Thread-instructions per second."""
        return self.thread_instructions / max(self.seconds, 1e-9)


class Launch:
    def __init__(self, kernel, grid, block, args, dynamic_smem=0, order="thread",
                 max_steps=10_000_000, buffers=None, arch=None, wgmma=None,
                 cta_order="index"):
        self.kernel = kernel
        if not (cta_order in ("index", "reverse") or isinstance(cta_order, int)):
            raise PTXError(f"cta_order must be 'index', 'reverse' or an int seed, got "
                           f"{cta_order!r}")
        self.cta_order = cta_order
        self.arch, self.wgmma = arch, wgmma     # the matrix unit's arch; a given wgmma result
        self.grid = _dim3(grid, "grid")
        self.block = _dim3(block, "block")
        if np.prod(self.block) > 1024:
            raise PTXError(f"{kernel.name}: a block of {np.prod(self.block)} threads (at most 1024)")
        if len(args) != len(kernel.params):
            raise PTXError(f"{kernel.name} takes {len(kernel.params)} arguments "
                           f"({', '.join(p.name for p in kernel.params)}), {len(args)} given")
        self.dynamic_smem, self.order, self.max_steps = int(dynamic_smem), order, max_steps
        self.approximate = set()
        self.executed = Counter()
        blob = np.zeros(max(kernel.param_size, 1), np.uint8)
        buffers_in, buffers, names = buffers, [], []
        mem = Memory(buffers, names, kernel.name)
        for name, a in (buffers_in := dict(buffers_in or {})).items():
            # global memory reached through pointers inside structs: buffer i at base(i)
            if not isinstance(a, np.ndarray) or not a.flags.c_contiguous:
                raise PTXError(f"{kernel.name}: buffer {name} must be a C-contiguous array")
            buffers.append(a.reshape(-1).view(np.uint8))
            names.append(name)
        self.symbols = {}
        for p, a in zip(kernel.params, args):
            self.symbols[p.name] = ("param", p.offset)
            if isinstance(a, np.ndarray) and p.size == 8 and p.type in ("u64", "b64", "s64"):
                if not a.flags.c_contiguous:
                    raise PTXError(f"{kernel.name}: argument {p.name} must be C-contiguous")
                buffers.append(a.reshape(-1).view(np.uint8))
                names.append(p.name)
                raw = mem.base(len(buffers) - 1).to_bytes(8, "little")
            elif isinstance(a, (bytes, bytearray)):
                if len(a) != p.size:
                    raise PTXError(f"{kernel.name}: argument {p.name} is {p.size} bytes, "
                                   f"{len(a)} given")
                raw = bytes(a)
            elif p.type in _INT and np.ndim(a) == 0:
                raw = np.asarray(a).astype(_INT[p.type]).tobytes()
            else:
                raise PTXError(f"{kernel.name}: argument {p.name} (.{p.type}, {p.size} bytes): "
                               f"give a NumPy array (pointer), a number or bytes")
            blob[p.offset:p.offset + p.size] = np.frombuffer(raw, np.uint8)
        self.param_blob = blob
        smem = local = 0
        used = _operand_text(kernel)
        for v in kernel.variables:
            if v.space == "shared":
                smem = (smem + v.align - 1) // v.align * v.align
                self.symbols[v.name] = ("shared", smem)
                smem += v.size if v.size else self.dynamic_smem
            elif v.space == "callparam":         # a call's argument slot (see machine.call)
                self.symbols[v.name] = ("callparam", 0)
            elif v.space == "local":
                local = (local + v.align - 1) // v.align * v.align
                self.symbols[v.name] = ("local", local)
                local += v.size
            elif v.space == "global" and v.name in used:
                buf = np.zeros(max(v.size, len(v.init), 1), np.uint8)
                buf[:len(v.init)] = np.frombuffer(v.init, np.uint8)
                buffers.append(buf)          # its address: a global buffer of its own
                names.append(v.name)
                self.symbols[v.name] = ("global", mem.base(len(buffers) - 1))
            elif v.name in used:
                raise Unsupported(f"{kernel.name}: module .{v.space} variable {v.name} "
                                  "is not modelled")
            # else: declared for code the kernel does not contain (Triton's assert strings)
        self.smem_size, self.local_size, self.mem = smem, local, mem

    def atomic_order(self, threads):
        if self.order == "thread":
            return threads
        if self.order == "reverse":
            return threads[::-1]
        return np.random.default_rng(self.order).permutation(threads)

    def run(self) -> Stats:
        t0 = time.perf_counter()
        budget = [self.max_steps]
        count = steps = 0
        gx, gy, gz = self.grid
        ids = [(x, y, z) for z in range(gz) for y in range(gy) for x in range(gx)]
        if self.cta_order == "reverse":
            ids = ids[::-1]
        elif self.cta_order != "index":
            ids = [ids[i] for i in np.random.default_rng(self.cta_order).permutation(len(ids))]
        for ctaid in ids:                       # one CTA after another, each to its end
            cta = CTA(self, ctaid)
            self.mem.smem = np.zeros(self.smem_size, np.uint8)
            self.mem.local = np.zeros((cta.n, self.local_size), np.uint8)
            before = budget[0]
            count += run_cta(cta, budget)
            steps += before - budget[0]
        return Stats(gx * gy * gz, steps, count, time.perf_counter() - t0,
                     tuple(sorted(self.approximate)), dict(self.executed))


def _operand_text(kernel) -> str:
    """All operands of ``kernel``'s instructions as one string (computed once per kernel):
    which module variables the code names."""
    text = getattr(kernel, "_operand_text", None)
    if text is None:
        text = "\n".join(op for ins in kernel.body for op in ins.ops)
        kernel._operand_text = text
    return text


def _dim3(d, what):
    d = (d,) if np.ndim(d) == 0 else tuple(d)
    d = tuple(int(x) for x in d) + (1,) * (3 - len(d))
    if len(d) != 3 or min(d) < 1:
        raise PTXError(f"{what} must be 1 to 3 positive sizes, got {d}")
    return d
