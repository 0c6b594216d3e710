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


def test_cuda_on_cpu_allocates_on_the_cpu_scoped_and_per_thread():
    import threading
    from torch_mma_emu.triton import cuda_on_cpu
    a = torch.ones(2)
    with cuda_on_cpu():
        made = [torch.full((1,), 2.0, device="cuda:0"), torch.zeros(3, device=torch.device("cuda")),
                torch.tensor([1], device="cuda"), torch.empty(2, device=0),
                a.to("cuda", torch.float16), a.to(device="cuda:0"), a.new_zeros(2, device="cuda"),
                torch.arange(3, device="cuda")]
        assert a.cuda() is a
        assert all(t.device.type == "cpu" for t in made)
        assert made[4].dtype == torch.float16 and made[0].item() == 2.0
        assert a.to(torch.float64).dtype == torch.float64    # dtypes and ints pass through
        assert not torch.cuda.is_available()
        other = []                                  # torch's mode stack is per thread

        def elsewhere():
            try:
                torch.zeros(1, device="cuda")
                other.append("allocated")
            except (AssertionError, RuntimeError) as e:
                other.append(type(e).__name__)
        t = threading.Thread(target=elsewhere)
        t.start()
        t.join()
        assert other and other[0] != "allocated"
    with pytest.raises((AssertionError, RuntimeError)):   # restored: CPU-only torch refuses
        torch.zeros(1, device="cuda")
    with pytest.raises(KeyError):
        with cuda_on_cpu():
            raise KeyError("x")
    with pytest.raises((AssertionError, RuntimeError)):   # popped after an exception too
        torch.zeros(1, device="cuda")
