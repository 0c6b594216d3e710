"""Every ``mma-emu`` subcommand over a table of hostile arguments (issue 32): each gives exit
code 2 and one line on stderr, never a traceback or a C++ frame (nor main's last-resort
"internal error" line, which would mean a bug).  The subcommands and their
options are read off the parser, so a new subcommand or option is covered without editing
this file; only the base command line of a subcommand (its required arguments, small sizes)
and the kind of an option's value (a count, a file to read, a file to write) are listed.

In process (``torch_mma_emu.cli.main``) for speed; a few cases as real processes too."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from torch_mma_emu.cli import build_parser, main

HW = Path(__file__).parent / "data" / "hwdata" / "H100_fp16_to_fp32.npz"

# the smallest valid command line of each leaf subcommand: a hostile value replaces or joins it
BASE = {
    "archs": [],
    "compare": ["--random", "--size", "4", "--arch", "sm90", "--format", "fp16"],
    "reveal sum": ["--n", "8"],
    "reveal dot": ["--n", "8"],
    "reveal mv": ["--n", "8", "--m", "2"],
    "reveal matmul": ["--k", "8", "--m", "2", "--n", "2"],
    "reveal allreduce": ["--world-size", "2", "--numel", "2"],
    "probe": ["--arch", "sm90", "--format", "fp16", "--no-order"],
    "fit": [str(HW)],
    "preview": ["--arch", "sm90", "--formats", "fp16", "--no-plot", "--no-progress"],
}
# options whose value names a file written (an existing file is fine to overwrite there)
WRITES = {("reveal", "--out"), ("reveal", "--schedule-out"), ("preview", "--out")}
# values an option rightly takes: fit prints at most --limit candidates (no work grows)
ACCEPTS = {("fit", "--limit"): {"99999999999999999999"}}

HUGE = "99999999999999999999"
INTS = [HUGE, "-" + HUGE, "\uff11\uff12", "\u0661\u0662", "1_000", "0x10", "1e3", "twelve", "",
        "12 "]
FLOATS = ["nan", "inf", "-inf", "1e999", "-3", "0", "\uff13", "three", ""]
SCHEDULES = ["schedule:split_k=" + HUGE, "schedule:split_k=10" + "0" * 22,
             "schedule:promote_every=2147483648", "schedule:dot_k=2147483648,"
             "input_precision=tf32x3", "schedule:residue_tile=" + HUGE,
             "schedule:split_k=2,split_grain=2147483648", "schedule:split_k=2,split_grain="
             "\uff18", "schedule:split_k=\uff14", "schedule:promote_every=0x20"]
WORDS = ["", "sm99", "float7", "\uff11\uff12", "-", "%zz"]


def _files(tmp: Path) -> dict:
    (tmp / "adir").mkdir(exist_ok=True)
    (tmp / "empty.json").write_text("")
    (tmp / "bad.json").write_text("{not json")
    (tmp / "list.json").write_text("[1, 2, 3]")
    (tmp / "empty.npz").write_bytes(b"")
    (tmp / "huge_split.json").write_text(json.dumps(
        {"format": "torch_mma_emu.Schedule", "schedule": "schedule:split_k=" + HUGE}))
    return {"missing": str(tmp / "nope" / "x.json"), "dir": str(tmp / "adir"),
            "under_a_file": str(tmp / "empty.json" / "x.json"),
            "empty": str(tmp / "empty.json"), "bad_json": str(tmp / "bad.json"),
            "json_list": str(tmp / "list.json"), "empty_npz": str(tmp / "empty.npz")}


def leaf_commands(parser=None) -> dict:
    """'reveal sum' -> its parser, for every leaf subcommand of the parser."""
    out, todo = {}, [("", parser or build_parser())]
    while todo:
        name, p = todo.pop()
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            out[name] = p
        for a in subs:
            todo += [(f"{name} {n}".strip(), sp) for n, sp in a.choices.items()]
    return out


def _kind(action) -> str:
    t = action.type
    if action.nargs == 0:
        return "flag"
    if action.choices is not None:
        return "choice"
    if t is float or getattr(t, "__name__", "") in ("finite_float", "_power_of_two"):
        return "float"
    name = getattr(t, "__name__", "")
    if t is int or name in ("integer", "positive_int", "seed") or name in _bound_names():
        return "int"
    return "word"


def _bound_names():
    from torch_mma_emu.limits import BOUNDS
    return set(BOUNDS)


def cases(tmp: Path) -> list:
    files = _files(tmp)
    out = []
    for cmd, p in sorted(leaf_commands().items()):
        assert cmd in BASE, f"mma-emu {cmd}: add its base command line to BASE"
        for a in p._actions:
            if isinstance(a, argparse._HelpAction):
                continue
            kind = _kind(a)
            if kind == "flag":
                continue
            if kind == "int":
                vals = INTS
            elif kind == "float":
                vals = FLOATS
            elif kind == "choice":
                vals = ["bogus", "", "\uff11\uff16"]
            elif (cmd.split()[0], a.option_strings[0] if a.option_strings else "") in WRITES:
                vals = ["", files["under_a_file"]] + (      # preview makes its --out folder
                    [files["dir"], files["missing"]] if cmd != "preview" else [])
            else:
                vals = WORDS + [files[k] for k in ("missing", "dir", "under_a_file", "empty",
                                                   "bad_json", "json_list", "empty_npz")]
            opt = a.option_strings[-1] if a.option_strings else ""
            for v in vals:
                if v in ACCEPTS.get((cmd, opt), ()):
                    continue
                if a.option_strings:
                    argv = cmd.split() + BASE[cmd] + [a.option_strings[-1], v]
                else:                       # a positional: it replaces the base's
                    argv = cmd.split() + [v]
                out.append(argv)
    # whole-command cases: no arguments, unknown options, a subcommand without its target
    out += [["reveal"], ["reveal", "sum"], ["probe"], ["fit"], ["compare", "--bogus"],
            ["reveal", "sum", "--n", "8", "--dim", "1"],
            ["reveal", "sum", "--shape", "4,4"], ["reveal", "sum", "--shape", "4,,4", "--dim", "0"],
            ["reveal", "sum", "--shape", HUGE + ",2", "--dim", "0"],
            ["reveal", "matmul", "--k", "8", "--arch", "sm99"],
            ["reveal", "matmul", "--k", "8", "--in-format", "tf32,"],
            ["reveal", "matmul", "--k", "8", "--backend", "emulated", "--in-format", ","],
            ["probe", "--arch", "sm90", "--format", "tf32,"],
            ["probe", "--arch", "sm90", "--format", ""],
            ["fit", files["dir"]], ["fit", str(HW), "--format", ""],
            ["preview", "--input", "randn:" + HUGE], ["preview", "--input", "randn:\uff13"]]
    # schedule strings and files: every integer field bounded, ASCII digits only
    for sched in SCHEDULES + [str(tmp / "huge_split.json")]:
        out += [["compare", "--random", "--size", "4", "--arch", "sm90", "--format", "fp16",
                 "--schedule", sched],
                ["reveal", "matmul", "--k", "8", "--m", "2", "--n", "2", "--backend",
                 "emulated", "--schedule", sched]]
    return out


def _one_line_exit_2(capsys, argv) -> None:
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, f"mma-emu {' '.join(map(repr, argv))}: exit {rc}, stderr {err!r}"
    lines = err.splitlines()
    assert len(lines) == 1, f"mma-emu {argv}: {len(lines)} lines: {err!r}"
    assert "Traceback" not in err and "frame #" not in err, err
    assert "internal error" not in err, err      # a bug caught by main's last resort


def test_every_subcommand_is_covered():
    assert set(leaf_commands()) == set(BASE)


def test_hostile_arguments_exit_2_with_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)         # a command that did run writes nothing into the tree
    bad = []
    for argv in cases(tmp_path):
        try:
            _one_line_exit_2(capsys, argv)
        except AssertionError as e:
            bad.append(str(e).splitlines()[0][:300])
    assert not bad, f"{len(bad)} hostile command lines misbehave:\n" + "\n".join(bad)


@pytest.mark.parametrize("argv", [
    ["compare", "--random", "--size", "99999999999999999999"],
    ["reveal", "allreduce", "--world-size", "100000"],
    ["reveal", "sum", "--n", "\uff11\uff12"],
    ["probe", "--arch", "sm90", "--out", "report.json"],
])
def test_real_process_one_line(argv):
    p = subprocess.run([sys.executable, "-m", "torch_mma_emu", *argv], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.splitlines()) == 1, p.stderr
    assert "Traceback" not in p.stderr and "frame #" not in p.stderr
