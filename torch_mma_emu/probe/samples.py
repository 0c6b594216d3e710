"""Recorded dot-product-accumulate samples: inputs and the unit's answers, as batches in
``emulated_mm``'s operand conventions (so a candidate model is checked with one call per
batch).  Sources: the probe log of a session, random inputs run on a target, or files of
recorded data (the ``a, b, c, d`` uint32 fp32-bit-pattern arrays of tests/data/hwdata)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..files import NotRegularFileError, regular_file
from ..limits import BOUNDS, MIB, limit
from .targets import Interface, encode, interface, output_codes, signed64


class SamplesFileError(ValueError):
    """A samples file (or its index.json) that cannot be read as samples; the message names
    the file."""


@dataclass
class Batch:
    """S samples of one length K: A (S, 1, K), B (S, K, 1), C (S, 1, 1), D codes (S,)."""

    A: torch.Tensor
    B: torch.Tensor
    C: torch.Tensor
    D: torch.Tensor                      # int64 bit patterns of the answers
    scale_a: torch.Tensor | None = None
    scale_b: torch.Tensor | None = None
    label: str = ""

    def __len__(self) -> int:
        return self.A.shape[0]

    @property
    def K(self) -> int:
        return self.A.shape[2]

    def select(self, idx) -> "Batch":
        sa = None if self.scale_a is None else self.scale_a[idx]
        sb = None if self.scale_b is None else self.scale_b[idx]
        return Batch(self.A[idx], self.B[idx], self.C[idx], self.D[idx], sa, sb, self.label)


@dataclass
class Samples:
    iface: Interface
    batches: list = field(default_factory=list)
    source: str = ""

    def __len__(self) -> int:
        return sum(len(b) for b in self.batches)

    @property
    def ks(self) -> list[int]:
        return sorted({b.K for b in self.batches})

    def add(self, batch: Batch) -> None:
        if len(batch):
            self.batches.append(batch)

    def split(self, first: int = 64) -> "Samples":
        """The same samples with a small leading batch (cheap early rejection)."""
        out = Samples(self.iface, source=self.source)
        for b in self.batches:
            if len(b) > 2 * first:
                out.add(b.select(slice(0, first)))
                out.add(b.select(slice(first, None)))
            else:
                out.add(b)
        out.batches.sort(key=len)
        return out


def from_runner_log(iface: Interface, log) -> Samples:
    """Every probe vector of a session with the target's answer (one batch per K)."""
    from .targets import encode_scales
    by_k: dict[int, list] = {}
    for v, o in log:
        by_k.setdefault(max(1, v.K), []).append((v, o))
    s = Samples(iface, source="probe vectors")
    for K, items in sorted(by_k.items()):
        S = len(items)
        av = torch.zeros(S, K, dtype=torch.float64)
        bv = torch.zeros(S, K, dtype=torch.float64)
        for i, (v, _) in enumerate(items):
            if v.K:
                av[i, :v.K] = torch.tensor(v.a, dtype=torch.float64)
                bv[i, :v.K] = torch.tensor(v.b, dtype=torch.float64)
        cv = torch.tensor([v.c for v, _ in items], dtype=torch.float64)
        A = encode(av, iface.fmt_a).reshape(S, 1, K)
        B = encode(bv, iface.fmt_b).reshape(S, K, 1)
        C = cv.to(iface.out_dtype).reshape(S, 1, 1)
        D = torch.tensor([signed64(o.code) for _, o in items], dtype=torch.int64)
        sa = sb = None
        if iface.scaled:
            nblk = -(-K // iface.block_size)
            sav = torch.ones(S, nblk, dtype=torch.float64)
            sbv = torch.ones(S, nblk, dtype=torch.float64)
            for i, (v, _) in enumerate(items):
                if v.sa:
                    sav[i, :len(v.sa)] = torch.tensor(v.sa, dtype=torch.float64)
                    sbv[i, :len(v.sb)] = torch.tensor(v.sb, dtype=torch.float64)
            sa = encode_scales(sav, iface.scale_format).reshape(S, 1, nblk)
            sb = encode_scales(sbv, iface.scale_format).reshape(S, nblk, 1)
        s.add(Batch(A, B, C, D, sa, sb, f"probes K={K}"))
    return s


def check_schedule(n, ks, families, batch) -> tuple[tuple, list]:
    """Validated (families, ks) for :func:`random_batches`; clear errors otherwise."""
    from ..inputs import FAMILIES
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive int, got {batch!r}")
    fams = tuple(FAMILIES if families is None else families)
    if not fams or any(f not in FAMILIES for f in fams):
        raise ValueError(f"families must be a non-empty selection of {FAMILIES}, got "
                         f"{families!r}")
    ks = list(ks)
    if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
        raise ValueError(f"ks must be a non-empty list of lengths K >= 1, got {ks!r}")
    return fams, ks


def random_batches(spec_like, n: int, ks, families, g: torch.Generator, batch: int):
    """Yield (family, K, operands) for n random inputs of seed 003's families: every
    (family, K) pair gets an even share, in chunks of at most ``batch``."""
    from ..inputs import operands
    fams, ks = check_schedule(n, ks, families, batch)
    chunk = max(1, min(batch, -(-n // (len(fams) * len(ks)))))
    done, i = 0, 0
    while done < n:
        fam = fams[i % len(fams)]
        K = ks[(i // len(fams)) % len(ks)]
        S = min(chunk, n - done)
        yield fam, K, operands(spec_like, 1, 1, K, fam, g, batch=(S,))
        done += S
        i += 1


def random_samples(target, n: int, ks, seed: int = 0, families=None,
                   batch: int = 4096) -> Samples:
    """n random inputs of seed 003's three families (split evenly over families and ks),
    run on ``target``."""
    iface = target.iface
    stand_in = stand_in_spec(iface)   # carries only the formats for inputs.operands
    g = torch.Generator().manual_seed(seed)
    fams, _ = check_schedule(n, ks, families, batch)
    s = Samples(iface, source=f"{n} random inputs ({', '.join(fams)})")
    for fam, K, kw in random_batches(stand_in, n, ks, families, g, batch):
        S = kw["A"].shape[0]
        C = kw["C"] if kw["C"] is not None else torch.zeros(S, 1, 1, dtype=iface.out_dtype)
        D = target(kw["A"], kw["B"], C, kw.get("scale_a"), kw.get("scale_b"))
        s.add(Batch(kw["A"], kw["B"], C, output_codes(D.reshape(-1)), kw.get("scale_a"),
                    kw.get("scale_b"), f"{fam} K={K}"))
    return s


def stand_in_spec(iface: Interface):
    """A Spec with the interface's formats (what inputs.operands needs to draw inputs)."""
    from .. import elementary as elem
    from ..spec import Spec
    # the simplest truncated fused operation taking these formats (T-FDPA; ST-FDPA, or
    # GST-FDPA for ue4m3 scales: where none takes them, Spec says why)
    ebits = max(iface.fmt_a.exp_bits, iface.fmt_b.exp_bits)
    ops = [elem.OPS[n] for n in elem.names(has_F=True, has_F2=False, scaled=iface.scaled)]
    fits = [o for o in ops if (not o.scaled or iface.scale_format in o.scale_formats)
            and (o.max_exp_bits is None or ebits <= o.max_exp_bits)]
    o = (fits or ops)[0]
    return Spec(op=o.name, in_format=iface.fmt_a.name,
                in_format_b=None if iface.fmt_b == iface.fmt_a else iface.fmt_b.name,
                out_format=iface.out.name, L=iface.block_size if o.scaled else 1, F=24,
                rho=elem.rhos_for(iface.out.name, o.name)[0],
                G=iface.block_size if o.has_G else 0,
                scale_format=iface.scale_format if iface.scale_format in o.scale_formats
                else None, block_size=iface.block_size)


# ------------------------------------------------------------------------------------
# recorded files
# ------------------------------------------------------------------------------------

def check_bit_patterns(x: np.ndarray, name: str) -> None:
    """Integer samples are fp32 bit patterns: 0..2**32-1 (uint32), or their int32 view
    (-2**31..-1 for the patterns with the sign bit set); anything else is refused, never
    wrapped."""
    if x.size == 0:
        return
    lo, hi = int(x.min()), int(x.max())
    if lo < -(1 << 31) or hi > 0xFFFFFFFF:
        bad = lo if lo < -(1 << 31) else hi
        raise ValueError(f"samples: {name} holds the integer {bad}, which is not an fp32 bit "
                         "pattern: integer samples must lie in 0..0xFFFFFFFF (uint32), or "
                         "-0x80000000..0x7FFFFFFF as int32")


def _u32_to_f32(x) -> torch.Tensor:
    return torch.from_numpy(np.asarray(x).astype(np.int64).astype(np.int32)).view(torch.float32)


_BIT_DTYPES = (np.dtype(np.uint32), np.dtype(np.int32), np.dtype(np.int64))


def from_arrays(a, b, c, d, in_format, out_dtype=None, *, source="arrays") -> Samples:
    """Samples from arrays a (S, K), b (S, K), c (S,), d (S,): either uint32 fp32 bit
    patterns (the hwdata convention) or floating arrays holding exact values.  c is rounded
    to the output format (RNE) as the recording harness did; d must be exact outputs."""
    iface = interface(in_format, out_dtype)

    def f32(x, name):
        x = np.asarray(x)
        if np.issubdtype(x.dtype, np.integer) and x.dtype not in _BIT_DTYPES:
            raise TypeError(f"samples: {name} has dtype {x.dtype}; allowed: uint32 fp32 bit "
                            "patterns (or int32 / int64 holding them) or float values")
        if np.issubdtype(x.dtype, np.integer):        # fp32 bit patterns
            check_bit_patterns(x, name)
            return _u32_to_f32(x).to(torch.float64)
        if not np.issubdtype(x.dtype, np.floating):
            raise TypeError(f"samples: {name} has dtype {x.dtype}; allowed: uint32 fp32 bit "
                            "patterns (or int32 / int64 holding them) or float values")
        return torch.from_numpy(x.astype(np.float64))
    av, bv = f32(a, "a"), f32(b, "b")
    cv, dv = f32(c, "c").reshape(-1), f32(d, "d").reshape(-1)
    if av.dim() != 2 or bv.shape != av.shape or cv.numel() != av.shape[0] or \
            dv.numel() != av.shape[0]:
        raise ValueError(f"samples need a (S, K), b (S, K), c (S,), d (S,); got "
                         f"{tuple(av.shape)}, {tuple(bv.shape)}, {tuple(cv.shape)}, "
                         f"{tuple(dv.shape)}")
    S, K = av.shape
    if S == 0 or K == 0:
        raise ValueError(f"samples need at least one row and K >= 1; got a of shape "
                         f"{tuple(av.shape)}")
    if iface.out_dtype != torch.float64:
        fin = torch.isfinite(dv)
        rt = dv.to(torch.float32).to(iface.out_dtype).to(torch.float64)
        if not torch.equal(rt[fin], dv[fin]):
            i = int((rt != dv)[fin].nonzero()[0])
            raise ValueError(f"d holds values that are not {iface.out.name} values (e.g. "
                             f"{float(dv[fin][i])!r}); is out_dtype right?")
    try:
        A = encode(av, iface.fmt_a).reshape(S, 1, K)
        B = encode(bv, iface.fmt_b).reshape(S, K, 1)
    except ValueError as e:
        raise ValueError(f"the recorded inputs are not {iface.fmt_a.name} values: {e}") from e
    C = cv.to(torch.float32).to(iface.out_dtype).reshape(S, 1, 1) \
        if iface.out_dtype != torch.float64 else cv.reshape(S, 1, 1)
    D = output_codes(dv.to(torch.float32).to(iface.out_dtype)
                     if iface.out_dtype != torch.float64 else dv)
    s = Samples(iface, source=source)
    s.add(Batch(A, B, C, D, label=source))
    return s


def _regular(p: Path, what: str) -> None:
    """A FIFO (whose reading would wait forever), a device: refused before opening."""
    try:
        regular_file(p, what)
    except NotRegularFileError as e:
        raise SamplesFileError(str(e)) from None


def _index_entry(idx: Path, name: str) -> dict:
    """The entry of ``index.json`` (a list of {"file", "in_format", "out_dtype", ...}) for
    the file ``name``, or {} when it names none."""
    import json
    try:
        doc = json.loads(idx.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise SamplesFileError(f"{idx}: not a readable JSON index: {e}") from None
    if not isinstance(doc, list) or not all(isinstance(e, dict) for e in doc):
        raise SamplesFileError(f"{idx}: an index is a JSON list of objects "
                         "{\"file\": ..., \"in_format\": ..., \"out_dtype\": ...}; got "
                         f"{type(doc).__name__}")
    for e in doc:
        if e.get("file") == name:
            bad = [k for k in ("in_format", "out_dtype") if not isinstance(e.get(k), str)]
            if bad:
                raise SamplesFileError(f"{idx}: the entry of {name} lacks {' and '.join(bad)} "
                                 "(format names such as \"fp16\", \"fp32\")")
            return e
    return {}


def _npz_arrays(p: Path) -> dict:
    """Arrays a, b, c, d of an .npz file (clear errors for anything else)."""
    import zipfile
    import zlib
    why = f"{p.name}: cannot read it as an .npz (numpy.savez) with arrays a, b, c, d"
    try:
        with open(p, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise SamplesFileError(f"{why}: {e}") from None
    if magic not in (b"PK\x03\x04", b"PK\x05\x06"):
        kind = "empty" if not magic else ("a single .npy array" if magic == b"\x93NUM"
                                          else "not a zip archive")
        raise SamplesFileError(f"{why}: the file is {kind}")
    top = limit("file_mib")
    try:
        with zipfile.ZipFile(p) as zf:     # the arrays' unpacked size, before unpacking them
            unpacked = sum(i.file_size for i in zf.infolist())
            declared = _declared_bytes(zf, p.name, top * MIB)
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:
        raise SamplesFileError(f"{why}: {e or type(e).__name__}") from None
    if unpacked > top * MIB:
        raise SamplesFileError(f"{p.name}: its arrays unpack to {unpacked / MIB:.0f} MiB, above "
                               f"the bound of {top} {BOUNDS['file_mib'].what}; set "
                               f"{BOUNDS['file_mib'].env} to raise it")
    if declared > top * MIB:
        raise SamplesFileError(f"{p.name}: its arrays' headers declare {declared / MIB:.0f} MiB"
                               f", above the bound of {top} {BOUNDS['file_mib'].what}; set "
                               f"{BOUNDS['file_mib'].env} to raise it")
    try:
        with np.load(p, allow_pickle=False) as z:
            missing = [k for k in ("a", "b", "c", "d") if k not in z.files]
            if missing:
                raise ValueError(f"it lacks arrays {missing}")
            return {k: z[k] for k in "abcd"}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, zlib.error, KeyError) as e:
        raise SamplesFileError(f"{why}: {e or type(e).__name__}") from None


def _declared_bytes(zf, name: str, top: int) -> int:
    """The bytes the .npy headers of an .npz's members declare (shape x item size): what
    np.load would allocate, whatever the member's own size says."""
    total = 0
    for info in zf.infolist():
        if not info.filename.endswith(".npy"):
            continue
        with zf.open(info) as f:
            try:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                else:
                    shape, _, dtype = np.lib.format.read_array_header_2_0(f)
            except ValueError as e:
                raise ValueError(f"member {info.filename}: {e}") from None
        n = 1
        for s in shape:
            n *= int(s)
        total += n * max(1, dtype.itemsize)
        if total > top:
            break
    return total


def load(path, in_format=None, out_dtype=None) -> Samples:
    """A recorded ``.npz`` (arrays a, b, c, d).  For files of tests/data/hwdata the formats
    come from the directory's index.json when not given."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such samples file: {p}")
    if p.is_dir():
        raise SamplesFileError(f"{p} is a directory; give an .npz file (mma-emu fit takes "
                         "directories)")
    _regular(p, "samples file")
    if in_format is None or out_dtype is None:
        idx = p.parent / "index.json"
        if idx.exists():
            _regular(idx, "index")
            e = _index_entry(idx, p.name)
            in_format = in_format or e.get("in_format")
            out_dtype = out_dtype or e.get("out_dtype")
        if in_format is None:
            raise SamplesFileError(f"{p.name}: say in_format= (and out_dtype=); no index.json "
                             "entry names them")
    z = _npz_arrays(p)
    return from_arrays(z["a"], z["b"], z["c"], z["d"], in_format, out_dtype, source=p.name)


__all__ = ["Batch", "Samples", "SamplesFileError", "from_runner_log", "random_samples", "random_batches",
           "check_schedule", "from_arrays", "load"]
