"""Worker of tests/preview/test_nccl_fsdp_tp.py: one gloo rank.  argv: init file, rank, world
size, out dir, "fsdp" or "tp".
fsdp: one step of an MLP under emulate("sm90") as a local copy (this rank's full gradients),
FSDP2 (fully_shard) under collectives="nccl-ring" (ReduceOp.AVG reduce-scatter), the same
with a gradient divide factor 2 (PREMUL_SUM(0.5)), and FSDP2 under plain emulate (gloo).
tp: a ColwiseParallel / RowwiseParallel MLP's forward under collectives="nccl-ring",
"nccl-tree" and plain emulate, and this rank's own partial product (the all-reduce's input)."""
import copy

import torch
import torch.distributed as dist
import torch.nn.functional as F

import torch_mma_emu as tme
from gloo_ranks import grad_step, init_rank, save_rank, wide_input

rank, ws, (what,) = init_rank()
torch.manual_seed(0)
res = {}
if what == "fsdp":
    from torch.distributed.fsdp import fully_shard
    model = torch.nn.Sequential(torch.nn.Linear(16, 48), torch.nn.ReLU(), torch.nn.Linear(48, 12))
    inp = wide_input(rank)

    def step(m, **kw):
        return grad_step(m, inp, **kw)

    res["local"], _ = step(copy.deepcopy(model))
    fs = fully_shard(copy.deepcopy(model))
    res["nccl"], em = step(fs, collectives="nccl-ring")
    res["summary"] = em.summary()
    fs = fully_shard(copy.deepcopy(model))
    fs.set_gradient_divide_factor(2.0)               # FSDP2: ReduceOp.PREMUL_SUM(1 / 2)
    res["premul"], _ = step(fs, collectives="nccl-ring")
    res["gloo"], _ = step(fully_shard(copy.deepcopy(model)))
else:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    mesh = init_device_mesh("cpu", (ws,))
    model = torch.nn.Sequential(torch.nn.Linear(16, 48), torch.nn.ReLU(),
                                torch.nn.Linear(48, 12, bias=False))
    inp = torch.randn(12, 16, generator=torch.Generator().manual_seed(7)) \
        * torch.logspace(-3, 3, 16)
    rows = slice(rank * 48 // ws, (rank + 1) * 48 // ws)
    with tme.emulate("sm90"):                         # this rank's partial product
        w1, b1, w2 = (model[0].weight[rows].contiguous(), model[0].bias[rows].contiguous(),
                      model[2].weight[:, rows].contiguous())
        res["partial"] = F.linear(F.relu(F.linear(inp, w1, b1)), w2).detach()

    def run(**kw):
        tp = parallelize_module(copy.deepcopy(model), mesh,
                                {"0": ColwiseParallel(), "2": RowwiseParallel()})
        with tme.emulate("sm90", **kw) as em:
            y = tp(inp)
            y.square().sum().backward()              # differentiable through the routing
        return y.detach().clone(), em

    res["nccl"], em = run(collectives="nccl-ring")
    res["summary"] = em.summary()
    res["tree"], _ = run(collectives="nccl-tree")
    res["gloo"], _ = run()
save_rank(res)
