"""softmax / log_softmax backward as torch 2.13's CUDA host_softmax_backward computes them
(issue 39): every path against a per-thread loop written from the kernels' text
(PersistentSoftmax.cuh's softmax_warp_backward, SoftMax.cu's cunn_SoftMaxBackward[Smem] and
cunn_SpatialSoftMaxBackward), the epilogue's contractions against nvcc's PTX, the route."""
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import torch_mma_emu as tme
from torch_mma_emu.aten_cuda import elementwise as ew
from torch_mma_emu.aten_cuda import softmax_backward as sb

f32 = np.float32
DATA = Path(__file__).parent / "data" / "aten_softmax"


def _exp(v):
    return f32(ew.exp(np.array([v], f32))[0])


def ref_persistent(g):
    n = len(g)
    P = 1 << max(n - 1, 0).bit_length()
    W = min(P, 32)
    s = [f32(0)] * W
    for lane in range(W):
        for it in range(P // W):
            i = lane + W * it
            s[lane] = f32(s[lane] + (g[i] if i < n else f32(0)))
    h = W // 2
    while h:
        s = [f32(s[lane] + s[lane ^ h]) for lane in range(W)]
        h //= 2
    assert len(set(v.tobytes() for v in s)) == 1        # every lane holds the same sum
    return s[0]


def ref_block(g, B, ilp, shift):
    """cunn_SoftMaxBackward: ilpReduce (AddFloat from 0), then the smem blockReduce."""
    n = len(g)
    vals = []
    for t in range(B):
        v, base, size = f32(0), 0, n
        if shift > 0:
            size += shift
            if shift <= t < size:
                v = f32(v + g[t - shift])
            size -= min(B, size)
            base = B - shift
        last = size % (ilp * B)
        off = t
        while off * ilp < size - last:
            for j in range(ilp):
                v = f32(v + g[base + off * ilp + j])
            off += B
        off = size - last + t
        while off < size:
            v = f32(v + g[base + off])
            off += B
        vals.append(v)
    warp = []
    for w in range(B // 32):
        a = f32(0)
        for i in range(32):
            a = f32(a + vals[w * 32 + i])
        warp.append(a)
    total = f32(0)
    for a in warp:
        total = f32(total + a)
    return total


def _shfl_down(v):
    v = list(v)
    for off in (16, 8, 4, 2, 1):
        v = [f32(v[x] + v[x + off]) if x + off < 32 else v[x] for x in range(32)]
    return v[0]


def ref_smem(g, B, ilp):
    n = len(g)
    vals = []
    for t in range(B):
        v, off = f32(0), t
        while off * ilp < n:
            for i in range(ilp):
                v = f32(v + g[off * ilp + i])
            off += B
        vals.append(v)
    warps = [_shfl_down(vals[w * 32:(w + 1) * 32]) for w in range(B // 32)]
    return _shfl_down(warps + [f32(0)] * (32 - len(warps)))


def ref_spatial(col, bx):
    n = len(col)
    if bx == 1:
        s = f32(0)
        for d in range(n):
            s = f32(s + col[d])
        return s
    sh = []
    for x in range(bx):
        s, d = f32(0), x
        while d < n:
            s = f32(s + col[d])
            d += bx
        sh.append(s)
    off = bx // 2
    while off:
        sh = [f32(sh[x] + sh[x + off]) if x < off else sh[x] for x in range(bx)]
        off //= 2
    return sh[0]


def _epi(g, y, S, log):
    """``y``: the output, or for log_softmax already ``expf(output)``."""
    return f32(g - f32(y * S))


CASES = [((3, 100), torch.float32, "persistent"), ((2, 33), torch.float16, "persistent"),
         ((2, 1024), torch.bfloat16, "persistent"), ((2, 3000), torch.float32, "Smem"),
         ((2, 3001), torch.float32, "Backward"), ((2, 1025), torch.float16, "Backward"),
         ((2, 70, 3), torch.float32, "Spatial"), ((2, 10, 100), torch.float32, "Spatial")]


@pytest.mark.parametrize("shape,dtype,kernel", CASES)
@pytest.mark.parametrize("log", [False, True])
def test_paths_against_the_thread_loops(shape, dtype, kernel, log):
    gen = torch.Generator().manual_seed(len(shape) * 7 + shape[-1])
    dim = 1
    x = torch.randn(shape, generator=gen)
    y = (torch.log_softmax if log else torch.softmax)(x, dim).to(dtype)
    grad = torch.randn(shape, generator=gen).to(dtype)
    gi, L = sb.softmax_backward(grad, y, dim, dtype, log_softmax=log)
    assert L.kernel == kernel
    G = (grad if log else grad * y).float().numpy()
    Y = y.float().numpy()
    if log:
        with np.errstate(all="ignore"):
            Y = ew.exp(Y.reshape(-1)).reshape(Y.shape).astype(f32)
    got = gi.float().numpy()
    for o in range(shape[0]):
        if kernel == "Spatial":
            for i in range(shape[2]):
                S = ref_spatial(G[o, :, i], L.block[0])
                for d in range(shape[1]):
                    want = torch.tensor(_epi(G[o, d, i], Y[o, d, i], S, log)).to(dtype).float()
                    assert got[o, d, i] == want.item() or (np.isnan(got[o, d, i]))
            continue
        S = {"persistent": lambda r: ref_persistent(r),
             "Smem": lambda r: ref_smem(r, L.block[0], L.ilp),
             "Backward": lambda r: ref_block(r, L.block[0], L.ilp,
                                             (o * shape[1]) % L.ilp)}[kernel](G[o])
        want = torch.tensor([_epi(G[o, j], Y[o, j], S, log) for j in range(shape[1])]
                            ).to(dtype).float().numpy()
        assert (got[o].view(np.int32) == want.view(np.int32)).all(), (o, L.describe())


def test_unaligned_gradient_row_shift():
    """log_softmax's gradient is passed as is: a view one element past a 16-byte boundary
    shifts ilpReduce's head (and rules out the Smem kernel)."""
    gen = torch.Generator().manual_seed(3)
    y = torch.log_softmax(torch.randn(2, 4000, generator=gen), 1)
    buf = torch.randn(2 * 4000 + 1, generator=gen)
    grad = buf[1:].view(2, 4000)
    gi, L = sb.softmax_backward(grad, y, 1, torch.float32, log_softmax=True)
    assert L.kernel == "Backward"
    G, Y = grad.numpy(), y.numpy()
    for o in range(2):
        S = ref_block(G[o], L.block[0], L.ilp, (1 + o * 4000) % 4)
        assert gi[o, 7].item() == _epi(G[o, 7], _exp(Y[o, 7]), S, True)


def test_launch_rules():
    assert sb.launch((4, 1024), 1, torch.float32, torch.float32).kernel == "persistent"
    assert sb.launch((4, 1028), 1, torch.float32, torch.float32).kernel == "Smem"
    assert sb.launch((4, 1025), 1, torch.float32, torch.float32).kernel == "Backward"
    assert sb.launch((4, 1025), 1, torch.float16, torch.float16).kernel == "Backward"
    assert sb.block_size(4, 3000) == 512 and sb.block_size(8, 1025) == 64
    assert sb.launch((4, 40000), 1, torch.float32, torch.float32).kernel == "Backward"


def test_epilogue_has_no_fma_in_nvccs_ptx():
    ptx = (DATA / "softmax_backward_sm90.ptx").read_text()

    def body(name):
        b = ptx[ptx.index(f".entry {name}("):]
        return re.findall(r"^\s+((?:fma|mul|sub|add)\.[\w.]*f32)\s", b[:b.index("ret;")], re.M)
    assert body("softmax_epilogue_f32") == ["mul.f32", "sub.f32"]
    assert body("log_softmax_epilogue_f32")[-2:] == ["mul.f32", "sub.f32"]
    assert "shfl.sync.bfly" in ptx and "shfl.sync.down" not in ptx


def test_training_step_routes_softmax_backward():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 300, generator=gen, requires_grad=True)
    g = torch.randn(4, 300, generator=gen)
    with tme.emulate("sm90", record=True) as em:
        y = F.softmax(x, -1)
        y.backward(g)
    rec = [r for r in em.records if r.op == "aten._softmax_backward_data.default"]
    assert rec and rec[0].format == "torch 2.13.0 CUDA kernel" and "persistent" in rec[0].note
    want, _ = sb.softmax_backward(g, y.detach(), 1, torch.float32)
    assert torch.equal(x.grad, want)
    assert not torch.equal(x.grad, torch.ops.aten._softmax_backward_data(g, y.detach(), 1,
                                                                         torch.float32))
    x.grad = None
    with tme.emulate("sm90", record=True) as em:
        F.log_softmax(x, 0).backward(g)              # dim 0: the spatial kernel
    rec = [r for r in em.records if "log_softmax_backward" in r.op]
    assert "Spatial" in rec[0].note
    with tme.emulate("MI300X", record=True) as em:
        F.softmax(x, -1).backward(g)
    assert [r.format for r in em.records if "backward_data" in r.op] == ["CPU order"]


def test_bad_input():
    with pytest.raises(TypeError):
        sb.softmax_backward(torch.ones(3, dtype=torch.float64), torch.ones(3,
                            dtype=torch.float64), 0, torch.float64)
    with pytest.raises(ValueError):
        sb.softmax_backward(torch.ones(3), torch.ones(4), 0, torch.float32)
