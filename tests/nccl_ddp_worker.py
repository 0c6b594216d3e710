"""Worker of tests/preview/test_nccl_ddp.py: one gloo rank.  argv: init file, rank, world
size, out dir.  One training step of a small MLP on sm90 three ways: a local copy (this
rank's gradients, no DDP), DDP under emulate(collectives="nccl-ring") and "nccl-tree" (no hook
written by hand) and DDP under plain emulate (gloo's all-reduce)."""
import copy

import torch
import torch.distributed as dist

import torch_mma_emu as tme
from gloo_ranks import init_rank, save_rank
from torch_mma_emu.preview.nccl_emu import NcclCollectives

rank, ws, _ = init_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
g = torch.Generator().manual_seed(1000 + rank)
inp = torch.randn(12, 16, generator=g) * torch.logspace(-3, 3, 16)   # wide magnitudes


def step(m, **kw):
    with tme.emulate("sm90", **kw) as em:
        m(inp).square().sum().backward()
    grads = torch.cat([p.grad.reshape(-1) for p in m.parameters()])    # the one bucket's order
    return grads, em


res = {}
res["local"], _ = step(copy.deepcopy(model))
res["nccl"], em = step(torch.nn.parallel.DistributedDataParallel(copy.deepcopy(model)),
                       collectives="nccl-ring")
res["summary"] = em.summary()
res["tree"], _ = step(torch.nn.parallel.DistributedDataParallel(copy.deepcopy(model)),
                      collectives="nccl-tree")
res["gloo"], _ = step(torch.nn.parallel.DistributedDataParallel(copy.deepcopy(model)))
# a DDP model built outside the block is routed when called inside it
res["outside"], _ = step(torch.nn.parallel.DistributedDataParallel(copy.deepcopy(model)),
                         collectives="nccl-ring")
# built inside a block (hook registered), stepped after it: DDP's default all-reduce bits
with NcclCollectives():
    ddp = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(model))
res["after"], _ = step(ddp)
res["hooked"] = bool(ddp._comm_hooks)
save_rank(res)
