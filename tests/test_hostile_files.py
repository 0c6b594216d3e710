"""Hostile inputs, round 3 (issue 42): files that run code when read, files lost mid-write,
files that are not files (FIFOs), bounds read from the environment.  Each case failed before
the fix it names."""
import io
import os
import tarfile

import pytest
import torch

from torch_mma_emu.hw import archive


class _Payload:
    """A pickle whose loading calls ``open(path, "w")``: the file appears if it runs."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_read_archive_never_unpickles_code(tmp_path):
    """High 2: a .pt member whose pickle calls a function (here open(..., "w"): it would create
    a file; os.system would run a command) is refused, named, and nothing runs."""
    victim = tmp_path / "created_by_pickle"
    buf = io.BytesIO()
    torch.save({"a": torch.ones(2), "x": _Payload(str(victim))}, buf)
    tar = tmp_path / "evil.tar"
    with tarfile.open(tar, "w") as t:
        info = tarfile.TarInfo("evil.pt")
        info.size = len(buf.getvalue())
        t.addfile(info, io.BytesIO(buf.getvalue()))
    with pytest.raises(ValueError, match="member 'evil.pt' is not an archive entry"):
        archive.read_archive(str(tar))
    assert not victim.exists()


def test_archive_round_trips_what_runs_store(tmp_path):
    """What the GPU steps store (tensors, dtypes, strings, nested dicts) reads back with
    weights_only=True; anything else is stored as its text, never as a pickled object."""
    a = archive.Archive(str(tmp_path / "m.tar"))
    x = torch.arange(6.).reshape(2, 3)
    a.add("r.pt", dict(a=x, kw={"out_dtype": torch.float16, "c_mode": "chain", "n": 3,
                                "odd": _Payload(str(tmp_path / "never"))}, t=(1, 2.5)))
    got = archive.read_archive(str(tmp_path / "m.tar"))["r.pt"]
    assert torch.equal(got["a"], x) and got["kw"]["out_dtype"] is torch.float16
    assert isinstance(got["kw"]["odd"], str) and got["t"] == (1, 2.5)
    assert not (tmp_path / "never").exists()


def test_a_corrupt_archive_is_moved_aside_without_overwriting(tmp_path):
    """Medium 4: Archive() moved a corrupt tar over an existing ``.broken``."""
    p = tmp_path / "m.tar"
    (tmp_path / "m.tar.broken").write_text("the first broken one")
    p.write_bytes(b"not a tar" * 100)
    archive.Archive(str(p))
    assert (tmp_path / "m.tar.broken").read_text() == "the first broken one"
    assert (tmp_path / "m.tar.broken.2").read_bytes() == b"not a tar" * 100
    assert not p.exists()


# ---------------------------------------------------------------------------------------
# Medium 4: writes are all or nothing; nothing the user did not name is replaced

def _run_cli(args, cwd, fsize=None, timeout=120):
    import resource
    import subprocess
    import sys

    def limit():
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))    # this checkout
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return subprocess.run([sys.executable, "-m", "torch_mma_emu", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, preexec_fn=limit)


def test_a_write_cut_short_keeps_the_previous_file(tmp_path):
    """``ulimit -f`` (a full disk alike) while ``reveal sum --out t.json`` replaces a good
    t.json left invalid JSON: now the good file stays, the command exits 2 in one line and
    no temporary file is left beside it."""
    import json
    from torch_mma_emu.cli import main
    assert main(["reveal", "sum", "--n", "4", "--out", str(tmp_path / "t.json")]) == 0
    good = (tmp_path / "t.json").read_text()
    json.loads(good)
    assert len(good) < 3000
    r = _run_cli(["reveal", "sum", "--n", "512", "--out", "t.json"], tmp_path, fsize=4096)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "writing t.json" in r.stderr
    assert (tmp_path / "t.json").read_text() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_atomic_write_interrupted_leaves_the_old_file(tmp_path, monkeypatch):
    """The writer of every output (torch_mma_emu.files): an interruption between writing and
    renaming (a kill) leaves the old file and removes the temporary one."""
    from torch_mma_emu import files
    p = tmp_path / "out.json"
    p.write_text("old")
    files.atomic_write(p, "new")
    assert p.read_text() == "new"

    def boom(a, b):
        raise KeyboardInterrupt
    monkeypatch.setattr(files.os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        files.atomic_write(p, "newer")
    assert p.read_text() == "new" and [x.name for x in tmp_path.iterdir()] == ["out.json"]


def test_preview_never_replaces_a_json_the_user_did_not_name(tmp_path, capsys):
    """``preview --out rep.png`` writes its numbers to rep.json: a rep.json that is not a
    preview report is kept and the command stops before any work (exit 2, one line)."""
    from torch_mma_emu.cli import main
    mine = tmp_path / "rep.json"
    mine.write_text('{"my": "results"}')
    assert main(["preview", "--out", str(tmp_path / "rep.png"), "--arch", "sm90"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a preview report" in err[0], err
    assert mine.read_text() == '{"my": "results"}'


def test_approx_keeps_each_recording_as_it_is_made(tmp_path, monkeypatch):
    """scripts/gpu/approx.py rewrote its whole .npz after every instruction (a kill in the
    middle lost every earlier recording): each instruction is now saved on its own as it is
    recorded, and the .npz is written once, whole."""
    import numpy as np

    from torch_mma_emu.hw import approx
    saved = []
    real = approx._save_npz

    def spy(path, arrays):
        saved.append(sorted(arrays))
        real(path, arrays)

    def stop(*a, **k):          # a kill after the recordings, before the sweep
        raise KeyboardInterrupt
    monkeypatch.setattr(approx, "_save_npz", spy)
    monkeypatch.setattr(approx, "sweep", stop)
    monkeypatch.setattr(approx.shutil, "rmtree", lambda *a, **k: None)
    out = tmp_path / "a.npz"
    with pytest.raises(KeyboardInterrupt):
        approx.main(["--stand-in", "--only", "ex2.approx.f32,rcp.approx.f32", "--out",
                     str(out), "--report", str(tmp_path / "a.md")])
    assert len(saved) == 1                       # once, not once per instruction
    parts = sorted(p.name for p in (tmp_path / "a.npz.parts").iterdir())
    assert parts == ["ex2_approx_f32.npy", "rcp_approx_f32.npy"]
    with np.load(out) as z:
        assert np.array_equal(z["rcp_approx_f32"],
                              np.load(tmp_path / "a.npz.parts" / "rcp_approx_f32.npy"))


# ---------------------------------------------------------------------------------------
# Medium 7: a FIFO (or any file that is not a regular file) as a file argument is refused

@pytest.fixture
def alarm():
    """Fail instead of hanging forever (the bug: open() of a FIFO waits for a writer)."""
    import signal

    def hang(*a):
        raise TimeoutError("hung on a FIFO")
    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def test_fifos_are_refused_as_inputs_and_outputs(tmp_path, capsys, alarm):
    from torch_mma_emu.cli import main
    fifo = tmp_path / "f.npz"
    os.mkfifo(fifo)
    jf = tmp_path / "f.json"
    os.mkfifo(jf)
    cases = [
        (["fit", str(fifo)], "is a FIFO, not a regular file"),
        (["reveal", "sum", "--n", "4", "--out", str(jf)], "is a FIFO, not a regular file"),
        (["reveal", "matmul", "--m", "2", "--n", "2", "--k", "8", "--schedule-out", str(jf)],
         "is a FIFO, not a regular file"),
        (["compare", "--arch", "sm90", "--format", "fp16", "--schedule", str(jf)],
         "is a FIFO, not a regular file"),
    ]
    for argv, msg in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and msg in err[0], (argv, err)


def test_a_fifo_index_json_is_refused(tmp_path, alarm):
    """fit reads index.json beside a samples file for its formats: a FIFO there hung."""
    import numpy as np

    from torch_mma_emu.probe.samples import SamplesFileError, load
    np.savez(tmp_path / "s.npz", a=np.zeros((1, 4), np.float32), b=np.zeros((1, 4), np.float32),
             c=np.zeros(1, np.float32), d=np.zeros(1, np.float32))
    os.mkfifo(tmp_path / "index.json")
    with pytest.raises(SamplesFileError, match="index .*index.json is a FIFO"):
        load(tmp_path / "s.npz")


def test_a_closed_stdout_is_one_line(tmp_path):
    """``mma-emu archs >&-`` printed "internal error: AttributeError ... 'flush'"."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run(["bash", "-c", f'"{sys.executable}" -m torch_mma_emu archs >&-'],
                       cwd=root, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "standard output is closed" in lines[0], r.stderr


# ---------------------------------------------------------------------------------------
# Low: fit's samples files

def test_fit_refuses_int8_samples():
    """int8 arrays were taken as bit patterns though the message lists uint32 / int32 /
    int64 (13 s, then "0 reproduce every sample")."""
    import numpy as np

    from torch_mma_emu.probe.samples import from_arrays
    a = np.ones((2, 4), np.int8)
    with pytest.raises(TypeError, match="a has dtype int8; allowed: uint32"):
        from_arrays(a, a, np.ones(2, np.int8), np.ones(2, np.int8), "fp16", "fp32")


def test_a_npy_header_declaring_a_huge_array_is_refused_naming_the_file(tmp_path):
    """A member whose .npy header declares 10^12 elements gave "Unable to allocate 3.64 TiB"
    without naming the file: the bound checked the zip members' sizes, not the headers."""
    import zipfile

    import numpy as np

    from torch_mma_emu.probe.samples import SamplesFileError, load
    p = tmp_path / "huge.npz"
    np.savez(p, a=np.zeros((1, 4), np.float32), b=np.zeros((1, 4), np.float32),
             c=np.zeros(1, np.float32), d=np.zeros(1, np.float32))
    header = np.lib.format.header_data_from_array_1_0(np.zeros(1, np.float32))
    header["shape"] = (10 ** 12,)
    import io
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    with zipfile.ZipFile(p, "a") as z:
        z.writestr("e.npy", buf.getvalue() + b"\0" * 16)
    with pytest.raises(SamplesFileError, match="huge.npz: its arrays' headers declare "
                       "3814697 MiB, above the bound of 256"):
        load(p, "fp16", "fp32")
