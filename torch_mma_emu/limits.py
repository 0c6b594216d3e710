"""Bounds on the work one argument can ask for: the processes, memory and time a number typed
on the command line (or passed to a function) makes the package spend.  Each bound is checked
before the work starts and names the environment variable that raises it.

``BOUNDS`` is the one table of them (README.md "Bounds and limits" lists it):
name -> (environment variable, default, what it bounds).  A default may be a function of
this machine (the world size: what its cores and memory hold).  Integers in environment
variables and on the command line are read by :func:`.codec.decimal_int` (ASCII decimal
digits only), as Spec and Schedule strings are.
"""
from __future__ import annotations

import os

from .codec import decimal_int
from .files import regular_file

GIB = 1 << 30
MIB = 1 << 20
RANK_BYTES = GIB // 2       # one collective rank: a Python process with torch (~0.3 GB RSS)
RANKS_PER_CORE = 4          # gloo ranks mostly wait on each other; more than this only thrash


def _available_bytes() -> int:
    """Memory available now (Linux /proc/meminfo; elsewhere 8 GiB is assumed)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 8 * GIB


def _default_world_size() -> int:
    cores = os.cpu_count() or 1
    return max(2, min(RANKS_PER_CORE * cores, _available_bytes() // RANK_BYTES))


class Bound:
    """One bound: its environment variable, default (an int or a function giving one), what
    it bounds (a few words, in the error) and a note for the README."""

    def __init__(self, env: str, default, what: str, note: str = "", shown: str = ""):
        self.env, self._default, self.what, self.note = env, default, what, note
        self.shown = shown or f"{default:,}"      # the default in README.md's table

    @property
    def default(self) -> int:
        return self._default() if callable(self._default) else self._default

    def value(self) -> int:
        """The bound in force: the environment variable when set, else the default."""
        text = os.environ.get(self.env)
        if text is None or text.strip() == "":
            return self.default
        v = decimal_int(text.strip())
        if v is None or v < 1:
            raise ValueError(f"{self.env} must be a positive integer (ASCII digits: a "
                             f"positive decimal integer), got {text!r}")
        return v


BOUNDS: dict[str, Bound] = {
    "world_size": Bound("MMA_EMU_MAX_WORLD_SIZE", _default_world_size,
                        "ranks of reveal allreduce", "one process each, started in a pool of one "
                        "per core", "4 per core, at most one per 0.5 GiB available"),
    "compare_size": Bound("MMA_EMU_MAX_COMPARE_SIZE", 1024,
                          "N of compare --random", "the N x N x N GEMM of every arch and "
                          "format; time grows as N^3"),
    "reveal_n": Bound("MMA_EMU_MAX_REVEAL_N", 1 << 16, "summands of a revealed order",
                      "reveal --n, --k, --numel, the summed dim of --shape; a 2^16-term "
                      "torch.sum takes about 4 s and 0.4 GB, 2^18 20 s, 2^20 5 minutes"),
    "reveal_basic_n": Bound("MMA_EMU_MAX_REVEAL_BASIC_N", 1024, "summands of reveal "
                            "--algorithm basic", "Algorithm 2 probes every pair: n^2 / 2 "
                            "probes of n terms and a list of n^2 / 2 pairs (n = 4096: about "
                            "2 minutes and 2.3 GB)"),
    "elements": Bound("MMA_EMU_MAX_ELEMENTS", 1 << 24, "elements of a tensor an argument asks "
                      "for", "m x k and k x n of reveal matmul / mv, the product of reveal "
                      "sum --shape, numel x world_size^2 of reveal allreduce, preview "
                      "--input"),
    "preview_batch": Bound("MMA_EMU_MAX_PREVIEW_BATCH", 4096, "examples of preview --batch",
                           "the model's example_inputs(batch, seed)"),
    "model_mib": Bound("MMA_EMU_MAX_MODEL_MIB", 2048, "MiB of tensors a preview model's "
                       "factory makes", "preview --model / --model-kwargs: the build stops "
                       "when its tensors pass it (--model-kwargs '{\"n_layer\": 100000}' "
                       "ran out of memory)"),
    "preview_repeat": Bound("MMA_EMU_MAX_REPEAT", 100, "timed passes of preview --repeat",
                            "per run; the best is kept"),
    "threads": Bound("MMA_EMU_MAX_THREADS", lambda: 4 * (os.cpu_count() or 1),
                     "threads of preview --threads", "torch.set_num_threads", "4 per core"),
    "triton_programs": Bound("MMA_EMU_MAX_TRITON_PROGRAMS", 1 << 20, "programs of one "
                             "emulated Triton launch", "the interpreter runs a grid's programs "
                             "one after another"),
    "probe_verify": Bound("MMA_EMU_MAX_PROBE_VERIFY", 10_000_000,
                          "random inputs of probe --verify", "verify(..., n)"),
    "tree_leaves": Bound("MMA_EMU_MAX_TREE_LEAVES", 1 << 16, "leaves of a SumTree read back",
                         "SumTree.from_json / from_dict / parse, tree schedules (a 2^16-leaf "
                         "chain loads in about 5 s, 0.4 GB); as many as reveal --n allows"),
    "split_k": Bound("MMA_EMU_MAX_SPLIT_K", 1 << 24, "split-K slices of a Schedule",
                     "schedule strings and files when read, any Schedule when it runs "
                     "(slices past K cost nothing on the CPU; on CUDA each keeps a partial "
                     "result)"),
    "fit_k": Bound("MMA_EMU_FIT_MAX_K", 4096, "products of one sample fit takes",
                   "mma-emu fit, probe.fit: every candidate model runs every sample (the "
                   "recorded files hold K = 4 .. 32)"),
    "partial_bytes": Bound("MMA_EMU_SCHED_PARTIAL_BYTES", 2 << 30, "bytes of partial "
                           "results a schedule keeps", "split-K slices x promotion blocks x "
                           "(batch, M, N) on the CUDA / tf32x3 / fp16-merge route",
                           "2 GiB"),
    "node_products": Bound("MMA_EMU_SCHED_MAX_NODE_PRODUCTS", 1 << 20, "K of a residue-tile "
                           "schedule on the per-element route", "about 2.3 program words per "
                           "product"),
    "file_mib": Bound("MMA_EMU_MAX_FILE_MIB", 256, "MiB of an input file",
                      "tree and schedule JSON files; a samples (.npz) file's arrays, "
                      "unpacked"),
}


class Setting:
    """One environment variable that chooses rather than bounds: its accepted values (a
    tuple of words; "bytes": a decimal integer from 1 to ``top``; "folder": an existing
    folder holding ``needs``), default and a note for the README."""

    def __init__(self, env: str, accepts, default, note: str, top: int = 0, needs: str = ""):
        self.env, self.accepts, self.default, self.note = env, accepts, default, note
        self.top, self.needs = top, needs

    def value(self):
        """The setting in force (the default when unset or empty); a clear ValueError for
        anything else than it accepts."""
        text = os.environ.get(self.env)
        if text is None or text == "":
            return self.default
        t = text.strip()
        if isinstance(self.accepts, tuple):     # exactly (the C++ side compares exactly)
            if text not in self.accepts:
                raise ValueError(f"{self.env} must be one of {', '.join(self.accepts)} (or "
                                 f"unset), got {text!r}")
            return t
        if self.accepts == "bytes":
            v = decimal_int(t)
            if v is None or not 1 <= v <= self.top:
                raise ValueError(f"{self.env} must be a decimal integer of bytes from 1 to "
                                 f"{self.top} (ASCII digits), got {text!r}")
            return v
        if not os.path.isdir(t) or (self.needs and not os.path.isfile(
                os.path.join(t, self.needs))):
            raise ValueError(f"{self.env}={text!r}: not a folder holding {self.needs} (unset "
                             "it to use the repository's)")
        return t

    @property
    def shown(self) -> str:
        if isinstance(self.accepts, tuple):
            return " / ".join(f"`{a}`" for a in self.accepts)
        return f"1 .. {self.top:,} bytes" if self.accepts == "bytes" else "a folder"


SETTINGS: dict[str, Setting] = {
    "scalar": Setting("MMA_EMU_SCALAR", ("0", "1"), "0", "1: the CPU kernel's scalar core "
                      "only (no vector fast paths)"),
    "cpu_isa": Setting("MMA_EMU_CPU_ISA", ("scalar", "avx2", "avx512"), "", "caps the CPU "
                       "kernel's instruction set (the best this CPU has by default)"),
    "cpu_generic": Setting("MMA_EMU_CPU_GENERIC", ("0", "1"), "0", "1: the FDPA rows run the "
                           "vector kernel that reads every option at run time, not the one "
                           "compiled for their chunk shape (same bits, slower; for tests)"),
    "cpu_block_bytes": Setting("MMA_EMU_CPU_BLOCK_BYTES", "bytes", 32 << 20, "the CPU kernel's"
                               " budget for one K block of operands (default 32 MiB)",
                               top=1 << 28),
    "hwdata": Setting("MMA_EMU_HWDATA", "folder", "", "recorded GPU samples (default "
                      "tests/data/hwdata)", needs="index.json"),
}


def setting(name: str):
    """The setting ``name`` of :data:`SETTINGS` in force."""
    return SETTINGS[name].value()


_KERNEL_SETTINGS = ("scalar", "cpu_isa", "cpu_generic", "cpu_block_bytes")
# os.environ's own dict where it has one (CPython: encoded keys; os.environ.get encodes the
# key on every call, ~0.5 us each): the kernel's settings are read on every product
_ENV_DATA = getattr(os.environ, "_data", None)
_KERNEL_ENVS = tuple((os.environ.encodekey(SETTINGS[n].env) if _ENV_DATA is not None
                      else SETTINGS[n].env) for n in _KERNEL_SETTINGS)
_checked: list = [None]       # the last values found well formed (checked once per change)


def check_settings() -> None:
    """Raise for the first malformed variable of the CPU kernel (called before it runs: the
    C++ side reads them too, and then only ever sees values parsed here)."""
    env = os.environ if _ENV_DATA is None else _ENV_DATA
    now = tuple(env.get(e) for e in _KERNEL_ENVS)
    if now == _checked[0]:
        return
    for name in _KERNEL_SETTINGS:
        SETTINGS[name].value()
    _checked[0] = now


def limit(name: str) -> int:
    """The bound ``name`` of :data:`BOUNDS` in force."""
    return BOUNDS[name].value()


class LimitError(ValueError):
    """An argument above its bound; the message names the bound and how to raise it."""


def check(name: str, value: int, what: str = "") -> int:
    """``value`` when it is at most the bound ``name``; else :class:`LimitError` naming
    ``what`` was asked, the bound and its environment variable."""
    b = BOUNDS[name]
    top = b.value()
    if value > top:
        raise LimitError(f"{what + ' = ' if what else ''}{value} is above the bound of "
                         f"{top} {b.what}; set {b.env} to raise it")
    return value


def check_file(path, what: str = "file") -> int:
    """The size of file ``path`` in bytes, when it is a regular file (a FIFO would block the
    reader forever: :func:`.files.regular_file`) within the file bound (before reading it)."""
    regular_file(path, what)
    size = os.path.getsize(path)
    b = BOUNDS["file_mib"]
    top = b.value()
    if size > top * MIB:
        raise LimitError(f"{what} {path} is {size / MIB:.0f} MiB, above the bound of {top} "
                         f"{b.what}; set {b.env} to raise it")
    return size


def markdown() -> str:
    """The tables of bounds and settings for README.md: variable, default, what it does."""
    rows = ["| environment variable | default | bounds |", "| --- | --- | --- |"]
    for b in BOUNDS.values():
        rows.append(f"| `{b.env}` | {b.shown} | {b.what}: {b.note} |")
    rows += ["", "| environment variable | accepts | sets |", "| --- | --- | --- |"]
    for s in SETTINGS.values():
        rows.append(f"| `{s.env}` | {s.shown} | {s.note} |")
    return "\n".join(rows) + "\n"
