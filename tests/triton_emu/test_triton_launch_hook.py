"""The launch hook's fixes for shipped libraries (issue 37): a grid function sees the
kernel's constexpr defaults, ``torch.cuda.device`` stays a class under ``device_queries``,
and four gaps of Triton's interpreter that FlagGems meets (a ``tl.dtype`` helper argument,
``and`` / ``or`` on block tensors, a non-tensor pointer argument, a libdevice function
imported by name); one launch record per launch; the target decisions in target_rules."""
import numpy as np
import pytest
import torch

pytest.importorskip("triton")
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import libdevice  # noqa: E402

import torch_mma_emu.triton as tmt  # noqa: E402
from torch_mma_emu.triton import target_rules  # noqa: E402
from torch_mma_emu.triton.record import Launch  # noqa: E402

erf = libdevice.erf          # imported by name, as FlagGems' tl_extra_shim does
BLOCKS = [tmt.interpret, lambda: tmt.emulate("H100"), lambda: tmt.emulate("MI300X")]


@triton.jit
def _double(x, N, BLOCK: tl.constexpr = 64):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + o, tl.load(x + o, mask=o < N) * 2, mask=o < N)


@pytest.mark.parametrize("block", BLOCKS)
def test_grid_function_sees_constexpr_defaults(block):
    x = torch.ones(200)
    with block():
        _double[lambda m: (triton.cdiv(200, m["BLOCK"]),)](x, 200)     # was KeyError 'BLOCK'
    assert torch.equal(x, torch.full((200,), 2.0))


def test_torch_cuda_device_stays_a_class():
    with tmt.device_queries("H100"):
        dev = torch.cuda.device
        assert isinstance(dev, type)            # torch's _get_device_index asks isinstance
        for d in (None, 0, -1, "cuda", "cuda:0", torch.device("cpu"), torch.device("cuda")):
            with torch.cuda.device(d):          # None / 0: the one emulated GPU; was TypeError
                pass
        assert isinstance(torch.cuda.device(None), dev)
        with pytest.raises((RuntimeError, AssertionError)):
            with torch.cuda.device(1):          # there is one GPU
                pass
    assert torch.cuda.device is dev.__mro__[1]   # restored


@triton.jit
def _min_of(dtype):
    d = dtype.value                      # compiled Triton passes a dtype as a constexpr
    if d.is_floating():
        return float("-inf")
    return -1


@triton.jit
def _fill_min(out):
    x = tl.load(out + tl.arange(0, 4))
    tl.store(out + tl.arange(0, 4), tl.full([4], _min_of(x.dtype), tl.float32))


@pytest.mark.parametrize("block", BLOCKS)
def test_dtype_argument_of_a_helper_is_a_constexpr(block):
    out = torch.zeros(4)
    with block() as em:
        _fill_min[(1,)](out)            # was AttributeError: 'dtype' has no attribute 'value'
    assert torch.isneginf(out).all()
    if em.emulating:
        assert "tl.dtype argument of a @jit helper" in em.summary()


@triton.jit
def _store_masked(out, M, N, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)[:, None]
    c = tl.arange(0, BLOCK)[None, :]
    mask = r < M and c < N               # compiled Triton: element-wise and
    tl.store(out + r * BLOCK + c, tl.full([BLOCK, BLOCK], 1.0, tl.float32), mask=mask)


@pytest.mark.parametrize("block", BLOCKS)
def test_and_of_block_tensors_is_element_wise(block):
    out = torch.zeros(8, 8)
    with block():
        _store_masked[(1,)](out, 3, 5, BLOCK=8)
    ref = torch.zeros(8, 8)
    ref[:3, :5] = 1
    assert torch.equal(out, ref)         # Python's `and` kept only c < N: rows 3-7 written


class _Buffer:
    """A pointer argument that is not a torch.Tensor (as FlagGems' StridedBuffer): a view
    ``offset`` elements into ``base``."""

    def __init__(self, base, offset):
        self.base, self.dtype, self.offset = base, base.dtype, offset

    def data_ptr(self):
        return self.base.data_ptr() + self.offset * self.base.element_size()

    def untyped_storage(self):
        return self.base.untyped_storage()


@triton.jit
def _erf_kernel(x, y, N, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.store(y + o, erf(tl.load(x + o, mask=o < N)), mask=o < N)


@pytest.mark.parametrize("block", BLOCKS[1:])     # the plain interpreter has no libdevice
def test_buffer_argument_and_libdevice_by_name(block):
    x = torch.linspace(-2, 2, 16)
    base = torch.zeros(20)
    with block() as em:
        _erf_kernel[(1,)](x, _Buffer(base, 4), 16, BLOCK=16)
    assert torch.equal(base[:4], torch.zeros(4))
    assert torch.allclose(base[4:].double(), torch.erf(x.double()), atol=1e-6)
    assert "not a torch.Tensor" in em.summary() and "by name" in em.summary()


@triton.jit
def _axpy(x, y, a, N, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    v = tl.load(x + o, mask=o < N) * a + tl.load(y + o, mask=o < N)
    tl.store(y + o, tl.exp(v), mask=o < N)
    tl.atomic_add(x + o, v, mask=o < N)


def test_one_record_per_launch_no_private_attributes():
    x, y = torch.rand(32), torch.rand(32)
    with tmt.emulate("H100") as em:
        _axpy[(1,)](x, y, 1.5, 32, BLOCK=32)
        _axpy[(2,)](x, y, 0.5, 32, BLOCK=32, num_warps=2)
    assert [type(r) for r in em.launches] == [Launch, Launch] and em.launch is None
    (name, grid, scalars), second = em.launches
    assert name == "_axpy" and grid == (1,) and second.num_warps == 2
    assert em.tallies.math and em.tallies.atomics and em.tallies.contract
    stuck = {"_launch_info", "_contract_counts", "_atomic_counts", "_math_counts", "_open",
             "_warned", "_num_warps"}
    assert not stuck & set(vars(em)), stuck & set(vars(em))


def test_target_decisions_by_registry_facts():
    assert target_rules.ptx_modelled("sm90") and not target_rules.ptx_modelled("gfx942")
    assert not target_rules.ptx_modelled(None)
    assert target_rules.reduction_target("sm80") == (("cuda", 80, 32), "")
    assert target_rules.reduction_target("gfx942")[0] == ("hip", "gfx942", 64)
    assert target_rules.reduction_target("gfx908")[0] is None      # no DPP path
    assert target_rules.device_capability("gfx90a") == (9, 0)
    assert target_rules.device_capability("sm89") == (8, 9)
    from torch_mma_emu.triton.gaps import CpuDriver
    assert CpuDriver(lambda: tmt.emulate("gfx90a")).get_device_capability() == (9, 0)
    with tmt.device_queries("gfx90a") as p:                          # ROCm torch's answer
        assert torch.cuda.get_device_capability() == (9, 0) and p.warp_size == 64
    assert np.array_equal(target_rules.device_capability("H100"), (9, 0))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU answers for itself")
def test_device_questions_inside_an_emulate_block():
    with tmt.emulate("MI300X"):             # fla asks at import: driver "cuda", then torch
        assert torch.cuda.get_device_capability() == (9, 4)
        assert torch.cuda.get_device_properties(0).gcnArchName == "gfx942"
        assert torch.cuda.device_count() == 1 and torch.cuda.current_device() == 0
        with torch.cuda.device(None):       # mamba: torch.cuda.device(x.device.index)
            pass
        assert not torch.cuda.is_available()         # tensors stay CPU tensors
    for outside in (tmt.interpret(), ):               # no target: torch's own answer
        with outside, pytest.raises((AssertionError, RuntimeError)):
            torch.cuda.get_device_capability()
    with pytest.raises((AssertionError, RuntimeError)):
        torch.cuda.get_device_capability()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU answers for itself")
def test_device_queries_available_answers_is_available_coherently():
    from torch.utils._triton import has_triton
    with tmt.device_queries("H100", available=True):
        assert torch.cuda.is_available() and has_triton()      # torchao, Liger ask these
        assert torch.zeros(2, device="cuda").device.type == "cpu"
        with tmt.emulate("H100") as em:       # Triton's CUDA driver cannot start: CPU driver
            _double[(4,)](torch.ones(200), 200)
        assert em.launches[0].grid == (4,)
    assert not torch.cuda.is_available() and not has_triton()


@triton.jit
def _is_float(dtype):
    return dtype.is_floating()          # compiled Triton unwraps a constexpr's attributes


@triton.jit
def _fill_is_float(out):
    x = tl.load(out + tl.arange(0, 4))
    tl.store(out + tl.arange(0, 4), x + _is_float(x.dtype))


@pytest.mark.parametrize("block", BLOCKS)
def test_dtype_constexpr_keeps_the_dtypes_methods(block):
    out = torch.zeros(4)
    with block():
        _fill_is_float[(1,)](out)
    assert torch.equal(out, torch.ones(4))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the stand-in driver is for a machine "
                    "without a GPU")
def test_thread_started_before_the_block_gets_a_clear_error():
    import threading
    x, go, seen = torch.ones(100), threading.Event(), {}

    def body():
        go.wait()
        try:
            _double[(2,)](x, 100)
        except Exception as e:              # noqa: BLE001 - the test reads it
            seen["err"] = e
    t = threading.Thread(target=body)
    t.start()
    with tmt.emulate("H100"):
        go.set()
        t.join()
    # was: AttributeError 'CpuDriver' object has no attribute 'launcher_cls'
    assert isinstance(seen.get("err"), RuntimeError), seen
    assert "no emulate/interpret block open" in str(seen["err"])
    assert torch.equal(x, torch.ones(100))          # nothing ran
