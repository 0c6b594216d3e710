"""Worker of tests/test_thirdparty_parallel.py: one of 2 gloo ranks on this CPU.  Each
scenario returns plain tensors (or raises); ``main`` saves ``{scenario: result or error}``
per rank for the test process to check."""
from __future__ import annotations

import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_mma_emu as tme  # noqa: E402
from thirdparty import COARSE, run_spied, unseen, native_calls, emulated_calls  # noqa: E402

D_IN, D_HID, D_OUT = 16, 32, 8


def _mlp(bias=False):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(D_IN, D_HID, bias=bias), nn.ReLU(),
                         nn.Linear(D_HID, D_OUT, bias=bias)).to(torch.bfloat16)


def _x(seed=1, n=6):
    return torch.randn(n, D_IN, generator=torch.Generator().manual_seed(seed)).bfloat16()


def _spied(fn):
    out, em, spy = run_spied(fn)
    return out, dict(unseen=unseen(spy, em), native=dict(native_calls(em)),
                     emulated=emulated_calls(em))


def _tp_plan():
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    return {"0": ColwiseParallel(), "2": RowwiseParallel()}


def tp_convert(mesh, rank, world):
    """tme.convert, then tensor parallel: column-wise Linear, ReLU, row-wise Linear."""
    from torch.distributed.tensor.parallel import parallelize_module
    model = tme.convert(_mlp(), COARSE)
    parallelize_module(model, mesh, _tp_plan())
    x = _x()
    y = model(x)
    y = y.full_tensor() if hasattr(y, "full_tensor") else y
    y.float().sum().backward()
    g = model[0].weight.grad
    return dict(y=y.detach(), w0_grad=g.to_local() if hasattr(g, "to_local") else g)


def tp_emulate(mesh, rank, world):
    """Plain modules in tensor parallel, the block under emulate: DTensor's products."""
    from torch.distributed.tensor.parallel import parallelize_module
    model = _mlp()
    parallelize_module(model, mesh, _tp_plan())
    x = _x()
    y, info = _spied(lambda: model(x))
    y = y.full_tensor() if hasattr(y, "full_tensor") else y
    return dict(y=y.detach(), **info)


def _train_step(model, rank):
    """One spied forward and backward on this rank's own input: (output, spy info)."""
    x = _x(seed=10 + rank)

    def step():
        y = model(x)
        y.float().square().mean().backward()
        return y.detach()
    return _spied(step)


def ddp(mesh, rank, world):
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(_mlp(bias=True))
    y, info = _train_step(model, rank)
    return dict(y=y, grads=[p.grad.clone() for p in model.parameters()], **info)


def fsdp2(mesh, rank, world):
    from torch.distributed.fsdp import fully_shard
    model = _mlp(bias=True)
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    y, info = _train_step(model, rank)
    return dict(y=y, grads=[p.grad.full_tensor() for p in model.parameters()], **info)


def dtensor_rule(mesh, rank, world):
    """``tme.emulated_mm`` on DTensors directly: a K split (without and with C) and a batch
    split."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    g = torch.Generator().manual_seed(3)
    A, B = torch.randn(4, 16, generator=g).bfloat16(), torch.randn(16, 6, generator=g).bfloat16()
    C = torch.randn(4, 6, generator=g)
    dA, dB = distribute_tensor(A, mesh, [Shard(1)]), distribute_tensor(B, mesh, [Shard(0)])
    dC = distribute_tensor(C, mesh, [Replicate()])
    ksplit = tme.emulated_mm(dA, dB, arch=COARSE)
    with_c = tme.emulated_mm(dA, dB, dC, arch=COARSE)
    bA = torch.randn(4, 3, 8, generator=g).bfloat16()
    bB = torch.randn(4, 8, 5, generator=g).bfloat16()
    batch = tme.emulated_mm(distribute_tensor(bA, mesh, [Shard(0)]),
                            distribute_tensor(bB, mesh, [Shard(0)]), arch=COARSE)
    return dict(ksplit_placement=str(ksplit.placements), ksplit=ksplit.full_tensor(),
                with_c=with_c.full_tensor(),
                batch_placement=str(batch.placements), batch=batch.full_tensor(),
                inputs=(A, B, C, bA, bB))


SCENARIOS = {"dtensor_rule": dtensor_rule, "tp_convert": tp_convert, "tp_emulate": tp_emulate, "ddp": ddp, "fsdp2": fsdp2}


def main(rank: int, world: int, port: int, outdir: str, names: list) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (world,))
    results = {}
    for name in names:
        try:
            results[name] = SCENARIOS[name](mesh, rank, world)
        except Exception:                      # reported by the test, by scenario
            results[name] = "ERROR " + traceback.format_exc()[-3000:]
        dist.barrier()
    torch.save(results, os.path.join(outdir, f"rank{rank}.pt"))
    dist.destroy_process_group()
