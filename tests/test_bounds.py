"""Bounds on the work an argument can ask for (torch_mma_emu/limits.py, issue 32): each is
refused before the work starts, with a message naming the bound and the environment variable
that raises it; raising the variable lets the value through.  No test here does the work:
they check the refusal, never the blow-up.  Also the strict parsing of format lists, Spec
strings, SumTree JSON and emulated_mm's string arguments, and third-party messages said in
ours."""
from __future__ import annotations

import json
import os
import re
import zipfile

import numpy as np
import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import limits
from torch_mma_emu.cli import main
from torch_mma_emu.fprev import SumTree


def _refused(capsys, argv, *needles) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, err
    return err


@pytest.mark.parametrize("env,argv,ok", [
    ("MMA_EMU_MAX_WORLD_SIZE", ["reveal", "allreduce", "--world-size", "{}"], None),
    ("MMA_EMU_MAX_COMPARE_SIZE", ["compare", "--random", "--size", "{}"], None),
    ("MMA_EMU_MAX_REVEAL_N", ["reveal", "sum", "--n", "{}"], None),
    ("MMA_EMU_MAX_REVEAL_N", ["reveal", "matmul", "--k", "{}"], None),
    ("MMA_EMU_MAX_REVEAL_N", ["reveal", "allreduce", "--world-size", "2", "--numel", "{}"],
     None),
    ("MMA_EMU_MAX_ELEMENTS", ["reveal", "mv", "--n", "8", "--m", "{}"], None),
    ("MMA_EMU_MAX_PROBE_VERIFY", ["probe", "--arch", "sm90", "--verify", "{}"], None),
    ("MMA_EMU_MAX_PREVIEW_BATCH", ["preview", "--batch", "{}"], None),
    ("MMA_EMU_MAX_REPEAT", ["preview", "--repeat", "{}"], None),
    ("MMA_EMU_MAX_THREADS", ["preview", "--threads", "{}"], None),
])
def test_each_bound_is_refused_with_its_variable(capsys, monkeypatch, env, argv, ok):
    name = next(k for k, b in limits.BOUNDS.items() if b.env == env)
    top = limits.limit(name)
    _refused(capsys, [a.format(top + 1) for a in argv], f"{top + 1} is above the bound of {top}",
             f"set {env} to raise it")
    # a lower bound from the environment takes effect, before any work
    monkeypatch.setenv(env, "3")
    _refused(capsys, [a.format(4) for a in argv], "4 is above the bound of 3", env)


def test_the_bound_moves_with_the_variable(monkeypatch):
    monkeypatch.setenv("MMA_EMU_MAX_COMPARE_SIZE", "5000")
    assert limits.check("compare_size", 5000) == 5000
    with pytest.raises(ValueError, match="5001 is above the bound of 5000 N of compare"):
        limits.check("compare_size", 5001)
    for bad in ("abc", "0", "-4", "\uff15", "1_000", "0x10"):
        monkeypatch.setenv("MMA_EMU_MAX_COMPARE_SIZE", bad)
        with pytest.raises(ValueError, match="MMA_EMU_MAX_COMPARE_SIZE must be a positive "
                                             "integer"):
            limits.limit("compare_size")


def test_a_bad_variable_is_one_line_on_the_command_line(capsys, monkeypatch):
    monkeypatch.setenv("MMA_EMU_MAX_COMPARE_SIZE", "lots")
    _refused(capsys, ["compare", "--random", "--size", "8"],
             "MMA_EMU_MAX_COMPARE_SIZE must be a positive integer")


def test_world_size_default_follows_cores_and_memory(monkeypatch):
    monkeypatch.delenv("MMA_EMU_MAX_WORLD_SIZE", raising=False)
    cores = os.cpu_count() or 1
    assert 2 <= limits.limit("world_size") <= max(2, 4 * cores)
    monkeypatch.setattr(limits, "_available_bytes", lambda: 3 * limits.RANK_BYTES)
    assert limits.limit("world_size") == min(3, 4 * cores) or cores == 0


def test_python_api_checks_the_same_bounds(monkeypatch):
    from torch_mma_emu import fprev
    from torch_mma_emu.compare import random_table
    with pytest.raises(ValueError, match="world_size = 100000 is above the bound"):
        fprev.reveal_allreduce(100000)
    with pytest.raises(ValueError, match="random_table: size = 100000 is above"):
        random_table(["sm90"], 100000, 0)
    with pytest.raises(ValueError, match="summands n = 100000000 is above the bound of "
                                         "65536 summands"):
        fprev.reveal_sum(10 ** 8)
    with pytest.raises(ValueError, match="MMA_EMU_MAX_ELEMENTS"):
        fprev.reveal_sum(shape=(60000, 60000), dim=1)
    with pytest.raises(ValueError, match="MMA_EMU_MAX_ELEMENTS"):
        fprev.reveal_matmul(60000, 8, 60000)
    from torch_mma_emu.probe.verify import verify
    with pytest.raises(ValueError, match="MMA_EMU_MAX_PROBE_VERIFY"):
        verify(tme.spec("sm90", "fp16"), "sm90", 10 ** 9)


def test_tree_leaves_and_files_are_bounded(tmp_path, monkeypatch):
    from torch_mma_emu.schedule import load_schedule
    doc = {"format": "torch_mma_emu.fprev.SumTree", "n": 10 ** 6, "nodes": [], "root": 0}
    with pytest.raises(ValueError, match="leaves n = 1000000 is above the bound of 65536 "
                                         "leaves .*MMA_EMU_MAX_TREE_LEAVES"):
        SumTree.from_json(json.dumps(doc))
    monkeypatch.setenv("MMA_EMU_MAX_TREE_LEAVES", "4")
    with pytest.raises(ValueError, match="tree text: leaves = 5 is above the bound of 4"):
        SumTree.parse("((((0+1)+2)+3)+4)")
    assert SumTree.parse("(((0+1)+2)+3)").n == 4
    big = tmp_path / "big.json"
    big.write_text(" " * (2 << 20) + "{}")
    monkeypatch.setenv("MMA_EMU_MAX_FILE_MIB", "1")
    with pytest.raises(ValueError, match=r"the schedule file .*big.json is 2 MiB, above the "
                                         r"bound of 1 MiB of an input file; set "
                                         r"MMA_EMU_MAX_FILE_MIB"):
        load_schedule(str(big))


def test_samples_file_bound_before_unpacking(tmp_path, monkeypatch):
    from torch_mma_emu.probe import samples
    p = tmp_path / "s.npz"
    z = np.zeros((300, 1024), dtype=np.uint32)            # 1.2 MB unpacked, tiny packed
    np.savez_compressed(p, a=z, b=z, c=z[:, 0], d=z[:, 0])
    assert os.path.getsize(p) < 100_000 and zipfile.is_zipfile(p)
    monkeypatch.setenv("MMA_EMU_MAX_FILE_MIB", "1")
    with pytest.raises(samples.SamplesFileError, match="s.npz: its arrays unpack to 2 MiB, "
                                                       "above the bound of 1 MiB"):
        samples.load(p, "fp16", "fp32")


def test_ranks_start_in_a_bounded_pool(monkeypatch):
    """With one core, rank r starts only once rank r - 1 has imported torch."""
    from torch_mma_emu import fprev
    from torch_mma_emu.fprev import collectives
    real = collectives.subprocess.Popen
    seen = []

    def popen(cmd, *a, **kw):
        cfg, rank = cmd[-2], int(cmd[-1])
        if rank:
            seen.append(os.path.exists(collectives.ready_file(os.path.dirname(cfg), rank - 1)))
        return real(cmd, *a, **kw)
    monkeypatch.setattr(collectives.subprocess, "Popen", popen)
    monkeypatch.setattr(collectives.os, "cpu_count", lambda: 1)
    res = fprev.reveal_allreduce(3, numel=3)
    assert res.world_size == 3 and res.checked > 0
    assert seen == [True, True]


# -- strict parsing ---------------------------------------------------------------------

@pytest.mark.parametrize("fmt", [",", "", "tf32,", ",tf32", "fp16,fp16,fp16", " , "])
def test_format_lists_are_strict(fmt):
    A, B = torch.randn(4, 8), torch.randn(8, 4)
    with pytest.raises(ValueError, match=r"in_format=.* must be one format or two separated "
                                         r"by a comma .*formats: fp64, fp32"):
        tme.emulated_mm(A, B, arch="sm90", in_format=fmt)


def test_unknown_format_in_a_list_names_the_formats():
    with pytest.raises(ValueError, match="in_format='tf32,fp99': unknown format 'fp99'; "
                                         "known formats"):
        tme.emulated_mm(torch.randn(4, 8), torch.randn(8, 4), in_format="tf32,fp99")


@pytest.mark.parametrize("kw,name", [({"in_format": 32}, "in_format"),
                                     ({"in_format": ["tf32"]}, "in_format"),
                                     ({"instruction": 1}, "instruction"),
                                     ({"c_mode": None}, "c_mode"),
                                     ({"c_mode": b"chain"}, "c_mode")])
def test_wrong_python_types_name_the_argument(kw, name):
    with pytest.raises(TypeError, match=f"emulated_mm: {name} must be"):
        tme.emulated_mm(torch.randn(4, 8), torch.randn(8, 4), **kw)


@pytest.mark.parametrize("child,what", [("1", "str '1'"), (1.0, "float 1.0"),
                                        (True, "bool True"), (None, "NoneType")])
def test_sumtree_children_are_integers(child, what):
    doc = {"format": "torch_mma_emu.fprev.SumTree", "n": 2, "nodes": [["add", [0, child]]],
           "root": 2}
    with pytest.raises(ValueError, match=f"node 2: a child must be an integer .*got {what}"):
        SumTree.from_json(json.dumps(doc))
    doc["nodes"] = [["add", "01"]]
    with pytest.raises(ValueError, match="children must be a list"):
        SumTree.from_dict(doc)
    assert SumTree(2, [("add", [np.int64(0), np.int32(1)])]).n == 2     # NumPy ints are ints


@pytest.mark.parametrize("text", ["((0+1)+\uff12)", "((0+1)+\u0662)", "((0+1)+\u00b2)"])
def test_tree_text_takes_ascii_digits_only(text):
    with pytest.raises(ValueError, match="unexpected character"):
        SumTree.parse(text)


def test_tree_picture_to_a_missing_folder(tmp_path):
    t = SumTree.parse("((0+1)+2)")
    with pytest.raises(FileNotFoundError, match="cannot render to .*: no folder"):
        t.render(tmp_path / "nope" / "t.png")


def test_torch_dtype_message_is_ours(capsys):
    _refused(capsys, ["reveal", "sum", "--n", "8", "--dtype", "float8_e4m3fn"],
             "cannot run reveal sum in float8_e4m3fn", "try float16, bfloat16")


def test_probe_out_without_format(capsys):
    _refused(capsys, ["probe", "--arch", "sm90", "--out", "report.json"],
             "not an output format; allowed: fp32, fp16, fp64")
    _refused(capsys, ["probe", "--arch", "sm70", "--out", "fp64", "--format", "fp16"])
    _refused(capsys, ["probe", "--arch", "gfx90a", "--out", "fp16", "--no-order"],
             "no interface of the target has that output")


def test_probe_out_without_format_keeps_that_output(capsys):
    assert main(["probe", "--arch", "sm80", "--out", "fp16", "--no-order"]) == 0
    rows = [ln.split() for ln in capsys.readouterr().out.splitlines() if ln[:4] in
            ("fp16", "bf16", "tf32")]
    assert rows and all(r[1] == "fp16" for r in rows)


def test_readme_lists_every_bound():
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "## Bounds and limits" in text
    assert limits.markdown() in text, "README's table of bounds differs from limits.markdown()"


@pytest.mark.parametrize("field,value,needle", [
    ("split_k", 10 ** 23, "split_k = 100000000000000000000000 is above the bound of 16777216 "
     "split-K slices of a Schedule; set MMA_EMU_MAX_SPLIT_K to raise it"),
    ("promote_every", 2 ** 31, "promote_every = 2147483648 is above the bound of 2147483647"),
    ("residue_tile", 2 ** 40, "residue_tile = 1099511627776 is above the bound of 2147483647"),
    ("dot_k", 2 ** 31, "dot_k = 2147483648 is above the bound of 2147483647"),
    ("split_grain", 2 ** 31, "split_grain = 2147483648 is above the bound of 2147483647"),
    ("split_grain", "\uff18", "split_grain must be ASCII decimal digits"),
])
def test_schedule_integers_are_bounded(field, value, needle):
    """Every integer field of a Schedule has a bound, checked at construction, from a
    string and from a schedule file alike (the message names the field and the bound)."""
    from torch_mma_emu.schedule import Schedule, load_schedule
    kw = {field: value}
    if field == "dot_k":
        kw["input_precision"] = "tf32x3"
    if field == "split_grain":
        kw["split_k"] = 2
    if field == "split_k":      # MMA_EMU_MAX_SPLIT_K: checked where read or run (issue 42)
        s = Schedule(**kw)
        with pytest.raises(ValueError, match=re.escape(needle)):
            s.check_bounds()
    else:
        with pytest.raises(ValueError, match=re.escape(needle)):
            Schedule(**kw)
    text = "schedule:" + ",".join(f"{k}={v}" for k, v in kw.items())
    with pytest.raises(ValueError, match=re.escape(needle)):
        Schedule.from_string(text)
    with pytest.raises(ValueError, match=re.escape(needle)):
        load_schedule(text)


def test_schedule_bounds_hold_at_the_bound_and_move_with_the_variable(tmp_path, monkeypatch):
    from torch_mma_emu.schedule import MAX_K_FIELD, Schedule, load_schedule
    top = limits.limit("split_k")
    assert Schedule(split_k=top).split_k == top          # at the bound: fine
    assert Schedule(promote_every=MAX_K_FIELD).promote_every == MAX_K_FIELD
    assert Schedule(split_k=2, split_grain=MAX_K_FIELD).split_grain == str(MAX_K_FIELD)
    monkeypatch.setenv("MMA_EMU_MAX_SPLIT_K", "8")
    assert Schedule(split_k=8).check_bounds().split_k == 8
    with pytest.raises(ValueError, match="split_k = 9 is above the bound of 8 .*"
                                         "MMA_EMU_MAX_SPLIT_K"):
        Schedule(split_k=9).check_bounds()
    with pytest.raises(ValueError, match="split_k = 9 is above the bound of 8 .*"
                                         "MMA_EMU_MAX_SPLIT_K"):
        Schedule.from_string("schedule:split_k=9")
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"format": "torch_mma_emu.Schedule",
                             "schedule": "schedule:split_k=9"}))
    with pytest.raises(ValueError, match="MMA_EMU_MAX_SPLIT_K"):
        load_schedule(str(f))
    monkeypatch.delenv("MMA_EMU_MAX_SPLIT_K")
    assert load_schedule(str(f)).split_k == 9


@pytest.mark.parametrize("value", ["abc", "0", "1", "3"])
def test_a_bad_split_k_bound_fails_the_work_not_the_import(value):
    """Issue 42 High 1: MMA_EMU_MAX_SPLIT_K=abc (or 0, 1, 3) broke ``import torch_mma_emu``
    and every command (the split-K presets are built at import).  The bound is checked where
    a schedule is read or run: the import and an unsplit product work, a split one says why."""
    import subprocess
    import sys
    code = ("import torch, torch_mma_emu as tme\n"
            "A = torch.ones(4, 64, dtype=torch.half); B = torch.ones(64, 4, dtype=torch.half)\n"
            "assert tme.emulated_mm(A, B, arch='sm90')[0, 0].item() == 64\n"
            "try:\n"
            "    tme.emulated_mm(A, B, arch='sm90', schedule='cublas_split_k_4')\n"
            "except ValueError as e:\n"
            "    print('ERR', e)\n")
    env = dict(os.environ, MMA_EMU_MAX_SPLIT_K=value)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ERR" in r.stdout and "MMA_EMU_MAX_SPLIT_K" in r.stdout, r.stdout
    r = subprocess.run([sys.executable, "-m", "torch_mma_emu", "archs"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
