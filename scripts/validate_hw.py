#!/usr/bin/env python
"""Live validation on a CUDA GPU: the emulator against this GPU's own matrix units.

On a GPU machine with 10-minute commands, run it in parts (docs/hardware/RUNBOOK.md):

    bash scripts/gpu/build_smoke.sh                       # build once, smoke test each kind
    python scripts/validate_hw.py --parts identity --out $OUT --report $OUT/H200.md
    python scripts/validate_hw.py --parts native --resume $OUT/results.json ...
    python scripts/validate_hw.py --render a.json b.json --report docs/hardware/H200.md

Part 1  CUDA kernel == CPU kernel, bit for bit, for every registry entry (default >= 1e6
        outputs per entry over the three input families of seed 003 section 3.1.4, plus a
        batched, strided, broadcast case and the epilogue mode).
Part 2  for every input format this GPU has: each instruction kernel (wgmma, mma.sync
        m16n8k8/k16/k32), the Triton kernel and cuBLAS against the emulator (default >= 1e6
        outputs per format and path).  Each instruction kernel is compared with the model of
        the instruction that runs (``native.instruction_spec``: a registry row naming it, or
        the arch's default with L = the instruction's K; the warp-level fp8 mma.sync of
        Hopper has "no model yet" until the registry has its row, and its single-instruction
        samples are archived for ``probe.fit``).  Triton runs K zero-padded to whole 16-deep
        blocks (``triton_kernels.run_k``): the emulator runs the same padded chain.  cuBLAS
        adds C in its epilogue (c_mode="epilogue"); it has no e5m2 x e5m2 GEMM (skipped).
        Where a path differs, the first failing call is re-run under other hypotheses
        (the other c_mode, other archs' models, other L / F, tf32 operands rounded instead of
        truncated, split-K with an fp32 reduction) and the report names those that
        reproduce it bit for bit.
Part 3  emulated multiply-adds per second on the GPU (fp16 -> fp32, --bench-arch, --bench-size)
        beside fp32 torch.matmul without TF32, measured in the same run.

Results survive a command that is cut off: the log is flushed line by line, results.json and
the report are rewritten after every row, and the inputs of mismatching outputs go into ONE
archive (``--archive``, a tar of .pt files, capped in size).  ``--resume results.json`` skips
the rows a previous run finished.  ``--device cpu`` is a dry run of part 1 (CPU against CPU)
and of the report, for testing this script without a GPU.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os
import platform
import re
import sys
import tarfile
import time
import traceback
import zlib

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch_mma_emu as tme  # noqa: E402
from torch_mma_emu import native  # noqa: E402
from torch_mma_emu.inputs import FAMILIES, operands  # noqa: E402
from torch_mma_emu import registry  # noqa: E402
from torch_mma_emu.isa import KERNEL_TYPES  # noqa: E402
from torch_mma_emu.registry import all_specs  # noqa: E402

INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
OUT_NAME = {torch.float32: "fp32", torch.float16: "fp16", torch.float64: "fp64"}
PARTS = ("identity", "native", "bench")
ARCHIVE_CAP = 15 << 20      # bytes; one file that comes back from the GPU machine (<= 16 MiB)
SAVE_OUTPUTS = 64           # mismatching outputs saved per row
NO_MODEL_SAMPLES = 2048     # single-instruction samples per family saved for probe.fit
CUBLAS_NO_E5M2 = "skipped: cuBLAS has no e5m2 x e5m2 fp8 GEMM (torch._scaled_mm raises)"


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(INT[t.element_size()])


def spec_id(s) -> str:
    b = f"x{s.in_format_b}" if s.in_format_b else ""
    sc = f" {s.scale_format}/{s.block_size}" if s.scaled else ""
    return f"{s.arch} {s.in_format}{b}->{s.out_format}{sc} [{s.instruction}]"


def hexbits(t: torch.Tensor, idx) -> str:
    return hex(int(bits(t.cpu())[idx]) & ((1 << (8 * t.element_size())) - 1))


class Clock:
    def __init__(self, limit: float):
        self.start = time.time()
        self.limit = limit

    def left(self) -> float:
        return self.limit - (time.time() - self.start)


def to_dev(kw: dict, dev) -> dict:
    return {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}


def compare(x: torch.Tensor, y: torch.Tensor):
    """(number of differing bit patterns, index of the first, how many differ only in a NaN
    payload, the differing indices as an (n, dim) tensor)."""
    bx, by = bits(x.cpu()), bits(y.cpu())
    diff = bx != by
    where = diff.nonzero()
    n = where.shape[0]
    first = tuple(where[0].tolist()) if n else None
    xf, yf = x.cpu().float(), y.cpu().float()
    nan_only = int((diff & torch.isnan(xf) & torch.isnan(yf)).sum()) if n else 0
    return n, first, nan_only, where


def safe_name(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s).strip("_")


def atomic_write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------
# mismatching inputs: one archive, fit-ready samples
# ---------------------------------------------------------------------------------------

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
                os.replace(path, path + ".broken")

    def add(self, name: str, obj) -> str | None:
        """Store ``obj`` (torch.save) as ``name``; the member's address, or None when there is
        no archive or it is full."""
        if not self.path:
            return None
        buf = io.BytesIO()
        torch.save(obj, buf)
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


def read_archive(path: str) -> dict:
    """{member name: loaded object}: the mismatches of a run, to re-run them on any machine."""
    out = {}
    with tarfile.open(path) as t:
        for m in t.getmembers():
            out[m.name] = torch.load(io.BytesIO(t.extractfile(m).read()), weights_only=False)
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


# ---------------------------------------------------------------------------------------
# results that survive a cut-off command
# ---------------------------------------------------------------------------------------

class State:
    """meta, the rows of each part, and where they are written after every row."""

    def __init__(self, meta: dict, out: str | None, report_path: str | None):
        self.meta, self.out, self.report_path = meta, out, report_path
        self.identity: list | None = None
        self.native: list | None = None
        self.bench: dict | None = None
        self.t0 = time.time()

    def save(self) -> None:
        self.meta["elapsed"] = self.meta.get("elapsed_before", 0.0) + time.time() - self.t0
        if self.out:
            atomic_write(os.path.join(self.out, "results.json"),
                         json.dumps(dict(meta=self.meta, identity=self.identity,
                                         native=self.native, bench=self.bench),
                                    indent=1, default=str))
        if self.report_path:
            report(self.report_path, self.meta, self.identity, self.native, self.bench)


def load_results(paths: list[str]) -> dict:
    """Merge results.json files of several runs (parts split over commands): later files
    replace rows of earlier ones with the same key."""
    meta, ident, nat, bench = {}, {}, {}, None
    cmds = []
    for p in paths:
        with open(p) as f:
            r = json.load(f)
        m = r.get("meta") or {}
        cmds.append(m.get("command", ""))
        meta = {**meta, **m}
        for row in r.get("identity") or []:
            ident[row["spec"]] = row
        for row in r.get("native") or []:
            nat[(row["format"], row["path"])] = row
        bench = r.get("bench") or bench
    meta["command"] = "; ".join(c for c in cmds if c)
    return dict(meta=meta, identity=list(ident.values()) or None,
                native=list(nat.values()) or None, bench=bench)


def _done(row: dict) -> bool:
    """Finished rows are kept by --resume; a row that raised is kept too (re-running it could
    poison the CUDA context again), rows not run are run."""
    return not str(row.get("status", "")).startswith("not run")


# ---------------------------------------------------------------------------------------
# Part 1: CUDA kernel == CPU kernel
# ---------------------------------------------------------------------------------------

def part_identity(args, dev, budget: float, log, state: State | None = None,
                  archive: Archive | None = None, previous: dict | None = None):
    clock = Clock(budget)
    rows = []
    if state is not None:
        state.identity = rows
    specs = all_specs()
    per_family = max(1, math.ceil(args.outputs / len(FAMILIES)))
    side = max(1, int(math.ceil(math.sqrt(per_family))))
    poisoned = None
    for idx, spec in enumerate(specs):
        sid = spec_id(spec)
        if previous and sid in previous and _done(previous[sid]):
            rows.append(previous[sid])
            continue
        row = dict(spec=sid, outputs=0, mismatches=0, first=None, status="ok")
        if poisoned:
            row["status"] = f"not run (CUDA context lost: {poisoned})"
            rows.append(row)
            continue
        if clock.left() <= 0:
            row["status"] = "not run (time limit)"
            rows.append(row)
            continue
        try:
            K = 2 * spec.L + spec.L // 2 + 1
            cases = []
            for fam in FAMILIES:
                g = torch.Generator().manual_seed(zlib.crc32(f"{spec.to_string()}|{fam}".encode()))
                cases.append((operands(spec, side, side, K, fam, g), "chain", fam))
            # batched, transposed A, broadcast C, and the epilogue mode
            g = torch.Generator().manual_seed(zlib.crc32(spec.to_string().encode()))
            kw = operands(spec, 9, 11, K, "bitstream", g, batch=(3,))
            kw["A"] = kw["A"].mT.contiguous().mT
            kw["C"] = kw["C"][:1, :1]
            cases.append((kw, "chain", "batched"))
            cases.append((operands(spec, 33, 17, K, "normal", g), "epilogue", "normal"))
            for kw, mode, fam in cases:
                cpu = tme.emulated_mm(**kw, c_mode=mode)
                gpu = tme.emulated_mm(**to_dev(kw, dev), c_mode=mode)
                n, first, _, where = compare(cpu, gpu)
                row["outputs"] += cpu.numel()
                row["mismatches"] += n
                if n and row["first"] is None:
                    row["first"] = dict(index=first, cpu=hexbits(cpu, first),
                                        cuda=hexbits(gpu, first), c_mode=mode, family=fam)
                    if archive is not None:
                        obj = dict(spec=spec.to_string(), c_mode=mode, family=fam,
                                   **samples(kw, where[:SAVE_OUTPUTS], cpu=cpu, cuda=gpu.cpu()))
                        row["saved"] = archive.add(f"identity_{idx:03d}_{safe_name(sid)}.pt", obj)
        except Exception as e:  # noqa: BLE001  (report, go on)
            row["status"] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
            log(traceback.format_exc())
            poisoned = _sticky_cuda_error(dev)
            if poisoned:
                log(f"[identity] the CUDA context is lost ({poisoned}): the remaining entries "
                    "are not run; run them in a new process (--resume)")
        rows.append(row)
        if idx % 25 == 24:
            log(f"[identity] {idx + 1}/{len(specs)} entries, {clock.left():.0f} s left")
        if row["mismatches"] or row["status"] != "ok":
            log(f"[identity] {row['spec']}: {row['mismatches']} mismatches / {row['outputs']} "
                f"({row['status']})")
        if state is not None and (idx % 10 == 9 or row["mismatches"] or row["status"] != "ok"):
            state.save()
    if state is not None:
        state.save()
    return rows


# ---------------------------------------------------------------------------------------
# Part 2: native paths against the model of what runs
# ---------------------------------------------------------------------------------------

def format_cases(cap):
    cases = []
    if cap >= (8, 0):
        cases += [("fp16", "fp16", torch.float32), ("fp16", "fp16", torch.float16),
                  ("bf16", "bf16", torch.float32), ("tf32", "tf32", torch.float32)]
    if cap >= (8, 9):
        for a in ("fp8_e4m3", "fp8_e5m2"):
            for b in ("fp8_e4m3", "fp8_e5m2"):
                for o in (torch.float32, torch.float16):
                    cases.append((a, b, o))
    cases += [("fp32", "fp32", torch.float32), ("fp64", "fp64", torch.float64)]
    return cases


def paths_for(fa, fb, odt, dev, have_triton):
    """[(path, reason it is skipped or None)] for one format case."""
    paths = []
    if fa in KERNEL_TYPES:
        for ins in native.instructions_for(fa, dev):
            if odt == torch.float16 and fa == "bf16":
                continue
            paths.append((f"mma:{ins}", None))
    if have_triton and fa != "fp64":
        paths.append(("triton", None))
    e5m2_pair = fa == fb == "fp8_e5m2"
    paths.append(("cublas", CUBLAS_NO_E5M2 if e5m2_pair else None))
    if fa.startswith("fp8"):
        paths.append(("cublas-promote", CUBLAS_NO_E5M2 if e5m2_pair else None))
    return paths


def path_model(path, arch, fa, fb, odt):
    """(spec or None, where the model comes from, c_mode) for one native path."""
    if path.startswith("mma:"):
        s, src = native.instruction_spec(arch, fa, odt, path[4:], in_format_b=fb)
        return s, src, "chain"
    s = tme.spec(arch, fa, odt, in_format_b=fb)
    src = f"default row '{s.instruction}'"
    if path == "triton":
        return s, src + "; K zero-padded to the kernel's 16-deep blocks (run_k)", "chain"
    return s, src + "; C added in the epilogue", "epilogue"


def run_native(path, A, B, C, fmt, odt):
    if path.startswith("mma:"):
        return native.mma_instruction(A, B, C, in_format=fmt, out_dtype=odt, instruction=path[4:])
    if path == "triton":
        return native.native_mm(A, B, C, backend="triton", in_format=fmt, out_dtype=odt)
    return native.native_mm(A, B, C, backend="cublas", in_format=fmt, out_dtype=odt,
                            fp8_fast_accum=path == "cublas")


def pad_k(kw: dict, K2: int) -> dict:
    """Operands zero-padded along K to K2 (the chain a Triton kernel really runs)."""
    A, B = kw["A"], kw["B"]
    K = A.shape[-1]
    if K2 <= K:
        return kw
    zA = torch.zeros((*A.shape[:-1], K2 - K), dtype=A.dtype)
    zB = torch.zeros((*B.shape[:-2], K2 - K, B.shape[-1]), dtype=B.dtype)
    return dict(kw, A=torch.cat([A, zA], -1), B=torch.cat([B, zB], -2))


def triton_run_k(K: int, fa: str) -> int:
    from torch_mma_emu.triton_kernels import run_k
    return run_k(K, fa)


def emulate(spec, kw, dev, c_mode, C="given"):
    k = to_dev(dict(kw, arch=spec), dev)
    if C is None:
        k["C"] = None
    return tme.emulated_mm(**k, c_mode=c_mode)


def split_k(spec, kw, dev, s, tree):
    """cuBLAS-style split-K hypothesis: s partial chains from 0, fp32 reduction, C added last."""
    A, B, C = kw["A"].to(dev), kw["B"].to(dev), kw["C"].to(dev)
    K = A.shape[-1]
    if K % s:
        return None
    step = K // s
    wide = torch.float64 if C.dtype == torch.float64 else torch.float32
    parts = []
    for i in range(s):
        sub = dict(kw, A=A[..., i * step:(i + 1) * step], B=B[..., i * step:(i + 1) * step, :],
                   C=None, arch=spec)
        parts.append(tme.emulated_mm(**sub).to(wide))
    while len(parts) > 1:
        if tree:
            parts = [parts[i] + parts[i + 1] if i + 1 < len(parts) else parts[i]
                     for i in range(0, len(parts), 2)]
        else:
            parts = [parts[0] + parts[1]] + parts[2:]
    return (parts[0] + C.to(wide)).to(C.dtype)


def tf32_rounded(t: torch.Tensor) -> torch.Tensor:
    """fp32 words rounded to tf32 (RNE on the low 13 bits) instead of truncated."""
    b = t.view(torch.int32)
    r = ((b + 0x1000 + ((b >> 13) & 1)) & ~0x1FFF).view(torch.float32)
    return torch.where(torch.isfinite(t), r, t)


def _ieee_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + y rounded once to their dtype (fp32: torch's IEEE add; fp16: exact in float64
    first), NaN as NVIDIA's canonical pattern."""
    if x.dtype == torch.float16:
        r = (x.double() + y.double()).to(torch.float16)
        nan = torch.tensor(0x7FFF, dtype=torch.int16).view(torch.float16)
    else:
        r = x + y
        nan = torch.tensor(0x7FFFFFFF, dtype=torch.int32).view(torch.float32)
    return torch.where(torch.isnan(r), nan.to(r.device), r)


def fp8_as_fp16_hmma(kw, dev, arch, odt, chained: bool):
    """Hypothesis for the warp-level fp8 mma.m16n8k32 of Hopper (nvcc 13's SASS on sm_90a:
    fp8 -> fp16 unpack, two HMMA.16816 from zero, then FADD / HADD2 of the accumulator):
    per 32-wide instruction, h = HMMA(a[16:32], HMMA(a[0:16], 0)) (``chained``) or
    HMMA(a[0:16], 0) + HMMA(a[16:32], 0), then acc = acc + h, with the arch's fp16 model
    for HMMA (fp8 -> fp16 is exact)."""
    A = kw["A"].to(dev).to(torch.float16)
    B = kw["B"].to(dev).to(torch.float16)
    acc = kw["C"].to(dev).to(odt)
    s16 = tme.spec(arch, "fp16", odt)
    zero = torch.zeros_like(acc)
    for k0 in range(0, A.shape[-1], 32):
        lo = tme.emulated_mm(A[..., k0:k0 + 16], B[..., k0:k0 + 16, :], zero, arch=s16)
        if chained:
            h = tme.emulated_mm(A[..., k0 + 16:k0 + 32], B[..., k0 + 16:k0 + 32, :], lo, arch=s16)
        else:
            h = _ieee_add(lo, tme.emulated_mm(A[..., k0 + 16:k0 + 32], B[..., k0 + 16:k0 + 32, :],
                                              zero, arch=s16))
        acc = _ieee_add(acc, h)
    return acc


def diagnose(path, spec, kw, native_out, dev, c_mode, arch, odt):
    """Which hypotheses reproduce the native result on these inputs (0 mismatches)."""
    found = []

    def same(s, k, mode):
        try:
            return compare(native_out, emulate(s, k, dev, mode))[0] == 0
        except Exception:  # noqa: BLE001
            return False

    other = "chain" if c_mode == "epilogue" else "epilogue"
    if same(spec, kw, other):
        found.append(f"c_mode={other}")
    fa, fb = spec.in_format, spec.in_format_b or spec.in_format
    for a in ("sm70", "sm75", "sm80", "sm89", "sm90", "sm100", "sm120"):
        if a == arch:
            continue
        try:
            s2 = tme.spec(a, fa, odt, in_format_b=fb)
        except (ValueError, TypeError):
            continue
        for mode in (c_mode, other):
            if same(s2, kw, mode):
                found.append(f"{a} model ({s2.describe()}), c_mode={mode}")
                break
    if spec.op == "t_fdpa":
        for L in (4, 8, 16, 32):
            for F in sorted({13, 23, 24, 25, 26, 27, spec.F}):
                if (L, F) == (spec.L, spec.F):
                    continue
                if same(spec.replace(L=L, F=F), kw, c_mode):
                    found.append(f"L={L} F={F} ({spec.describe()} otherwise)")
    if fa == "tf32":
        k = dict(kw, A=tf32_rounded(kw["A"]), B=tf32_rounded(kw["B"]))
        for mode in (c_mode, other):
            if same(spec, k, mode):
                found.append(f"tf32 operands rounded (RNE), not truncated, c_mode={mode}")
                break
    if path == "mma:mma.m16n8k32" and registry.row(arch, fa, odt, in_format_b=fb).instr.group:
        for chained in (True, False):
            try:
                if compare(native_out, fp8_as_fp16_hmma(kw, dev, arch, odt, chained))[0] == 0:
                    found.append("fp8 -> fp16, two HMMA.16816 from zero " +
                                 ("chained" if chained else "added") + ", then + c (IEEE, "
                                 "per instruction)")
            except Exception:  # noqa: BLE001
                pass
    if path.startswith("cublas"):
        for s in (2, 3, 4, 8, 16):
            for tree in (False, True):
                try:
                    r = split_k(spec, kw, dev, s, tree)
                    if r is not None and compare(native_out, r)[0] == 0:
                        found.append(f"split-K into {s}, {'pairwise' if tree else 'sequential'} "
                                     "fp32 reduction, C added last")
                except Exception:  # noqa: BLE001
                    pass
    return found


def _sticky_cuda_error(dev) -> str | None:
    """A CUDA error that poisons the context (every later call fails): its text, else None."""
    if torch.device(dev).type != "cuda":
        return None
    try:
        torch.cuda.synchronize(dev)
        torch.zeros(1, device=dev).add_(1).item()
        return None
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def part_native(args, dev, arch, budget: float, log, state: State | None = None,
                archive: Archive | None = None, previous: dict | None = None,
                cap=None, have_triton=None):
    clock = Clock(budget)
    if have_triton is None:
        try:
            import triton  # noqa: F401
            have_triton = True
        except ImportError:
            have_triton = False
            log("[native] triton is not installed: the Triton path is skipped")
    cap = cap or torch.cuda.get_device_capability(dev)
    rows = []
    if state is not None:
        state.native = rows
    M = N = args.native_size
    want_formats = set(args.formats.split(",")) if args.formats else None
    want_paths = tuple(args.paths.split(",")) if args.paths else None
    skip_paths = tuple(args.exclude_paths.split(",")) if args.exclude_paths else ()
    poisoned = None
    for fa, fb, odt in format_cases(cap):
        fname = f"{fa}->{OUT_NAME[odt]}" if fa == fb else f"{fa}x{fb}->{OUT_NAME[odt]}"
        if want_formats and fa not in want_formats and fname not in want_formats:
            continue
        try:
            tme.spec(arch, fa, odt, in_format_b=fb)
        except (ValueError, TypeError) as e:
            rows.append(dict(format=fname, path="-", status=f"no model: {e}"))
            continue
        fmt = fa if fa == fb else f"{fa},{fb}"
        ik = 32 if fa.startswith("fp8") else 16 if fa in ("fp16", "bf16") else 8
        ks = [ik, 4 * ik, max(8 * ik, args.native_k)]
        for path, skip in paths_for(fa, fb, odt, dev, have_triton):
            if (want_paths and not path.startswith(want_paths)) or \
                    (skip_paths and path.startswith(skip_paths)):
                continue
            key = (fname, path)
            if previous and key in previous and _done(previous[key]):
                rows.append(previous[key])
                continue
            row = dict(format=fname, path=path, c_mode="", model="", model_source="",
                       outputs=0, mismatches=0, nan_payload_only=0,
                       by_family={f: 0 for f in FAMILIES}, status="ok", explained=None)
            if skip:
                row["status"] = skip
                rows.append(row)
                log(f"[native] {fname:24} {path:28} {skip}")
                continue
            try:
                spec, source, c_mode = path_model(path, arch, fa, fb, odt)
            except ValueError as e:
                row["status"] = f"no model: {e}"
                rows.append(row)
                continue
            row["c_mode"], row["model_source"] = c_mode, source
            compare_spec = spec
            if spec is None:    # no model yet: compare with the default, for information
                compare_spec = tme.spec(arch, fa, odt, in_format_b=fb)
                row["status"] = "no model yet"
                row["model"] = f"(none; compared with the default {compare_spec.describe()})"
            else:
                row["model"] = spec.describe()
            if poisoned:
                row["status"] = f"not run (CUDA context lost: {poisoned})"
                rows.append(row)
                continue
            if clock.left() <= 0:
                row["status"] = "not run (time limit)"
                rows.append(row)
                continue
            calls = 0
            first_fail = None
            collected = []          # no model yet: single-instruction samples for probe.fit
            try:
                while row["outputs"] < args.native_outputs and clock.left() > 0:
                    fam = FAMILIES[calls % len(FAMILIES)]
                    K = ks[(calls // len(FAMILIES)) % len(ks)]
                    g = torch.Generator().manual_seed(zlib.crc32(f"{arch}{fmt}{odt}{path}{calls}".encode()))
                    kw = operands(compare_spec, M, N, K, fam, g)
                    A, B, C = kw["A"].to(dev), kw["B"].to(dev), kw["C"].to(dev)
                    got = run_native(path, A, B, C, fmt, odt)
                    ekw = pad_k(kw, triton_run_k(K, fa)) if path == "triton" else kw
                    want = emulate(compare_spec, ekw, dev, c_mode)
                    n, first, nan_only, where = compare(got, want)
                    row["outputs"] += want.numel()
                    row["mismatches"] += n
                    row["nan_payload_only"] += nan_only
                    row["by_family"][fam] += n
                    if n and first_fail is None:
                        first_fail = (ekw, got, fam, K, first, want, where)
                    if spec is None and K == ik and archive is not None:
                        S = min(NO_MODEL_SAMPLES, M * N)
                        flat = torch.arange(S)
                        idx = torch.stack([flat // N, flat % N], 1)
                        collected.append(dict(family=fam, **samples(kw, idx, native=got.cpu(),
                                                                    default_model=want.cpu())))
                    calls += 1
            except Exception as e:  # noqa: BLE001
                row["status"] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                log(f"[native] {fname} {path}: {row['status']}")
                poisoned = _sticky_cuda_error(dev)
                if poisoned:
                    log(f"[native] the CUDA context is lost ({poisoned}): the remaining rows "
                        "are not run; run them in a new process (--resume)")
            base = safe_name(f"{fname}_{path}")
            if collected and archive is not None:
                row["samples_saved"] = archive.add(f"samples_{base}.pt", dict(
                    arch=arch, instruction=path[4:], in_format=fa, in_format_b=fb,
                    out=OUT_NAME[odt], note="single-instruction samples (K = the instruction's "
                    "K) of an instruction with no model yet; probe.fit takes a, b, c, native",
                    parts=collected))
            if first_fail is not None:
                ekw, got, fam, K, first, want, where = first_fail
                row["first"] = dict(family=fam, K=K, index=first, native=hexbits(got, first),
                                    emulated=hexbits(want, first))
                if archive is not None:
                    row["saved"] = archive.add(f"native_{base}_{fam}_K{K}.pt", dict(
                        spec=compare_spec.to_string(), path=path, c_mode=c_mode, family=fam,
                        **samples(ekw, where[:SAVE_OUTPUTS], native=got.cpu(),
                                  emulated=want.cpu())))
                if clock.left() > 0 and not poisoned:
                    row["explained"] = diagnose(path, compare_spec, ekw, got, dev, c_mode, arch, odt)
            rows.append(row)
            log(f"[native] {fname:24} {path:28} {row['mismatches']:>9} / {row['outputs']:<9} "
                f"{row['status']}" + (f"  explained by: {row['explained']}" if row.get("explained") else ""))
            if state is not None:
                state.save()
    if state is not None:
        state.save()
    return rows


def native_failures(rows) -> int:
    """Rows that must be clean and are not: a modeled instruction kernel or Triton row with a
    mismatch, or any error.  cuBLAS differences are findings, not failures."""
    bad = 0
    for r in rows or []:
        st = str(r.get("status", ""))
        if st.startswith("error"):
            bad += 1
        elif st == "ok" and r.get("mismatches") and not str(r.get("path")).startswith("cublas"):
            bad += 1
    return bad


# ---------------------------------------------------------------------------------------
# Part 3: speed
# ---------------------------------------------------------------------------------------

def best_time(fn, reps):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    return min(ts)


def part_bench(args, dev):
    n = args.bench_size
    g = torch.Generator(device=dev).manual_seed(0)
    A32 = torch.randn(n, n, device=dev, generator=g)
    B32 = torch.randn(n, n, device=dev, generator=g)
    A, B = A32.half(), B32.half()
    t_emu = best_time(lambda: tme.emulated_mm(A, B, arch=args.bench_arch), args.reps)
    with native._tf32(False):  # the reference: fp32 torch.matmul without TF32
        t_ref = best_time(lambda: torch.matmul(A32, B32), args.reps)
    macs = n ** 3
    return dict(arch=args.bench_arch, size=n, model=tme.spec(args.bench_arch, "fp16").describe(),
                emulated_macs=macs / t_emu, fp32_matmul_macs=macs / t_ref,
                ratio=(macs / t_ref) / (macs / t_emu), t_emu=t_emu, t_ref=t_ref)


# ---------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------

def gpu_key(name: str) -> str:
    m = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", name)
    return m.group(1) if m else re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")


def wgmma_built(dev) -> str:
    """Whether the wgmma kernels run, asked in a child process (a broken kernel must not
    poison this process's CUDA context)."""
    if torch.cuda.get_device_capability(dev)[0] != 9:
        return "n/a"
    import subprocess
    code = ("import torch; from torch_mma_emu import native\n"
            "A = torch.zeros(64, 16, dtype=torch.float16, device='cuda')\n"
            "B = torch.zeros(16, 8, dtype=torch.float16, device='cuda')\n"
            "native.mma_instruction(A, B, instruction='wgmma.m64n8k16'); torch.cuda.synchronize()")
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=300, env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep +
                                                 os.environ.get("PYTHONPATH", "")))
    except subprocess.TimeoutExpired:
        return "no (the check timed out)"
    if r.returncode == 0:
        return "yes"
    last = (r.stderr.strip().splitlines() or ["?"])[-1]
    return f"no ({last[:100]})"


def report(path, meta, ident, nat, bench):
    L = [f"# Hardware validation: {meta.get('gpu', '?')}", "",
         f"Generated by `scripts/validate_hw.py` on {meta.get('date', '?')} "
         f"({meta.get('elapsed', 0):.0f} s).", "", "| | |", "|---|---|"]
    for k in ("gpu", "arch", "torch", "cuda", "triton", "driver", "wgmma kernels built", "command"):
        L.append(f"| {k} | {meta.get(k, '')} |")
    L += ["", "## 1. CUDA kernel against the CPU kernel (bit for bit)", ""]
    if ident is None:
        L.append("Not run in this report's commands (`--parts`).")
    else:
        tot = sum(r["outputs"] for r in ident)
        bad = [r for r in ident if r["mismatches"] or r["status"] != "ok"]
        mn = min((r["outputs"] for r in ident if r["status"] == "ok"), default=0)
        L.append(f"{len(ident)} registry entries, {tot:,} outputs in all (at least {mn:,} per entry "
                 f"that ran), three input families, batched/strided/broadcast and epilogue cases: "
                 f"**{sum(r['mismatches'] for r in ident)} mismatches**, "
                 f"{len(bad)} entries with a mismatch, an error or not run.")
        if bad:
            L += ["", "| registry entry | outputs | mismatches | status | first | saved |",
                  "|---|---|---|---|---|---|"]
            for r in bad:
                L.append(f"| {r['spec']} | {r['outputs']} | {r['mismatches']} | {r['status']} | "
                         f"{r.get('first') or ''} | {r.get('saved') or ''} |")
    L += ["", f"## 2. Native paths against the emulator (`arch=\"{meta.get('arch', '?')}\"`)", "",
          "`mma:*` is the instruction kernel (one instruction kind, accumulator fed back along K), "
          "compared with the model of that instruction (`native.instruction_spec`); `triton` the "
          "Triton chain (`torch_mma_emu.triton_kernels`, K zero-padded to its 16-deep blocks on "
          "both sides); `cublas` torch's cuBLAS call (C added in the epilogue, so compared with "
          "`c_mode=\"epilogue\"`), `cublas-promote` cuBLAS fp8 without fast accumulation. Inputs: "
          "the three families of seed 003 section 3.1.4 (normal, cancel, bitstream with "
          "NaN/Inf/subnormals), K = one instruction, four instructions and more.", ""]
    if nat is None:
        L.append("Not run in this report's commands (`--parts`).")
    else:
        ran = [r for r in nat if r.get("path") != "-" and r.get("outputs")]
        L.append(f"{len(ran)} rows ran, {sum(r['outputs'] for r in ran):,} outputs; "
                 f"{native_failures(nat)} rows that must be clean are not (a modeled instruction "
                 "kernel or Triton row with a mismatch, or an error).")
        L += ["", "| format | path | model | c_mode | outputs | mismatches | normal / cancel / bitstream "
              "| NaN payload only | explained by | status |",
              "|---|---|---|---|---|---|---|---|---|---|"]
        for r in nat:
            if r.get("path") == "-":
                L.append(f"| {r['format']} | - | | | | | | | | {r['status']} |")
                continue
            fams = " / ".join(str(r["by_family"][f]) for f in FAMILIES)
            ex = "; ".join(r["explained"]) if r.get("explained") else ("none found" if r["mismatches"] else "")
            L.append(f"| {r['format']} | {r['path']} | {r.get('model', '')} | {r['c_mode']} | "
                     f"{r['outputs']:,} | {r['mismatches']:,} | {fams} | {r['nan_payload_only']} | "
                     f"{ex} | {r['status']} |")
        L += ["", "Where each model comes from:", ""]
        for r in nat:
            if r.get("model_source"):
                L.append(f"- {r['format']} {r['path']}: {r['model_source']}")
        firsts = [r for r in nat if r.get("first") or r.get("samples_saved")]
        if firsts:
            L += ["", "First mismatches (their inputs, up to 64 outputs per row, are in the run's "
                  "archive `mismatches.tar`; `validate_hw.read_archive` loads it):", ""]
            for r in firsts:
                if r.get("first"):
                    L.append(f"- {r['format']} {r['path']}: {r['first']} ({r.get('saved') or 'not saved'})")
                if r.get("samples_saved"):
                    L.append(f"- {r['format']} {r['path']}: single-instruction samples for "
                             f"`probe.fit` in {r['samples_saved']}")
    L += ["", "## 3. Speed", ""]
    if bench is None:
        L.append("Not run in this report's commands (`--parts`).")
    else:
        L += ["| arch | model | size | emulated MAC/s | fp32 torch.matmul MAC/s (TF32 off) | ratio |",
              "|---|---|---|---|---|---|",
              f"| {bench['arch']} | {bench['model']} | {bench['size']}^3 | {bench['emulated_macs']:.3g} | "
              f"{bench['fp32_matmul_macs']:.3g} | {bench['ratio']:.1f}x |"]
    L.append("")
    atomic_write(path, "\n".join(L))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/mma_emu_validate"),
                   help="folder for validate.log, results.json and mismatches.tar")
    p.add_argument("--report", default=None, help="markdown report (default docs/hardware/<GPU>.md)")
    p.add_argument("--archive", default=None, help="tar of mismatching inputs (default "
                   "<out>/mismatches.tar; 'none' saves nothing)")
    p.add_argument("--arch", default=None, help="emulated arch (default: this GPU's)")
    p.add_argument("--parts", default=",".join(PARTS), help="comma list of identity, native, bench")
    p.add_argument("--formats", default=None, help="part 2: only these input formats (fp16, "
                   "fp8_e4m3, ... or full names such as fp16->fp16)")
    p.add_argument("--paths", default=None, help="part 2: only these paths (prefixes: mma, "
                   "mma:wgmma, triton, cublas)")
    p.add_argument("--exclude-paths", default=None, help="part 2: not these paths (prefixes; "
                   "e.g. a kind whose smoke test broke the CUDA context)")
    p.add_argument("--resume", nargs="*", default=None, metavar="JSON",
                   help="results.json of earlier runs: keep their finished rows, run the rest")
    p.add_argument("--render", nargs="+", default=None, metavar="JSON",
                   help="no run: merge these results.json files into --report (no GPU needed)")
    p.add_argument("--outputs", type=int, default=1_000_000, help="outputs per registry entry (part 1)")
    p.add_argument("--native-outputs", type=int, default=1_000_000, help="outputs per format and path (part 2)")
    p.add_argument("--native-size", type=int, default=256, help="M = N of the part 2 products (multiple of 64)")
    p.add_argument("--native-k", type=int, default=256, help="largest K of part 2")
    p.add_argument("--time-limit", type=float, default=480.0,
                   help="seconds for parts 1 and 2 together (each row stops when it is spent)")
    p.add_argument("--quick", action="store_true", help="small counts (about a minute)")
    p.add_argument("--skip-identity", action="store_true")
    p.add_argument("--skip-native", action="store_true")
    p.add_argument("--skip-bench", action="store_true")
    p.add_argument("--bench-arch", default="sm90")
    p.add_argument("--bench-size", type=int, default=4096)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--device", default="cuda", help="'cpu': a dry run of part 1 (CPU against "
                   "CPU) and of the report, for testing this script without a GPU")
    args = p.parse_args(argv)
    parts = [x for x in args.parts.split(",") if x]
    unknown = [x for x in parts if x not in PARTS]
    if unknown:
        print(f"validate_hw: --parts: unknown {', '.join(unknown)}; allowed: {', '.join(PARTS)}",
              file=sys.stderr)
        sys.exit(2)
    for name in ("identity", "native", "bench"):
        if getattr(args, f"skip_{name}") and name in parts:
            parts.remove(name)
    args.parts = parts
    if args.quick:
        args.outputs, args.native_outputs, args.bench_size = 20_000, 100_000, 2048
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.render:
        if not args.report:
            print("validate_hw: --render needs --report PATH", file=sys.stderr)
            return 2
        try:
            r = load_results(args.render)
        except (OSError, ValueError, KeyError) as e:
            print(f"validate_hw: cannot read {' '.join(args.render)}: {e}", file=sys.stderr)
            return 2
        report(args.report, r["meta"], r["identity"], r["native"], r["bench"])
        print(f"report: {args.report}")
        return 0
    if args.device == "cpu":
        return dry_run(args)
    if not torch.cuda.is_available():
        print("validate_hw: no CUDA device; nothing to validate (--device cpu: dry run)",
              file=sys.stderr)
        return 2
    if not hasattr(torch.ops.mma_emu, "_mma_instr"):
        print("validate_hw: torch_mma_emu was built without its CUDA kernels; build first:\n"
              "  bash scripts/gpu/build_smoke.sh   (or TORCH_CUDA_ARCH_LIST=9.0a bash scripts/build_ext.sh)",
              file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    arch = args.arch or native.device_arch(dev)
    os.makedirs(args.out, exist_ok=True)
    logf = open(os.path.join(args.out, "validate.log"), "a", buffering=1)

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    try:
        import triton
        tv = triton.__version__
    except ImportError:
        tv = "not installed"
    meta = dict(gpu=name, arch=arch, torch=torch.__version__, cuda=torch.version.cuda, triton=tv,
                driver=_driver(), date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                command="python scripts/validate_hw.py " + " ".join(sys.argv[1:] if argv is None else argv),
                python=platform.python_version())
    meta["wgmma kernels built"] = wgmma_built(dev)
    path = args.report or os.path.join(ROOT, "docs", "hardware", f"{gpu_key(name)}.md")
    state = State(meta, args.out, path)
    prev = load_results(args.resume) if args.resume else None
    if prev:
        state.identity, state.native, state.bench = prev["identity"], prev["native"], prev["bench"]
        meta["command"] = prev["meta"].get("command", "") + "; " + meta["command"]
    archive = Archive(None if args.archive == "none"
                      else args.archive or os.path.join(args.out, "mismatches.tar"))
    log(f"validate_hw: {name} ({arch}), torch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"triton {tv}, wgmma built: {meta['wgmma kernels built']}, parts {','.join(args.parts)}")
    state.save()
    t0 = time.time()
    if "identity" in args.parts:
        share = args.time_limit * (0.5 if "native" in args.parts else 1.0)
        previous = {r["spec"]: r for r in (prev or {}).get("identity") or []}
        ident = part_identity(args, dev, share, log, state, archive, previous)
        log(f"[identity] {sum(r['outputs'] for r in ident):,} outputs, "
            f"{sum(r['mismatches'] for r in ident)} mismatches over {len(ident)} registry entries")
    if "native" in args.parts:
        previous = {(r["format"], r["path"]): r for r in (prev or {}).get("native") or []}
        part_native(args, dev, arch, args.time_limit - (time.time() - t0), log, state, archive,
                    previous)
    if "bench" in args.parts:
        state.bench = part_bench(args, dev)
        b = state.bench
        log(f"[bench] {b['arch']} fp16->fp32 {b['size']}^3: emulated {b['emulated_macs']:.3g} "
            f"MAC/s, fp32 torch.matmul (TF32 off) {b['fp32_matmul_macs']:.3g} MAC/s, "
            f"ratio {b['ratio']:.1f}x")
    state.save()
    log(f"report: {path}; results.json, validate.log and mismatches.tar under {args.out}")
    bad = sum(r["mismatches"] + (r["status"].startswith("error")) for r in state.identity or [])
    return 1 if bad or native_failures(state.native) else 0


def dry_run(args) -> int:
    """Part 1 with the CPU kernel on both sides, and the report: tests this script anywhere."""
    os.makedirs(args.out, exist_ok=True)
    meta = dict(gpu="CPU dry run", arch=args.arch or "sm90", torch=torch.__version__, cuda="",
                triton="", driver="", date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                command="dry run")
    meta["wgmma kernels built"] = "n/a"
    state = State(meta, args.out, args.report or os.path.join(args.out, "dry_run.md"))
    archive = Archive(None if args.archive == "none"
                      else args.archive or os.path.join(args.out, "mismatches.tar"))
    ident = part_identity(args, torch.device("cpu"), args.time_limit, print, state, archive)
    return 1 if sum(r["mismatches"] for r in ident) else 0


def _driver() -> str:
    try:
        import subprocess
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 else ""
    except Exception:  # noqa: BLE001
        return ""


if __name__ == "__main__":
    sys.exit(main())
