"""The mismatching inputs of a run: one capped tar of .pt members (``Archive``), read back by
``read_archive``; ``samples`` cuts out the dot products behind chosen outputs (fit-ready)."""
from __future__ import annotations

import io
import math
import os
import tarfile
import time

import torch

ARCHIVE_CAP = 15 << 20      # bytes; one file that comes back from the GPU machine (<= 16 MiB)
SAVE_OUTPUTS = 64           # mismatching outputs saved per row


class Archive:
    """One tar of .pt members, appended member by member (a cut-off run keeps every member
    written before it) and capped at ``cap`` bytes."""

    def __init__(self, path: str | None, cap: int = ARCHIVE_CAP):
        self.path, self.cap = path, cap
        self.names: set[str] = set()
        if path and os.path.exists(path):
            try:
                with tarfile.open(path) as t:
                    self.names = set(t.getnames())
            except (tarfile.TarError, OSError):
                os.replace(path, _free_name(path + ".broken"))   # never over an earlier one

    def add(self, name: str, obj) -> str | None:
        """Store ``obj`` (torch.save) as ``name``; the member's address, or None when there is
        no archive or it is full."""
        if not self.path:
            return None
        buf = io.BytesIO()
        torch.save(plain(obj), buf)
        data = buf.getvalue()
        size = os.path.getsize(self.path) if os.path.exists(self.path) else 0
        if size + len(data) + 1024 > self.cap:
            return None
        base, n = name, 1
        while name in self.names:
            n += 1
            name = f"{base[:-3]}_{n}.pt" if base.endswith(".pt") else f"{base}_{n}"
        os.makedirs(os.path.dirname(os.path.abspath(self.path)) or ".", exist_ok=True)
        info = tarfile.TarInfo(name)
        info.size, info.mtime = len(data), int(time.time())
        with tarfile.open(self.path, "a") as t:
            t.addfile(info, io.BytesIO(data))
        self.names.add(name)
        return f"{os.path.basename(self.path)}:{name}"


def _free_name(path: str) -> str:
    """``path``, or ``path.2``, ``path.3``, ...: the first that does not exist."""
    n, cand = 1, path
    while os.path.lexists(cand):
        n += 1
        cand = f"{path}.{n}"
    return cand


_PLAIN = (str, int, float, bool, type(None), torch.Tensor, torch.dtype, torch.device)


def plain(obj):
    """``obj`` with only what ``torch.load(weights_only=True)`` reads back: dicts, lists and
    tuples of tensors, numbers, strings and dtypes; anything else becomes its ``str``."""
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(plain(v) for v in obj) if type(obj) in (list, tuple) else \
            [plain(v) for v in obj]
    return obj if isinstance(obj, _PLAIN) else str(obj)


def read_archive(path: str) -> dict:
    """{member name: loaded object}: the mismatches of a run, to re-run them on any machine.
    Members are read with ``weights_only=True``: tensors and plain containers only, never
    code (a member that holds anything else is refused, named)."""
    out = {}
    with tarfile.open(path) as t:
        for m in t.getmembers():
            f = t.extractfile(m) if m.isfile() else None
            if f is None:
                raise ValueError(f"{path}: member {m.name!r} is not a regular file")
            try:
                out[m.name] = torch.load(io.BytesIO(f.read()), weights_only=True)
            except Exception as e:  # noqa: BLE001  (pickle.UnpicklingError and its kin)
                first = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
                raise ValueError(f"{path}: member {m.name!r} is not an archive entry "
                                 f"(tensors, numbers, strings; never code): {first}") from None
    return out


def samples(kw: dict, idx, **outs) -> dict:
    """The dot products behind output indices ``idx`` ((n, dim) tensor, dim = 2 or 3): rows
    a (n, K) of A, columns b (n, K) of B, c (n,) and each named output (n,), in the tensors'
    own dtypes, plus the scales of scaled specs.  ``probe.fit`` and ``emulated_mm`` take them
    as they are."""
    A, B, C = kw["A"].cpu(), kw["B"].cpu(), kw.get("C")
    out0 = next(iter(outs.values()))
    batch, (M, N) = tuple(out0.shape[:-2]), tuple(out0.shape[-2:])
    K = A.shape[-1]
    A = A.broadcast_to((*batch, M, K)).reshape(-1, M, K)
    B = B.broadcast_to((*batch, K, N)).reshape(-1, K, N)
    nb, nbd = A.shape[0], len(batch)
    idx = idx.reshape(-1, nbd + 2).long()
    strides = torch.tensor([math.prod(batch[d + 1:]) for d in range(nbd)], dtype=torch.long)
    flat_b = (idx[:, :nbd] * strides).sum(1) if nbd else torch.zeros(idx.shape[0], dtype=torch.long)
    i, j = idx[:, -2].long(), idx[:, -1].long()
    res = dict(a=A[flat_b, i, :], b=B[flat_b, :, j], index=idx.clone(),
               kw={k: v for k, v in kw.items() if not isinstance(v, torch.Tensor)
                   and k != "arch"})
    if C is not None:
        res["c"] = C.cpu().broadcast_to((*batch, M, N)).reshape(nb, M, N)[flat_b, i, j]
    for name in ("scale_a", "scale_b"):
        if kw.get(name) is not None:
            s = kw[name].cpu()
            s = s.broadcast_to((*batch, *s.shape[-2:])).reshape(nb, *s.shape[-2:])
            res[name] = s[flat_b, i, :] if name == "scale_a" else s[flat_b, :, j]
    for name, t in outs.items():
        res[name] = t.cpu().reshape(nb, M, N)[flat_b, i, j]
    return res

