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
