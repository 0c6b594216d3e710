"""FlagGems' Triton operators as shipped (``mm``, ``bmm``, ``addmm``, ``softmax``,
``layer_norm``) under emulate on sm_90, sm_80 and gfx942 (tests/triton_emu/triton_zoo.py), against
float64 references.  FlagGems asks the device at import and launch (vendor detection,
``torch.cuda.get_device_name`` in ``LibEntry``) and times configs on the GPU driver
(``LibTuner``): ``tmt.device_queries`` and the zoo gaps (zoo_gaps.py) let it run; its tuning
database goes to a temporary directory (``FLAGGEMS_CACHE_DIR``), never the user's."""
import os
import tempfile

import pytest
import torch
import torch.nn.functional as F

from triton_zoo import ARCHS, check_dots, close, run_zoo

from torch_mma_emu.triton import device_queries

os.environ.setdefault("GEMS_VENDOR", "nvidia")             # no vendor probing subprocesses
os.environ.setdefault("FLAGGEMS_CACHE_DIR", tempfile.mkdtemp(prefix="flaggems-"))
try:
    with device_queries("H100"):
        import flag_gems  # noqa: F401
        from flag_gems import ops
except Exception as e:        # noqa: BLE001 - not installed, or fails on this machine
    pytest.skip(f"flag_gems not importable here (pip install flag-gems torch==<yours> --no-deps): "
                f"{type(e).__name__}: {e}", allow_module_level=True)

H = torch.float16


def _run(key, fn):
    with device_queries(ARCHS[key]):
        return run_zoo(key, fn)


def _randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(H)


@pytest.mark.parametrize("key", list(ARCHS))
def test_mm_bmm_addmm(key):
    a, b = _randn(48, 64, seed=1), _randn(64, 40, seed=2)
    A, B = _randn(3, 32, 64, seed=3), _randn(3, 64, 24, seed=4)
    bias = _randn(40, seed=5)
    (c, C, d), em, launches = _run(key, lambda: (ops.mm(a, b), ops.bmm(A, B),
                                                 ops.addmm(bias, a, b, beta=0.5, alpha=2.0)))
    close(c, a.double() @ b.double(), 2e-3, 2e-3)           # fp16 out: 2^-11 relative
    close(C, A.double() @ B.double(), 2e-3, 2e-3)
    close(d, 0.5 * bias.double() + 2.0 * (a.double() @ b.double()), 2e-3, 4e-3)
    check_dots(key, em)
    assert len(launches) >= 3


@pytest.mark.parametrize("key", list(ARCHS))
def test_softmax_layer_norm(key):
    x = _randn(6, 200, seed=6)
    w, bb = _randn(200, seed=7), _randn(200, seed=8)
    (s, ln), em, launches = _run(key, lambda: (
        ops.softmax(x, -1), ops.layer_norm(x, [200], w, bb, 1e-5)[0]))
    xd = x.double().requires_grad_()
    close(s, torch.softmax(xd, -1), 2e-3, 1e-5)
    close(ln, F.layer_norm(xd, [200], w.double(), bb.double(), 1e-5), 4e-3, 4e-3)
    assert not em.counts and "tl.reduce" in em.summary()    # no dot ran; reductions listed
    assert set(launches) >= {"softmax_kernel_inner", "layer_norm_persistent_kernel"}

