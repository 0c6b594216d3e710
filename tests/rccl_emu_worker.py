"""Worker of tests/preview/test_rccl_emu.py: one gloo rank.  argv: init file, rank, world
size, out dir.  Saves its inputs, plain gloo's all_reduce, the emulated RCCL backend's
(ring 1 and 2 channels LL, tree, the hand-written 3-rank MSCCL ring / 4-rank all-pairs) and one training step
of a small MLP: local gradients, DDP under emulate(collectives="rccl-ring") and under an
MscclAlgorithm, and under plain emulate (gloo)."""
import copy
import os

import torch
import torch.distributed as dist
from gloo_ranks import grad_step, init_rank, save_rank, wide_input

from torch_mma_emu.order.msccl import MscclAlgorithm
from torch_mma_emu.preview.rccl_emu import RcclCollectives

rank, ws, _ = init_rank()
HAND = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "msccl",
                    "ring-3n-hand.xml" if ws == 3 else "allpairs-4n-hand.xml")
N = 3000
g = torch.Generator().manual_seed(200 + rank)
x = (torch.randn(N, generator=g) * torch.logspace(-2, 2, N)).to(torch.float16)
res = {"x": x.clone()}
xh = x.clone()
dist.all_reduce(xh)
res["gloo"] = xh
alg = MscclAlgorithm(HAND)
for name, kw in (("ring1", dict(algo="ring")), ("ring2", dict(proto="ll", nchannels=2)),
                 ("tree", dict(algo="tree", nchannels=2)), ("msccl", dict(msccl=alg))):
    em = RcclCollectives(**kw)
    with em:
        t = x.clone()
        dist.all_reduce(t)
        res[name] = t
    res[name + "_summary"] = em.summary_line()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
inp = wide_input(rank)


def step(m, **kw):
    grads, em = grad_step(m, inp, **kw)
    return torch.cat([t.reshape(-1) for t in grads]), em


res["local"], _ = step(copy.deepcopy(model))
ddp = torch.nn.parallel.DistributedDataParallel
res["ddp_ring"], em = step(ddp(copy.deepcopy(model)), collectives="rccl-ring")
res["ddp_summary"] = em.summary()
res["ddp_msccl"], em = step(ddp(copy.deepcopy(model)), collectives=alg)
res["ddp_msccl_summary"] = em.summary()
res["ddp_gloo"], _ = step(ddp(copy.deepcopy(model)))
save_rank(res)
