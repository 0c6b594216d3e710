"""csrc/cuda/sched_cuda.cu (the split-K / promotion / tree schedule kernel), compiled by nvcc
13.0 to sm_80 PTX (tests/data/cuda_ptx/, regen.sh) and run on the CPU by the PTX
interpreter as ``sched_cuda`` launches it (tests/cuda_sched_ptx.py).  Every schedule preset
(and a few custom schedules: pairwise trees, fp64 workspaces, alpha / beta epilogues, many
slices, interleaved slices, a summation tree) is run through ``emulated_mm`` on the route a
CUDA tensor takes (``_gemm`` partials, then ``_sched`` programs without CHAIN ops); each
``_sched`` call is run twice, by the CPU kernel and by the PTX: 0 mismatching bits."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch_mma_emu.schedule_run as sched_mod  # noqa: E402
from torch_mma_emu import cpp, emulated_mm, ptx  # noqa: E402
from torch_mma_emu.schedule import PRESETS, Schedule  # noqa: E402

import cuda_sched_ptx as R  # noqa: E402

# (arch, A format, output): the rows the presets are written for (fp16 / bf16 / fp8 / tf32),
# an fp16-output row and an fp64 one
ROWS = [("sm80", "fp16", "fp32"), ("sm80", "fp16", "fp16"), ("sm90", "fp8_e4m3", "fp32"),
        ("sm90", "bf16", "fp32"), ("sm80", "tf32", "fp32"), ("sm80", "fp64", "fp64")]
DT = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn,
      "tf32": torch.float32, "fp64": torch.float64, "fp32": torch.float32}
CUSTOM = {"pairwise_3": Schedule(split_k=3, reduce="pairwise"),
          "split_9_empties": Schedule(split_k=9),
          "split_2_epilogue_fma": Schedule(split_k=2, c_mode="epilogue", alpha=1.5, beta=0.25),
          "pairwise_fp64_ws": Schedule(split_k=3, reduce="pairwise", workspace="fp64",
                                       alpha=0.75, beta=-1.25),
          "promote_mul_add": Schedule(promote_every=32, workspace="fp64", c_mode="epilogue",
                                      epilogue="mul_add", alpha=0.1, beta=3.0),
          "interleaved": Schedule(split_k=2, split_grain="16", split_layout="interleaved"),
          "split_many": Schedule(split_k=1000)}
SCHEDULES = {**{k: v.schedule for k, v in PRESETS.items()}, **CUSTOM}
SHAPE = (2, 5, 7, 160)      # batch, M, N, K: 70 outputs (not a multiple of the block), K
# cut by the fp16 grain (64) and fp8's (128) into uneven slices and empty ones.  Residue
# tiles (NODE ops: every product in the schedule kernel, slow to interpret): a residue of 8
# and one tile of 32
SMALL = (1, 3, 5, 40)


@contextlib.contextmanager
def cuda_route(mod, log):
    """schedule_run as on a CUDA tensor: slices and blocks as _gemm partials; every _sched
    call also run by the PTX kernel, its mismatches logged."""
    old_flag, old_sched = sched_mod._CPU_CHAINS, cpp.sched

    def both(spec, a, b, c, partials, program, consts, sa=None, sb=None):
        ref = old_sched(spec, a, b, c, partials, program, consts, sa, sb)
        assert sa is None and sb is None, "the CUDA kernel takes no scales"
        out, st = R.run(mod, cpp.params(spec, "chain"), a, b, c, partials, program, consts)
        w = {2: np.uint16, 4: np.uint32, 8: np.uint64}[out.itemsize]
        r = ref.numpy()
        log.append((int((out.view(w) != r.view(w)).sum()), r.size, st.thread_instructions))
        return ref

    sched_mod._CPU_CHAINS, cpp.sched = False, both
    try:
        yield
    finally:
        sched_mod._CPU_CHAINS, cpp.sched = old_flag, old_sched


@pytest.fixture(scope="module")
def mod():
    return R.load("sm80")


@pytest.fixture(scope="module")
def mod100():
    return R.load("sm100a")


def _run(mod, name, sched, row):
    arch, fa, out = row
    B, M, N, K = SMALL if sched.residue_tile is not None else SHAPE
    g = torch.Generator().manual_seed(3)
    A = torch.randn(B, M, K, generator=g, dtype=torch.float64).to(DT[fa])
    Bm = torch.randn(B, K, N, generator=g, dtype=torch.float64).to(DT[fa])
    C = torch.randn(B, M, N, generator=g, dtype=torch.float64).to(DT[out])
    A[0, 1, 3] = float("inf")
    kw = dict(in_format="tf32") if fa == "tf32" else {}
    if sched.input_precision is not None:
        if fa != "tf32":
            pytest.skip(f"{name}: fp32 inputs only")
        kw = {}
    log = []
    try:
        with cuda_route(mod, log):
            emulated_mm(A, Bm, C, arch=arch, out_dtype=DT[out], schedule=sched, **kw)
    except ptx.Unsupported as e:         # an instruction the interpreter lacks: named
        pytest.xfail(f"{name} on {row}: {e}")
    except ptx.PTXError:                 # a fault of the kernel or the interpreter: fails
        raise
    except (ValueError, NotImplementedError) as e:   # the schedule does not fit the row
        pytest.skip(f"{name} on {row}: {str(e).splitlines()[0][:120]}")
    return log


def _own_row(name):
    if name.startswith("triton_") and name != "triton_fp8_hopper" and "imprecise" not in name:
        return ROWS[4]                  # fp32 inputs (tf32, tf32x3, ieee)
    if "fp8" in name or "scaled" in name or "deepseek" in name:
        return ROWS[2]
    return ROWS[0]


def _check(mod, name, row):
    log = _run(mod, name, SCHEDULES[name], row)
    if not log:
        assert SCHEDULES[name] == Schedule(), f"{name} ran no _sched program"
        pytest.skip(f"{name}: no _sched call (the plain _gemm route, tests/test_ptx_cuda_gemm.py)")
    bad = sum(x[0] for x in log)
    assert bad == 0, f"{name} on {row}: {bad} of {sum(x[1] for x in log)} outputs differ"


# residue-tile presets (NODE ops, ~4 s each here) beyond the one that has them all (split,
# residue, the fp16 serial merge): in the slow run
SLOW = {"cublas_cutlass_residue_32", "cublas_cutlass_split_k_4_fp32",
        "cublas_cutlass_split_k_4_fp16_partials",
        # and custom ones whose programs the presets and the other custom ones already hold
        "pairwise_3", "split_9_empties", "split_2_epilogue_fma"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in SCHEDULES])
def test_schedule_kernel_ptx_equals_cpu_kernel(mod, name):
    """Each schedule on the row it is written for (presets) or fp16 -> fp32 (custom)."""
    _check(mod, name, _own_row(name))


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=lambda r: "-".join(r))
@pytest.mark.parametrize("name", list(SCHEDULES))
def test_schedule_kernel_ptx_every_row(mod, name, row):
    _check(mod, name, row)


@pytest.mark.parametrize("name", ["cublas_split_k_4", "pairwise_fp64_ws", "promote_mul_add"])
def test_schedule_kernel_sm100a_ptx(mod100, name):
    """sm_100a's PTX of the schedule kernel (other integer forms: abs, mad.lo.s64, selp,
    st.local.v2) on an sm100 row: equal to the CPU kernel as well."""
    log = _run(mod100, name, SCHEDULES[name], ("sm100", "fp16", "fp32"))
    assert log and sum(x[0] for x in log) == 0
