"""The ``reveal`` sub-command, driven through its own argparse registration."""
import argparse
import json
import shutil

import pytest

from torch_mma_emu.fprev import SumTree, builders as B
from torch_mma_emu.fprev.cli import main, register


def run(argv, capsys):
    parser = argparse.ArgumentParser(prog="mma-emu")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code = args.func(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_reveal_sum_prints_description_and_probes(tmp_path, capsys):
    out_file = tmp_path / "t.json"
    code, out, _ = run(["reveal", "sum", "--n", "32", "--library", "numpy",
                        "--out", str(out_file)], capsys)
    assert code == 0
    assert "8-way strided, ways combined pairwise" in out
    assert "probes:" in out and "calls" in out
    assert SumTree.from_json(out_file.read_text()) == B.strided(32, 8, "pairwise")


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' program not installed")
def test_reveal_matmul_renders_png(tmp_path, capsys):
    png = tmp_path / "mm.png"
    code, out, _ = run(["reveal", "matmul", "--k", "32", "--m", "8", "--backend", "reference",
                        "--arch", "sm70", "--dtype", "float16", "--out", str(png)], capsys)
    assert code == 0 and "chain of (4+1)-term fused sums" in out
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_reveal_with_algorithm_4_and_text_output(tmp_path, capsys):
    txt = tmp_path / "t.txt"
    code, out, _ = run(["reveal", "dot", "--n", "16", "--algorithm", "fprev", "--verify",
                        "--out", str(txt)], capsys)
    assert code == 0 and "(fprev, verified)" in out
    assert SumTree.parse(txt.read_text()).n == 16


def test_errors_exit_with_code_2(capsys):
    code, _, err = run(["reveal", "matmul", "--k", "64", "--backend", "reference",
                        "--arch", "sm100", "--dtype", "float8_e4m3fn"], capsys)
    assert code == 2 and "range is too narrow" in err
    code, _, err = run(["reveal", "sum"], capsys)
    assert code == 2 and "--n" in err


def test_reveal_allreduce(tmp_path, capsys):
    out_file = tmp_path / "ar.json"
    code, out, _ = run(["reveal", "allreduce", "--world-size", "2", "--numel", "4",
                        "--out", str(out_file)], capsys)
    assert code == 0 and "all_reduce over 2 ranks" in out
    assert json.loads(out_file.read_text())["world_size"] == 2


def test_main_entry_point(capsys):
    assert main(["reveal", "sum", "--n", "8"]) == 0
    assert "sequential" in capsys.readouterr().out
