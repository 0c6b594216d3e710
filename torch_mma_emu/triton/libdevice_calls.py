"""``tl.extra.cuda.libdevice.<fn>(x)`` inside an emulate block on an NVIDIA arch: Triton's
interpreter has no extern calls at all (NotImplementedError); here a unary fp32 libdevice
function runs as the PTX it inlines to for sm_90, cut out of a one-element kernel compiled
on the CPU and run with :mod:`torch_mma_emu.gpu_math.ptx_run` (like target_math's
``tl.log``).  Lanes that reach code ptx_run does not run (slow paths) take the float64
function where one is known, else the call raises.  Kernels are compiled before the launch
(the interpreter patches ``triton.language`` during it) for the ``libdevice.<name>`` names
found in the kernel's source file."""
from __future__ import annotations

import atexit
import importlib.util
import inspect
import os
import re
import shutil
import tempfile

import numpy as np

from ..gpu_math import ptx_run

_SYMBOLS: dict = {}          # __nv_ symbol -> libdevice function name (unary fp32 ones)
_ROUTINES: dict = {}         # name -> (prog, src, dst) or the reason it cannot run
_DIR: list = []
_PREPARED: set = set()       # kernels whose file was scanned
# the float64 function for lanes of a slow path
F64 = {"exp": np.exp, "exp2": np.exp2, "exp10": lambda v: 10.0 ** v, "expm1": np.expm1,
       "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "sin": np.sin,
       "cos": np.cos, "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
       "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sqrt": np.sqrt,
       "rsqrt": lambda v: 1 / np.sqrt(v), "cbrt": np.cbrt, "fast_expf": np.exp,
       "fast_logf": np.log, "fast_log2f": np.log2, "fast_sinf": np.sin,
       "fast_cosf": np.cos, "fast_tanf": np.tan, "fast_exp10f": lambda v: 10.0 ** v}


def symbols() -> dict:
    """{__nv_ symbol: libdevice function name} of the unary fp32 functions, read from
    Triton's libdevice module."""
    if not _SYMBOLS:
        from triton.language.extra.cuda import libdevice
        src = inspect.getsource(libdevice)
        for m in re.finditer(r"def (\w+)\(arg0, _semantic=None\):(.*?)(?=\n@|\Z)", src, re.S):
            sym = re.search(r'\(core\.dtype\("fp32"\), \): \("(__nv_\w+)", core\.dtype\("fp32"\)\)',
                            m.group(2))
            if sym:
                _SYMBOLS[sym.group(1)] = m.group(1)
    return _SYMBOLS


def _kernel(name: str):
    if not _DIR:
        _DIR.append(tempfile.mkdtemp(prefix="tme_libdevice_"))
        atexit.register(shutil.rmtree, _DIR[0], True)     # no folder left per process
    path = os.path.join(_DIR[0], f"tme_libdevice_{name}.py")
    with open(path, "w") as f:
        f.write("import triton\nimport triton.language as tl\n"
                "from triton.language.extra.cuda import libdevice\n\n\n@triton.jit\n"
                "def one(X, OUT):\n    o = tl.arange(0, 32)\n"
                f"    tl.store(OUT + o, libdevice.{name}(tl.load(X + o)))\n")
    spec = importlib.util.spec_from_file_location(f"tme_libdevice_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.one


def routine(name: str):
    if name not in _ROUTINES:
        from . import ptx_of
        try:
            ptx = ptx_of.compile_ptx(_kernel(name), {"X": "*fp32", "OUT": "*fp32"}, {},
                                     num_warps=1)
            got = ptx_run.routine(ptx)
            ptx_run.run_lanes(*got, np.float32([1.5]))
            _ROUTINES[name] = got
        except Exception as e:                      # noqa: BLE001 - reported at the call
            _ROUTINES[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return _ROUTINES[name]


def compiled(name: str):
    """The routine of ``libdevice.<name>`` compiled before the launch (see ``routine``), or
    the reason there is none; never compiles (the interpreter has patched
    ``triton.language`` by now)."""
    return _ROUTINES.get(name) or ("not compiled before the launch (libdevice.<name> not in "
                                   "the kernel's file)")


def prepare(fn) -> None:
    """Compile the routines of the ``libdevice.<name>`` calls in the kernel's source file."""
    if fn in _PREPARED:
        return
    _PREPARED.add(fn)
    try:
        with open(inspect.getsourcefile(fn)) as f:    # closed at once
            text = f.read()
    except (TypeError, OSError):
        return
    names = set(re.findall(r"libdevice\.(\w+)\s*\(", text))
    if names:
        unary = set(symbols().values())
        for name in sorted(names & unary):
            routine(name)


def evaluate(block, symbol: str, args, counts):
    """The call as sm_90 computes it (a TensorHandle), or None to leave it to the
    interpreter (which raises)."""
    from .target_rules import ptx_modelled
    if block is None or not ptx_modelled(block.arch):
        return None
    name = symbols().get(symbol)
    if name is None or len(args) != 1 or getattr(args[0].dtype, "name", "") != "fp32":
        return None
    got = compiled(name)
    if not isinstance(got, tuple):
        raise NotImplementedError(f"torch_mma_emu.triton: libdevice.{name} ({symbol}) cannot "
                                  f"be emulated: {got}")
    from triton.runtime.interpreter import TensorHandle
    x = np.asarray(args[0].data, np.float32)
    out, dead = ptx_run.run_lanes(*got, x)
    label = f"libdevice.{name}"
    counts[(label, "fp32", f"{symbol} (its {len(got[0])} PTX instructions)",
            ptx_run.exact(got[0]))] += 1
    if dead.any():
        f = F64.get(name)
        if f is None:
            raise NotImplementedError(f"torch_mma_emu.triton: libdevice.{name} ({symbol}): "
                                      f"{int(dead.sum())} elements reach code this does not "
                                      f"run ({ptx_run.dead_reason[0]})")
        counts[(label, "fp32", f"{symbol} slow path, {int(dead.sum())} elements: float64 "
                "rounded", False)] += 1
        out = out.copy()
        with np.errstate(all="ignore"):
            out[dead] = f(x.reshape(-1)[dead].astype(np.float64)).astype(np.float32)
    return TensorHandle(out.reshape(x.shape).copy(), args[0].dtype)
