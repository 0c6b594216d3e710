"""ATen's own CUDA kernels (torch 2.13's headers compiled by nvcc 13.0 to sm_90 PTX:
tests/data/aten_kernels/, scripts/regen_aten_kernel_ptx.py) run in the PTX interpreter and
compared bit for bit with the NumPy models of torch_mma_emu.aten_cuda (issue 43 item 2);
and the interpreter features those kernels need (device asserts, ``WARP_SZ``)."""
from __future__ import annotations

import numpy as np
import pytest

from torch_mma_emu import ptx

_ASSERT_PTX = """
.version 8.0
.target sm_90
.address_size 64
.extern .func __assertfail
(
        .param .b64 __assertfail_param_0,
        .param .b64 __assertfail_param_1
)
;
.visible .entry guarded(
        .param .u64 guarded_param_0,
        .param .u32 guarded_param_1
)
{
        .reg .pred      %p<2>;
        .reg .b32       %r<5>;
        .reg .b64       %rd<4>;

        ld.param.u64    %rd1, [guarded_param_0];
        ld.param.u32    %r1, [guarded_param_1];
        mov.u32         %r2, %tid.x;
        setp.ge.u32     %p1, %r2, %r1;
        @%p1 bra        $L__fail;
        mov.u32         %r3, WARP_SZ;
        mad.lo.s32      %r4, %r3, 1000, %r2;
        cvta.to.global.u64      %rd2, %rd1;
        mul.wide.u32    %rd3, %r2, 4;
        add.s64         %rd2, %rd2, %rd3;
        st.global.u32   [%rd2], %r4;
        ret;
$L__fail:
        { // callseq 0, 0
        .param .b64 param0;
        st.param.b64    [param0+0], %rd1;
        .param .b64 param1;
        st.param.b64    [param1+0], 7;
        call.uni
        __assertfail,
        (
        param0,
        param1
        );
        } // callseq 0
        ret;
}
"""


def test_call_sequence_parses_and_assert_fires_naming_the_thread():
    mod = ptx.Module(_ASSERT_PTX)
    out = np.zeros(8, np.uint32)
    mod.launch("guarded", 1, 8, [out, np.uint32(8)])     # no thread reaches the call
    assert out.tolist() == [32000 + t for t in range(8)]  # WARP_SZ is 32
    with pytest.raises(ptx.PTXError, match=r"guarded: device assertion failed "
                       r"\(__assertfail called\) in thread tid \(5, 0, 0\)"):
        mod.launch("guarded", 1, 8, [out, np.uint32(5)])
