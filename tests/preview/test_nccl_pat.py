"""NCCL's PAT reduce-scatter through the emulated backend on 3 and 4 gloo ranks: a fp16
reduce_scatter_tensor and FSDP2's gradient reduce-scatter (SUM, then / world size) equal
the single-process fold in PAT's order (order/nccl_pat.py) and differ from gloo's bits;
AVG runs NCCL's ring (NCCL has no PAT with scaling ops).  The same ranks' fp16 all-reduce
under NVLS (exact node) and the symmetric kernels, and an fp8 all-reduce on ring and tree,
equal their single-process folds."""
import gloo_ranks
import pytest
import torch

from torch_mma_emu.order import nccl, nccl_extra, nccl_pat


def fsdp_fold(local, ws):
    """PAT SUM reduce-scatter of FSDP2's input (for shard c: shard c of every gradient),
    then FSDP's post-division by ws as CUDA divides by a number (``x * RN(1 / ws)`` in
    float32, preview/aten_pointwise.py); rank c's parameter shards."""
    rows = [torch.cat([g.chunk(ws, 0)[c].reshape(-1) for c in range(ws) for g in grads])
            for grads in local]
    stacked = torch.stack(rows)
    n = stacked.shape[1] // ws
    got = torch.from_numpy(nccl.reduce_values(nccl_pat.pat_reduce_scatter(ws, n), stacked,
                                              torch.float32)) * (torch.tensor(1.0) / ws)
    shapes = [g.chunk(ws, 0)[0].shape for g in local[0]]
    return [[p.reshape(s) for p, s in zip(got[c * n:(c + 1) * n].split(
        [s.numel() for s in shapes]), shapes)] for c in range(ws)]


def check(ws):
    res = gloo_ranks.run_ranks("nccl_pat_worker.py", ws)
    x = torch.stack([r["x"] for r in res])
    n = x.shape[1] // ws
    pat = torch.from_numpy(nccl.reduce_values(nccl_pat.pat_reduce_scatter(ws, n), x)).half()
    avg = torch.from_numpy(nccl.reduce_values(nccl.ring_reduce_scatter(ws, n), x,
                                              op="avg")).half()
    for k, r in enumerate(res):
        assert torch.equal(r["pat_rs"], pat[k * n:(k + 1) * n])
        assert torch.equal(r["pat_avg"], avg[k * n:(k + 1) * n])
    assert any(not torch.equal(r["pat_rs"], r["gloo_rs"]) for r in res)
    ring = torch.from_numpy(nccl.reduce_values(nccl.ring_reduce_scatter(ws, n), x)).half()
    assert not torch.equal(pat, ring)                  # PAT is not NCCL's ring either
    assert "ring (NCCL runs PAT without scaling ops only) x1" in res[0]["emu_summary"]
    want = fsdp_fold([r["local"] for r in res], ws)
    for r, w in zip(res, want):
        assert all(torch.equal(a, b) for a, b in zip(r["pat"], w))
    assert not all(all(torch.equal(a, b) for a, b in zip(r["gloo"], w))
                   for r, w in zip(res, want))
    assert "pat/simple" in res[0]["summary"] and "reduce_scatter x1" in res[0]["summary"]
    # the unverified exact node and the symmetric kernels' float32 chains, fp8 hops
    N = x.shape[1]
    nvls = nccl.reduce_values(nccl_extra.exact_node(ws, N), x)
    sym = nccl.reduce_values(nccl_extra.symmetric_allreduce(ws, N, torch.float16), x,
                             acc="f32")
    x8 = torch.stack([r["x8"] for r in res])
    ring8 = nccl.reduce_values(nccl.ring_allreduce(ws, N, x8.dtype, nchannels=2), x8)
    tree8 = nccl.reduce_values(nccl.tree_allreduce(ws, N, x8.dtype, nchannels=2), x8)
    for r in res:
        assert torch.equal(r["nvls"], torch.from_numpy(nvls).half())
        assert torch.equal(r["symmetric"], torch.from_numpy(sym).half())
        assert torch.equal(r["ring8"], torch.from_numpy(ring8).to(x8.dtype))
        assert torch.equal(r["tree8"], torch.from_numpy(tree8).to(x8.dtype))
        assert "order unverified" in r["nvls_summary"]
    assert not torch.equal(res[0]["ring8"], res[0]["tree8"])
    # one rounding (or a float32 chain) is not the fp16 ring's rounding at every hop
    ring16 = nccl.reduce_values(nccl.ring_allreduce(ws, N, torch.float16), x)
    assert not (nvls == ring16).all() and not (sym == ring16).all()


@pytest.mark.slow           # about a minute on the shared 2-core machine
def test_pat_reduce_scatter_and_fsdp2_3_ranks():
    check(3)


@pytest.mark.slow
def test_pat_reduce_scatter_and_fsdp2_4_ranks():
    check(4)


def test_algorithm_names_strict_mode_and_summary():
    import torch_mma_emu as tme
    from torch_mma_emu.preview.nccl_emu import CHOICES, NcclCollectives
    assert {"nccl-pat", "nccl-nvls", "nccl-nvls-tree", "nccl-collnet",
            "nccl-symmetric"} <= set(CHOICES)
    for name in ("nccl-nvls", "nccl-nvls-tree", "nccl-collnet", "nccl-symmetric"):
        em = tme.emulate("sm90", collectives=name)
        assert "order unverified" in em.summary()
    assert "unverified" not in tme.emulate("sm90", collectives="nccl-pat").summary()
    for algo in ("nvls", "nvls_tree", "collnet_direct", "collnet_chain", "symmetric"):
        with pytest.raises(ValueError, match="unverified.*strict=True allows ring, tree, pat"):
            NcclCollectives(algo=algo, strict=True)
    NcclCollectives(algo="pat", strict=True)            # verified against NCCL's code
    emu = NcclCollectives(algo="collnet_chain")
    with pytest.raises(ValueError, match="no collnet_chain reduce_scatter"):
        emu.ranges("reduce_scatter", 3, 4, torch.float32)
    with pytest.raises(ValueError, match="algorithm must be one of"):
        NcclCollectives(algo="pat2")
    # PAT's all-reduce is the ring's; its reduce-scatter is not
    pat = NcclCollectives(algo="pat")
    assert pat.ranges("all_reduce", 4, 100, torch.float32) == nccl.ring_allreduce(4, 100)
    assert pat.ranges("reduce_scatter", 4, 8, torch.float32) == \
        nccl_pat.pat_reduce_scatter(4, 8)
    assert pat.ranges("reduce_scatter", 4, 8, torch.float32, "avg") == \
        nccl.ring_reduce_scatter(4, 8)


def test_cli_pat_needs_reduce_scatter():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "torch_mma_emu", "reveal", "allreduce",
                        "--world-size", "3", "--backend", "nccl-emu", "--algo", "pat"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--op reduce_scatter" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
