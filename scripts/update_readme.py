#!/usr/bin/env python
"""Regenerate the generated parts of README.md (torch_mma_emu.registry_doc.render_readme: the
arch x format matrix, the instruction table, the output of `mma-emu compare`)."""
from pathlib import Path

from torch_mma_emu.registry_doc import render_readme

README = Path(__file__).resolve().parents[1] / "README.md"

if __name__ == "__main__":
    README.write_text(render_readme(README.read_text()))
