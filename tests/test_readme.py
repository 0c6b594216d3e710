"""README.md's generated parts match the registry and the instruction table (run
scripts/update_readme.py)."""
from pathlib import Path

from torch_mma_emu.registry_doc import render_readme

ROOT = Path(__file__).resolve().parents[1]


def test_generated_parts_up_to_date():
    text = (ROOT / "README.md").read_text()
    assert render_readme(text) == text, "README is stale: run scripts/update_readme.py"
    assert "| sm90 (Hopper)" in text
    assert "| `hgmma.k16` | HGMMA (wgmma.m64nNk16) | sm90 |" in text
