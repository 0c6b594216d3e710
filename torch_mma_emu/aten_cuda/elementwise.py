"""PyTorch's CUDA elementwise math, bit for bit: exp, log, tanh, erf, rsqrt, sigmoid, SiLU,
GELU (erf form and tanh form) of torch 2.13's CUDA 13.0 build, in float32, float16 and
bfloat16, vectorised in NumPy.

What the kernels compute (read from the PTX that nvcc 13.0 makes of each ATen lambda with
PyTorch's device flags, no fast-math, no flush-to-zero, contraction on;
tests/data/aten_math/, scripts/regen_aten_math_ptx.py): float16 / bfloat16 inputs are
widened to float32 exactly, the whole expression runs in float32 and is rounded once when
stored.  CUDA's ``expf`` is a Cody-Waite split (an ``fma.rm`` rounding trick for the
integer part j, two FMAs for the reduced argument) into ``ex2.approx.ftz`` times 2^j, and
a caller that adds 1 fuses that product into an FMA (sigmoid, SiLU: the same bits unless
the product is subnormal, 2^j being a power of two); ``logf`` an
FMA polynomial; ``tanhf`` for |x| >= 0.6 ``1 - 2 rcp.approx.ftz(ex2(2 log2(e)|x|) + 1)``,
else an odd polynomial; ``erff`` two polynomials (|x| < 1.00295 and above, then
``1 - ex2``); ``rsqrtf`` is ``rsqrt.approx.f32``.  The instructions are the models in
:mod:`torch_mma_emu.gpu_math` (MUFU.EX2 / RCP / RSQ, IEEE FMA and adds).

Each function takes and returns float32 NumPy arrays (the value before the store);
:func:`evaluate` applies an op to an array of any of the three dtypes and rounds.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from .. import gpu_math
from ..gpu_math import fast, ieee

from .facts import CUDA_VERSION, TORCH_VERSION   # the ATen sources; the CUDA math library (nvcc)
MODELS = f"torch {TORCH_VERSION} CUDA {CUDA_VERSION}"

_EX2 = gpu_math.FUNCTIONS["ex2.approx.ftz.f32"].fn
_RCP_FTZ = gpu_math.FUNCTIONS["rcp.approx.ftz.f32"].fn
_RSQRT = gpu_math.FUNCTIONS["rsqrt.approx.f32"].fn
_F = np.float32


def _c(bits: int) -> np.float32:
    return np.array([bits], np.uint32).view(np.float32)[0]


def _u(x) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def _fu(b) -> np.ndarray:
    return np.ascontiguousarray(b, dtype=np.uint32).view(np.float32)


ONE, HALF = _F(1), _F(0.5)


# -- expf ------------------------------------------------------------------------------
def _expf_parts(x):
    """CUDA's expf up to its last product: (ex2 of the reduced argument, 2^j)."""
    t = ieee.fma(x, _c(0x3BBB989D), HALF)                    # x log2(e) / 256 + 1/2
    t = np.clip(np.nan_to_num(t, nan=0.0), 0, 1).astype(np.float32)   # cvt.sat: NaN -> 0
    j = ieee.fma_directed(t, _c(0x437C0000), _c(0x4B400001), "rm")   # 2^23 + 1 + j + 126
    r = ieee.fma(x, _c(0x3FB8AA3B), -ieee.add(j, _c(0xCB40007F)))  # x log2(e) - j, hi
    r = ieee.fma(x, _c(0x32A57060), r)                       # ... lo part
    scale = _fu(_u(j) << np.uint32(23))
    return _EX2(r), scale


def exp(x):
    e, s = _expf_parts(x)
    return ieee.mul(e, s)


def _one_plus_exp_neg(x):
    """1 + expf(-x) as the kernels compute it: the last product fused into an FMA."""
    e, s = _expf_parts(-np.asarray(x, np.float32))
    return ieee.fma(e, s, ONE)


def sigmoid(x):
    """``1 / (1 + exp(-x))`` (UnarySpecialOpsKernel.cu), a correctly rounded division."""
    return ieee.div(ONE, _one_plus_exp_neg(x))


def silu(x):
    """``x / (1 + exp(-x))`` (ActivationSiluKernel.cu), a correctly rounded division."""
    return ieee.div(x, _one_plus_exp_neg(x))


# -- logf ------------------------------------------------------------------------------
_LOG_POLY = [0xBE055027, 0x3E1039F6, 0xBDF8CDCC, 0x3E0F2955, 0xBE2AD8B9, 0x3E4CED0B,
             0xBE7FFF22, 0x3EAAAA78, 0xBF000000]


def log(x):
    """CUDA's logf: m in [0.666, 1.333) by integer arithmetic on the bits, an FMA polynomial
    in m - 1, plus e ln 2; subnormals scaled by 2^23 first; x >= +Inf or NaN: x*Inf + Inf;
    0: -Inf; negative: the polynomial's NaN."""
    x = np.asarray(x, np.float32)
    small = x < _c(0x00800000)
    x1 = np.where(small, ieee.mul(x, _c(0x4B000000)), x)
    e0 = np.where(small, _c(0xC1B80000), _F(0))              # -23
    b = _u(x1)
    k = ((b.astype(np.int64) - 1059760811) & 0xFF800000).astype(np.int64)
    m = _fu(((b.astype(np.int64) - k) & 0xFFFFFFFF).astype(np.uint32))
    ks = np.where(k >= 2 ** 31, k - 2 ** 32, k).astype(np.float64).astype(np.float32)
    e = ieee.fma(ks, _c(0x34000000), e0)                     # exponent (k / 2^23)
    f = ieee.add(m, _F(-1))
    p = ieee.fma(_c(_LOG_POLY[0]), f, _c(_LOG_POLY[1]))
    for c in _LOG_POLY[2:]:
        p = ieee.fma(p, f, _c(c))
    q = ieee.fma(ieee.mul(f, p), f, f)
    r = ieee.fma(e, _c(0x3F317218), q)
    inf = _c(0x7F800000)
    r = np.where(b >= 0x7F800000, ieee.fma(x1, inf, inf), r)   # unsigned: NaN, Inf, x < 0
    return np.where(x1 == 0, -inf, r).astype(np.float32)


# -- tanhf -----------------------------------------------------------------------------
def _copysign(sign_of, mag):
    return _fu((_u(mag) & np.uint32(0x7FFFFFFF)) | (_u(sign_of) & np.uint32(0x80000000)))


def tanh(x):
    """CUDA's tanhf: |x| >= 0.6: ``1 - 2 rcp.approx.ftz(ex2(2 log2(e) |x|) + 1)`` (1 from
    |x| >= 9.01), the sign copied; below, ``x + x^3 p(x^2)``."""
    x = np.asarray(x, np.float32)
    a = np.abs(x)
    t = ieee.add(_EX2(ieee.mul(a, _c(0x4038AA3B))), ONE)
    big = ieee.fma(_RCP_FTZ(t), _F(-2), ONE)
    big = _copysign(x, np.where(a >= _c(0x41102CB4), ONE, big))
    x2 = ieee.mul(x, x)
    p = ieee.fma(_c(0x3C80F082), x2, _c(0xBD563CAE))
    for c in (0x3E085941, 0xBEAAA9ED, 0x00000000):
        p = ieee.fma(p, x2, _c(c))
    small = ieee.fma(p, x, x)
    return np.where(a >= _c(0x3F19999A), big, small).astype(np.float32)


# -- erff ------------------------------------------------------------------------------
_ERF_BIG = [0x38EB4C3A, 0xBAAE005B, 0x3C09919F, 0xBD24D99A, 0x3E235519, 0x3F69B4F9,
            0x3F210A14]
_ERF_SMALL = [0x38B1E96A, 0xBA574D20, 0x3BAAD5EA, 0xBCDC1BE7, 0x3DE718AF, 0xBEC093AC,
              0x3E0375D3]


def erf(x):
    """CUDA 13.0's erff: |x| < 1.00295: ``x + x p(x^2)``; above: ``1 - ex2(-|x| - |x|
    q(|x|))`` with x's sign.  (Not libdevice's ``__nv_erff`` of Triton 3.6: other
    coefficients.)"""
    x = np.asarray(x, np.float32)
    a = np.abs(x)
    with np.errstate(invalid="ignore"):
        big = a >= _c(0x3F8060FE)
    t = np.where(big, a, ieee.mul(x, x))
    cb, cs = _ERF_BIG, _ERF_SMALL
    p = ieee.fma(np.where(big, _c(cb[0]), _c(cs[0])), t, np.where(big, _c(cb[1]), _c(cs[1])))
    for i in range(2, 7):
        p = ieee.fma(p, t, np.where(big, _c(cb[i]), _c(cs[i])))
    y = np.where(big, -a, x).astype(np.float32)
    r = ieee.fma(p, y, y)
    r_big = _copysign(x, ieee.sub(ONE, _EX2(r)))
    return np.where(big, r_big, r).astype(np.float32)


def rsqrt(x):
    """``rsqrtf``: ``rsqrt.approx.f32`` (MUFU.RSQ, subnormal inputs scaled by 2^24)."""
    return _RSQRT(np.asarray(x, np.float32))


# -- GELU ------------------------------------------------------------------------------
def gelu(x):
    """``x * 0.5 * (1 + erf(x * M_SQRT1_2))`` (ActivationGeluKernel.cu, approximate='none')."""
    x = np.asarray(x, np.float32)
    e = erf(ieee.mul(x, _c(0x3F3504F3)))
    return ieee.mul(ieee.mul(x, HALF), ieee.add(e, ONE))


def gelu_tanh(x):
    """``0.5 x (1 + tanh(kBeta (x + kKappa x^3)))`` (approximate='tanh'): x^3 as x (x x),
    ``kKappa x^3 + x`` one FMA."""
    x = np.asarray(x, np.float32)
    cube = ieee.mul(x, ieee.mul(x, x))
    inner = ieee.mul(ieee.fma(cube, _c(0x3D372713), x), _c(0x3F4C422A))
    return ieee.mul(ieee.mul(x, HALF), ieee.add(tanh(inner), ONE))


def fast_model(name: str) -> Callable:
    """Op ``name``'s model as a float32 -> float32 function that runs the C++ kernel
    (``gpu_math.fast``) where it is available and ``OPS[name].fn`` otherwise: the same bits."""
    fn = OPS[name].fn

    def run(x):
        x = np.asarray(x, np.float32)
        if x.size >= fast.MIN_SIZE and fast.available():
            return fast.run(name, x)
        with np.errstate(all="ignore"):
            return np.asarray(fn(x), np.float32)
    run.__name__ = f"fast_{name}"
    return run


# -- the table ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Op:
    """One modelled ATen elementwise kernel: its model (float32 in, float32 before the
    store), the ATen source file and the expression, as the PTX test data has them."""
    name: str
    fn: Callable
    source: str
    expression: str


_ROWS = [
    ("exp", exp, "UnaryOpsKernel.cu", "std::exp(a)"),
    ("log", log, "UnaryLogKernels.cu", "::log(a)"),
    ("tanh", tanh, "UnaryGeometricTanhKernel.cu", "::tanh(a)"),
    ("erf", erf, "UnarySpecialOpsKernel.cu", "::erf(a)"),
    ("rsqrt", rsqrt, "UnaryOpsKernel.cu", "::rsqrt(a)"),
    ("sigmoid", sigmoid, "UnarySpecialOpsKernel.cu", "1 / (1 + std::exp(-a))"),
    ("silu", silu, "ActivationSiluKernel.cu", "x / (1 + exp(-x))"),
    ("gelu", gelu, "ActivationGeluKernel.cu", "x * 0.5 * (1 + ::erf(x * M_SQRT1_2))"),
    ("gelu_tanh", gelu_tanh, "ActivationGeluKernel.cu",
     "0.5 * x * (1 + tanh(kBeta * (x + kKappa * x^3)))"),
]
OPS: dict[str, Op] = {r[0]: Op(*r) for r in _ROWS}
DTYPES = ("float32", "float16", "bfloat16")


def _round(y: np.ndarray, dtype: str) -> np.ndarray:
    """float32 -> ``dtype`` rounded to nearest even (the store), as the dtype's NumPy
    array (bfloat16: its 16 bits as uint16)."""
    if dtype == "float32":
        return y
    if dtype == "float16":
        with np.errstate(over="ignore"):
            return y.astype(np.float16)
    from ..gpu_math import ptx_run
    return ptx_run.half_bits(y, "bf16").astype(np.uint16)


def widen(x: np.ndarray, dtype: str) -> np.ndarray:
    """The float32 value of ``x`` in ``dtype`` (bfloat16 given as uint16 bit patterns)."""
    if dtype == "bfloat16":
        return (np.asarray(x).astype(np.uint32) << np.uint32(16)).view(np.float32)
    return np.asarray(x).astype(np.float32)


def evaluate(name: str, x: np.ndarray, dtype: str = "float32") -> np.ndarray:
    """Op ``name`` (a key of :data:`OPS`) on ``x`` of ``dtype`` (``float32`` / ``float16``
    arrays, ``bfloat16`` as uint16 bit patterns), rounded once to ``dtype``.  Runs the C++
    kernel of the same model where the extension has it (``gpu_math.fast``; the functions
    above are its reference)."""
    op = OPS.get(name)
    if op is None:
        raise ValueError(f"torch_mma_emu.aten_cuda.elementwise: unknown op {name!r}; "
                         f"modelled: {', '.join(OPS)}")
    if dtype not in DTYPES:
        raise ValueError(f"torch_mma_emu.aten_cuda.elementwise: dtype {dtype!r} is not "
                         f"modelled; modelled: {', '.join(DTYPES)}")
    f = widen(x, dtype).reshape(-1)
    if fast.available() and f.size >= fast.MIN_SIZE:
        out = fast.run(name, f)          # the C++ kernel: the same bits (gpu_math/fast.py)
    else:
        out = np.empty(f.size, np.float32)
        step = 1 << 20                  # the models' temporaries are float64: in chunks
        with np.errstate(all="ignore"):
            for i in range(0, f.size, step):
                out[i:i + step] = op.fn(f[i:i + step])
    return _round(out, dtype).reshape(np.shape(x))


__all__ = ["OPS", "Op", "DTYPES", "MODELS", "TORCH_VERSION", "CUDA_VERSION", "evaluate",
           "widen", "fast_model", "exp", "log", "tanh", "erf", "rsqrt", "sigmoid", "silu",
           "gelu", "gelu_tanh"]
