"""The registry and the instruction table as markdown: the generated parts of README.md
(``render_readme``; scripts/update_readme.py writes them, tests/test_readme.py checks that
they are current)."""
from __future__ import annotations

import re

from .isa import INSTRUCTIONS, KERNELS
from .registry import ARCHS, Row, instruction_archs, rows_for

_COLS = ["fp64", "fp32", "tf32/xf32", "bf16", "fp16", "fp8", "fp6/fp4", "MXFP8/6/4", "NVFP4"]


def _cols_of(r: Row) -> set[str]:
    if r.scale_format == "ue4m3":
        return {"NVFP4"}
    if r.scale_format == "ue8m0":
        return {"MXFP8/6/4"}
    out = set()
    for f in r.formats:
        if f in ("tf32", "xf32"):
            out.add("tf32/xf32")
        elif f.startswith("fp8"):
            out.add("fp8")
        elif f in ("fp6_e2m3", "fp6_e3m2", "fp4_e2m1"):
            out.add("fp6/fp4")
        else:
            out.add(f)
    return out


def _model(r: Row) -> str:
    p = r.params
    if r.op == "fma":
        txt = "FMA"
    elif r.op == "ftz_addmul":
        txt = f"FTZ-AddMul L={p['L']} P={p['P']}"
    elif r.op == "e_fdpa":
        txt = f"E-FDPA L={p['L']}"
    else:
        txt = f"{r.op.split('_')[0].upper()}-FDPA L={p['L']} F={p['F']}"
    if r.op in ("t_fdpa", "st_fdpa", "gst_fdpa"):
        txt += {"rz_e8m13": " E8M13", "rne_fp16": ""}.get(p["rho"], "")
    if r.out == "fp16" and r.op != "fma":
        txt = "fp16 out"
    multi = [f"{p['passes']} passes of {p['L']}"] if p.get("passes", 1) > 1 else []
    if multi and p.get("pass_width", 0) not in (0, p["L"]):
        multi.append({1: "alternating k", 2: "alternating pairs",
                      4: "alternating quads"}.get(p["pass_width"], f"width {p['pass_width']}"))
    if p.get("c_join", "first") == "final":
        multi.append("c last")
    if multi:
        txt += f" ({', '.join(multi)})"
    return txt


def _cell(rs: list[Row], rows: list[Row]) -> str:
    parts = []
    for r in rs:
        txt = _model(r)
        if not r.default:
            # an instruction variant: named where it is of another family than the default
            default = next((d for d in rows if d.default and r.formats[0] in d.formats
                            and d.out == r.out and d.scale_format == r.scale_format), None)
            other = default is not None and default.instr.family != r.instr.family
            txt += f" (alt{': ' + r.instruction if other else ''})"
        if txt not in parts:
            parts.append(txt)
    return "; ".join(parts)


def markdown_matrix() -> str:
    """The arch x input-format matrix of the README."""
    lines = ["| arch | GPUs | " + " | ".join(_COLS) + " |", "|" + "---|" * (len(_COLS) + 2)]
    for a in ARCHS.values():
        rows = rows_for(a.name)
        cells = []
        for c in _COLS:
            rs = [r for r in rows if c in _cols_of(r)]
            cells.append(_cell(rs, rows) if rs else "-")
        lines.append(f"| {a.name} ({a.family}) | {', '.join(a.gpus)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _shape(shape) -> str:
    return " x ".join(n if d is None else str(d) for n, d in zip("MNK", shape))


def instruction_table() -> str:
    """Every instruction of isa.py: its id (what ``instruction=`` takes), archs,
    shape, types, names and the native kernel that issues it."""
    lines = ["| id | name | archs | m x n x k | inputs -> outputs | PTX / SASS / ISA | "
             "native kernel |", "|---|---|---|---|---|---|---|"]
    for i in INSTRUCTIONS.values():
        isa = " / ".join(f"`{n}`" for n in (i.ptx, i.sass, i.isa) if n)
        types = f"{', '.join(i.inputs)} -> {', '.join(i.outputs)}"
        if i.scales:
            types += f" ({', '.join(i.scales)} scales)"
        shape = "-" if i.shape == (None, None, None) else _shape(i.shape)
        kern = f"`{i.kernel}` (kind {KERNELS[i.kernel].kind})" if i.kernel else "-"
        archs = ", ".join(instruction_archs(i.id))
        lines.append(f"| `{i.id}` | {i.name} | {archs} | {shape} | {types} | {isa} | {kern} |")
    return "\n".join(lines)


def _compare_output() -> str:
    from .compare import eq10_text
    from .registry import archs
    return "```\n$ mma-emu compare\n" + eq10_text(archs()) + "\n```\n"


_BLOCKS = {"registry-matrix": lambda: markdown_matrix() + "\n",
           "instruction-table": lambda: instruction_table() + "\n",
           "compare-output": _compare_output}


def render_readme(text: str) -> str:
    """README.md's text with every generated block (between ``<!-- NAME:begin -->`` and
    ``<!-- NAME:end -->``) written anew."""
    for name, make in _BLOCKS.items():
        text = re.sub(rf"(<!-- {name}:begin -->\n).*?(<!-- {name}:end -->)",
                      lambda m: m.group(1) + make() + m.group(2), text, flags=re.S)
    return text
