"""torch 2.13's CUDA softmax beyond the persistent warp kernel (aten_cuda/host_softmax.py):
the launch rules of ``host_softmax``, the block kernels (``cunn_SoftMaxForwardReg`` /
``Smem`` / ``cunn_SoftMaxForward``) and the spatial kernel, each checked bit for bit against
a slow per-thread loop written from the kernel text, and the route under ``emulate``."""
import numpy as np
import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu.aten_cuda import host_softmax as hs
from torch_mma_emu.aten_cuda import softmax as sm

F = np.float32
LOWEST = F(-np.finfo(np.float32).max)
MATH = sm.device_math()
needs_math = pytest.mark.skipif(MATH is None, reason="no CUDA expf / logf model")


# ---- the slow reference: one thread at a time, as the kernel text reads --------------------
def _row_max(row):
    m = LOWEST
    for v in row:
        if not np.isnan(v) and v > m:      # fmaxf: NaN skipped
            m = F(v)
    return m


def _warp_shfl_down_sum(lanes):
    for off in (16, 8, 4, 2, 1):
        lanes = [F(lanes[l] + (lanes[l + off] if l + off < 32 else lanes[l]))
                 for l in range(32)]
    return lanes[0]


def _block_reduce(vals):
    B = len(vals)
    shared = [_warp_shfl_down_sum(vals[w * 32:(w + 1) * 32]) for w in range(B // 32)]
    return _warp_shfl_down_sum([shared[l] if l < B // 32 else F(0) for l in range(32)])


def _ref_block_row(row, kernel, shift, B, ilp, reg_cnt, exp, log, log_softmax):
    n = len(row)
    mx = _row_max(row)
    e = [F(v) for v in np.asarray(exp((row - mx).astype(F)), F)]    # exp(x_i - max)
    vals = []
    for t in range(B):
        acc = F(0)
        if kernel == "Reg":
            for r in range(reg_cnt):
                if t + r * B < n:
                    acc = F(acc + e[t + r * B])
        elif kernel == "Smem":
            off = t
            while off * ilp < n:
                for j in range(ilp):
                    acc = F(acc + e[off * ilp + j])
                off += B
        else:                                  # ilpReduce, data as an index into the row
            data, size, off = 0, n, t
            if shift > 0:
                data -= shift
                size += shift
                if shift <= off < size:
                    acc = F(acc + e[data + off])
                size -= min(B, size)
                data += B
            last = size % (ilp * B)
            while off * ilp < size - last:
                for j in range(ilp):
                    acc = F(acc + e[data + off * ilp + j])
                off += B
            off = size - last + t
            while off < size:
                acc = F(acc + e[data + off])
                off += B
        vals.append(acc)
    s = _block_reduce(vals)
    d = (row - mx).astype(F)
    if log_softmax:
        return (d - np.asarray(log(np.array([s], F)), F)[0]).astype(F)
    return (np.asarray(exp(d), F) / s).astype(F)


def _ref_spatial_col(col, bx, exp, log, log_softmax):
    n = len(col)
    mx = _row_max(col)
    e = np.asarray(exp((col - mx).astype(F)), F)
    sh = []
    for x in range(bx):
        acc = F(0)
        for d in range(x, n, bx):
            acc = F(acc + e[d])
        sh.append(acc)
    off = bx // 2
    while off > 0:
        for x in range(off):
            sh[x] = F(sh[x] + sh[x + off])
        off //= 2
    d = (col - mx).astype(F)
    if log_softmax:
        return (d - np.asarray(log(np.array([sh[0]], F)), F)[0]).astype(F)
    return (np.asarray(exp(d), F) / sh[0]).astype(F)


def _view(rows, n, dtype, offset, seed):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(rows * n + offset, generator=g) * 6
    base[::97] += 30                         # a wide range, so the order shows
    return base.to(dtype)[offset:].view(rows, n)


def _bits(a):
    return np.asarray(a, F).view(np.int32)


# ---- launch rules -------------------------------------------------------------------------
def test_launch_rules():
    L = hs.launch((3, 2048), -1, torch.float32)
    assert L.kernel == "persistent"
    assert hs.launch((3, 2049), -1, torch.float32).name == "cunn_SoftMaxForwardReg<3>"
    assert hs.launch((3, 9216), -1, torch.float32).reg_cnt == 9
    assert hs.launch((3, 9217), -1, torch.float32).kernel == "Forward"      # 9217 % 4
    assert hs.launch((3, 10000), -1, torch.float32).kernel == "Smem"
    assert hs.launch((3, 10000), -1, torch.float32, offset=1).kernel == "Forward"
    assert hs.launch((3, 12256), -1, torch.float32).kernel == "Forward"     # smem full
    assert hs.launch((3, 12252), -1, torch.float32).kernel == "Smem"
    assert hs.launch((3, 24504), -1, torch.float16).kernel == "Smem"
    assert hs.launch((3, 10004), -1, torch.float16).kernel == "Forward"     # % 8
    L = hs.launch((3, 4000), -1, torch.float16, half_to_float=True)
    assert L.kernel == "Smem" and L.ilp == 8                                # no Reg
    assert hs.launch((3, 2049), -1, torch.bfloat16).block == (1024, 1)
    assert hs.forward_block_size(3000) == 1024 and hs.forward_block_size(100) == 128
    assert hs.launch((5, 3000, 1), 1, torch.float32).kernel == "Reg"        # inner == 1
    assert hs.spatial_block_size(300, 7) == (128, 7)
    assert hs.spatial_block_size(30, 7) == (1, 7)                            # dim < 64
    assert hs.spatial_block_size(300, 100) == (1, 100)                       # inner > 64
    assert hs.spatial_block_size(64, 64) == (16, 64)
    assert hs.launch((2, 300, 7), 1, torch.float16).kernel == "Spatial"
    with pytest.raises(TypeError, match="fp32, fp16 or bf16"):
        hs.launch((3, 5000), -1, torch.float64)


# ---- bit-exact against the per-thread loop --------------------------------------------------
CASES = [  # (n, dtype, storage offset, kernel, half_to_float)
    (2049, torch.float32, 0, "Reg", False),
    (5000, torch.float16, 3, "Reg", False),
    (9217, torch.float32, 0, "Forward", False),     # odd n: rows at shifts 0, 1, 2, 3
    (9300, torch.float32, 2, "Smem", False) if 9300 % 4 else None,
    (10000, torch.float32, 0, "Smem", False),
    (10000, torch.float32, 1, "Forward", False),
    (10003, torch.float16, 5, "Forward", False),    # ILP 8, shifts vary per row
    (12000, torch.float16, 0, "Smem", False),
    (9990, torch.bfloat16, 0, "Forward", False),
    (4000, torch.float16, 0, "Smem", True),
    (4001, torch.float16, 0, "Forward", True),
]
CASES = [c for c in CASES if c]


@needs_math
@pytest.mark.parametrize("n,dtype,offset,kernel,h2f", CASES)
def test_block_kernels_against_a_thread_loop(n, dtype, offset, kernel, h2f):
    exp, log = MATH
    rows = 3 if kernel == "Forward" else 2
    x = _view(rows, n, dtype, offset, seed=n + offset)
    for log_softmax in (False, True):
        got, L = hs.softmax(x, -1, log_softmax=log_softmax, half_to_float=h2f)
        assert L.kernel == kernel
        X = x.float().numpy()
        for r in range(rows):
            shift = (offset + r * n) % L.ilp
            want = _ref_block_row(X[r], kernel, shift, L.block[0], L.ilp, L.reg_cnt, exp,
                                  log, log_softmax)
            want = torch.from_numpy(want).to(torch.float32 if h2f else dtype)
            assert torch.equal(got[r].view(-1).float(), want.float()), (r, shift)
    if kernel == "Forward":              # the shift matters: shift 0's order differs
        X = x.float().numpy()
        L = hs.launch(x.shape, -1, dtype, offset=offset, half_to_float=h2f)
        shifts = [(offset + r * n) % L.ilp for r in range(rows)]
        a = hs.evaluate_rows(X, L, exp, log, shifts=[0] * rows)
        b = hs.evaluate_rows(X, L, exp, log, shifts=shifts)
        assert any(shifts) and not np.array_equal(_bits(a), _bits(b))


@needs_math
@pytest.mark.parametrize("shape,dim,dtype", [((3, 300, 5), 1, torch.float32),
                                             ((2, 70, 64), 1, torch.float16),
                                             ((40, 3, 9), 0, torch.bfloat16),
                                             ((2, 5, 100), 1, torch.float32)])
def test_spatial_kernel_against_a_thread_loop(shape, dim, dtype):
    exp, log = MATH
    g = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=g) * 8).to(dtype)
    for log_softmax in (False, True):
        got, L = hs.softmax(x, dim, log_softmax=log_softmax)
        assert L.kernel == "Spatial"
        X = x.float().numpy().reshape(L.outer, L.dim, L.inner)
        G = got.float().numpy().reshape(L.outer, L.dim, L.inner)
        for o in range(L.outer):
            for i in range(0, L.inner, max(1, L.inner // 7)):
                want = _ref_spatial_col(X[o, :, i], L.block[0], exp, log, log_softmax)
                want = torch.from_numpy(want).to(dtype).float().numpy()
                assert np.array_equal(_bits(G[o, :, i]), _bits(want)), (o, i)


# ---- under emulate -------------------------------------------------------------------------
@needs_math
@pytest.mark.parametrize("shape,dim,offset,kernel", [
    ((4, 3000), -1, 0, "cunn_SoftMaxForwardReg<3>"),
    ((2, 10001), -1, 1, "cunn_SoftMaxForward"),
    ((2, 10000), -1, 0, "cunn_SoftMaxForwardSmem"),
    ((4, 300, 6), 1, 0, "cunn_SpatialSoftMaxForward"),
    ((300, 20), 0, 0, "cunn_SpatialSoftMaxForward")])
def test_routed_softmax_is_the_model(shape, dim, offset, kernel):
    g = torch.Generator().manual_seed(7)
    n = int(np.prod(shape))
    x = (torch.randn(n + offset, generator=g) * 5)[offset:].view(shape)
    differs = False
    for op, log in ((torch.softmax, False), (torch.log_softmax, True)):
        with tme.emulate("sm90", record=True) as em:
            y = op(x, dim)
        want, L = hs.softmax(x, dim, log_softmax=log)
        assert torch.equal(y, want)
        assert L.name.startswith(kernel.split("<")[0])
        name = "aten._log_softmax.default" if log else "aten._softmax.default"
        assert em.counts[(name, "forward", "torch 2.13.0 CUDA kernel")] == 1
        assert em.counts.get((name, "forward", "CPU order"), 0) == 0
        assert any(kernel in r.note for r in em.records if r.op == name)
        differs |= not torch.equal(y, op(x, dim))
    assert differs                         # not the CPU's bits


@needs_math
def test_routed_half_to_float_and_fp64():
    x = torch.randn(3, 5000).half()
    with tme.emulate("sm90") as em:
        y = torch.ops.aten._softmax(x, -1, True)
    want, L = hs.softmax(x, -1, half_to_float=True)
    assert y.dtype == torch.float32 and torch.equal(y, want) and L.kernel == "Smem"
    with tme.emulate("sm90") as em:
        y = torch.softmax(torch.ones(2, 3000, dtype=torch.float64), -1)
    assert em.counts[("aten._softmax.default", "forward", "CPU order")] == 1


# ---- the GPU step's CPU stand-in -----------------------------------------------------------
@needs_math
def test_gpu_step_compare_covers_the_block_kernels(tmp_path):
    """scripts/gpu/reductions.py --compare now checks every recorded softmax row length and
    dtype (4099: Reg<5>, 16384 fp32: cunn_SoftMaxForward): a record the model gives matches,
    the CPU's softmax does not."""
    from torch_mma_emu.hw import reductions as hw
    from torch_mma_emu.hw.common import bits
    arrays = {"device": np.array("NVIDIA H100 80GB HBM3"), "sms": np.array(132),
              "max_threads_per_sm": np.array(2048)}
    for key, n, dt in (("fp16_spread_n4099", 4099, torch.float16),
                       ("fp32_normal_n16384", 16384, torch.float32)):
        x = hw.inputs(n, key.split("_")[1], dt)
        arrays["in_" + key] = bits(x).numpy()
        arrays["softmax_" + key] = bits(hs.softmax(x, -1)[0]).numpy()
    arrays["in_bf16_normal_n4099"] = bits(hw.inputs(4099, "normal", torch.bfloat16)).numpy()
    arrays["softmax_bf16_normal_n4099"] = bits(torch.softmax(
        hw.inputs(4099, "normal", torch.bfloat16).float(), -1).bfloat16()).numpy()
    path = tmp_path / "r.npz"
    np.savez(path, **arrays)
    rows = {k: b for k, b, _ in hw.compare(str(path))}
    assert rows["softmax_fp16_spread_n4099"] == rows["softmax_fp32_normal_n16384"] == 0
    assert rows["softmax_bf16_normal_n4099"] > 0
