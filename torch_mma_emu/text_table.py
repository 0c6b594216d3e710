"""Plain-text tables for the command line and reports (no dependencies, stable for tests and
logs)."""
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
