"""The one text form of a :class:`~.spec.Spec` and a :class:`~.schedule.Schedule`:
``prefix:field=value,field=value,...`` (the custom op's schema takes strings, so this is
how both travel through ``torch.ops.mma_emu.emulated_mm`` and its graphs).

Plain ``str`` operations only: Dynamo traces them, so a Schedule can be built (and its
string written) inside ``torch.compile(fullgraph=True)``.

Values are percent-escaped.  ``escape_all=True`` escapes every byte but ``A-Z a-z 0-9 _ . - ~``
(what ``urllib.parse.quote(v, safe='')`` writes: the Spec strings already written, and the
test seeds derived from them, stay as they are); ``False`` escapes only ``%``, ``,`` and
``=`` (a Schedule's tree text stays readable).  :func:`decode` reads any ``%XX`` escape,
refuses unknown and repeated fields, and converts each value by its field's kind (integers
in ASCII decimal digits only), raising a ValueError that names the field and what it allows.
"""
from __future__ import annotations

import dataclasses
import math
import re

KINDS = ("int", "float", "bool", "str")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")
_HEX = "0123456789ABCDEF"
_INT = re.compile(r"-?[0-9]{1,64}")     # [0-9], not \d: \d also takes other scripts' digits


def decimal_int(text) -> int | None:
    """The integer ``text`` writes in ASCII decimal digits (an optional ``-``, at most 64
    digits); None for anything else: other scripts' digits (fullwidth, Arabic-Indic), ``_``
    separators, hex, a ``+``, spaces, a non-string.  The one reading of integer text: Spec
    and Schedule fields, the command line, the MMA_EMU_MAX_* variables (limits.py)."""
    if not isinstance(text, str) or not _INT.fullmatch(text):
        return None
    return int(text)


def value_text(v) -> str:
    """The text of one field value: bools as 0/1, floats as exact hex, the rest as ``str``."""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return v.hex()
    return str(v)


def escape(text: str, escape_all: bool = False) -> str:
    if not escape_all:
        return text.replace("%", "%25").replace(",", "%2C").replace("=", "%3D")
    out = []
    for ch in text:
        if ch in _UNRESERVED:
            out.append(ch)
        else:
            out.extend("%" + _HEX[b >> 4] + _HEX[b & 15] for b in ch.encode("utf-8"))
    return "".join(out)


def unescape(text: str, field: str = "") -> str:
    """``text`` with every ``%XX`` escape replaced by its byte (UTF-8)."""
    if "%" not in text:
        return text
    head, *rest = text.split("%")
    raw = bytearray(head.encode("utf-8"))
    for piece in rest:
        code = piece[:2]
        if len(code) < 2 or any(ch not in "0123456789abcdefABCDEF" for ch in code):
            raise ValueError(f"bad escape %{code} in the value of {field or 'a field'}: "
                             f"{text!r} (a % starts a two-digit hex escape, %25 is %)")
        raw.append(int(code, 16))
        raw += piece[2:].encode("utf-8")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"the escapes in the value of {field or 'a field'} are not UTF-8: "
                         f"{text!r}") from None


def encode(prefix: str, items, escape_all: bool = False) -> str:
    """``prefix:name=value,...`` of the ``(name, value)`` pairs, in their order."""
    return prefix + ":" + ",".join(f"{name}={escape(value_text(v), escape_all)}"
                                   for name, v in items)


def _convert(kind: str, name: str, v: str, what: str):
    if kind == "str":
        return v
    if kind == "int":
        i = decimal_int(v)
        if i is not None:
            return i
        raise ValueError(f"{what} field {name} must be an integer, got {v!r} (ASCII decimal "
                         "digits only, at most 64)")
    if kind == "bool":
        if v in ("0", "1"):
            return v == "1"
        raise ValueError(f"{what} field {name} must be 0 or 1, got {v!r}")
    try:                # float: exact hex (what value_text writes) or decimal
        x = float.fromhex(v) if "0x" in v.lower() else float(v)
    except (ValueError, OverflowError):
        x = None
    if x is None or not math.isfinite(x):
        raise ValueError(f"{what} field {name} must be a finite number (decimal or hex "
                         f"float, at most about 1.8e308), got {v!r}")
    return x


def field_kinds(cls) -> dict:
    """``{name: kind}`` of a dataclass's compared fields, in order, read off their
    annotations (``int``, ``float``, ``bool``, ``str``, optionally ``X | None`` or
    ``Optional[X]``)."""
    out = {}
    for f in dataclasses.fields(cls):
        if not f.compare:
            continue
        t = str(f.type).replace(" | None", "")
        t = t[len("Optional["):-1] if t.startswith("Optional[") else t
        if t not in KINDS:
            raise TypeError(f"{cls.__name__}.{f.name}: annotation {f.type!r} is none of {KINDS}")
        out[f.name] = t
    return out


def decode(prefix: str, s, kinds: dict) -> dict:
    """The fields of ``prefix:name=value,...`` as ``{name: value}``, each converted by
    ``kinds[name]`` (one of :data:`KINDS`)."""
    what = prefix
    if not isinstance(s, str) or not s.startswith(prefix + ":"):
        shown = s if isinstance(s, str) else type(s).__name__
        raise ValueError(f"not a serialised {what}: {shown!r} ({what.capitalize()}"
                         f".to_string() writes '{prefix}:field=value,...')")
    out = {}
    for part in s[len(prefix) + 1:].split(","):
        if not part:
            continue
        name, eq, v = part.partition("=")
        if name not in kinds:
            raise ValueError(f"unknown {what} field {name!r} (fields: {', '.join(kinds)})")
        if not eq:
            raise ValueError(f"{what} field {name} has no value ('{name}=...')")
        if name in out:
            raise ValueError(f"{what} field {name} is given twice")
        out[name] = _convert(kinds[name], name, unescape(v, name), what)
    return out
