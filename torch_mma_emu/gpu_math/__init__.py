"""NVIDIA's float32 math instructions, bit for bit where public evidence allows.

Not Triton-specific: a ``tl.exp``, an Inductor kernel's ``exp`` and a CUDA op's ``__expf``
all end in the same PTX instructions.  ``FUNCTIONS`` maps each PTX instruction name to a
:class:`Record`: the SASS that ``ptxas`` makes of it for sm_90 (read from the cubin of this
project's Triton's ptxas; the wrapper around the ``MUFU`` op handles subnormals), whether
the model is bit-exact and on what evidence, and the NumPy function.  ::

    from torch_mma_emu import gpu_math
    gpu_math.evaluate("ex2.approx.ftz.f32", np.float32([0.5, -3.25]))
    gpu_math.FUNCTIONS["div.full.f32"].exact     # True: MUFU.RCP then one FMUL

``exact=False`` marks a model whose core ``MUFU`` op has no bit model checked on sm_90:
LG2 and SQRT are ptx-math's models of sm_5x-sm_75 (candidates until a GPU sweep confirms
them), SIN, COS and TANH the float64 function rounded, with the hardware's special values,
flush-to-zero and range reduction; callers name these as approximate.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from . import ieee, mufu

TWO24, TWO_M126, TWO126 = np.float32(2.0 ** 24), np.float32(2.0 ** -126), np.float32(2.0 ** 126)
INV_2PI = np.float32(0.15915493667125701904)        # the FMUL.RZ constant before MUFU.SIN/COS

MUFU_EVIDENCE = ("coefficients and structure from B. Carleton's ptx-math (github.com/bcarlet/"
                 "ptx-math, 2021); dfyz/reproducible-inference checks MUFU.EX2 "
                 "(ex2.approx.ftz.f32) against its model over all 2^32 inputs on an H100 "
                 "(sm_90a, 132 SMs: check_ex2.cu) and uses RCP / RSQ the same way")
SASS_EVIDENCE = "the SASS ptxas (Triton 3.6's) emits for sm_90, read with cuobjdump"
IEEE_EVIDENCE = "IEEE 754 correctly rounded (PTX ISA: .rn is round to nearest even)"
APPROX = "no public bit model of the MUFU op on sm_90: float64 function rounded"
MINMAX = ("PTX ISA: max/min return the non-NaN operand (.NaN: NaN); zeros of opposite sign "
          "assumed ordered -0 < +0, not confirmed on hardware")
CANDIDATE = ("candidate: ptx-math's model (github.com/bcarlet/ptx-math), validated by its author "
             "on sm_5x-sm_75 GPUs, not yet on sm_90")


@dataclasses.dataclass(frozen=True)
class Record:
    """One PTX instruction: its arity, whether ``fn`` is bit-exact, the sm_90 SASS it
    becomes, the PTX ISA's error bound, and the evidence."""
    name: str
    arity: int
    exact: bool
    sass: str
    bound: str
    evidence: str
    fn: Callable


# -- the sm_90 SASS sequences around each MUFU op (names follow SASS) ----------------------
def _ex2_full(x):
    """FSETP.GEU P0 = x >= -126; @!P0 x *= 0.5; MUFU.EX2; @!P0 r = r*r (subnormal results)."""
    x = np.asarray(x, dtype=np.float32)
    low = x < -126
    r = mufu.ex2(np.where(low, x * np.float32(0.5), x))
    return np.where(low, ieee.mul(r, r), r)


def _scaled_in(x, core, post):
    """|x| < 2^-126 (zero, subnormal): x *= 2^24 before the MUFU op, ``post`` after."""
    x = np.asarray(x, dtype=np.float32)
    small = np.abs(x) < TWO_M126
    r = core(np.where(small, ieee.mul(x, TWO24), x))
    return np.where(small, post(r), r)


def _rcp_full(x):
    """s = 2^24 (|x| < 2^-126), 0.25 (|x| > 2^126), else 1; MUFU.RCP(x*s) * s."""
    x = np.asarray(x, dtype=np.float32)
    s = np.where(np.abs(x) < TWO_M126, TWO24, np.float32(1))
    s = np.where(np.abs(x) > TWO126, np.float32(0.25), s).astype(np.float32)
    return ieee.mul(s, mufu.rcp(ieee.mul(x, s)))


def _div_full(a, b, ftz=False):
    """|b| > 2^126: a, b *= 1/4; |b| < 2^-126 (not .ftz): a, b *= 2^24; MUFU.RCP(b) * a."""
    a, b = np.broadcast_arrays(np.asarray(a, np.float32), np.asarray(b, np.float32))
    big = np.abs(flush(b) if ftz else b) > TWO126
    small = np.zeros_like(big) if ftz else np.abs(b) < TWO_M126
    q = np.float32(0.25)
    a = np.where(big, ieee.mul(a, q, ftz), a)
    b = np.where(big, ieee.mul(b, q, ftz), b)
    a = np.where(small, ieee.mul(a, TWO24), a)
    b = np.where(small, ieee.mul(b, TWO24), b)
    return ieee.mul(mufu.rcp(b), a, ftz)


def _div_approx(a, b, ftz=False):
    """|b| < 2^-126 (not .ftz): a, b *= 2^24; MUFU.RCP(b) * a."""
    a, b = np.broadcast_arrays(np.asarray(a, np.float32), np.asarray(b, np.float32))
    if not ftz:
        small = np.abs(b) < TWO_M126
        a = np.where(small, ieee.mul(a, TWO24), a)
        b = np.where(small, ieee.mul(b, TWO24), b)
    return ieee.mul(mufu.rcp(b), a, ftz)


def _trig(core):
    return lambda x: core(ieee.mul_rz(x, INV_2PI))


flush = mufu.flush
_E, _A = True, False
_ROWS = [
    # name, arity, exact, sass, bound (PTX ISA), evidence, fn
    ("ex2.approx.ftz.f32", 1, _E, "MUFU.EX2", "rel 2^-22.5", MUFU_EVIDENCE, mufu.ex2),
    ("ex2.approx.f32", 1, _E, "x < -126: FMUL x, 0.5; MUFU.EX2; FMUL r, r",
     "rel 2^-22.5", f"{MUFU_EVIDENCE}; {SASS_EVIDENCE}", _ex2_full),
    ("rcp.approx.ftz.f32", 1, _E, "MUFU.RCP", "1 ulp", MUFU_EVIDENCE, mufu.rcp),
    ("rcp.approx.f32", 1, _E, "s = 2^24 | 1/4 | 1; MUFU.RCP(x*s) * s", "1 ulp",
     f"{MUFU_EVIDENCE}; {SASS_EVIDENCE}", _rcp_full),
    ("rsqrt.approx.ftz.f32", 1, _E, "MUFU.RSQ", "rel 2^-22.9", MUFU_EVIDENCE, mufu.rsqrt),
    ("rsqrt.approx.f32", 1, _E, "|x| < 2^-126: FMUL x, 2^24; MUFU.RSQ; FMUL r, 2^12",
     "rel 2^-22.9", f"{MUFU_EVIDENCE}; {SASS_EVIDENCE}",
     lambda x: _scaled_in(x, mufu.rsqrt, lambda r: ieee.mul(r, np.float32(4096)))),
    ("div.full.f32", 2, _E, "|b| > 2^126: a,b *= 1/4; |b| < 2^-126: a,b *= 2^24; "
     "MUFU.RCP(b); FMUL", "2 ulp", f"{MUFU_EVIDENCE}; {SASS_EVIDENCE}", _div_full),
    ("div.full.ftz.f32", 2, _E, "|b| > 2^126: a,b *= 1/4 (FMUL.FTZ); MUFU.RCP(b); FMUL.FTZ",
     "2 ulp", f"{MUFU_EVIDENCE}; {SASS_EVIDENCE}", lambda a, b: _div_full(a, b, True)),
    ("div.approx.f32", 2, _E, "|b| < 2^-126: a,b *= 2^24; MUFU.RCP(b); FMUL",
     "2 ulp for |b| in [2^-126, 2^126]", f"{MUFU_EVIDENCE}; {SASS_EVIDENCE}", _div_approx),
    ("div.approx.ftz.f32", 2, _E, "MUFU.RCP(b); FMUL.FTZ", "2 ulp for |b| in [2^-126, 2^126]",
     f"{MUFU_EVIDENCE}; {SASS_EVIDENCE}", lambda a, b: _div_approx(a, b, True)),
    ("lg2.approx.ftz.f32", 1, _A, "MUFU.LG2", "abs 2^-22.6 for x in [0.5, 2]", CANDIDATE,
     mufu.lg2),
    ("lg2.approx.f32", 1, _A, "|x| < 2^-126: FMUL x, 2^24; MUFU.LG2; FADD r, -24",
     "abs 2^-22.6 for x in [0.5, 2]", f"{CANDIDATE}; {SASS_EVIDENCE}",
     lambda x: _scaled_in(x, mufu.lg2, lambda r: ieee.add(r, np.float32(-24)))),
    ("sqrt.approx.ftz.f32", 1, _A, "MUFU.SQRT", "rel 2^-23", CANDIDATE, mufu.sqrt),
    ("sqrt.approx.f32", 1, _A, "|x| < 2^-126: FMUL x, 2^24; MUFU.SQRT; FMUL r, 2^-12",
     "rel 2^-23", f"{CANDIDATE}; {SASS_EVIDENCE}",
     lambda x: _scaled_in(x, mufu.sqrt, lambda r: ieee.mul(r, np.float32(2.0 ** -12)))),
    ("sin.approx.f32", 1, _A, "FMUL.RZ x, 1/(2 pi); MUFU.SIN", "abs 2^-20.9 in [-pi, pi]",
     f"{APPROX}; {SASS_EVIDENCE}", _trig(mufu.sin)),
    ("sin.approx.ftz.f32", 1, _A, "FMUL.RZ x, 1/(2 pi); MUFU.SIN", "abs 2^-20.9 in [-pi, pi]",
     f"{APPROX}; {SASS_EVIDENCE}", _trig(mufu.sin)),
    ("cos.approx.f32", 1, _A, "FMUL.RZ x, 1/(2 pi); MUFU.COS", "abs 2^-20.9 in [-pi, pi]",
     f"{APPROX}; {SASS_EVIDENCE}", _trig(mufu.cos)),
    ("cos.approx.ftz.f32", 1, _A, "FMUL.RZ x, 1/(2 pi); MUFU.COS", "abs 2^-20.9 in [-pi, pi]",
     f"{APPROX}; {SASS_EVIDENCE}", _trig(mufu.cos)),
    ("tanh.approx.f32", 1, _A, "MUFU.TANH", "rel 2^-10.987", APPROX, mufu.tanh),
    # IEEE-exact instructions
    ("div.rn.f32", 2, _E, "subroutine (correctly rounded)", "0.5 ulp", IEEE_EVIDENCE, ieee.div),
    ("sqrt.rn.f32", 1, _E, "subroutine (correctly rounded)", "0.5 ulp", IEEE_EVIDENCE,
     ieee.sqrt),
    ("rcp.rn.f32", 1, _E, "subroutine (correctly rounded)", "0.5 ulp", IEEE_EVIDENCE,
     lambda x: ieee.div(np.float32(1), x)),
    ("fma.rn.f32", 3, _E, "FFMA", "0.5 ulp", IEEE_EVIDENCE, ieee.fma),
    ("fma.rn.ftz.f32", 3, _E, "FFMA.FTZ", "0.5 ulp", IEEE_EVIDENCE,
     lambda a, b, c: ieee.fma(a, b, c, True)),
    ("mul.rn.f32", 2, _E, "FMUL", "0.5 ulp", IEEE_EVIDENCE, ieee.mul),
    ("add.rn.f32", 2, _E, "FADD", "0.5 ulp", IEEE_EVIDENCE, ieee.add),
    ("sub.rn.f32", 2, _E, "FADD (negated b)", "0.5 ulp", IEEE_EVIDENCE, ieee.sub),
    # exact but for the sign of a zero result from -0 and +0 (assumed -0 < +0)
    ("max.f32", 2, _A, "FMNMX", "exact", MINMAX, lambda a, b: ieee.minmax(a, b, "max")),
    ("min.f32", 2, _A, "FMNMX", "exact", MINMAX, lambda a, b: ieee.minmax(a, b, "min")),
    ("max.NaN.f32", 2, _A, "FMNMX.NAN", "exact", MINMAX,
     lambda a, b: ieee.minmax(a, b, "max", True)),
    ("min.NaN.f32", 2, _A, "FMNMX.NAN", "exact", MINMAX,
     lambda a, b: ieee.minmax(a, b, "min", True)),
]
FUNCTIONS: dict[str, Record] = {r[0]: Record(*r) for r in _ROWS}


def _as_f32(v, name: str, what: str) -> np.ndarray:
    if isinstance(v, (bool, int, float)):
        return np.asarray(v, dtype=np.float32)
    a = np.asarray(v)
    if a.dtype != np.float32:
        raise TypeError(f"torch_mma_emu.gpu_math.evaluate({name!r}): {what} must be a float32 "
                        f"NumPy array (or a Python number), got dtype {a.dtype}")
    return a


def evaluate(name: str, x, y=None, z=None) -> np.ndarray:
    """``name`` (a key of ``FUNCTIONS``) applied elementwise to float32 arrays ``x`` (and
    ``y``, ``z`` for two- and three-operand instructions, broadcast), as float32."""
    rec = FUNCTIONS.get(name)
    if rec is None:
        raise ValueError(f"torch_mma_emu.gpu_math: unknown instruction {name!r}; known: "
                         f"{', '.join(sorted(FUNCTIONS))}")
    args = [x, y, z][:rec.arity]
    extra = [v for v in [x, y, z][rec.arity:] if v is not None]
    if any(v is None for v in args) or extra:
        raise TypeError(f"torch_mma_emu.gpu_math.evaluate({name!r}) takes {rec.arity} "
                        f"operand(s) (x{', y' if rec.arity > 1 else ''}"
                        f"{', z' if rec.arity > 2 else ''})")
    arrs = np.broadcast_arrays(*[_as_f32(v, name, w) for v, w in zip(args, "xyz")])
    with np.errstate(all="ignore"):     # NaN / inf inputs are values here, not errors (-W error)
        return _evaluate(rec, arrs)


def _evaluate(rec, arrs) -> np.ndarray:
    shape = arrs[0].shape
    flat = [np.ascontiguousarray(a).reshape(-1) for a in arrs]
    n = flat[0].size
    if n <= CHUNK:
        return np.asarray(rec.fn(*flat), dtype=np.float32).reshape(shape)
    out = np.empty(n, np.float32)          # in chunks: the models' temporaries are 64-bit
    for i in range(0, n, CHUNK):
        out[i:i + CHUNK] = rec.fn(*[a[i:i + CHUNK] for a in flat])
    return out.reshape(shape)


CHUNK = 1 << 22


def approximate() -> list[str]:
    """The instructions whose model is not bit-exact."""
    return [n for n, r in FUNCTIONS.items() if not r.exact]


__all__ = ["FUNCTIONS", "Record", "evaluate", "approximate"]
