"""Worker of tests/preview/test_nccl_emu.py: one gloo rank.  argv: init file, rank, world
size, out dir.  Saves its inputs and the results of plain gloo and of the emulated NCCL
backend (ring 1 and 2 channels, tree), and a DDP step with the emulated hook."""

import torch
import torch.distributed as dist

from gloo_ranks import init_rank, save_rank
from torch_mma_emu.preview.nccl_emu import NcclCollectives

rank, ws, _ = init_rank()
N = 4096
g = torch.Generator().manual_seed(100 + rank)
x = (torch.randn(N, generator=g) * torch.logspace(-2, 2, N)).to(torch.float16)
res = {"x": x.clone()}
y = x.float().clone()                  # gloo cannot sum fp16 on every build: fp32 reference
dist.all_reduce(y)
res["gloo_fp32"] = y
xh = x.clone()
dist.all_reduce(xh)
res["gloo"] = xh
for name, kw in (("ring1", dict(algo="ring")), ("ring2", dict(algo="ring", nchannels=2)),
                 ("tree", dict(algo="tree", nchannels=2))):
    em = NcclCollectives(**kw)
    with em:
        t = x.clone()
        dist.all_reduce(t)
        res[name] = t
    assert dist.all_reduce is not em.all_reduce
em = NcclCollectives()
with em:
    o = torch.empty(N // ws, dtype=torch.float16)
    dist.reduce_scatter_tensor(o, x[: (N // ws) * ws].clone())
    res["rs"] = o
    a = x.clone()
    dist.all_reduce(a, op=dist.ReduceOp.AVG)
    res["avg"] = a
# DDP with the emulated hook: the bucket before and the gradients after
torch.manual_seed(0)
model = torch.nn.Linear(8, 4)
ddp = torch.nn.parallel.DistributedDataParallel(model)
seen = []


def hook(state, bucket):
    seen.append(bucket.buffer().clone())
    return em.ddp_hook(state, bucket)


ddp.register_comm_hook(None, hook)
inp = torch.randn(5, 8, generator=torch.Generator().manual_seed(rank))
ddp(inp).square().sum().backward()
res["bucket"] = seen[0]
res["grads"] = torch.cat([p.grad.reshape(-1) for p in model.parameters()])   # bucket order
save_rank(res)
