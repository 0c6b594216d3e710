#!/usr/bin/env python
"""Regenerate the generated parts of README.md (the arch x format matrix from the registry,
the output of `mma-emu compare`).  tests/test_readme.py fails when they are stale."""
import re
from pathlib import Path

from torch_mma_emu.registry import markdown_matrix

README = Path(__file__).resolve().parents[1] / "README.md"


def _compare_output() -> str:
    from torch_mma_emu.cli import eq10_text
    from torch_mma_emu.registry import archs
    return "```\n$ mma-emu compare\n" + eq10_text(archs()) + "\n```\n"


def render(text: str) -> str:
    text = re.sub(r"(<!-- registry-matrix:begin -->\n).*?(<!-- registry-matrix:end -->)",
                  lambda m: m.group(1) + markdown_matrix() + "\n" + m.group(2), text, flags=re.S)
    return re.sub(r"(<!-- compare-output:begin -->\n).*?(<!-- compare-output:end -->)",
                  lambda m: m.group(1) + _compare_output() + m.group(2), text, flags=re.S)


if __name__ == "__main__":
    README.write_text(render(README.read_text()))
