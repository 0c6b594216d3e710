"""``tmt.device_queries``: torch.cuda's device queries answer for the emulated GPU while the
block is open (third-party Triton libraries ask at import and launch), and are restored."""
import pytest
import torch

from torch_mma_emu.triton import device_queries


def test_device_queries_answer_for_the_arch_and_restore():
    before = torch.cuda.get_device_capability
    with device_queries("H100") as p:
        assert torch.cuda.get_device_capability() == (9, 0)
        assert torch.cuda.get_device_name() == "NVIDIA H100" == p.name
        assert torch.cuda.get_device_properties(0).multi_processor_count == 132
        with torch.cuda.device(torch.device("cpu")):
            pass
        assert not torch.cuda.is_available()          # tensors stay on the CPU
    with device_queries("gfx942") as p:
        assert p.gcnArchName == "gfx942" and p.warp_size == 64
    assert torch.cuda.get_device_capability is before
    with pytest.raises(ValueError):
        with device_queries("no-such-gpu"):
            pass
