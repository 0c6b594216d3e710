"""MIG slices as named GPUs (issue 39): a GPU instance is a CUDA device of its own SM count,
so PyTorch's reduction kernels split a sum over fewer CTAs on it."""
import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import aten_cuda, registry


def test_slices_have_the_profiles_sm_counts():
    assert registry.gpu("A100 MIG 3g.20gb").sms == 42
    assert registry.gpu("A100 MIG 7g.80gb").sms == 98
    assert registry.gpu("A30 MIG 1g.6gb").sms == 14
    assert [registry.gpu(f"H100 MIG {p}").sms for p in
            ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")] == \
        [16, 26, 32, 60, 64, 132]
    assert registry.gpu("H200 MIG 3g.71gb").sms == 60
    assert registry.gpu("h100 mig 1g.10gb+me") is registry.gpu("H100 MIG 1g.10gb")
    assert registry.canonical_arch("H100 MIG 3g.40gb") == "sm90"
    assert registry.canonical_arch("A100 MIG 1g.5gb") == "sm80"
    with pytest.raises(ValueError):
        registry.gpu("H100 MIG 5g.50gb")


def test_a_slice_changes_the_sums_cta_split_and_bits():
    x = torch.empty(1 << 24)
    grids = {g: aten_cuda.config_for(x, None, "sum", registry.gpu(g)).grid[1]
             for g in ("H100", "H100 MIG 3g.40gb", "H100 MIG 1g.10gb")}
    assert grids == {"H100": 528, "H100 MIG 3g.40gb": 240, "H100 MIG 1g.10gb": 128}
    g = torch.Generator().manual_seed(0)
    y = torch.randn(1 << 21, generator=g) * torch.exp2(torch.randint(-20, 20, (1 << 21,),
                                                                     generator=g).float())
    with tme.emulate("H100 MIG 1g.10gb", record=True) as em:
        a = y.sum()
    assert "16 SMs" in em.records[-1].note
    assert torch.equal(a, aten_cuda.reduce(y, gpu="H100 MIG 1g.10gb"))
    assert not torch.equal(a, aten_cuda.reduce(y, gpu="H100"))
