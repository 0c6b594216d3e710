"""Our CUDA GEMM (csrc/cuda/gemm_cuda.cu), compiled by nvcc to sm_80 PTX (committed:
tests/data/cuda_ptx/, regen.sh), run on the CPU by the PTX interpreter (torch_mma_emu.ptx)
exactly as ``gemm_cuda`` launches it (decode kernels, then the fast t_fdpa tile kernel, the
generic one-thread-per-output kernel or the IEEE values kernel; structs packed as bytes from
the parameter vector, tests/cuda_gemm_ptx.py): the bits equal the CPU kernel's
(``cpp.gemm``, what ``emulated_mm`` calls on CPU) for registry rows, 0 mismatches.

Fast: one row per distinct kernel instantiation the registry reaches (every CUDA kernel of
the file that a registry row launches), batched, with an infinity in A and a NaN in B.
Slow: every registry spec (each row x input-format pair x block size); the committed PTX
against a fresh compile: tests/test_ptx_cuda_targets.py."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_mma_emu import cpp, ptx, registry  # noqa: E402
from torch_mma_emu.formats import storage_dtype, value_table  # noqa: E402

import cuda_gemm_ptx as R  # noqa: E402

VALUES = "values"
SHAPE = (2, 8, 8, 40)          # batch, M, N, K: K pads to 64 (two K tiles of the fast kernel)


def _operands(spec, seed=0):
    Bt, M, N, K = SHAPE
    g = torch.Generator().manual_seed(seed)
    out_dt = {"fp32": torch.float32, "fp16": torch.float16, "fp64": torch.float64}[spec.out_format]
    c3 = torch.randn(Bt, M, N, generator=g).to(out_dt)
    if spec.elementary.operands == VALUES:
        vdt = torch.float64 if spec.out_format == "fp64" else torch.float32
        a3 = torch.randn(Bt, M, K, generator=g).to(storage_dtype(spec.fmt_a)).to(vdt)
        b3 = torch.randn(Bt, K, N, generator=g).to(storage_dtype(spec.fmt_b)).to(vdt)
        a3[0, 1, 3], b3[0, 2, 5] = float("inf"), float("nan")
        return a3, b3, c3, None, None
    a3 = R.codes(spec.fmt_a.name, (Bt, M, K), g, "inf")
    b3 = R.codes(spec.fmt_b.name, (Bt, K, N), g, "nan")
    sa3 = sb3 = None
    if spec.scaled:
        nblk = -(-K // spec.block_size)
        sfmt = spec.scale_format
        table = value_table(sfmt)
        ok = torch.nonzero(torch.isfinite(table) & (table > 2.0 ** -4) & (table < 2.0 ** 4)).flatten()
        sa3 = ok[torch.randint(len(ok), (Bt, M, nblk), generator=g)].to(torch.uint8)
        sb3 = ok[torch.randint(len(ok), (Bt, nblk, N), generator=g)].to(torch.uint8)
    return a3, b3, c3, sa3, sb3


def _np(t):
    return None if t is None else t.contiguous().numpy()


def check(mod, spec):
    """(kernel suffix, mismatches, outputs, [Stats]); xfail naming the instruction where
    the interpreter cannot run the kernel."""
    a3, b3, c3, sa3, sb3 = _operands(spec)
    ref = cpp.gemm(spec, a3, b3, c3, sa3, sb3).numpy()
    vec = cpp.params(spec)
    try:
        out, suffix, stats = R.run_gemm(mod, _np(a3), _np(b3), _np(c3), vec, _np(sa3), _np(sb3))
    except ptx.Unsupported as e:      # an instruction the interpreter lacks: named
        pytest.xfail(f"{_spec_id(spec)}: {e}")
    w = {2: np.uint16, 4: np.uint32, 8: np.uint64}[ref.itemsize]
    bad = int((out.view(w) != ref.view(w)).sum())
    return suffix, bad, ref.size, stats


def _spec_id(s):
    fb = "" if s.fmt_b.name == s.fmt_a.name else "," + s.fmt_b.name
    bs = f"/{s.block_size}" if s.block_size else ""
    return f"{s.arch}-{s.instruction}-{s.fmt_a.name}{fb}-{s.out_format}{bs}"


ALL = registry.all_specs()


def _one_per_kernel():
    seen, out = set(), []
    for s in ALL:
        vdt = np.float64 if s.out_format == "fp64" else np.float32
        k = (R.kernel_for(cpp.params(s), vdt), s.op, s.scaled)   # values_kernel: fma / ftz
        if k not in seen:
            seen.add(k)
            out.append(s)
    return out


FAST = _one_per_kernel()


@pytest.fixture(scope="module")
def mod():
    return R.load_module()


def test_params_struct_layout():
    """Params is 200 bytes, every field where params.h puts it (checked against the
    kernel's parameter sizes in the PTX)."""
    m = R.load_module(keep=["decode_kernelE", "generic_kernelILi3EE"])
    gen = next(k for n, k in m.kernels.items() if "generic_kernel" in n)
    dec = next(k for n, k in m.kernels.items() if "decode_kernel" in n)
    assert [p.size for p in gen.params][:4] == [200, 48, 48, 40]   # Params, Planes x2, Scales
    assert [p.size for p in dec.params] == [40, 8, 1, 28, 8, 8, 48]  # View3 ... FormatDesc, Planes
    vec = cpp.params(ALL[0])
    blob = R.pack_params(vec)
    p = R.named(vec)
    assert np.frombuffer(blob[:48], np.int32)[1] == p["L"]
    assert np.frombuffer(blob[56:84], np.int32).tolist() == list(R.fmt_desc(p, "fa"))
    assert np.frombuffer(blob[196:200], np.int32)[0] == p["c_emin"]


@pytest.mark.parametrize("spec", FAST, ids=_spec_id)
def test_cuda_gemm_ptx_equals_cpu_kernel(mod, spec):
    suffix, bad, n, _ = check(mod, spec)
    assert bad == 0, f"{_spec_id(spec)} ({suffix}): {bad} of {n} outputs differ from the CPU kernel"


@pytest.mark.slow
@pytest.mark.parametrize("spec", ALL, ids=_spec_id)
def test_cuda_gemm_ptx_every_registry_spec(mod, spec):
    suffix, bad, n, _ = check(mod, spec)
    assert bad == 0, f"{_spec_id(spec)} ({suffix}): {bad} of {n} outputs differ from the CPU kernel"
