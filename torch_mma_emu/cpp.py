"""The C++ extension's interface, by name: its kernels called with a :class:`~.spec.Spec`.

``csrc/core/layout.h`` is the one definition of the integer parameter vector the kernels
read, of the codes of the elementary operations, output conversions and NaN styles, and of
the schedule program's opcodes; the extension exports those names in order
(``_C._layout()``).  Here the vector is built from :meth:`Spec.param_values` by name, in the
extension's order, and the Python names are checked against the extension's at import: a
stale build or a name added on one side only is an ImportError naming the difference, never
a silently shifted vector.
"""
from __future__ import annotations

from functools import lru_cache

import torch

from . import _C
from .formats import NAN_STYLES
from .spec import OPS, RHOS, Spec

LAYOUT: dict = _C._layout()
PARAMS: tuple = LAYOUT["params"]            # names in the vector's order

# the parameters whose values are names, and the list that numbers them
_ENUMS = {"op": "ops", "rho": "rhos", **{f"{f}_nan_style": "nan_styles"
                                         for f in ("fa", "fb", "fo", "fs")}}
# the schedule program's opcodes Python emits (schedule_tree.py, schedule_run.py)
SCHED_OP_NAMES = ("PARTIAL", "C", "ZERO", "ADD", "NODE", "EPI_ALPHA", "EPI_FMA", "EPI_MULADD",
                  "CHAIN", "CHAINS")

_PROBE = Spec("t_fdpa", "fp16", "fp32", L=16, F=24, rho="rz_fp32")   # any spec: the names


def layout_errors(layout: dict) -> list[str]:
    """How ``layout`` (the extension's names) differs from what the Python side uses."""
    ours = {"params": set(_PROBE.param_values()), "ops": set(OPS), "rhos": set(RHOS),
            "nan_styles": set(NAN_STYLES), "sched_ops": set(SCHED_OP_NAMES)}
    errs = []
    for key, names in ours.items():
        theirs = layout.get(key, ())
        if len(set(theirs)) != len(theirs):
            errs.append(f"{key}: the extension lists a name twice")
        only_c, only_py = set(theirs) - names, names - set(theirs)
        if only_c or only_py:
            errs.append(f"{key}: only in the extension {sorted(only_c)}, only in Python "
                        f"{sorted(only_py)}")
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


def gemm(spec: Spec, a, b, c, scale_a=None, scale_b=None, c_mode: str = "chain",
         c_in: str | None = None):
    """The plain instruction chain of ``spec`` over a (batch, M, K) and b (batch, K, N);
    ``c`` in the output format, ``c_in`` the format it came in."""
    return torch.ops.mma_emu._gemm(a, b, c, scale_a, scale_b,
                                   list(params(spec, c_mode, c_in)))


def sched(spec: Spec, a, b, c, partials, program, consts, scale_a=None, scale_b=None):
    """A schedule program (schedule_run.py) of ``spec``'s chain-mode instruction."""
    return torch.ops.mma_emu._sched(a, b, c, partials, list(params(spec, "chain")),
                                    list(program), list(consts), scale_a, scale_b)


@torch.library.register_fake("mma_emu::_gemm")
def _fake_gemm(a, b, c, scale_a, scale_b, params):
    return c.new_empty((a.shape[0], a.shape[1], b.shape[2]))
