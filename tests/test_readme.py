"""README.md's generated matrix matches the registry (run scripts/update_readme.py)."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_registry_matrix_up_to_date():
    spec = importlib.util.spec_from_file_location("update_readme", ROOT / "scripts" / "update_readme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = (ROOT / "README.md").read_text()
    assert mod.render(text) == text, "README matrix is stale: run scripts/update_readme.py"
    assert "| sm90 (Hopper)" in text
