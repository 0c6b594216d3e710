"""Pictures of summation trees: Graphviz DOT text, and PNG/SVG/PDF through ``dot``.

Leaves are boxes labelled with the summand index, additions small circles, fused sums
double circles labelled with their number of terms (seed 001 Figures 1-4 style).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import TYPE_CHECKING

from ..files import atomic_path, atomic_write

if TYPE_CHECKING:           # tree.py imports this module (SumTree.render)
    from .tree import SumTree


FORMATS = ("png", "svg", "pdf", "dot")


def to_dot(tree: SumTree, *, title: str | None = None, rankdir: str = "BT") -> str:
    """DOT source: edges point from a summand to the operation consuming it."""
    lines = ["digraph summation {", f"  rankdir={rankdir};", "  ordering=in;",
             "  node [fontsize=10];"]
    if title:
        safe = title.replace('"', "'")
        lines.append(f'  label="{safe}"; labelloc=t;')
    for v in range(tree.n):
        lines.append(f'  {v} [shape=box, label="{v}"];')
    low = list(range(tree.n)) + [0] * len(tree.children)  # children drawn by smallest leaf
    for v in tree.postorder():
        low[v] = min(low[c] for c in tree.children[v - tree.n])
    for idx, (kind, ch) in enumerate(zip(tree.kinds, tree.children)):
        v = tree.n + idx
        ch = sorted(ch, key=low.__getitem__)
        if kind == "add":
            lines.append(f'  {v} [shape=circle, label="+", width=0.3, fixedsize=true];')
        else:
            lab = f"{len(ch)}" if kind == "fused" else f"{len(ch)}, exact"
            lines.append(f'  {v} [shape=doublecircle, label="{lab}", fontsize=8];')
        for c in ch:
            lines.append(f"  {c} -> {v};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(tree: SumTree, path, *, title: str | None = None, fmt: str | None = None) -> str:
    """Write the tree to ``path``; the format comes from the suffix (png, svg, pdf, dot).
    Needs the Graphviz ``dot`` program for everything but .dot."""
    path = os.fspath(path)
    fmt = (fmt or os.path.splitext(path)[1].lstrip(".")).lower()
    if fmt not in FORMATS:
        raise ValueError(f"cannot render to {path!r}: format must be one of {FORMATS}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):       # before Graphviz, whose message is two lines of its own
        raise FileNotFoundError(f"cannot render to {path!r}: no folder {folder}")
    src = to_dot(tree, title=title or tree.describe())
    if fmt == "dot":
        atomic_write(path, src)
        return path
    exe = shutil.which("dot")
    if exe is None:
        raise RuntimeError("rendering needs the Graphviz 'dot' program (apt-get install "
                           "graphviz); to_dot() gives the DOT text without it")
    with atomic_path(path) as tmp:        # Graphviz writes a temporary file: all or nothing
        proc = subprocess.run([exe, f"-T{fmt}", "-o", tmp], input=src.encode(),
                              capture_output=True)
        if proc.returncode:
            why = " ".join(proc.stderr.decode(errors="replace").split())[:300]
            raise RuntimeError(f"cannot render to {path!r}: Graphviz dot failed ({why})")
    return path
