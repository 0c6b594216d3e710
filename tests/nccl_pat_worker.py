"""Worker of tests/preview/test_nccl_pat.py: one gloo rank.  argv: init file, rank, world
size, out dir.  fp16 all_reduce under "nvls" and "symmetric", fp8 all_reduce on the ring
and the tree; a fp16 reduce_scatter_tensor (SUM, and AVG, which NCCL runs on the ring)
under NcclCollectives(algo="pat") and plain gloo; one FSDP2 step of an MLP with SUM
reduce-scatters (set_force_sum_reduction_for_comms) under emulate(collectives="nccl-pat")
and plain emulate, and this rank's own full gradients."""
import copy

import torch
import torch.distributed as dist
from gloo_ranks import grad_step, init_rank, save_rank, wide_input

from torch_mma_emu.preview.nccl_emu import NcclCollectives

rank, ws, _ = init_rank()
N = 64 * ws
g = torch.Generator().manual_seed(200 + rank)
x = (torch.randn(N, generator=g) * torch.logspace(-2, 2, N)).to(torch.float16)
res = {"x": x.clone()}
out = torch.empty(N // ws, dtype=torch.float16)
dist.reduce_scatter_tensor(out, x.clone())
res["gloo_rs"] = out.clone()
with NcclCollectives(algo="pat") as emu:
    dist.reduce_scatter_tensor(out, x.clone())
    res["pat_rs"] = out.clone()
    dist.reduce_scatter_tensor(out, x.clone(), op=dist.ReduceOp.AVG)
    res["pat_avg"] = out.clone()
res["emu_summary"] = emu.summary_line()
# all-reduces: fp16 under the unverified exact node and the symmetric kernels; fp8 (gathered
# as bytes) on the ring and the tree
for algo in ("nvls", "symmetric"):
    with NcclCollectives(algo=algo) as emu:
        t = x.clone()
        dist.all_reduce(t)
        res[algo] = t
    res[algo + "_summary"] = emu.summary_line()
x8 = (x.float() / 16).to(torch.float8_e4m3fn)
res["x8"] = x8.clone()
for algo in ("ring", "tree"):
    with NcclCollectives(algo=algo, nchannels=2):
        t = x8.clone()
        dist.all_reduce(t)
        res[algo + "8"] = t

from torch.distributed.fsdp import fully_shard  # noqa: E402

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 48), torch.nn.ReLU(), torch.nn.Linear(48, 12))
inp = wide_input(rank)


def step(m, **kw):
    return grad_step(m, inp, **kw)


res["local"], _ = step(copy.deepcopy(model))
fs = fully_shard(copy.deepcopy(model))
fs.set_force_sum_reduction_for_comms(True)          # SUM reduce-scatter, then / ws
res["pat"], em = step(fs, collectives="nccl-pat")
res["summary"] = em.summary()
fs = fully_shard(copy.deepcopy(model))
fs.set_force_sum_reduction_for_comms(True)
res["gloo"], _ = step(fs)
save_rank(res)
