"""Gloo multi-rank runs for the tests of the emulated NCCL backend: the test process starts
one worker process per rank (:func:`run_ranks`), each worker joins the gloo group
(:func:`init_rank`) and saves its results (:func:`save_rank`), which the test loads."""
import os
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_ranks(worker: str, ws: int, *args: str, timeout: int = 600) -> list:
    """Run ``tests/<worker>`` as ``ws`` gloo ranks (argv: init file, rank, world size, out
    dir, then ``args``); returns every rank's saved dict, rank order."""
    tmp = tempfile.mkdtemp()
    env = dict(os.environ, PYTHONPATH=ROOT)
    path = os.path.join(ROOT, "tests", worker)
    procs = [subprocess.Popen([sys.executable, path, os.path.join(tmp, "init"), str(r),
                               str(ws), tmp, *args], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in range(ws)]
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        assert p.returncode == 0, out.decode()[-2000:]
    return [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(ws)]


def init_rank() -> tuple:
    """In a worker: join the gloo group from argv; returns ``(rank, world size, extra args)``."""
    init, rank, ws = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=ws)
    return rank, ws, sys.argv[5:]


def wide_input(rank: int) -> torch.Tensor:
    """This rank's (12, 16) input: features from 1e-3 to 1e3, so the gradients' sums over
    ranks depend on their order."""
    g = torch.Generator().manual_seed(1000 + rank)
    return torch.randn(12, 16, generator=g) * torch.logspace(-3, 3, 16)


def grad_step(m, inp, **kw) -> tuple:
    """One emulated sm90 training step of ``m`` on ``inp`` (``kw``: emulate's arguments):
    this rank's parameter gradients (a DTensor's local shard), detached copies, and the
    block."""
    import torch_mma_emu as tme
    with tme.emulate("sm90", **kw) as em:
        m(inp).square().sum().backward()
    grads = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
             for p in m.parameters()]
    return [t.detach().clone() for t in grads], em


def save_rank(res: dict) -> None:
    """In a worker: save this rank's results where :func:`run_ranks` reads them, leave the
    group."""
    torch.save(res, os.path.join(sys.argv[4], f"rank{dist.get_rank()}.pt"))
    dist.destroy_process_group()
