"""The C++ extension's interface, by name: its kernels called with a :class:`~.spec.Spec`.

``csrc/core/layout.h`` is the one definition of the integer parameter vector the kernels
read, of the codes of the elementary operations, output conversions and NaN styles, and of
the schedule program's opcodes; the extension exports those names in order
(``_C._layout()``).  The operations and roundings are also the records of elementary.py,
which must list the same names in the same order.  Here the vector is built from
:meth:`Spec.param_values` by name, in the extension's order, and the Python names are
checked against the extension's at import: a stale build or a name added on one side only
is an ImportError naming the difference, never a silently shifted vector.
"""
from __future__ import annotations

from functools import lru_cache

import torch

from . import _C, cuda_archs
from .formats import NAN_STYLES
from . import elementary
from .isa import KERNEL_TYPES, KERNELS
from .limits import check_settings
from .spec import Spec

LAYOUT: dict = _C._layout()
PARAMS: tuple = LAYOUT["params"]            # names in the vector's order

# the parameters whose values are names, and the list that numbers them
_ENUMS = {"op": "ops", "rho": "rhos", **{f"{f}_nan_style": "nan_styles"
                                         for f in ("fa", "fb", "fo", "fs")}}
# the schedule program's opcodes Python emits (schedule_tree.py, schedule_run.py)
SCHED_OP_NAMES = ("PARTIAL", "C", "ZERO", "ADD", "NODE", "EPI_ALPHA", "EPI_FMA", "EPI_MULADD",
                  "CHAIN", "CHAINS")

_PROBE = Spec(elementary.names(has_F=True, scaled=False)[0], "fp16", "fp32", L=16, F=24,
              rho=elementary.RHO_NAMES[0])   # any spec: the names of its parameters


def layout_errors(layout: dict) -> list[str]:
    """How ``layout`` (the extension's names) differs from what the Python side uses."""
    ours = {"params": set(_PROBE.param_values()), "ops": set(elementary.NAMES),
            "rhos": set(elementary.RHO_NAMES), "nan_styles": set(NAN_STYLES),
            "sched_ops": set(SCHED_OP_NAMES)}
    ordered = {"ops": elementary.NAMES, "rhos": elementary.RHO_NAMES}
    errs = []
    for key, names in ours.items():
        theirs = layout.get(key, ())
        if len(set(theirs)) != len(theirs):
            errs.append(f"{key}: the extension lists a name twice")
        only_c, only_py = set(theirs) - names, names - set(theirs)
        if only_c or only_py:
            errs.append(f"{key}: only in the extension {sorted(only_c)}, only in Python "
                        f"{sorted(only_py)}")
        elif key in ordered and tuple(theirs) != ordered[key]:
            errs.append(f"{key}: elementary.py lists {list(ordered[key])}, the extension "
                        f"(csrc/core/layout.h) {list(theirs)}: one order in both")
    # the instruction kernels' codes: isa.py writes them as numbers, the extension's position
    for key, table in (("instr_kinds", {n: k.kind for n, k in KERNELS.items()}),
                       ("instr_types", KERNEL_TYPES)):
        theirs = {n: i for i, n in enumerate(layout.get(key, ()))}
        if theirs != table:
            errs.append(f"{key}: the extension has {theirs}, isa.py {table}")
    return errs


def codes(layout: dict) -> dict:
    """``{list: {name: code}}`` of a layout's enumerations (a code is the position)."""
    return {key: {n: i for i, n in enumerate(layout[key])}
            for key in ("ops", "rhos", "nan_styles", "sched_ops")}


def vector(values: dict, layout: dict) -> list[int]:
    """The parameter vector of ``values`` (:meth:`Spec.param_values`) in ``layout``'s order."""
    cs = codes(layout)
    return [cs[_ENUMS[n]][values[n]] if n in _ENUMS else int(values[n])
            for n in layout["params"]]


_errs = layout_errors(LAYOUT)
if not hasattr(_C, "_cuda_archs"):   # Python imports _C.cpython-*.so before _C.abi3.so
    _errs.append(f"{_C.__file__} is a build from before the stable-ABI port (it has no "
                 "_cuda_archs); scripts/build_ext.sh removes it and installs _C.abi3.so")
if _errs:
    raise ImportError("torch_mma_emu._C does not match the Python side (rebuild it: "
                      "scripts/build_ext.sh; csrc/core/layout.h and torch_mma_emu/cpp.py "
                      "name the same things): " + "; ".join(_errs))
SCHED = codes(LAYOUT)["sched_ops"]          # opcode name -> code


@lru_cache(maxsize=4096)
def params(spec: Spec, c_mode: str = "chain", c_in: str | None = None) -> tuple[int, ...]:
    """The parameter vector of ``spec`` for ``torch.ops.mma_emu._gemm`` / ``_sched``
    (``c_in``: the format C came in, see :meth:`Spec.param_values`)."""
    return tuple(vector(spec.param_values(c_mode, c_in), LAYOUT))


# the text of the exception a kernel throws where Ctrl-C cut it off (csrc/torch_stable.h): a
# kernel on torch's stable ABI can throw only a C++ exception, which Python sees as RuntimeError
INTERRUPTED = "[mma_emu KeyboardInterrupt]"


def call(op: str, *args):
    """``torch.ops.mma_emu.<op>(*args)`` as the package calls its C++ ops: on a GPU this build
    holds no code for, the RuntimeError of :func:`cuda_archs.check` first (instead of CUDA's
    "no kernel image"); Ctrl-C inside the kernel raises KeyboardInterrupt.  Argument errors
    are ValueError (the kernels throw std::invalid_argument)."""
    if args[0].is_cuda:
        cuda_archs.check(args[0].device)
    else:     # MMA_EMU_SCALAR / _CPU_ISA / _CPU_BLOCK_BYTES parsed here: C++ sees only these
        check_settings()
    try:
        return getattr(torch.ops.mma_emu, op)(*args)
    except RuntimeError as e:
        if INTERRUPTED in str(e):
            raise KeyboardInterrupt from None
        raise


def gemm(spec: Spec, a, b, c, scale_a=None, scale_b=None, c_mode: str = "chain",
         c_in: str | None = None):
    """The plain instruction chain of ``spec`` over a (batch, M, K) and b (batch, K, N);
    ``c`` in the output format, ``c_in`` the format it came in."""
    return call("_gemm", a, b, c, scale_a, scale_b, list(params(spec, c_mode, c_in)))


def sched(spec: Spec, a, b, c, partials, program, consts, scale_a=None, scale_b=None):
    """A schedule program (schedule_run.py) of ``spec``'s chain-mode instruction."""
    return call("_sched", a, b, c, partials, list(params(spec, "chain")), list(program),
                list(consts), scale_a, scale_b)


@torch.library.register_fake("mma_emu::_gemm")
def _fake_gemm(a, b, c, scale_a, scale_b, params):
    return c.new_empty((a.shape[0], a.shape[1], b.shape[2]))
