"""The Python <-> C++ interface by name (csrc/core/layout.h, torch_mma_emu/cpp.py): the
extension exports the names the header lists, the Python side uses exactly those names,
and the parameter vector and opcodes follow the extension's order, so a name added,
dropped or moved on one side is caught."""
import re
from pathlib import Path

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import _C, cpp, schedule_run
from torch_mma_emu.formats import NAN_STYLES
from torch_mma_emu.registry import all_specs
from torch_mma_emu.elementary import NAMES as OPS, RHO_NAMES as RHOS

HEADER = Path(__file__).resolve().parents[1] / "csrc/core/layout.h"


def _macro(name: str) -> str:
    text = HEADER.read_text()
    m = re.search(rf"#define {name}\(X[^)]*\)(.*?)(?<!\\)\n", text, re.S)
    assert m, name
    return m.group(1)


def _header_names(name: str) -> list[str]:
    """The names a macro of layout.h lists, read from the text (the formats expanded)."""
    body = _macro(name)
    out = []
    for m in re.finditer(r"MMA_FORMAT_PARAMS\(X, (\w+)\)|X\((\w+)(?:, \w+)?\)", body):
        if m.group(1):
            fields = re.findall(r"X\(f##_(\w+)\)", _macro("MMA_FORMAT_PARAMS"))
            out += [f"{m.group(1)}_{f}" for f in fields]
        else:
            out.append(m.group(2))
    return out


@pytest.mark.parametrize("key,macro", [("params", "MMA_PARAMS"), ("ops", "MMA_OPS"),
                                       ("rhos", "MMA_RHOS"), ("nan_styles", "MMA_NAN_STYLES"),
                                       ("sched_ops", "MMA_SCHED_OPS")])
def test_the_built_extension_exports_the_header_lists(key, macro):
    """A stale build (header edited, extension not rebuilt) fails here."""
    assert list(_C._layout()[key]) == _header_names(macro)


def test_python_names_are_the_extension_names():
    lay = _C._layout()
    assert cpp.layout_errors(lay) == []
    assert set(lay["ops"]) == set(OPS) and set(lay["rhos"]) == set(RHOS)
    assert set(lay["nan_styles"]) == set(NAN_STYLES)
    assert len(cpp.params(tme.spec("sm90", "fp16"))) == len(lay["params"])
    assert schedule_run._CHAIN == lay["sched_ops"].index("CHAIN")


@pytest.mark.parametrize("change,msg", [
    (lambda L: {**L, "params": L["params"][:-1]}, "params: only in the extension [], only in "
                                                  "Python ['c_emin']"),
    (lambda L: {**L, "params": L["params"] + ("new_field",)}, "only in the extension "
                                                              "['new_field']"),
    (lambda L: {**L, "ops": L["ops"] + ("q_fdpa",)}, "ops: only in the extension ['q_fdpa']"),
    (lambda L: {**L, "sched_ops": L["sched_ops"][1:]}, "only in Python ['PARTIAL']"),
    (lambda L: {**L, "rhos": L["rhos"] + L["rhos"][:1]}, "rhos: the extension lists a name "
                                                         "twice"),
])
def test_drift_is_named(change, msg):
    errs = "; ".join(cpp.layout_errors(change(_C._layout())))
    assert msg in errs, errs


def test_vector_is_built_by_name_in_the_extension_order():
    """Reordering the layout reorders the vector the same way: nothing is positional."""
    lay = _C._layout()
    for sp in list(all_specs())[::7]:
        values = sp.param_values("epilogue")
        flat = cpp.vector(values, lay)
        shuffled = {**lay, "params": tuple(reversed(lay["params"])),
                    "ops": tuple(reversed(lay["ops"]))}
        back = cpp.vector(values, shuffled)
        assert back[::-1][1:] == flat[1:]          # every field but op, in reverse order
        assert back[-1] == len(OPS) - 1 - flat[0]  # op codes follow the reversed list
        assert flat[lay["params"].index("epilogue")] == 1
        assert flat[lay["params"].index("L")] == sp.L
        assert flat[lay["params"].index("op")] == lay["ops"].index(sp.op)


def test_the_kernels_read_fields_by_name():
    """A wrong value at one named position changes the kernel's result: the C++ reads the
    fields where the Python writes them (F here)."""
    sp = tme.spec("sm90", "bf16")
    g = torch.Generator().manual_seed(0)
    A = torch.randn(8, 64, generator=g).bfloat16()
    B = torch.randn(64, 8, generator=g).bfloat16()
    a3 = A.view(torch.int16).reshape(1, 8, 64)
    b3 = B.view(torch.int16).reshape(1, 64, 8)
    c3 = torch.zeros(1, 8, 8)
    p = list(cpp.params(sp))
    p[cpp.PARAMS.index("F")] = 3
    coarse = torch.ops.mma_emu._gemm(a3, b3, c3, None, None, p)
    assert torch.equal(coarse, cpp.gemm(sp.replace(F=3), a3, b3, c3))
    assert not torch.equal(coarse, cpp.gemm(sp, a3, b3, c3))
