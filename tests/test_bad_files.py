"""Malformed strings and files, as a new user writes them: each a ValueError / TypeError
saying what is allowed, and on the command line exit code 2 and one line, no traceback.
Schedules (compare / reveal --schedule), recorded samples (mma-emu fit: .npz and
index.json), SumTree JSON, and the tf32x3 tile length."""
import json
import shutil
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu.cli import main
from torch_mma_emu.order import SumTree
from torch_mma_emu.probe import fit
from torch_mma_emu.schedule import Schedule, load_schedule

HW = Path(__file__).resolve().parent / "data/hwdata/H100_fp16_to_fp32.npz"


def _one_line_exit_2(capsys, argv, msg):
    assert main(argv) == 2
    out = capsys.readouterr()
    lines = out.err.splitlines()
    assert len(lines) == 1 and msg in lines[0], out.err
    assert "Traceback" not in out.err and out.out == ""


@pytest.fixture
def files(tmp_path):
    """Bad schedule and sample files."""
    (tmp_path / "nosched.json").write_text(json.dumps({"format": "torch_mma_emu.Schedule"}))
    (tmp_path / "notstr.json").write_text(json.dumps({"format": "torch_mma_emu.Schedule",
                                                      "schedule": 4}))
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "empty.npz").write_bytes(b"")
    data = HW.read_bytes()
    (tmp_path / "trunc.npz").write_bytes(data[:len(data) // 2])
    (tmp_path / "text.npz").write_text("hello")
    np.save(tmp_path / "single.npy", np.zeros(3))
    z = dict(np.load(HW))
    z["a"] = z["a"].astype(np.int64)
    z["a"][0, 0] += 1 << 32                       # an fp16 value's pattern, wrapped once
    np.savez(tmp_path / "wide.npz", **z)
    np.savez(tmp_path / "nod.npz", **{k: v for k, v in np.load(HW).items() if k != "d"})
    for name, index in (("dict", {"file": "x.npz"}), ("nokeys", [{"file": "x.npz"}]),
                        ("notjson", None)):
        d = tmp_path / name
        d.mkdir()
        shutil.copy(HW, d / "x.npz")
        (d / "index.json").write_text("{" if index is None else json.dumps(index))
    (tmp_path / "nothing").mkdir()
    return tmp_path


# What the command line, load_schedule and fit refuse: (command, argument, the message's start)
BAD = [
    ("schedule", "schedule:alpha=0x1p99999,c_mode=epilogue", "alpha must be a finite number"),
    ("schedule", "schedule:beta=1e400,c_mode=epilogue", "beta must be a finite number"),
    ("schedule", "schedule:split_k=2,split_k=4", "schedule field split_k is given twice"),
    ("schedule", "nosched.json", "not a schedule file: expected {'format'"),
    ("schedule", "notstr.json", "not a schedule file"),
    ("schedule", "deep.json", "its JSON nests too deeply"),
    ("schedule", "binary.json", "cannot read the schedule file"),
    ("fit", "empty.npz", "the file is empty"),
    ("fit", "trunc.npz", "cannot read it as an .npz"),
    ("fit", "text.npz", "the file is not a zip archive"),
    ("fit", "single.npy", "the file is a single .npy array"),
    ("fit", "nod.npz", "it lacks arrays ['d']"),
    ("fit", "wide.npz", "which is not an fp32 bit pattern: integer samples must lie in 0..0xFFFFFFFF"),
    ("fit", "dict", "an index is a JSON list of objects"),
    ("fit", "nokeys", "the entry of x.npz lacks in_format and out_dtype"),
    ("fit", "notjson", "not a readable JSON index"),
    ("fit", "nothing", "holds no .npz files"),
]


def refused(command):
    """The (argument, message) cases of BAD for one command, one test each."""
    cases = [(arg, msg) for c, arg, msg in BAD if c == command]
    return pytest.mark.parametrize("arg,msg", cases, ids=[a for a, _ in cases])


@refused("schedule")
def test_compare_and_reveal_refuse_bad_schedules(capsys, files, arg, msg):
    arg = str(files / arg) if arg.endswith(".json") else arg
    _one_line_exit_2(capsys, ["compare", "--schedule", arg], msg)
    _one_line_exit_2(capsys, ["reveal", "matmul", "--k", "8", "--backend", "emulated",
                              "--schedule", arg, "--no-progress"], msg)
    with pytest.raises(ValueError, match=msg[:20]):
        load_schedule(arg)


@refused("fit")
def test_fit_refuses_bad_samples(capsys, files, arg, msg):
    fmt = [] if (files / arg).is_dir() else ["--format", "fp16", "--out", "fp32"]
    _one_line_exit_2(capsys, ["fit", str(files / arg), *fmt], msg)
    if not (files / arg).is_dir():
        with pytest.raises(ValueError) as e:
            fit(str(files / arg), "fp16", "fp32")
        assert msg in str(e.value)
        # a file that cannot be read names itself (SamplesFileError: fit adds no prefix);
        # bad contents are a plain ValueError, which fit's command line prefixes with the path
        from torch_mma_emu.probe.samples import SamplesFileError
        assert isinstance(e.value, SamplesFileError) == (arg not in ("wide.npz",)), arg


def test_fit_refuses_wide_bit_patterns_from_arrays_and_tensors():
    z = dict(np.load(HW))
    a = z["a"].astype(np.int64)
    a[3, 1] = -(1 << 31) - 1
    with pytest.raises(ValueError, match="a holds the integer -2147483649"):
        fit((a, z["b"], z["c"], z["d"]), "fp16", "fp32")
    d = torch.from_numpy(z["d"].astype(np.int64))
    d[0] += 1 << 40
    with pytest.raises(ValueError, match="d holds the integer"):
        fit((torch.from_numpy(z["a"].astype(np.int64)), torch.from_numpy(z["b"].astype(np.int64)),
             torch.from_numpy(z["c"].astype(np.int64)), d), "fp16", "fp32")
    # the int32 view of the same patterns is the same data
    i32 = {k: v.astype(np.uint32).view(np.int32) for k, v in z.items()}
    r1 = fit((i32["a"], i32["b"], i32["c"], i32["d"]), "fp16", "fp32", limit=1, passes=False)
    r2 = fit(str(HW), "fp16", "fp32", limit=1, passes=False)
    assert r1.best == r2.best


def test_huge_leaf_count_is_refused_cheaply():
    doc = {"format": "torch_mma_emu.fprev.SumTree", "n": 300_000_000, "nodes": [], "root": 0}
    tracemalloc.start()
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="above the bound of 65536 leaves .* set "
                                         "MMA_EMU_MAX_TREE_LEAVES to raise it"):
        SumTree.from_json(json.dumps(doc))
    with pytest.raises(ValueError, match="not connected to the root"):
        SumTree.from_json(json.dumps({**doc, "n": 60_000}))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1 << 20 and time.perf_counter() - t0 < 1.0
    with pytest.raises(ValueError, match="n must be an integer, got 300000000.0"):
        SumTree.from_json(json.dumps({**doc, "n": 3e8}))
    with pytest.raises(ValueError, match="nests too deeply"):
        SumTree.from_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="not JSON"):
        SumTree.from_json("{")
    with pytest.raises(ValueError, match="meta must be an object"):
        SumTree.from_json(json.dumps({**doc, "n": 2, "nodes": [["add", [0, 1]]], "root": 2,
                                      "meta": [1]}))


def test_tf32x3_tiles_and_promotion_blocks_hold_whole_instructions():
    """dot_k and promote_every follow one rule: a multiple of the instruction's K."""
    A, B = torch.randn(4, 64), torch.randn(64, 3)
    L = tme.spec("sm90", "tf32").L
    for bad in (Schedule(input_precision="tf32x3", dot_k=L + 1),
                Schedule(input_precision="tf32_rn", promote_every=L + 1)):
        name = "dot_k" if bad.dot_k else "promote_every"
        with pytest.raises(ValueError, match=f"{name}={L + 1} is not a multiple of the "
                                             f"instruction's K"):
            tme.emulated_mm(A, B, arch="sm90", schedule=bad)
    ok = tme.emulated_mm(A, B, arch="sm90", schedule=Schedule(input_precision="tf32x3",
                                                              dot_k=2 * L))
    assert ok.shape == (4, 3)
    with pytest.raises(ValueError, match="dot_k must be >= 1"):
        Schedule(input_precision="tf32x3", dot_k=0)
