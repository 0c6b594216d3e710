"""The command line never shows a traceback: a bad argument exits with code 2 and one line
naming what is allowed, checked before any work; a closed pipe ends quietly; every
subcommand's --help shows examples."""
import subprocess
import sys

import pytest

from torch_mma_emu.cli import build_parser, main
from torch_mma_emu.compare import random_table

BAD = [
    (["compare", "--random", "--size", "0"], "must be a positive integer, got 0"),
    (["compare", "--random", "--size", "-1"], "must be a positive integer, got -1"),
    (["compare", "--random", "--size", "many"], "'many' is not an integer"),
    (["compare", "--random", "--format", "nonsense"], "invalid choice: 'nonsense'"),
    (["compare", "--format", "fp16"], "--format applies only with --random"),
    (["compare", "--size", "8", "--seed", "1"], "--size, --seed apply only with --random"),
    (["compare", "--random", "--arch", "sm70", "--format", "fp8_e4m3"],
     "no selected arch (sm70) has input format fp8_e4m3"),
    (["compare", "--arch", "sm99"], "unknown arch 'sm99'; supported: sm70"),
    (["archs", "--arch", "rtx9999"], "unknown arch 'rtx9999'"),
    (["reveal", "sum", "--n", "0"], "must be a positive integer"),
    (["reveal", "sum", "--shape", "4,x", "--dim", "1"], "comma-separated positive integers"),
    (["reveal", "matmul", "--k", "-3"], "must be a positive integer"),
    (["reveal", "allreduce", "--world-size", "1"], "must be at least 2"),
    (["reveal", "allreduce", "--world-size", "2", "--backend", "foo"], "invalid choice: 'foo'"),
    (["nosuchcommand"], "invalid choice: 'nosuchcommand'"),
    ([], "the following arguments are required: COMMAND"),
]


@pytest.mark.parametrize("argv,msg", BAD, ids=[" ".join(a) or "(none)" for a, _ in BAD])
def test_bad_arguments_exit_2_with_one_line(capsys, argv, msg):
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.out == ""
    lines = out.err.splitlines()
    assert len(lines) == 1 and msg in lines[0], out.err
    assert "Traceback" not in out.err


def _run(*argv, **kw):
    return subprocess.run([sys.executable, "-m", "torch_mma_emu", *argv], capture_output=True,
                          text=True, **kw)


def test_real_process_one_line_no_traceback():
    for argv in (["compare", "--random", "--size", "0"], ["compare", "--random", "--format", "x"]):
        p = _run(*argv)
        assert p.returncode == 2 and p.stdout == ""
        assert len(p.stderr.splitlines()) == 1 and "Traceback" not in p.stderr


def test_nccl_without_gpus_refused_before_any_process():
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    p = _run("reveal", "allreduce", "--world-size", "2", "--backend", "nccl")
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1
    assert "needs one CUDA device per rank" in p.stderr and "gloo" in p.stderr


def test_closed_pipe_ends_quietly():
    # the reader is gone before the first write: every write raises BrokenPipeError
    p = subprocess.Popen([sys.executable, "-m", "torch_mma_emu", "archs"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait() == 0
    assert err == "", err


def _subparsers(parser):
    import argparse
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            return a.choices
    return {}


def test_every_subcommand_help_shows_examples():
    parser = build_parser()
    todo = list(_subparsers(parser).items())
    assert {"archs", "compare", "reveal", "probe", "fit"} <= {n for n, _ in todo}
    seen = 0
    while todo:
        name, sp = todo.pop()
        text = sp.format_help()
        assert "examples:\n  mma-emu " in text, f"mma-emu {name} --help has no example"
        todo += [(f"{name} {n}", p) for n, p in _subparsers(sp).items()]
        seen += 1
    assert seen >= 10   # archs, compare, reveal + 5 targets, probe, fit


def test_help_exits_0(capsys):
    assert main(["compare", "--help"]) == 0
    assert "mma-emu compare --random --size 256" in capsys.readouterr().out


def test_random_compare_shows_progress_on_request(capsys):
    hdr, rows = random_table(["sm90"], 8, 0, ["fp16"], progress=True)
    err = capsys.readouterr().err
    assert "compare --random" in err            # tqdm's bar, on stderr
    assert [r[:3] for r in rows] == [["sm90", "fp16", "fp32"], ["sm90", "fp16", "fp16"]]


def test_compare_arch_aliases_give_one_row(capsys):
    assert main(["compare", "--arch", "H100", "--arch", "sm90", "--arch", "hopper"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("sm90")]
    assert len(rows) == 1
