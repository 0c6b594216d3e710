"""Parse the PTX that nvcc (13.0, ``-arch=sm_80`` / ``sm_90``) and Triton emit: a module's
entry functions, their parameters (``.align`` / ``.b8`` arrays: structs by value), register
and predicate declarations, labels, ``.shared`` / ``.local`` variables (module-level
``.shared``, ``extern .shared`` dynamic shared memory included) and instructions, each
decoded once into (guard, opcode, type parts, operands)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..text_table import split_top
from .errors import Unsupported

_SIZES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
          "b32": 4, "u32": 4, "s32": 4, "f32": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8,
          "pred": 1, "f16x2": 4, "bf16x2": 4}
_VAR = re.compile(r"^(?:\.?extern\s+)?\.(shared|local|global|const)\s+(?:\.align\s+(\d+)\s+)?"
                  r"\.(\w+)\s+([\w$]+)\s*(?:\[(\d*)\])?")
_PARAM = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+"
                    r"(?:(\.ptr)\s+(?:\.(?:global|shared|const|local)\s+)?)?"
                    r"(?:\.align\s+(\d+)\s+)?([\w$]+)\s*(?:\[(\d+)\])?")


@dataclass
class Instr:
    guard: str | None       # predicate register, or None
    neg: bool               # @!%p
    op: str                 # the full opcode, e.g. "ld.global.v4.f32"
    parts: list             # opcode split at the dots
    ops: list               # operand strings
    line: int               # line number in the PTX text


@dataclass
class Param:
    name: str
    type: str
    size: int
    align: int
    offset: int = 0


@dataclass
class Var:
    space: str
    name: str
    size: int               # bytes; 0 for extern (dynamic) shared memory
    align: int
    init: bytes = b""       # a module .global / .const variable's initializer


@dataclass
class Kernel:
    name: str
    params: list
    body: list                                   # Instr
    labels: dict                                 # label -> index in body
    variables: list = field(default_factory=list)  # Var (.shared / .local)

    @property
    def param_size(self) -> int:
        return max((p.offset + p.size for p in self.params), default=0)


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _var(stmt: str):
    m = _VAR.match(stmt)
    if not m:
        return None
    space, align, ty, name, count = m.groups()
    n = 1 if count is None else (int(count) if count else 0)
    w = _SIZES.get(ty, 1)
    init = b""
    if "=" in stmt:                      # = {1, 2, ...} or = 5: little-endian elements
        vals = [v for v in re.split(r"[{},\s]+", stmt.split("=", 1)[1]) if v and v != ";"]
        try:
            init = b"".join((int(v, 0) & ((1 << 8 * w) - 1)).to_bytes(w, "little") for v in vals)
        except ValueError:
            raise Unsupported(f"PTX initializer of {name} ({stmt[:80]!r})") from None
    return Var(space, name, w * n, int(align or w), init)


def _params(text: str) -> list:
    out, off = [], 0
    for chunk in [c.strip() for c in text.split(",") if c.strip()]:
        m = _PARAM.match(chunk)
        if not m:
            raise Unsupported(f"PTX parameter declaration {chunk!r}")
        al1, ty, ptr, al2, name, count = m.groups()
        if ptr:                 # .ptr [.space] .align N: the alignment of the data pointed to
            al2 = None
        elt = _SIZES.get(ty)
        if elt is None:
            raise Unsupported(f"PTX parameter type .{ty} ({name})")
        size = elt * (int(count) if count else 1)
        align = int(al1 or al2 or elt)
        off = (off + align - 1) // align * align
        out.append(Param(name, ty, size, align, off))
        off += size
    return out


_INSTR = re.compile(r"^(?:@(!?)(%[\w.]+)\s+)?([a-z][\w.:]*)\s*(.*)$", re.S)


_CALL = re.compile(r"\bcall(?:\.uni)?\b[^;]*;")


def _one_line(m) -> str:
    """A ``call`` statement nvcc spreads over lines, on one line (line count kept)."""
    s = m.group(0)
    return s.replace("\n", " ") + "\n" * s.count("\n")


def _body(text: str, kname: str):
    body, labels, variables = [], {}, []
    line = 0
    text = _CALL.sub(_one_line, text)
    for raw in re.split(r"(;|\n)", text):
        if raw == "\n":
            line += 1
            continue
        stmt = raw.strip().strip("{}").strip()
        while True:                                     # labels before a statement
            m = re.match(r"^([\w$.]+):(?!:)\s*(.*)$", stmt, re.S)
            if not m or m.group(1).startswith("%"):
                break
            labels[m.group(1)] = len(body)
            stmt = m.group(2).strip().strip("{}").strip()
        if not stmt or stmt == ";":
            continue
        if stmt.split()[0] in (".reg", ".pragma", ".loc", ".file", ".maxntid", ".reqntid",
                               ".minnctapersm", ".maxnreg", ".section"):
            continue
        if stmt.startswith(".param"):              # a call sequence's argument slots
            m = _PARAM.match(stmt)
            if m is None:
                raise Unsupported(f"{kname}: PTX declaration {stmt!r}")
            al1, ty, _, _, name, count = m.groups()
            size = _SIZES.get(ty, 1) * int(count or 1)
            variables.append(Var("callparam", name, size, int(al1 or 1)))
            continue
        if stmt.startswith((".shared", ".local", ".global", ".const", "extern", ".extern")):
            v = _var(stmt)
            if v is None:
                raise Unsupported(f"{kname}: PTX declaration {stmt!r}")
            variables.append(v)
            continue
        m = _INSTR.match(stmt)
        if not m:
            raise Unsupported(f"{kname}: PTX statement {stmt!r} (line {line + 1})")
        neg, guard, op, rest = m.groups()
        body.append(Instr(guard, bool(neg), op, op.split("."), split_top(rest), line + 1))
    return body, labels, variables


def parse(text: str) -> dict:
    """Every ``.entry`` of a PTX module, by name, as :class:`Kernel`; module-level ``.shared``
    variables are added to each kernel's variables."""
    text = strip_comments(text)
    kernels, module_vars = {}, []
    pos = 0
    for m in re.finditer(r"\.entry\s+([\w$]+)\s*\(", text):
        head = text[pos:m.start()]
        for stmt in re.split(r";|\n", head):
            stmt = re.sub(r"^\s*\.(visible|weak)\s+", "", stmt.strip())
            v = _var(stmt.strip())
            if v is not None:
                module_vars.append(v)
        name = m.group(1)
        close = text.index(")", m.end())
        params = _params(text[m.end():close])
        start = text.index("{", close)
        depth, i = 0, start
        while True:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                break
            i += 1
        body, labels, variables = _body(text[start + 1:i], name)
        kernels[name] = Kernel(name, params, body, labels, variables)
        pos = i + 1
    if not kernels:
        raise Unsupported("no .entry function in the PTX text")
    for k in kernels.values():
        k.variables = module_vars + k.variables
    return kernels
