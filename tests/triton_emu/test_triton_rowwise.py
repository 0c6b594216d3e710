"""triton_kernels/rowwise.py, the GPU step's kernels around the dots: they compute what
they say (against torch, within rounding), on aligned and unaligned rows, and refuse bad
input with a message."""
import pytest
import torch

triton = pytest.importorskip("triton")
import torch_mma_emu.triton as tmt  # noqa: E402
from torch_mma_emu import triton_kernels as K  # noqa: E402


def _x(dt, rows=3, n=300, unaligned=False):
    g = torch.Generator().manual_seed(1)
    buf = torch.randn(rows, n + 1, generator=g).to(dt)
    return buf[:, 1:] if unaligned else buf[:, :n].contiguous()


@pytest.mark.parametrize("dt", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("unaligned", [False, True])
def test_rowwise_kernels_compute_what_they_say(dt, unaligned):
    x = _x(dt, unaligned=unaligned)
    assert (x.data_ptr() % 16 != 0) == unaligned
    xf = x.float()
    with tmt.interpret():
        s, sm, ln = K.row_sum(x), K.softmax(x), K.layer_norm(x)
    torch.testing.assert_close(s, xf.sum(1) * 0.1 + 1.0, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sm, torch.softmax(xf, 1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ln, torch.nn.functional.layer_norm(xf, (x.shape[1],)),
                               rtol=1e-4, atol=1e-4)


def test_exp2_div_and_bad_input():
    x = torch.linspace(-20, 20, 777)
    d = torch.linspace(0.5, 3, 777)
    with tmt.interpret():
        y = K.exp2_div(x, d)
        torch.testing.assert_close(y, torch.exp2(x) / d, rtol=1e-6, atol=0)
        with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
            K.row_sum(torch.zeros(2, 4, dtype=torch.int32))
        with pytest.raises(ValueError, match="2-D with contiguous rows"):
            K.softmax(torch.zeros(4, 2).t())
        with pytest.raises(TypeError, match="one shape"):
            K.exp2_div(x, d[:5])
