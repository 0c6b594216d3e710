"""Smoke test of one kind of GPU work, run in its own process before the long runs, so that a
sticky CUDA error (an illegal address, a bad instruction) poisons one kind, not every row.

    python scripts/gpu/smoke.py --list              # the kinds this GPU has
    python scripts/gpu/smoke.py mma:wgmma.m64n8k16  # one kind: one line per check
    python scripts/gpu/smoke.py --instructions      # every instruction kind in one process
                                                    # (for one compute-sanitizer pass)

Kinds: ``emulated`` (the CUDA kernel of emulated_mm against the CPU kernel), ``mma:<name>``
(each instruction kernel against the model of that instruction), ``triton``, ``cublas``.
Small products (a second or two each).  Exit code: 0 every check ran and matched, 1 a check
mismatched (a finding: the validation parts measure it), 3 an error (the kind is broken).
"""
from __future__ import annotations

import sys
import traceback
import zlib

import torch

from .. import native
from ..formats import OUT_DTYPES
from ..inputs import operands
from ..isa import KERNEL_OUTPUTS
from ..ops import emulated_mm
from ..registry import spec as registry_spec
from .common import bits


def ndiff(x, y) -> int:
    return int((bits(x) != bits(y)).sum())


def kinds(dev) -> list[str]:
    out = ["emulated"]
    for ins, kern in native.INSTRUCTIONS.items():
        if any(ins in native.instructions_for(f, dev) for f in kern.inputs):
            out.append(f"mma:{ins}")
    return out + ["triton", "cublas"]


def _ops(spec, M, N, K, fam, tag):
    g = torch.Generator().manual_seed(zlib.crc32(f"{tag}{fam}".encode()))
    return operands(spec, M, N, K, fam, g)


def check_emulated(dev):
    for arch, fmt, out in [("sm90", "fp16", None), ("sm90", "fp16", torch.float16),
                           ("sm90", "fp8_e4m3", None), ("sm80", "tf32", None),
                           ("gfx942", "fp16", None), ("gfx90a", "bf16", None),
                           ("sm90", "fp32", None), ("sm100", "fp4_e2m1", None)]:
        spec = registry_spec(arch, fmt, out, scale_format="ue8m0" if fmt == "fp4_e2m1" else None)
        for fam in ("normal", "bitstream"):
            kw = _ops(spec, 70, 40, 3 * spec.L + 5, fam, arch + fmt)
            cpu = emulated_mm(**kw)
            gpu = emulated_mm(**{k: (v.to(dev) if isinstance(v, torch.Tensor) else v)
                                     for k, v in kw.items()})
            yield f"emulated {arch} {fmt}->{spec.out_format} {fam}", ndiff(cpu, gpu), cpu.numel(), ""


def check_mma(dev, ins):
    arch = native.device_arch(dev)
    k = native.INSTRUCTIONS[ins].k
    for fmt in native.INSTRUCTIONS[ins].inputs:
        if ins not in native.instructions_for(fmt, dev):
            continue
        for odt in (OUT_DTYPES[o] for o in KERNEL_OUTPUTS[fmt]):
            spec, src = native.instruction_spec(arch, fmt, odt, ins)
            model = spec or registry_spec(arch, fmt, odt)
            for fam in ("normal", "bitstream"):
                for K in (k, 2 * k):
                    kw = _ops(model, 64, 16, K, fam, ins + fmt)
                    A, B, C = (kw[x].to(dev) for x in "ABC")
                    got = native.mma_instruction(A, B, C, in_format=fmt, out_dtype=odt,
                                                 instruction=ins)
                    torch.cuda.synchronize(dev)
                    want = emulated_mm(**kw)
                    note = "" if spec else "no model yet (compared with the default)"
                    yield (f"{ins} {fmt}->{model.out_format} {fam} K={K}",
                           ndiff(got, want), want.numel(), note)


def check_triton(dev):
    from torch_mma_emu.triton_kernels import matmul, run_k
    arch = native.device_arch(dev)
    for fmt, odt, K in [("fp16", torch.float32, 64), ("fp16", torch.float16, 40),
                        ("bf16", torch.float32, 48), ("tf32", torch.float32, 8),
                        ("tf32", torch.float32, 40), ("fp32", torch.float32, 8),
                        ("fp8_e4m3", torch.float32, 64), ("fp8_e5m2", torch.float16, 96)]:
        if fmt.startswith("fp8") and torch.cuda.get_device_capability(dev) < (8, 9):
            continue
        spec = registry_spec(arch, fmt, odt)
        for fam in ("normal", "bitstream"):
            kw = _ops(spec, 64, 64, K, fam, "triton" + fmt)
            A, B, C = (kw[x].to(dev) for x in "ABC")
            got = matmul(A, B, C, in_format=fmt, out_dtype=odt)
            K2 = run_k(K, fmt)
            pad = dict(kw, A=torch.cat([kw["A"], torch.zeros(64, K2 - K, dtype=kw["A"].dtype)], 1),
                       B=torch.cat([kw["B"], torch.zeros(K2 - K, 64, dtype=kw["B"].dtype)], 0))
            want = emulated_mm(**pad)
            yield f"triton {fmt}->{spec.out_format} {fam} K={K} (runs {K2})", ndiff(got, want), want.numel(), ""


def check_cublas(dev):
    arch = native.device_arch(dev)
    cases = [("fp16", torch.float32), ("fp16", torch.float16), ("bf16", torch.float32),
             ("tf32", torch.float32), ("fp32", torch.float32), ("fp64", torch.float64)]
    if torch.cuda.get_device_capability(dev) >= (8, 9):
        cases += [("fp8_e4m3", torch.float32), ("fp8_e4m3", torch.float16)]
    for fmt, odt in cases:
        spec = registry_spec(arch, fmt, odt)
        kw = _ops(spec, 64, 32, 64, "normal", "cublas" + fmt)
        A, B, C = (kw[x].to(dev) for x in "ABC")
        got = native.native_mm(A, B, C, backend="cublas", in_format=fmt, out_dtype=odt)
        want = emulated_mm(**kw, c_mode="epilogue")
        yield f"cublas {fmt}->{spec.out_format} normal K=64", ndiff(got, want), want.numel(), \
            "differences are findings (split-K, epilogue): see validate_hw"


def run(kind, dev) -> int:
    if kind == "emulated":
        gen = check_emulated(dev)
    elif kind.startswith("mma:"):
        gen = check_mma(dev, kind[4:])
    elif kind == "triton":
        gen = check_triton(dev)
    elif kind == "cublas":
        gen = check_cublas(dev)
    else:
        print(f"smoke: unknown kind {kind!r}; known: {', '.join(kinds(dev))}", file=sys.stderr)
        return 2
    rc = 0
    try:
        for name, n, total, note in gen:
            strict = kind != "cublas" and not note
            print(f"{'ok  ' if n == 0 else 'DIFF'} {name}: {n} / {total} differ"
                  + (f"  [{note}]" if note else ""), flush=True)
            if n and strict:
                rc = max(rc, 1)
    except Exception as e:  # noqa: BLE001
        print(f"ERR  {kind}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
              flush=True)
        traceback.print_exc()
        return 3
    return rc


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not torch.cuda.is_available():
        print("smoke: no CUDA device", file=sys.stderr)
        return 2
    if not hasattr(torch.ops.mma_emu, "_mma_instr"):
        print("smoke: torch_mma_emu has no CUDA kernels (build first: scripts/gpu/steps.sh build)",
              file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    if argv == ["--list"]:
        print("\n".join(kinds(dev)))
        return 0
    if argv == ["--instructions"]:
        return max([run(k, dev) for k in kinds(dev) if k.startswith(("mma:", "emulated"))])
    if len(argv) != 1:
        print("usage: smoke.py --list | --instructions | KIND", file=sys.stderr)
        return 2
    return run(argv[0], dev)
