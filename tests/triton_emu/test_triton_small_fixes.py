"""Small fixes of issue 37 item 6: integer scans through a user combine (FlagGems ``sort``'s
``tl.cumsum`` of uint32: the warp prefix is one value, the lanes a row), the math summary
naming its own target, and source files read and closed."""
import gc
import warnings

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import torch_mma_emu.triton as tmt  # noqa: E402
from torch_mma_emu.triton import ptx_check  # noqa: E402


@triton.jit
def int_cumsum(x_ptr, o_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(o_ptr + offs, tl.cumsum(tl.load(x_ptr + offs), axis=0))


@triton.jit
def exp_kernel(x_ptr, o_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(o_ptr + offs, tl.exp(tl.load(x_ptr + offs)))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_cumsum_runs_in_the_compiled_order(dtype):
    x = torch.randint(-1000, 1000, (2048,), generator=torch.Generator().manual_seed(0),
                      dtype=dtype)
    o = torch.empty(2048, dtype=dtype)
    with tmt.emulate("H100") as em:
        int_cumsum[(1,)](x, o, N=2048)
    assert torch.equal(o, torch.cumsum(x, 0))
    assert "NumPy's order" not in em.summary(), em.summary()
    assert "tl.associative_scan" in em.summary()


def test_integer_cumsum_matches_ptx():
    x = torch.randint(0, 2, (1024,), generator=torch.Generator().manual_seed(1),
                      dtype=torch.int32)
    assert ptx_check.check(int_cumsum, (x, torch.empty(1024, dtype=torch.int32)),
                           {"N": 1024})["equal"]


@pytest.mark.parametrize("arch,head", [("MI300X", "math on gfx942 (its compiled math is "
                                                  "not modelled)"),
                                       ("H100", "math on sm90 (Triton 3.6's sm_90 PTX")])
def test_math_summary_names_its_target(arch, head):
    with tmt.emulate(arch) as em:
        exp_kernel[(1,)](torch.randn(16), torch.empty(16), N=16)
    assert head in em.summary()
    if arch == "MI300X":
        assert "sm_90" not in em.summary()


def test_kernel_sources_are_read_and_closed():
    from torch_mma_emu.triton import libdevice_calls, target_math

    def user_kernel():           # any function with a source file
        return 0
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for mod in (target_math, libdevice_calls):
            mod._PREPARED.discard(user_kernel)
            mod.prepare(user_kernel)
        gc.collect()
    assert not [w for w in seen if issubclass(w.category, ResourceWarning)]
