"""gemlite's weight-only quantized GEMMs (A16W8: int8 per-channel, A16W4: 4-bit grouped with
zeros, packed by gemlite) as shipped, under emulate on sm_90, sm_80 and gfx942
(tests/triton_emu/triton_zoo.py),
against float64 references of the same math (the dequantized weight times the activations).

gemlite allocates on ``device="cuda"`` at import and in its packing and launch code, and asks
the device's capability: it runs inside ``tmt.device_queries(arch)`` and ``tmt.cuda_on_cpu()``
(CUDA allocations made on the CPU)."""
import contextlib

import pytest
import torch

from triton_zoo import check_dots, close, need, run_zoo

import torch_mma_emu.triton as tmt  # noqa: E402

# gemlite is imported once, under sm_90's queries: it fixes IS_HIP (its AMD configs and
# kernel variants) at import, so gfx942 runs its NVIDIA choices with AMD's dots
KEYS = {"sm90": "H100", "sm80": "A100", "gfx942": "MI300X"}


@contextlib.contextmanager
def _on(key):
    with tmt.device_queries(KEYS[key]), tmt.cuda_on_cpu():
        yield


@pytest.fixture(scope="module")
def helper():
    with _on("sm90"):
        need("gemlite")
        from gemlite import helper
    return helper


def _g(seed):
    return torch.Generator().manual_seed(seed)


def _int8(N, K):
    w_q = torch.randint(-127, 128, (N, K), generator=_g(1), dtype=torch.int8)
    s = (torch.rand(N, 1, generator=_g(2)) * 0.02 + 0.001).half()
    return w_q, s, w_q.double() * s.double()


def _int4(N, K, g):
    w_q = torch.randint(0, 16, (N, K), generator=_g(3), dtype=torch.uint8)
    s = (torch.rand(N, K // g, generator=_g(4)) * 0.05 + 0.01).half()
    z = torch.randint(0, 16, (N, K // g), generator=_g(5)).half()
    w = (w_q.double().view(N, K // g, g) - z.double()[..., None]) * s.double()[..., None]
    return w_q, s, z, w.view(N, K)


def _run(key, layer_fn, M, K, w):
    x = (torch.randn(M, K, generator=_g(6)) * 0.5).half()
    with _on(key):
        layer = layer_fn()
        y, em, launches = run_zoo(key, lambda: layer(x))
    assert y.shape == (M, w.shape[0]) and y.dtype == torch.float16
    ref = x.double() @ w.t()
    close(y, ref, 1e-2, 1e-2 * ref.abs().max().item())
    check_dots(key, em)
    # gemlite's dispatch: split-K GEMM below 64 rows, the plain GEMM from 64 (core.py)
    assert set(launches) == {"gemm_splitK_INT_kernel" if M < 64 else "gemm_INT_kernel"}
    return layer


@pytest.mark.parametrize("M", [16, 64])
@pytest.mark.parametrize("key", list(KEYS))
def test_a16w8_int8_channelwise(helper, key, M):
    N, K = 64, 512
    w_q, s, w = _int8(N, K)
    layer = _run(key, lambda: helper.A16W8(device="cuda:0").from_weights(w_q, scales=s),
                 M, K, w)
    assert layer.W_q.dtype == torch.int8 and layer.W_q.device.type == "cpu"


@pytest.mark.parametrize("M", [16, 64])
@pytest.mark.parametrize("key", list(KEYS))
def test_a16w4_grouped_packed(helper, key, M):
    N, K, g = 64, 512, 64
    w_q, s, z, w = _int4(N, K, g)
    layer = _run(key, lambda: helper.A16W4_HQQ_INT(device="cuda:0").from_weights(w_q, s, z),
                 M, K, w)
    assert layer.elements_per_sample > 1             # gemlite packed the 4-bit values
    assert layer.W_q.numel() * layer.elements_per_sample == N * K
