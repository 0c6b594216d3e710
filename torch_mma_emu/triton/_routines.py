"""The one-element kernel whose PTX holds the libdevice routine a ``tl`` function becomes
(target_math.py cuts the routine out and runs it with gpu_math.ptx_run).  Imported only
when a block first needs a routine: importing the package does not import Triton."""
import triton
import triton.language as tl


@triton.jit
def one_op(X, OUT, OP: tl.constexpr):
    o = tl.arange(0, 32)
    x = tl.load(X + o)
    if OP == "create_log":
        r = tl.log(x)
    elif OP == "create_log2":
        r = tl.log2(x)
    elif OP == "create_sin":
        r = tl.sin(x)
    elif OP == "create_cos":
        r = tl.cos(x)
    else:
        r = tl.erf(x)
    tl.store(OUT + o, r)
