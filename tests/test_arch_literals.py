"""Arch facts live in the registry: no module of the package decides by an arch's name.

An AMD or NVIDIA rule reads the arch's facts (``Arch.capability``, ``Arch.cdna``,
``Arch.fp32`` / ``fp64``, the rows' instructions, ``registry.DEFAULT_ARCH``), so a new arch
is a registry entry, not a hunt for ``"gfx942"`` in twenty files.  This test reads every
module's string constants with ``ast`` (docstrings and messages are whole strings and do not
match) and fails on one that is an arch name, an alias of one, or looks like one
(``sm90a``, ``sm_100``, ``gfx950``, the bare prefixes ``sm`` / ``gfx`` of a name test);
``ALLOWED`` lists the modules that may, each with its reason.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from torch_mma_emu import registry
from torch_mma_emu.isa import norm

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("torch_mma_emu", "triton_kernels")
# an arch name that is not (yet) in the registry, or a vendor test by prefix
LOOKS_LIKE = re.compile(r"(sm_?\d+[a-z]?|gfx\d+[0-9a-z]*|sm_?|gfx)")
NAMES = {norm(n) for a in registry.ARCHS.values() for n in (a.name, *a.aliases)}

# module (path from the repository root) -> why it may spell arch names
ALLOWED = {
    "torch_mma_emu/registry.py": "the arch registry: where the names and their facts live",
    "torch_mma_emu/hw/smoke.py": "the GPU step's smoke cases: a named sample of (arch, format) "
                                 "pairs to run, not a rule",
}


def arch_literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string constant of ``path`` that names or looks like an arch."""
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            s = node.value
            if norm(s) in NAMES or LOOKS_LIKE.fullmatch(s):
                out.append((node.lineno, s))
    return sorted(out)


def test_the_check_sees_names_aliases_and_prefixes(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('"""sm90 in a docstring is fine"""\n'
                 'A = x == "gfx942"\nB = y.startswith("gfx")\nC = {"hopper": 1}\n'
                 'D = f"sm{9}{0}"\nE = "gfx950"\nF = "sm90 only, not {arch}"\n')
    assert [t for _, t in arch_literals(p)] == ["gfx942", "gfx", "hopper", "sm", "gfx950"]


def test_no_arch_name_literals_outside_the_registry():
    hits = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in ALLOWED:
                continue
            hits += [f"{rel}:{line}: {text!r}" for line, text in arch_literals(path)]
    assert not hits, ("arch names spelled outside the registry (read the arch's facts: "
                      "registry.ARCHS[...].capability / .cdna / .fp32 / .fp64, "
                      "registry.DEFAULT_ARCH; or list the module in ALLOWED with a reason): "
                      + "; ".join(hits))


def test_allowed_modules_still_exist_and_still_need_it():
    for rel in ALLOWED:
        path = ROOT / rel
        assert path.is_file(), f"{rel} is gone: remove it from ALLOWED"
        assert arch_literals(path), f"{rel} spells no arch name now: remove it from ALLOWED"
