"""One table for the elementary operations and the output roundings (torch_mma_emu/elementary.py).

The records are checked against what does not read them: the C++ core's lists
(csrc/core/layout.h, through the built extension), the kernels' rounding, the reference's
algorithms.  And the table stays the only one: ``op_literals`` reads every module's string
constants with ``ast`` and fails on an operation's or a rounding's name spelled outside
elementary.py and the registry (a rule written as ``sp.op in ("tr_fdpa", "gtr_fdpa")``
is a copy of the table that drifts); ``ALLOWED`` lists the few that may, with the reason.
"fma" is also an instruction family, an epilogue and Triton's FMA path, so it counts only
where it stands for an operation: compared with an ``op``, passed as ``op=``, or listed with
another operation's name.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import _C, cpp, elementary as elem
from torch_mma_emu.probe import search, space
from torch_mma_emu.probe.tables import table4_row
from torch_mma_emu.reference import elementary_ops as ref_ops
from torch_mma_emu.registry import ROWS, all_specs
from torch_mma_emu.registry_doc import model_cell
from torch_mma_emu.spec import FIELD_KINDS, NON_ARITH_FIELDS, Spec

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("torch_mma_emu", "triton_kernels", "scripts")
NAMES = set(elem.NAMES) | set(elem.RHO_NAMES)
HOMONYMS = {"fma"}          # names with other meanings in the package (see the docstring)

# module -> why it may spell the names
ALLOWED_MODULES = {
    "torch_mma_emu/elementary.py": "the table itself",
    "torch_mma_emu/registry.py": "the arch registry: each row names the operation and "
                                 "rounding its instruction computes with",
}
# (module, name) -> why that one name may be spelled there
ALLOWED_NAMES = {
    ("torch_mma_emu/spec.py", "rne_fp32"): "the dataclass default of Spec.rho",
}


def _op_context(node: ast.Constant, parent: dict) -> bool:
    """Whether a constant stands for an operation: compared with ``op`` / ``x.op``, passed
    as ``op=``, or in a literal collection beside another operation's name."""
    up = parent.get(node)
    if isinstance(up, ast.keyword):
        return up.arg == "op"
    if isinstance(up, (ast.Tuple, ast.List, ast.Set)):
        others = [e for e in up.elts if e is not node]
        if any(isinstance(e, ast.Constant) and e.value in elem.NAMES for e in others):
            return True
        up = parent.get(up)
    if isinstance(up, ast.Compare):
        sides = [up.left, *up.comparators]
        return any(isinstance(s, ast.Name) and s.id == "op" or
                   isinstance(s, ast.Attribute) and s.attr == "op" for s in sides)
    return False


def op_literals(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every string constant of ``path`` that is an operation's or a
    rounding's name (docstrings and messages are whole strings and do not match)."""
    tree = ast.parse(path.read_text(), str(path))
    parent = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                node.value in NAMES and (node.value not in HOMONYMS or _op_context(node, parent)):
            out.append((node.lineno, node.col_offset, node.value))
    return [(line, name) for line, _, name in sorted(out)]


def test_the_check_sees_rules_and_passes_homonyms(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('"""t_fdpa in a docstring is fine"""\n'
                 'A = sp.op in ("tr_fdpa", "gtr_fdpa")\nB = op == "fma"\n'
                 'C = Spec(op="fma")\nD = ("fma", "e_fdpa")\nE = {"rz_e8m13": 14}\n'
                 'F = family == "fma"\nG = DotPlan("fma", "fp32")\nH = "t_fdpa L=16"\n'
                 'I = epilogue in ("fma", "mul_add")\n')
    assert [t for _, t in op_literals(p)] == ["tr_fdpa", "gtr_fdpa", "fma", "fma", "fma",
                                              "e_fdpa", "rz_e8m13"]


def test_no_operation_or_rounding_names_outside_the_table():
    hits = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in ALLOWED_MODULES:
                continue
            hits += [f"{rel}:{line}: {name!r}" for line, name in op_literals(path)
                     if (rel, name) not in ALLOWED_NAMES]
    assert not hits, ("an elementary operation or rounding named outside elementary.py (read "
                      "its record: spec.elementary.has_F2, .c_joins, .zero_fields, "
                      "elementary.names(...), spec.rounding.bits; or list it in ALLOWED_* "
                      "with a reason): " + "; ".join(hits))


def test_allowed_places_still_need_it():
    for rel in ALLOWED_MODULES:
        assert (ROOT / rel).is_file(), f"{rel} is gone: remove it from ALLOWED_MODULES"
        assert op_literals(ROOT / rel), f"{rel} names no operation now: remove it"
    for rel, name in ALLOWED_NAMES:
        assert name in [n for _, n in op_literals(ROOT / rel)], \
            f"{rel} no longer spells {name!r}: remove it from ALLOWED_NAMES"


# -- the table against what does not read it -----------------------------------------------

def test_the_table_is_the_extensions_lists_in_order():
    lay = _C._layout()
    assert tuple(lay["ops"]) == elem.NAMES and tuple(lay["rhos"]) == elem.RHO_NAMES
    assert cpp.layout_errors(lay) == []
    swapped = {**lay, "ops": (lay["ops"][1], lay["ops"][0], *lay["ops"][2:])}
    assert "ops: elementary.py lists" in "; ".join(cpp.layout_errors(swapped))


@pytest.mark.parametrize("rho", elem.RHO_NAMES)
def test_rho_bits_are_the_kernels(rho):
    """1 + 2**-man_bits survives the C++ kernel's rounding, 1 + 2**-(man_bits + 1) does not
    (RZ truncates it; RNE ties it to the even 1)."""
    r = elem.RHOS[rho]
    if r.out == "fp64":
        sp = Spec("fma", "fp64", "fp64", L=1, rho=rho)
    else:
        sp = Spec("t_fdpa", "fp32", r.out, L=2, F=40, rho=rho)
    dt = torch.float64 if r.out == "fp64" else torch.float32
    for k, kept in ((r.man_bits, True), (r.man_bits + 1, False)):
        a = torch.tensor([[1.0, 2.0 ** -k]], dtype=dt)
        b = torch.ones(2, 1, dtype=dt)
        c = torch.zeros(1, 1, dtype=dt if r.out != "fp16" else torch.float16)
        d = tme.emulated_mm(a, b, c, arch=sp, out_dtype=c.dtype).double().item()
        assert d == (1 + 2.0 ** -k if kept else 1.0), (rho, k, d)
    assert r.bits == r.man_bits + 1 and r.title == f"{r.mode.upper()}-{r.label}"


def test_every_operation_has_its_algorithm_in_the_reference():
    """reference/elementary_ops.py runs op_<name> for each record, and its section header names the
    record's algorithm and title (one spelling)."""
    text = (ROOT / "torch_mma_emu/reference/elementary_ops.py").read_text()
    for o in elem.OPS.values():
        assert ref_ops.OPS[o.name].__name__ == f"op_{o.name}"
        at = text.index(f"\ndef op_{o.name}(")
        head = re.findall(r"\n# (Algorithms? ([0-9/]+)): ([^\n]*)", text[:at])[-1]
        assert set(re.findall(r"\d+", o.algorithm)) <= set(head[1].split("/")), (o, head)
        assert o.title in head[2].split(" "), (o, head)


@pytest.mark.parametrize("name", elem.NAMES)
def test_spec_validation_follows_the_record(name):
    """What a record allows, Spec allows; what it does not, Spec refuses with a message."""
    o = elem.OPS[name]
    sp = next(s for s in all_specs() if s.op == name)
    for rho in elem.RHO_NAMES:
        if elem.RHOS[rho].out != sp.out_format:
            continue
        ok = rho in elem.rhos_for(sp.out_format, name)
        try:
            sp.replace(rho=rho)
            assert ok, (name, rho)
        except ValueError as e:
            assert not ok and "rounds to nearest" in str(e), (name, rho, e)
    multi = dict(passes=1, c_join="final")
    if o.passes:
        assert sp.replace(**multi).multipass
    else:
        with pytest.raises(ValueError, match="take one of"):
            sp.replace(**multi)
    for f, other in (("zero_sign", "plus"), ("cancelled_group", "keep"), ("tr_renorm", True)):
        if f in o.zero_fields:
            assert getattr(sp.replace(**{f: other}), f) == other
        else:
            with pytest.raises(ValueError, match=f"{f} applies to"):
                sp.replace(**{f: other})


def test_operands_follow_the_record():
    """An operation on values gets fp32 / fp64 values, one on codes the input codes."""
    for sp in all_specs():
        o = sp.elementary
        assert (o.operands == elem.VALUES) == (sp.op in elem.names(operands=elem.VALUES))
        assert o.operands == elem.CODES or o.name in ("fma", "ftz_addmul")


def test_names_are_in_rank_order_and_select_by_property():
    assert [elem.OPS[n].rank for n in elem.names()] == sorted(o.rank for o in elem.OPS.values())
    assert len({o.rank for o in elem.OPS.values()}) == len(elem.OPS)
    assert all(o.c_joins in elem.C_JOIN_KINDS and o.operands in (elem.VALUES, elem.CODES) and
               set(o.zero_fields) <= set(elem.ZERO_FIELDS) for o in elem.OPS.values())
    # searched as passes: every operation that may be one but those with F2 (see space.py)
    assert set(space.SEARCHED_AS_PASSES) == {n for n in elem.names(passes=True)
                                             if not elem.OPS[n].has_F2}
    assert set(elem.names(passes=True)) == {"e_fdpa", "t_fdpa", "tr_fdpa", "gtr_fdpa"}
    with pytest.raises(ValueError, match="op must be one of"):
        elem.op("q_fdpa")


def test_arith_fields_are_specs_fields_less_the_listed():
    assert set(search.ARITH_FIELDS) | set(NON_ARITH_FIELDS) | set(search.UNSEEN_FIELDS) == \
        set(FIELD_KINDS) | {"notes"}
    assert not set(search.ARITH_FIELDS) & (set(NON_ARITH_FIELDS) | set(search.UNSEEN_FIELDS))


# -- one parts(), three renderings --------------------------------------------------------------

def test_the_renderings_print_the_titles_and_the_one_layout_name():
    sp = tme.spec("gfx942", "fp16").replace(L=4, passes=2, pass_width=1, c_join="final")
    p = sp.parts()
    assert p["passes"] == (2, 4, "alternating single k", 1)
    assert "passes=2x4 (alternating single k, width 1)" in sp.describe()
    row = table4_row("t", sp)
    assert row[3] == "TR-FDPA" and row[7] == "RNE-FP32" and \
        "2 passes (alternating single k)" in row[8] and "c added last" in row[8]
    ftz = next(r for r in ROWS if r.op == "ftz_addmul")
    assert table4_row("t", ftz.first_spec())[3] == "FTZ-AddMul"
    assert model_cell(ftz).startswith("FTZ-AddMul L=")
    import dataclasses
    t = next(r for r in ROWS if r.op == "t_fdpa" and r.out == "fp32")
    alt = dataclasses.replace(t, params={**t.params, "L": 4, "passes": 2, "pass_width": 1})
    assert "alternating single k" in model_cell(alt)


def test_parts_hold_what_the_operation_carries():
    for sp in all_specs():
        p, o = sp.parts(), sp.elementary
        assert ("F" in p) == o.has_F and ("F2" in p) == o.has_F2 and ("scale" in p) == o.scaled
        assert p["op"] is o and p["rho"] is sp.rounding
        assert sp.describe().startswith(f"{o.name} L={sp.L}")
