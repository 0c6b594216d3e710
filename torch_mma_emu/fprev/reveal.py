"""The public entry points: ``reveal``, ``reveal_sum``, ``reveal_dot``, ``reveal_mv``,
``reveal_matmul``, ``reveal_allreduce`` and ``reveal_target``.

Each builds a target (:mod:`.targets`), runs an algorithm on it and returns the
:class:`~.tree.SumTree` with provenance in ``tree.meta`` (target, dtype, device, probes,
calls, seconds, library versions) so trees from different machines can be compared.
"""
from __future__ import annotations

import gc
import platform
import time

import numpy as np
import torch

from ..limits import check
from ..registry import DEFAULT_ARCH
from .algorithms.fast import reveal_default
from .algorithms.paper import basic_fprev, fprev, modified_fprev
from .collectives import reveal_collective
from .probes import ProbeValues, check_dtype
from .targets.base import Target, VectorTarget
from .targets.matmul import MatmulTarget
from .targets.torch_ops import (MatVecTarget, dot_target, numpy_dot_target,
                                numpy_sum_target, sum_target)
from ..order import SumTree
from .verify import cross_check

ALGORITHMS = ("default", "fprev", "basic", "modified")
_PAPER = {"fprev": fprev, "basic": basic_fprev, "modified": modified_fprev}


def _bar(progress):
    if not progress:
        return None, None
    if callable(progress):
        return progress, None
    from tqdm.auto import tqdm
    bar = tqdm(total=None, unit=" probes", desc="revealing", leave=False)

    def update(done):
        bar.update(done - bar.n)
    return update, bar


def reveal_target(target: Target, *, algorithm: str = "default", verify: bool = False,
                  progress=False, shortcuts=None) -> SumTree:
    """Run ``algorithm`` on a target.

    ``algorithm``: "default" (ours), "fprev" (seed 001 Algorithm 4), "basic" (Algorithm 2),
    "modified" (Algorithm 5).  ``verify``: run every probe twice (default algorithm) and
    check the tree on extra random probes; a non-deterministic or value-dependent target
    raises :class:`~.errors.InconsistentError` instead of returning a tree.  ``progress``:
    True for a tqdm bar, or a callable receiving the number of probes done.
    ``shortcuts``: let the default algorithm guess-and-verify blocks and strided ways
    (default: only for library sums known to use IEEE additions; see
    :func:`~.algorithms.fast.reveal_default`).
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    if algorithm == "basic":     # n^2 / 2 probes and pairs: its own bound, before the work
        check("reveal_basic_n", target.n, "n of algorithm='basic'")
    update, bar = _bar(progress)
    gc_on = gc.isenabled()
    gc.disable()  # millions of short-lived tuples: collection passes cost more than probes
    t0 = time.perf_counter()
    calls0 = target.calls
    try:
        if algorithm == "default":
            tree, stats = reveal_default(target, verify=verify, progress=update,
                                         shortcuts=shortcuts)
        else:
            tree, stats = _PAPER[algorithm](target)
        if verify:
            stats["check_probes"] = cross_check(target, tree)
    finally:
        if gc_on:
            gc.enable()
        if bar is not None:
            bar.close()
    tree.meta.update(_provenance(target))
    tree.meta.update(algorithm=algorithm, verified=bool(verify),
                     seconds=round(time.perf_counter() - t0, 6),
                     calls=target.calls - calls0, **stats)
    return tree


def _provenance(target) -> dict:
    meta = {"target": target.describe(), "n": target.n,
            "dtype": str(target.dtype).replace("torch.", ""), "device": str(target.device),
            "big": target.values.big, "unit": target.values.unit,
            "torch": torch.__version__, "numpy": np.__version__,
            "machine": platform.machine(), "cpu": torch.backends.cpu.get_cpu_capability()}
    if target.device.type == "cuda":
        meta["gpu"] = torch.cuda.get_device_name(target.device)
    return meta


def _values(dtype, big, unit, pack=True, out_dtype=None):
    if big is None and unit is None:
        return None
    return ProbeValues.for_dtype(check_dtype(dtype), out_dtype, big=big, unit=unit, pack=pack)


def reveal(fn, n: int, *, dtype=torch.float32, device="cpu", big=None, unit=None,
           **opts) -> SumTree:
    """The summation tree of ``fn``, any callable summing a 1-D tensor of ``n`` elements
    of ``dtype`` on ``device`` (it must return a scalar tensor or a number).  Pass
    ``shortcuts=True`` when fn is known to add with plain IEEE additions (faster).

    >>> reveal(torch.sum, 64).describe()   # doctest: +SKIP
    '8-way strided (each way 4-way strided, ...), ...'
    """
    from .targets.torch_ops import as_device, check_n
    if not callable(fn):
        raise TypeError(f"reveal: fn must be a callable summing a 1-D tensor, got "
                        f"{type(fn).__name__}")
    dev = as_device(device)
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"reveal: device must be cpu or cuda[:i], got {device!r}")
    target = VectorTarget(_returning_scalar(fn), check_n(n), dtype, dev,
                          values=_values(dtype, big, unit))
    return reveal_target(target, **opts)


def _returning_scalar(fn):
    """``fn`` checked to return one real number (a one-element tensor or a Python / NumPy
    real), so a wrong return type is named instead of failing inside a conversion."""
    import numbers

    import numpy as np

    def checked(x):
        y = fn(x)
        if isinstance(y, torch.Tensor):
            if y.numel() != 1 or y.is_complex():
                raise TypeError(f"reveal: fn must return a scalar (a one-element real tensor "
                                f"or a number); it returned a {y.dtype} tensor of shape "
                                f"{tuple(y.shape)}")
            return y.reshape(())
        if isinstance(y, np.ndarray) and y.size == 1:
            y = y.reshape(()).item()
        if isinstance(y, bool) or not isinstance(y, numbers.Real):
            raise TypeError(f"reveal: fn must return a scalar (a one-element real tensor or a "
                            f"number); it returned {type(y).__name__} {y!r:.60}")
        return y
    return checked


def reveal_sum(n: int | None = None, *, shape=None, dim=None, dtype=torch.float32,
               device="cpu", library: str = "torch", big=None, unit=None, **opts) -> SumTree:
    """torch.sum of ``n`` elements, or over ``dim`` of a contiguous tensor of ``shape``
    (every other index then carries one probe).  ``library="numpy"``: numpy.sum."""
    if library == "numpy":
        if shape is not None:
            raise ValueError("library='numpy' reveals 1-D sums only (give n)")
        target = numpy_sum_target(n, dtype=dtype, values=_values(dtype, big, unit))
    elif library == "torch":
        target = sum_target(n, shape=shape, dim=dim, dtype=dtype, device=device,
                            values=_values(dtype, big, unit))
    else:
        raise ValueError(f"library must be 'torch' or 'numpy', got {library!r}")
    return reveal_target(target, **opts)


def reveal_dot(n: int, *, dtype=torch.float32, device="cpu", library: str = "torch",
               big=None, unit=None, **opts) -> SumTree:
    """torch.dot (or numpy.dot) of two n-vectors; the summands are the products."""
    if library == "numpy":
        target = numpy_dot_target(n, dtype=dtype, values=_values(dtype, big, unit))
    elif library == "torch":
        target = dot_target(n, dtype=dtype, device=device, values=_values(dtype, big, unit))
    else:
        raise ValueError(f"library must be 'torch' or 'numpy', got {library!r}")
    return reveal_target(target, **opts)


def reveal_mv(m: int, n: int, *, dtype=torch.float32, device="cpu", big=None, unit=None,
              **opts) -> SumTree:
    """torch.mv of an (m, n) matrix and an n-vector: the order summing each output."""
    target = MatVecTarget(m, n, dtype, device, values=_values(dtype, big, unit))
    return reveal_target(target, **opts)


def reveal_matmul(m: int, n: int, k: int, mm="torch", *, dtype=torch.float32, device="cpu",
                  out_dtype=None, arch: str = DEFAULT_ARCH, in_format=None, with_c: bool = False,
                  c_mode: str = "chain", instruction=None, batch: bool = True,
                  mm_kwargs=None, big=None, unit=None, **opts) -> SumTree:
    """The order in which an (m, k) @ (k, n) product sums over k.

    ``mm``: "torch", "emulated" (``torch_mma_emu.emulated_mm`` with ``arch``,
    ``in_format``, ``out_dtype``, ``c_mode``, ``instruction``), "reference" (the exact
    oracle; slow),
    "cublas" / "triton" (``torch_mma_emu.native_mm``, CUDA), or a callable
    ``mm(A, B[, C])``.  ``with_c``: C is summand k.  ``batch``: one probe per row of A
    (checked with seed 003's Step 1 first); False probes row 0 only.
    """
    target = MatmulTarget(m, n, k, backend=mm, dtype=dtype, device=device,
                          out_dtype=out_dtype, with_c=with_c, arch=arch,
                          in_format=in_format, c_mode=c_mode, instruction=instruction,
                          mm_kwargs=mm_kwargs, big=big, unit=unit, batch=batch)
    return reveal_target(target, **opts)


def reveal_allreduce(world_size, backend: str = "gloo", numel: int = 16, *,
                     op: str = "all_reduce", dtype=torch.float32, verify: bool = False,
                     timeout: float = 300, checks: int = 4, progress: bool = False,
                     nccl_emu: dict | None = None):
    """torch.distributed.all_reduce (``op="reduce_scatter"``: reduce_scatter_tensor) with
    SUM over ``world_size`` spawned processes.  Returns a
    :class:`~.collectives.CollectiveReveal`: the distinct trees and the element ranges they
    apply to.  A list of world sizes reveals each of them with one process start.
    ``checks`` random-data collectives must be reproduced by replaying the trees.
    ``progress``: a bar of finished worker processes on stderr.  ``backend="nccl-emu"``:
    NCCL's modelled order over gloo (``nccl_emu``: ``dict(algo=, proto=, nchannels=)``);
    ``"rccl-emu"``: RCCL 2.21.5's (``nccl_emu`` may add ``msccl=``: an MSCCL XML path or
    :class:`~torch_mma_emu.order.msccl.MscclAlgorithm`)."""
    return reveal_collective(world_size, op=op, backend=backend, numel=numel, dtype=dtype,
                             verify=verify, timeout=timeout, checks=checks, progress=progress,
                             nccl_emu=nccl_emu)
