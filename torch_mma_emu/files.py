"""Files the package reads and writes, handled so that a hostile or unlucky path does no harm.

* :func:`atomic_write` / :func:`atomic_path`: a file is written to a temporary name in its
  own folder and moved over the target with ``os.replace`` only when complete, so a kill, a
  full disk or ``ulimit -f`` leaves the previous file (or none), never half of one.
* :func:`regular_file`: a path named as an input (or an output to replace) must be a regular
  file: a FIFO would block the reader forever, a device or a folder is no data file.
"""
from __future__ import annotations

import contextlib
import os
import stat


class NotRegularFileError(ValueError):
    """A path that exists and is not a regular file (a FIFO, a device, a folder, a socket)."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def regular_file(path, what: str = "file", *, may_be_missing: bool = False) -> str:
    """``path`` when it is a regular file (symlinks followed); else
    :class:`NotRegularFileError` (FileNotFoundError when missing, unless ``may_be_missing``).
    Checked before opening: opening a FIFO for reading blocks until a writer comes."""
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if may_be_missing:
            return path
        raise FileNotFoundError(f"{what} {path}: no such file") from None
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFileError(f"{what} {path} is {_kind(st.st_mode)}, not a regular file")
    return path


@contextlib.contextmanager
def atomic_path(path, what: str = "output file"):
    """A temporary path beside ``path`` to write; moved over ``path`` when the block ends
    without an error, removed otherwise.  An existing ``path`` that is not a regular file
    (a FIFO, a folder) is refused before anything is written."""
    path = os.fspath(path)
    regular_file(path, what, may_be_missing=True)
    folder = os.path.dirname(os.path.abspath(path)) or "."
    base, ext = os.path.splitext(os.path.basename(path))
    tmp = _new_temp(folder, f".{base}.", f".tmp{ext}")
    try:
        yield tmp
        with open(tmp, "rb+") as f:       # on disk before it takes the name
            os.fsync(f.fileno())
        if os.path.exists(path):          # a replaced file keeps its permissions
            try:
                os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
            except OSError:
                pass
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _new_temp(folder: str, prefix: str, suffix: str) -> str:
    """A new empty file in ``folder`` (created exclusively, mode 0666 less the umask)."""
    for _ in range(100):
        tmp = os.path.join(folder, f"{prefix}{os.urandom(6).hex()}{suffix}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {folder}")


def atomic_write(path, data, what: str = "output file") -> None:
    """Write ``data`` (str: UTF-8 text, or bytes) to ``path`` all at once (see the module)."""
    with atomic_path(path, what) as tmp:
        if isinstance(data, str):
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(data)
        else:
            with open(tmp, "wb") as f:
                f.write(data)
