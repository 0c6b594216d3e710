"""PyTorch 2.13's CUDA sum / mean modelled under emulate (issue 39): launch configuration
from the device, FPRev agreement of the emulated op with the model's tree on every branch,
routing and records."""
import warnings

import numpy as np
import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import aten_cuda, registry
from torch_mma_emu.fprev import VectorTarget, reveal
from torch_mma_emu.fprev.verify import cross_check

H100, PCIE = registry.gpu("H100"), registry.gpu("H100 PCIe")


def cfg(x, dim=None, op="sum", gpu=H100):
    return aten_cuda.config_for(x, dim, op, gpu)


# ---- the device table and the launch configuration -----------------------------------------
def test_gpu_table():
    assert (H100.sms, PCIE.sms, registry.gpu("H200").sms, registry.gpu("A100").sms) == \
        (132, 114, 132, 108)
    assert registry.gpu("sm90") is H100 and registry.gpu("H100 SXM") is H100
    assert registry.gpu("RTX 4060").max_threads_per_sm == 1536
    assert registry.canonical_arch("H100 PCIe") == "sm90"
    with pytest.raises(ValueError):
        registry.gpu("gfx942")          # no AMD rows: ROCm's kernel is another model


def test_ctas_follow_the_sm_count():
    x = torch.empty(1 << 24)            # issue 39: 528 CTAs on 132 SMs, 456 on 114
    assert cfg(x).grid == (1, 528) and cfg(x, gpu=PCIE).grid == (1, 456)
    c = cfg(x)
    assert (c.block_width, c.block_height, c.vectorize_input, c.step_input) == \
        (512, 1, True, 512 * 528)


def test_config_branches():
    c = cfg(torch.empty(4096, 4096), 1)           # one warp per row, 16 rows per block
    assert (c.block_width, c.block_height, c.warp_split, c.ctas_per_output) == (32, 16, False, 1)
    c = cfg(torch.empty(4096, 4096), 0)           # outputs along lanes, vectors of 4 outputs
    assert (c.fastest, c.output_vec_size, c.block_width, c.block_height, c.ctas_per_output) \
        == (False, 4, 32, 4, 64)
    assert not cfg(torch.empty(1000)[::2]).vectorize_input       # stride 2
    assert not cfg(torch.empty(100)).vectorize_input             # dim0 < 128
    assert cfg(torch.empty(300, dtype=torch.float16)).input_vec_size == 8
    assert cfg(torch.empty(300, dtype=torch.bfloat16), op="mean").input_vec_size == 8


def test_layout_coalesces_and_orders():
    x = torch.empty(3, 5, 7)
    assert aten_cuda.layout(x, (1, 2)).num_reduce_dims == 1        # 5x7 contiguous: one dim
    assert aten_cuda.layout(x, (0, 2)).num_reduce_dims == 2
    lay = aten_cuda.layout(x.transpose(0, 2), (0,))               # reduced dim has stride 1
    assert lay.stride0 == 1 and lay.num_inputs == 7


def test_values_against_an_independent_loop():
    """The NumPy evaluation against a per-thread loop written from the kernel's text."""
    g = torch.Generator().manual_seed(0)
    for n, off in ((1000, 0), (1003, 3), (700, 1)):
        buf = (torch.randn(n + 4, generator=g) * torch.exp2(
            torch.randint(-12, 12, (n + 4,), generator=g).float()))
        x = buf[off:off + n]
        c = cfg(x)
        got = aten_cuda.reduce(x).numpy()
        S, V = c.step_input, 4
        xs = x.numpy()
        shift = off % V
        acc = np.zeros((S, V), np.float32)
        start = 0
        if shift:
            for t in range(shift, V):
                acc[t, 0] += xs[t - shift]
            start = V - shift
        end = n - start
        for t in range(S):
            j = t
            while j * V + V - 1 < end:
                for i in range(V):
                    acc[t, i] = np.float32(acc[t, i] + xs[start + j * V + i])
                j += S
        ts = end - end % V
        for t in range(end - ts):
            acc[t, 0] += xs[start + ts + t]
        v = acc[:, 0].copy()
        for i in range(1, V):
            v = (v + acc[:, i]).astype(np.float32)
        while len(v) > 1:
            h = len(v) // 2
            v = (v[:h] + v[h:]).astype(np.float32)
        assert got.view(np.int32) == v[0].view(np.int32), (n, off)


# ---- FPRev: the tree revealed from the emulated op is the model's tree -----------------------
def _emulated(gpu="sm90", shape=None, place=None, dim=None, op=torch.sum):
    def fn(x):
        with tme.emulate(gpu):
            return op(place(x), dim)[0] if dim is not None else op(place(x))
    return fn


def _at(off):
    def place(x):
        buf = torch.zeros(x.numel() + 8, dtype=x.dtype)
        buf[off:off + x.numel()] = x
        return buf[off:off + x.numel()]
    return place


@pytest.mark.parametrize("n,off", [(130, 0), (131, 1), (133, 2), (200, 3)])
def test_fprev_vectorised_with_alignment_shift(n, off):
    x = _at(off)(torch.empty(n))
    assert cfg(x).vectorize_input
    want = aten_cuda.tree(cfg(x), shift=off % 4)
    if off == 2:                # through emulate once (the rest: the model the mode calls)
        assert reveal(_emulated(place=_at(off)), n) == want
    else:
        assert reveal(lambda v: aten_cuda.reduce(_at(off)(v)), n) == want


def test_fprev_not_vectorised_and_fp16_vectors_of_8():
    strided = lambda x: torch.stack([x, torch.zeros_like(x)], 1).reshape(-1)[::2]  # noqa: E731
    assert reveal(_emulated(place=strided), 90) == aten_cuda.tree(cfg(torch.empty(180)[::2]))
    x16 = torch.empty(160, dtype=torch.float16)
    assert cfg(x16).input_vec_size == 8
    got = reveal(lambda x: aten_cuda.reduce(x), 160, dtype=torch.float16)
    assert got == aten_cuda.tree(cfg(x16))


def test_fprev_outputs_along_lanes():
    """sum over dim 0 of a [n, 8] tensor (output vectors, warps and CTAs split the input)."""
    def place(x):
        return torch.stack([x] + [torch.zeros_like(x)] * 7, 1)
    n = 300
    c = cfg(torch.empty(n, 8), 0)
    assert not c.fastest and c.output_vec_size == 4 and c.warp_split
    assert reveal(lambda v: aten_cuda.reduce(place(v), 0)[0], n) == aten_cuda.tree(c)


@pytest.mark.slow
def test_fprev_wide_blocks_and_multi_cta_on_132_and_114_sms(monkeypatch):
    """A 512-wide block (one row of 2^13), and 120 rows of 2^17: 32x16 blocks over 5 CTAs
    on 132 SMs, 4 on 114; FPRev's random probes on the emulated op check the model's tree."""
    n = 1 << 13
    c = cfg(torch.empty(n))
    assert (c.block_width, c.ctas_per_output) == (512, 1)
    cross_check(VectorTarget(_emulated(place=_at(1)), n), aten_cuda.tree(c, shift=1), trials=24)
    n, rows = 1 << 17, 120
    monkeypatch.setenv("MMA_EMU_MAX_REVEAL_N", str(n))
    for name, ctas in (("H100", 5), ("H100 PCIe", 4)):
        c = cfg(torch.empty(rows, n), 1, gpu=registry.gpu(name))
        assert (c.block_width, c.block_height, c.ctas_per_output) == (32, 16, ctas)

        def fn(x, name=name):
            full = torch.zeros(rows, n)
            full[0] = x
            return aten_cuda.reduce(full, 1, gpu=name)[0]
        cross_check(VectorTarget(fn, n), aten_cuda.tree(c), trials=12)
    assert aten_cuda.tree(cfg(torch.empty(rows, n), 1, gpu=H100)) != \
        aten_cuda.tree(cfg(torch.empty(rows, n), 1, gpu=PCIE))


def test_fprev_mean():
    n = 256                     # factor 2^-8: mean = sum * 2^-8 exactly, FPRev sees the sum
    tr = reveal(lambda x: aten_cuda.reduce(x, op="mean") * 256, n)
    assert tr == aten_cuda.tree(cfg(torch.empty(n), op="mean"))


def test_mean_is_sum_times_rounded_reciprocal():
    x = torch.randn(3, 1000, generator=torch.Generator().manual_seed(1))
    s = aten_cuda.reduce(x, 1).numpy()
    m = aten_cuda.reduce(x, 1, op="mean").numpy()
    f = np.float32(np.float32(3) / np.float32(3000))
    assert np.array_equal(m.view(np.int32), (s * f).astype(np.float32).view(np.int32))


# ---- under emulate ---------------------------------------------------------------------------
def test_emulate_routes_records_and_names_the_version():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(64, 1000, generator=g) * torch.exp2(torch.randint(-20, 20, (64, 1000),
                                                                      generator=g).float())
    with tme.emulate("H100 PCIe") as em:
        s, m = x.sum(1), x.mean()
        i = torch.arange(10).sum()
    assert torch.equal(s, aten_cuda.reduce(x, 1, gpu="H100 PCIe"))
    assert torch.equal(m, aten_cuda.reduce(x, op="mean", gpu="H100 PCIe"))
    assert not torch.equal(s, x.sum(1))          # the CPU's order differs on these inputs
    assert int(i) == 45
    assert "aten.sum.dim_IntList" in em.summary() and "torch 2.13.0 CUDA kernel" in em.summary()
    assert em.counts[("aten.mean.default", "forward", "torch 2.13.0 CUDA kernel")] == 1


def test_gpu_choice_changes_the_bits():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1 << 23, generator=g) * torch.exp2(torch.randint(-30, 30, (1 << 23,),
                                                                     generator=g).float())
    a = aten_cuda.reduce(x, gpu="H100")
    b = aten_cuda.reduce(x, gpu="H100 PCIe")
    assert cfg(x).ctas_per_output == 528 and cfg(x, gpu=PCIE).ctas_per_output == 456
    assert not torch.equal(a, b)


def test_backward_and_amd_native(monkeypatch):
    x = torch.randn(50, 300, requires_grad=True)
    with tme.emulate("sm80") as em:
        y = x.mean(1).sum()
        y.backward()
    assert torch.equal(y.detach(), aten_cuda.reduce(aten_cuda.reduce(x.detach(), 1, op="mean",
                                                                     gpu="A100"), gpu="A100"))
    assert x.grad is not None and em.counts[("aten.sum.default", "forward",
                                             "torch 2.13.0 CUDA kernel")] == 1
    with tme.emulate("MI300X") as em:
        x.detach().sum()
    assert em.counts[("aten.sum.default", "forward", "CPU order")] == 1
    assert em.recorder.native_count == 0 and em.recorder.kernel_count == 1


def test_version_warning(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.12.0")
    with pytest.warns(UserWarning, match="torch 2.13.0"):
        with tme.emulate("sm90"):
            torch.ones(10).sum()
    monkeypatch.undo()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tme.emulate("sm90"):
            torch.ones(10).sum()


def test_bad_input():
    with pytest.raises(TypeError, match="float"):
        aten_cuda.reduce(torch.arange(5))
    with pytest.raises(ValueError, match="op must be"):
        aten_cuda.reduce(torch.ones(3), op="prod")
    with pytest.raises(ValueError, match="unknown arch"):
        registry.gpu("Z80")


# ---- the GPU step's CPU stand-in -------------------------------------------------------------
def test_gpu_step_compare(tmp_path):
    """scripts/gpu/reductions.py --compare: a record the model would give matches on the
    recorded SM count (132) and not when told the GPU has 114."""
    from torch_mma_emu.hw import reductions as hw
    from torch_mma_emu.hw.common import bits
    n = 1 << 23
    x = hw._spread(n, n)
    arrays = {f"head_all_n{n}": bits(x[:64]).numpy(), "device": np.array("NVIDIA H100 80GB HBM3"),
              "sms": np.array(132), "max_threads_per_sm": np.array(2048),
              f"allsum_n{n}": bits(aten_cuda.reduce(x, gpu="H100")).numpy(),
              f"allmean_n{n}": bits(aten_cuda.reduce(x, op="mean", gpu="H100")).numpy()}
    xo = hw._spread(hw.OFFSET_N + 8, 101)
    arrays["in_off_k1"] = bits(xo).numpy()
    arrays["offsum_k1"] = bits(aten_cuda.reduce(xo[1:1 + hw.OFFSET_N])).numpy()
    path = tmp_path / "r.npz"
    np.savez(path, **arrays)
    assert hw.main(["--compare", str(path)]) == 0
    rows = dict((k, b) for k, b, _ in hw.compare(str(path), "H100 PCIe"))
    assert rows[f"allsum_n{n}"] == rows[f"allmean_n{n}"] == 1 and rows["offsum_k1"] == 0
    assert hw.main(["--compare", str(tmp_path / "missing.npz")]) == 2


# ---- softmax / log_softmax: the persistent warp kernel ----------------------------------------
def _exp_rn(x):
    with np.errstate(over="ignore"):
        return np.exp(np.asarray(x, np.float64)).astype(np.float32)


def _log_rn(x):
    return np.log(np.asarray(x, np.float64)).astype(np.float32)


@pytest.mark.parametrize("n", [1, 5, 32, 33, 100, 1000, 2048])
def test_persistent_softmax_against_a_lane_loop(n):
    from torch_mma_emu.aten_cuda import softmax as sm
    g = torch.Generator().manual_seed(n)
    x = (torch.randn(3, n, generator=g) * 4).numpy()
    P = 1 << max(n - 1, 0).bit_length()
    W = min(P, 32)
    for r in range(3):
        row = x[r]
        mx = row.max()
        lanes = []
        for lane in range(W):
            s = np.float32(0)
            for it in range(P // W):
                i = lane + W * it
                if i < n:
                    s = np.float32(s + _exp_rn(np.float32(row[i] - mx)))
            lanes.append(s)
        while len(lanes) > 1:
            h = len(lanes) // 2
            lanes = [np.float32(lanes[i] + lanes[i + h]) for i in range(h)]
        want = (_exp_rn((row - mx).astype(np.float32)) / lanes[0]).astype(np.float32)
        got = sm.evaluate(x[r:r + 1], _exp_rn, _log_rn)[0]
        assert np.array_equal(got.view(np.int32), want.view(np.int32))
        wl = ((row - mx).astype(np.float32) - _log_rn(lanes[0])).astype(np.float32)
        gl = sm.evaluate(x[r:r + 1], _exp_rn, _log_rn, log_softmax=True)[0]
        assert np.array_equal(gl.view(np.int32), wl.view(np.int32))


def test_softmax_dispatch_rule_and_route():
    from torch_mma_emu.aten_cuda import softmax as sm
    assert sm.persistent(2048, torch.float32) and not sm.persistent(2049, torch.float32)
    assert sm.persistent(2048, torch.float16) and not sm.persistent(1025, torch.float64)
    x = torch.randn(4, 3000, dtype=torch.float64)
    with tme.emulate("sm90") as em:
        y = torch.softmax(x, -1)
    assert torch.equal(y, torch.softmax(x, -1))            # fp64: native, recorded
    assert em.counts[("aten._softmax.default", "forward", "CPU order")] == 1
    x = torch.randn(4, 100)
    with tme.emulate("sm90") as em:
        y = torch.log_softmax(x, -1)
    if sm.device_math() is None:
        assert em.counts[("aten._log_softmax.default", "forward", "CPU order")] == 1
    else:
        assert torch.equal(y, sm.softmax(x, log_softmax=True))
        assert em.counts[("aten._log_softmax.default", "forward",
                          "torch 2.13.0 CUDA kernel")] == 1


def test_fp32_vt0_8_switch(monkeypatch):
    """The unconfirmed <8, 8> instantiation for fp32 rows of a multiple of 1024: the model
    follows the fact table (FPRev agrees), and the order differs from <4, 4>."""
    from torch_mma_emu.aten_cuda import facts
    x = torch.empty(2048)
    t4 = aten_cuda.tree(cfg(x))
    monkeypatch.setattr(facts, "FP32_VT0_8_AT_1024", True)
    c = cfg(x)
    assert (c.vt0, c.input_vec_size) == (8, 8) and cfg(torch.empty(2000)).vt0 == 4
    assert aten_cuda.tree(c) != t4
    assert reveal(lambda v: aten_cuda.reduce(v), 2048, shortcuts=True) == aten_cuda.tree(c)
