"""CLI: mma-emu reveal matmul --schedule / --schedule-out and mma-emu compare --schedule."""
import json
import subprocess
import sys

import torch

import torch_mma_emu as tme
from torch_mma_emu.cli import main
from torch_mma_emu.schedule import load_schedule


def test_reveal_writes_a_schedule_that_reproduces_the_revealed_kernel(tmp_path, capsys):
    out = tmp_path / "s.json"
    rc = main(["reveal", "matmul", "--k", "64", "--m", "16", "--backend", "emulated",
               "--arch", "sm90", "--dtype", "float16", "--with-c", "--schedule",
               "cublas_split_k_4_pairwise", "--schedule-out", str(out), "--no-progress"])
    assert rc == 0
    d = json.loads(out.read_text())
    s = load_schedule(str(out))
    assert s.tree is not None and d["k"] == 64
    g = torch.Generator().manual_seed(0)
    A, B, C = torch.randn(5, 64, generator=g).half(), torch.randn(64, 3, generator=g).half(), \
        torch.randn(5, 3, generator=g)
    want = tme.emulated_mm(A, B, C, arch="sm90", schedule="cublas_split_k_4_pairwise")
    assert torch.equal(tme.emulated_mm(A, B, C, arch="sm90", schedule=s), want)
    # compare --schedule runs the table with it (K = --size = 64 fits the tree)
    rc = main(["compare", "--random", "--size", "64", "--arch", "sm90", "--format", "fp16",
               "--schedule", str(out)])
    assert rc == 0
    assert "schedule: tree of 65 leaves" in capsys.readouterr().out
    # every sm90 row: the ones whose instruction fuses fewer than the tree's 16 products per
    # node are marked, the others run
    rc = main(["compare", "--random", "--size", "64", "--arch", "sm90", "--schedule", str(out),
               "--no-progress"])
    text = capsys.readouterr().out
    assert rc == 0
    lines = {tuple(ln.split()[:3]): ln for ln in text.splitlines() if ln.startswith("sm90 ")}
    assert "cannot run the tree" in lines[("sm90", "fp32", "fp32")]
    assert "cannot run the tree" in lines[("sm90", "tf32", "fp32")]
    assert "cannot run the tree" not in lines[("sm90", "fp16", "fp32")]
    # no row of sm80 fuses 16 products: the reason, exit code 2, one line
    r = subprocess.run([sys.executable, "-m", "torch_mma_emu", "compare", "--random", "--size",
                        "64", "--arch", "sm80", "--schedule", str(out), "--no-progress"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "cannot run this tree" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_compare_with_a_preset_and_bad_schedules(tmp_path):
    r = subprocess.run([sys.executable, "-m", "torch_mma_emu", "compare", "--arch", "sm90",
                        "--schedule", "deepseek_v3_promote_128"], capture_output=True, text=True)
    assert r.returncode == 0 and "promote every 128" in r.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("{\"format\": \"something else\"}")
    for arg, msg in (("nonsense", "not a schedule file, a preset"), (str(bad), "format"),
                     (str(tmp_path / "missing.json"), "schedule file not found")):
        r = subprocess.run([sys.executable, "-m", "torch_mma_emu", "compare", "--schedule", arg],
                           capture_output=True, text=True)
        assert r.returncode == 2 and msg in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
