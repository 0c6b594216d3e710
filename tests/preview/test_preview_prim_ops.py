"""TorchScript's ``prim::`` ops (``prim::device``: what a FakeTensor's ``.device`` dispatches)
are not in the dispatcher's table, where PyTorch's kernel lookups raise ("operator
prim::device does not exist").  The mode's lookups must answer "no kernel" for them: a mode
*below* ``emulate`` that asks ``_decomposes`` sees ``prim.device`` during emulate's fake-tensor
stride query, and a raise there, inside C++, terminated the process."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import torch

import torch_mma_emu as tme
from torch_mma_emu.preview import custom_ops
from torch_mma_emu.preview.mode import _decomposes

PRIM_DEVICE = torch.ops.prim.device.default


def test_lookups_answer_no_kernel_for_prim_ops():
    assert _decomposes(PRIM_DEVICE) is False
    assert custom_ops.has_kernel(PRIM_DEVICE, "CPU") is False
    assert custom_ops.kernel_is_python(PRIM_DEVICE, (torch.zeros(1),), {}) is None
    assert not custom_ops.is_opaque_and_unknown(PRIM_DEVICE)      # multiplies nothing
    # the lookups still see real kernels
    assert _decomposes(torch.ops.aten.linear.default)
    assert custom_ops.has_kernel(torch.ops.aten.mm.default, "CPU")


def test_prim_device_through_the_mode_is_silent():
    x = torch.randn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tme.emulate("sm90", record=True) as em:
            assert PRIM_DEVICE(x) == torch.device("cpu")
    assert em.records == []


_BELOW = textwrap.dedent("""
    import torch, torch_mma_emu as tme
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch_mma_emu.preview.mode import _decomposes

    class Below(TorchDispatchMode):     # asks the mode's lookup for every op it sees
        seen = set()
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.add(str(func))
            _decomposes(func)
            return func(*args, **(kwargs or {}))

    w = torch.randn(8, 8, requires_grad=True)
    x = torch.randn(1, 4, 2, 8)
    with Below() as below, tme.emulate("sm90"):
        q = (x @ w).transpose(1, 2)            # a strided view that requires grad
        torch.nn.functional.scaled_dot_product_attention(q, q, q,
                                                         attn_mask=torch.zeros(1, 1, 4, 4))
    print("SEEN", "prim.device.default" in below.seen)
""")


def test_a_mode_below_emulate_meets_prim_device_without_dying():
    """The process used to die here (``terminate called after throwing ...``)."""
    r = subprocess.run([sys.executable, "-c", _BELOW], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "SEEN True" in r.stdout, (r.stdout, r.stderr[-2000:])
