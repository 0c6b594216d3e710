"""Part 2: each native path of this GPU (the instruction kernels, Triton, cuBLAS) against the
emulator's model of what runs; a mismatch is archived and ``diagnose``d."""
from __future__ import annotations

import zlib

import torch

from .. import native
from ..formats import out_format
from ..inputs import ALL_FAMILIES, operands
from ..isa import KERNEL_TYPES
from ..registry import spec as registry_spec
from .archive import SAVE_OUTPUTS, Archive, samples
from .common import (Clock, compare, emulate, error_status, hexbits, lost_context, not_run,
                     safe_name)
from .diagnose import diagnose
from .results import State, done

NO_MODEL_SAMPLES = 2048     # single-instruction samples per family saved for probe.fit
CUBLAS_NO_E5M2 = "skipped: cuBLAS has no e5m2 x e5m2 fp8 GEMM (torch._scaled_mm raises)"


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
    s = registry_spec(arch, fa, odt, in_format_b=fb)
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
        fname = f"{fa}->{out_format(odt)}" if fa == fb else f"{fa}x{fb}->{out_format(odt)}"
        if want_formats and fa not in want_formats and fname not in want_formats:
            continue
        try:
            registry_spec(arch, fa, odt, in_format_b=fb)
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
            if previous and key in previous and done(previous[key]):
                rows.append(previous[key])
                continue
            row = dict(format=fname, path=path, c_mode="", model="", model_source="",
                       outputs=0, mismatches=0, nan_payload_only=0,
                       by_family={f: 0 for f in ALL_FAMILIES}, status="ok", explained=None)
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
                compare_spec = registry_spec(arch, fa, odt, in_format_b=fb)
                row["status"] = "no model yet"
                row["model"] = f"(none; compared with the default {compare_spec.describe()})"
            else:
                row["model"] = spec.describe()
            why = not_run(poisoned, clock)
            if why:
                row["status"] = why
                rows.append(row)
                continue
            calls = 0
            first_fail = None
            collected = []          # no model yet: single-instruction samples for probe.fit
            try:
                while row["outputs"] < args.native_outputs and clock.left() > 0:
                    fam = ALL_FAMILIES[calls % len(ALL_FAMILIES)]
                    K = ks[(calls // len(ALL_FAMILIES)) % len(ks)]
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
                row["status"] = error_status(e)
                log(f"[native] {fname} {path}: {row['status']}")
                poisoned = lost_context(dev, log, "native", "rows")
            base = safe_name(f"{fname}_{path}")
            if collected and archive is not None:
                row["samples_saved"] = archive.add(f"samples_{base}.pt", dict(
                    arch=arch, instruction=path[4:], in_format=fa, in_format_b=fb,
                    out=out_format(odt), note="single-instruction samples (K = the instruction's "
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
