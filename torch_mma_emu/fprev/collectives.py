"""Revealing the reduction order of torch.distributed collectives.

The summands of element p of an all_reduce are the world_size ranks' values at p.  Ring
and tree algorithms split the tensor into chunks that are reduced in different orders, so
every element position gets its own tree: one collective per rank pair (i, j) puts +big on
rank i and -big on rank j at *every* position, so world_size*(world_size-1)/2 collectives
give the full LCA-size matrix of every position at once.  Each position's tree is rebuilt
from its matrix (Algorithm 4 on a table) and checked against all of it; positions are then
grouped into ranges with the same tree.

Workers are started as ``python -m torch_mma_emu.fprev.collective_worker`` processes (they
never re-import the caller's ``__main__``, so a plain script or a notebook works without a
main guard) and rendezvous through a file; several world sizes can share one start
(sub-groups of the largest world).  A backend this machine cannot run is refused before any
process starts.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import torch

from ..limits import check
from .errors import FPRevError, InconsistentError, NondeterministicError
from .probes import ProbeValues, check_dtype
from ..order import Ranges, SumTree

OPS = ("all_reduce", "reduce_scatter")
BACKENDS = ("gloo", "nccl", "ucc", "mpi", "nccl-emu", "rccl-emu")
# nccl-emu / rccl-emu: gloo processes whose collectives run preview.nccl_emu / rccl_emu
# (NCCL's / RCCL's or an MSCCL XML's modelled order)
EMULATED = {"nccl-emu": "NcclCollectives", "rccl-emu": "RcclCollectives"}


def check_backend(backend: str, world_size: int) -> None:
    """Refuse, before any process starts, a backend this machine cannot run."""
    import torch.distributed as dist
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available in this torch build")
    if backend == "mpi":
        raise ValueError("backend 'mpi' is not supported: MPI ranks are started by mpirun, "
                         "not by reveal_allreduce; use gloo (CPU), nccl (GPUs) or ucc")
    if backend == "nccl":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not dist.is_nccl_available() or n < world_size:
            raise ValueError(f"backend 'nccl' needs one CUDA device per rank ({world_size}); "
                             f"this machine has {n}" + ("" if dist.is_nccl_available() else
                                                        " and torch has no NCCL")
                             + "; use backend='gloo' on the CPU")
    if (backend == "gloo" or backend in EMULATED) and not dist.is_gloo_available():
        raise ValueError("backend 'gloo' is not available in this torch build")
    if backend == "ucc" and not dist.is_ucc_available():
        raise ValueError("backend 'ucc' is not available in this torch build; use gloo")


def _pairs(ws: int) -> list:
    return [(i, j) for i in range(ws) for j in range(i + 1, ws)]


def _collective(dist, op, x, group, ws):
    """``op`` (all_reduce, in place, or reduce_scatter) of this rank's ``x`` over ``group``
    of ``ws`` ranks: this rank's result, in float64."""
    if op == "all_reduce":
        dist.all_reduce(x, group=group)
        return x.to(torch.float64)
    out = torch.empty(x.numel() // ws, dtype=x.dtype, device=x.device)
    dist.reduce_scatter_tensor(out, x, group=group)
    return out.to(torch.float64)


def run_worker(rank, max_ws, world_sizes, init_file, out_dir, backend, op, numel, dtype_name,
            big, unit, repeats, checks, nccl_emu=None):
    import contextlib

    import torch.distributed as dist
    dtype = getattr(torch, dtype_name)
    dev = torch.device("cpu")
    if backend == "nccl":      # one GPU per rank
        dev = torch.device("cuda", rank)
        torch.cuda.set_device(dev)
    emu = contextlib.nullcontext()
    if backend in EMULATED:
        from ..preview import nccl_emu as nmod, rccl_emu as rmod
        cls = getattr(nmod if backend == "nccl-emu" else rmod, EMULATED[backend])
        emu, backend = cls(**(nccl_emu or {})), "gloo"
    dist.init_process_group(backend, init_method="file://" + init_file, rank=rank,
                            world_size=max_ws)
    try:
        emu.__enter__()
        groups = {ws: (dist.new_group(list(range(ws))) if ws != max_ws else None)
                  for ws in world_sizes}
        for ws in world_sizes:
            if rank >= ws:
                continue
            outs = []
            for rep in range(repeats):
                pairs = _pairs(ws) if rep == 0 else _pairs(ws)[::-1]
                res = []
                for i, j in pairs:
                    x = torch.full((numel,), big if rank == i else -big if rank == j else unit,
                                   dtype=dtype, device=dev)
                    res.append(_collective(dist, op, x, groups[ws], ws))
                if rep:
                    res = res[::-1]
                outs.append(torch.stack(res))
            # random inputs, to check the revealed trees by replay
            g = torch.Generator().manual_seed(1000 * ws + rank)
            xs = torch.randn(checks, numel, generator=g, dtype=torch.float64).to(dtype)
            ys = []
            for x in xs:
                x = x.to(dev, copy=True)   # all_reduce works in place
                ys.append(_collective(dist, op, x, groups[ws], ws))
            torch.save({"probes": torch.stack(outs).cpu(), "x": xs.to(torch.float64),
                        "y": torch.stack(ys).cpu() if ys else torch.zeros(0)},
                       os.path.join(out_dir, f"ws{ws}_rank{rank}.pt"))
    finally:
        emu.__exit__(None, None, None)
        dist.destroy_process_group()


def ready_file(tmp: str, rank: int) -> str:
    """The file a worker writes once it has imported torch (collective_worker)."""
    return os.path.join(tmp, f"rank{rank}.ready")


def _run_workers(config: list, nprocs: int, tmp: str, timeout: float,
                 progress: bool = False) -> None:
    """Start ``nprocs`` worker processes running :func:`run_worker` and wait for them; the
    first failing rank's last stderr line becomes an :class:`FPRevError`.  ``progress``:
    a bar of finished ranks, with the time spent, on stderr."""
    from tqdm import tqdm
    cfg = os.path.join(tmp, "config.json")
    with open(cfg, "w") as f:
        json.dump(config, f)
    # the workers import this package from where this process found it
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    procs, logs = [], []
    bar = tqdm(total=nprocs, desc="collective workers done", unit="rank", leave=False,
               disable=not progress, file=sys.stderr)
    pool = max(1, os.cpu_count() or 1)

    def starting() -> int:     # started ranks still importing torch (no ready file yet)
        return sum(p.poll() is None and not os.path.exists(ready_file(tmp, r))
                   for r, p in enumerate(procs))
    try:
        deadline = time.monotonic() + timeout
        while True:
            # a bounded pool: at most one rank per core imports torch at a time, the rest
            # are started as those reach the rendezvous (a machine's load stays near its
            # cores, not at world_size)
            while len(procs) < nprocs and starting() < pool:
                rank = len(procs)
                log = open(os.path.join(tmp, f"rank{rank}.err"), "w+")
                logs.append(log)
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "torch_mma_emu.fprev.collective_worker", cfg,
                     str(rank)], stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env))
            if len(procs) == nprocs and all(p.poll() is not None for p in procs):
                break
            if any(p.poll() not in (None, 0) for p in procs):
                break
            if time.monotonic() > deadline:
                raise FPRevError(f"collective probes did not finish within {timeout} s")
            bar.update(sum(p.poll() is not None for p in procs) - bar.n)
            bar.refresh()                              # the elapsed time moves on
            time.sleep(0.1)
        for r, p in enumerate(procs):
            if p.poll() not in (None, 0):
                logs[r].seek(0)
                lines = [ln.strip() for ln in logs[r].read().splitlines() if ln.strip()]
                why = lines[-1] if lines else f"exit code {p.returncode}"
                raise FPRevError(f"collective worker rank {r} failed: {why}")
    finally:
        bar.close()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()


@dataclass
class CollectiveReveal:
    """Trees of one collective: ``ranges`` is ``[(start, stop, tree), ...]`` (an
    :class:`~torch_mma_emu.order.Ranges`) over element positions (of the whole tensor; for reduce_scatter rank r holds positions
    ``r*numel/ws ...``).  ``per_rank`` is set instead when ranks received differently
    reduced all_reduce results."""

    op: str
    world_size: int
    backend: str
    numel: int
    ranges: list = field(default_factory=list)
    per_rank: dict | None = None
    probes: int = 0
    checked: int = 0  # random inputs reproduced by replay

    def trees(self) -> list:
        """The distinct trees."""
        return Ranges(self.ranges).trees()

    def tree_at(self, position: int) -> SumTree:
        return Ranges(self.ranges).tree_at(position)

    def describe(self) -> str:
        parts = [f"[{s}:{e}] {t.describe()}" for s, e, t in self.ranges]
        return (f"{self.op} over {self.world_size} ranks ({self.backend}), {len(self.trees())} "
                f"distinct tree(s): " + "; ".join(parts))

    def to_dict(self) -> dict:
        return {"op": self.op, "world_size": self.world_size, "backend": self.backend,
                "numel": self.numel, "probes": self.probes, "checked": self.checked,
                "ranges": Ranges(self.ranges).to_list()}


def tree_from_table(L) -> SumTree:
    """The tree whose LCA sizes are the table ``L[i][j]`` (Algorithm 4 reading a table),
    checked against every entry."""
    from .algorithms.assemble import Assembler
    n = len(L)
    asm = Assembler(n)

    def build(I):
        if len(I) == 1:
            return I[0], 1
        i = I[0]
        lv: dict[int, list] = {}
        for j in I[1:]:
            lv.setdefault(int(L[i][j]), []).append(j)
        r = i
        for lval in sorted(lv):
            sub, n_tc = build(lv[lval])
            if len(lv[lval]) == n_tc:
                r = asm.new("add", [r, sub])
            else:
                asm.attach(sub, [r], "fused")
                r = sub
        return r, max(lv)

    tree = asm.tree(build(list(range(n)))[0]) if n > 1 else SumTree(1)
    for i in range(n):
        for j in range(i + 1, n):
            if tree.lca_size(i, j) != L[i][j]:
                raise InconsistentError(f"LCA sizes {L} fit no summation tree (pair {i},{j})")
    return tree


def _ranges(tables: list) -> Ranges:
    return Ranges.of_positions(tree_from_table(L) for L in tables)


def _tables(res: torch.Tensor, ws: int, values: ProbeValues) -> list:
    """res: (pairs, positions) outputs -> one LCA-size table per position."""
    q = res / values.unit
    if not torch.isfinite(q).all() or not torch.equal(q, q.round()) or (q < 0).any() \
            or (q > ws - 2).any():
        raise FPRevError("collective outputs are not counts of units: the big value did not "
                         "cancel (not a plain sum, or a reduction op other than SUM)")
    cnt = q.to(torch.int64)
    tables = []
    for p in range(res.shape[1]):
        L = [[0] * ws for _ in range(ws)]
        for k, (i, j) in enumerate(_pairs(ws)):
            L[i][j] = L[j][i] = ws - int(cnt[k, p])
        tables.append(L)
    return tables


def reveal_collective(world_size, *, op="all_reduce", backend="gloo", numel=16,
                      dtype=torch.float32, verify=False, timeout=300, checks=4,
                      progress=False, nccl_emu=None):
    """Reveal ``torch.distributed.all_reduce`` (or ``reduce_scatter``) with SUM.

    ``world_size``: an int, or a list of ints to reveal several sizes with one process
    start (returns a dict size -> result).  ``backend="nccl-emu"``: gloo processes whose
    collectives run in NCCL's modelled order (preview.nccl_emu; ``nccl_emu``: its
    ``algo`` / ``proto`` / ``nchannels`` / ``rings`` / ``trees``); ``"rccl-emu"``: RCCL's
    (preview.rccl_emu; ``nccl_emu`` may add ``msccl``: an MSCCL XML path).  ``verify``: run every probe twice.  ``checks``:
    collectives on random data whose results the revealed trees must reproduce by replay.
    Returns a :class:`CollectiveReveal`.
    """
    sizes = [world_size] if isinstance(world_size, int) else list(world_size)
    if not sizes or any(not isinstance(w, int) or w < 2 for w in sizes):
        raise ValueError(f"world_size must be an int >= 2 (or a list of them), got {world_size!r}")
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    if not isinstance(numel, int) or numel < 1:
        raise ValueError(f"numel must be a positive int, got {numel!r}")
    if op == "reduce_scatter" and any(numel % w for w in sizes):
        raise ValueError(f"reduce_scatter needs numel ({numel}) divisible by every world size")
    max_ws = max(sizes)
    check("world_size", max_ws, "world_size")           # before any process starts
    check("elements", numel * max_ws * max_ws, f"numel x world_size^2 ({numel} x "
          f"{max_ws}^2, the LCA tables)")
    dtype = check_dtype(dtype)
    values = ProbeValues.for_dtype(dtype)
    check_backend(backend, max_ws)
    if nccl_emu and backend not in EMULATED:
        raise ValueError(f"nccl_emu options apply to backend {' or '.join(EMULATED)}")
    if backend in EMULATED:          # bad options (or MSCCL XML) cost no process start
        from ..preview import nccl_emu as nmod, rccl_emu as rmod
        nccl_emu = dict(nccl_emu or {})
        if not isinstance(nccl_emu.get("msccl", ""), str):     # workers get JSON: the source
            nccl_emu["msccl"] = nccl_emu["msccl"].source
        getattr(nmod if backend == "nccl-emu" else rmod, EMULATED[backend])(**nccl_emu)
    repeats = 2 if verify else 1
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        config = [max_ws, sorted(set(sizes)), init_file, tmp, backend, op, numel,
                  str(dtype).replace("torch.", ""), values.big, values.unit, repeats, checks,
                  nccl_emu]
        _run_workers(config, max_ws, tmp, timeout, progress)
        results = {}
        for ws in sorted(set(sizes)):
            saved = [torch.load(os.path.join(tmp, f"ws{ws}_rank{r}.pt")) for r in range(ws)]
            res = _assemble(ws, [d["probes"] for d in saved], op, backend, numel, values)
            _check_by_replay(res, saved, dtype)
            results[ws] = res
    return results[sizes[0]] if isinstance(world_size, int) else results


def _check_by_replay(res: "CollectiveReveal", saved: list, dtype) -> None:
    """Every rank's random-data result must be the replay of the tree at its position."""
    from ..order import evaluate as replay
    if not len(saved[0]["y"]):
        return
    x = torch.stack([d["x"] for d in saved], dim=-1)  # (checks, numel, ranks)
    ws = res.world_size
    for r, d in enumerate(saved):
        y = d["y"]
        for k in range(y.shape[1]):
            pos = k if res.op == "all_reduce" else r * (res.numel // ws) + k
            ranges = res.per_rank[r] if res.per_rank else res.ranges
            tree = next(t for s, e, t in ranges if s <= pos < e)
            got = replay(tree, x[:, pos, :].to(dtype))
            if not torch.equal(torch.from_numpy(got), y[:, k]):
                raise InconsistentError(
                    f"{res.op} on {ws} ranks: rank {r} position {pos} does not reduce random "
                    "data in the revealed order (value-dependent reduction?)")
    res.checked = x.shape[0]


def _assemble(ws, outs, op, backend, numel, values) -> CollectiveReveal:
    for r, o in enumerate(outs):  # o: (repeats, pairs, positions)
        if o.shape[0] > 1 and not torch.equal(o[0], o[1]):
            raise NondeterministicError(f"rank {r}: the same {op} probe gave different "
                                        "results; the reduction order is not deterministic")
    res = CollectiveReveal(op, ws, backend, numel, probes=len(_pairs(ws)) * outs[0].shape[0])
    if op == "reduce_scatter":
        res.ranges = _ranges(_tables(torch.cat([o[0] for o in outs], dim=1), ws, values))
        return res
    if all(torch.equal(outs[0][0], o[0]) for o in outs[1:]):
        res.ranges = _ranges(_tables(outs[0][0], ws, values))
    else:
        res.per_rank = {r: _ranges(_tables(o[0], ws, values)) for r, o in enumerate(outs)}
        res.ranges = res.per_rank[0]
    return res
