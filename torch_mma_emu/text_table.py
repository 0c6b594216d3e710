"""Plain-text tables for the command line and reports (no dependencies, stable for tests and
logs), and the one splitter of comma lists at top level (PTX operands, MLIR types)."""
from __future__ import annotations


def format_table(header: list[str], rows: list[list], title: str | None = None) -> str:
    """``header`` and ``rows`` in left-aligned columns under a dashed rule, ``title`` above."""
    cells = [[str(h) for h in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    out = [title] if title else []
    out.append("  ".join(h.ljust(w) for h, w in zip(cells[0], widths)).rstrip())
    out.append(line)
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells[1:]]
    return "\n".join(out)


def split_top(s: str, brackets: str = "{}[]") -> list[str]:
    """``s`` split at the commas outside any bracket pair of ``brackets`` (open and close
    characters alternating: ``"{}[]"`` for PTX operands, ``"<>()[]{}"`` for MLIR types);
    each part stripped, an empty last part dropped."""
    if len(brackets) % 2:
        raise ValueError(f"brackets must be open/close pairs, got {brackets!r}")
    opens, closes = brackets[0::2], brackets[1::2]
    out, depth, cur = [], 0, []
    for ch in s:
        if ch in opens:
            depth += 1
        elif ch in closes:
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    last = "".join(cur).strip()
    if last:
        out.append(last)
    return out
