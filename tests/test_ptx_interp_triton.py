"""The PTX interpreter (torch_mma_emu.ptx) on a Triton kernel with a loop, masks and a
cross-warp reduction, compiled here for sm_90 PTX: its bits equal the project's Triton
emulation of the same launch (``emulate``), an independent model of the reduction order."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = triton.language

from torch_mma_emu import ptx  # noqa: E402
from torch_mma_emu.triton import emulate  # noqa: E402
from torch_mma_emu.triton.layout import compile_launch, target_of  # noqa: E402


@triton.jit
def _rowsum(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


@pytest.mark.parametrize("n_cols,block,warps", [(300, 128, 4), (1000, 256, 2)])
def test_triton_loop_masks_reduction_equals_emulation(n_cols, block, warps):
    rows = 3
    g = torch.Generator().manual_seed(n_cols)
    x = torch.randn(rows, n_cols, generator=g) * torch.exp2(
        torch.randint(-12, 12, (rows, n_cols), generator=g).float())
    comp = compile_launch(_rowsum.fn, (x, torch.zeros(rows), n_cols),
                          {"BLOCK": block, "num_warps": warps}, target_of("H100"), ptx=True)
    mod = ptx.Module(comp.ptx)
    (name, kern), = mod.kernels.items()
    xn, yn = x.numpy().copy(), np.zeros(rows, np.float32)
    given = [xn, yn, np.int32(n_cols)]
    args = given + [np.zeros(16, np.uint8)] * (len(kern.params) - len(given))  # scratch
    st = mod.launch(name, rows, 32 * warps, args, dynamic_smem=16384)
    ye = torch.zeros(rows)
    with emulate("H100"):
        _rowsum[(rows,)](x, ye, n_cols, BLOCK=block, num_warps=warps)
    assert np.array_equal(ye.numpy().view(np.uint32), yn.view(np.uint32))
    assert st.ctas == rows
