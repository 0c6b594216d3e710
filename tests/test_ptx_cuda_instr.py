"""csrc/cuda/mma_instr.cu's instruction kernels (mma.sync m16n8k8 / k16 / k32, wgmma
m64n8k8 / k16 / k32), compiled by nvcc 13.0 for each target (tests/data/cuda_ptx/, regen.sh)
and run on the CPU by the PTX interpreter as ``mma_instr_cuda`` launches them
(tests/cuda_instr_ptx.py): for every (arch, instruction kernel, formats, accumulator) whose
registry model ``native.instruction_spec`` gives (the rows the kernels serve), the kernel's
D equals the CPU kernel's chain (``emulated_mm`` of that spec, C the initial accumulator)
bit for bit: the fragment indexing, the K loop and the accumulator feedback of the CUDA code
checked against the PTX ISA's layouts, which the interpreter implements independently.
Where the build has no code for an instruction (fp8 mma.sync in the sm_80 PTX, wgmma outside
sm_90a), the kernel must raise its error flag, as the host code then reports."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_mma_emu import emulated_mm, native, ptx, registry  # noqa: E402
from torch_mma_emu.formats import INT_OF_SIZE  # noqa: E402
from torch_mma_emu.isa import KERNEL_OUTPUTS, KERNELS  # noqa: E402

import cuda_instr_ptx as R  # noqa: E402

DT = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32,
      "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
ODT = {"fp32": torch.float32, "fp16": torch.float16}


def _combos():
    """(arch, instruction kernel, fa, fb, accumulator, spec) for every kernel that runs on
    the arch and every type pair and accumulator the host code picks a kernel for."""
    out = []
    for arch in R.TARGET:
        cc = registry.ARCHS[arch].capability
        for name, kern in KERNELS.items():
            if not kern.runs_on(cc):
                continue
            for fa in kern.inputs:
                for fb in kern.inputs:
                    if fa != fb and not fa.startswith("fp8"):
                        continue
                    for acc in KERNEL_OUTPUTS[fa]:
                        if acc == "fp16" and fa == "bf16":
                            continue
                        spec, _ = native.instruction_spec(arch, fa, ODT[acc], name,
                                                          in_format_b=fb)
                        if spec is not None:
                            out.append((arch, name, fa, fb, acc, spec))
    return out


COMBOS = _combos()


def _id(c):
    return f"{c[0]}-{c[1]}-{c[2]}" + ("" if c[3] == c[2] else "," + c[3]) + f"-{c[4]}"


def _operands(fa, fb, acc, M, N, K, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = (torch.randn(M, K, generator=g) * 2).to(DT[fa])
    Bt = (torch.randn(N, K, generator=g) * 2).to(DT[fb])
    C = torch.randn(M, N, generator=g).to(ODT[acc])
    A[1, 3] = float("inf")             # a special value in one row and one column
    if fb != "fp8_e4m3":
        Bt[2, 5] = float("nan")
    if fa == "tf32":                   # low mantissa bits set: the model truncates them
        A = (A.view(torch.int32) | 0x1FFF).view(torch.float32)
    return A, Bt, C


@pytest.fixture(scope="module")
def mods():
    return {}


def _mod(mods, target):
    if target not in mods:
        mods[target] = R.load(target)
    return mods[target]


@pytest.mark.parametrize("combo", COMBOS, ids=_id)
def test_instruction_kernel_ptx_equals_cpu_model(mods, combo):
    arch, name, fa, fb, acc, spec = combo
    kern = KERNELS[name]
    M, N, K = kern.rows * 2, 16, kern.k * 3          # two tiles along M and N, three along K
    A, Bt, C = _operands(fa, fb, acc, M, N, K)
    mod = _mod(mods, R.TARGET[arch])
    code = lambda t: t.view(INT_OF_SIZE[t.element_size()]).numpy()  # noqa: E731
    d, err, st = R.run(mod, arch, name, fa, fb, acc, code(A), code(Bt), C.numpy())
    assert err == 0, f"{_id(combo)}: the kernel raised its no-code flag"
    ref = emulated_mm(A, Bt.t(), C, arch=spec, c_mode="chain").numpy()
    w = np.uint32 if acc == "fp32" else np.uint16
    bad = int((d.view(w) != ref.view(w)).sum())
    assert bad == 0, f"{_id(combo)}: {bad} of {d.size} outputs differ from the CPU model"
    assert st.thread_instructions > 0


@pytest.mark.parametrize("target,name", [("sm80", "mma.m16n8k32"), ("sm89", "wgmma.m64n8k16"),
                                         ("sm100a", "wgmma.m64n8k32"),
                                         ("sm120a", "wgmma.m64n8k8.tf32")])
def test_no_code_sets_the_error_flag(mods, target, name):
    """A build without the instruction (fp8 mma.sync below sm_89, wgmma outside sm_90a)
    compiles the kernel to the error path: the flag is set and D is not written."""
    kern = KERNELS[name]
    fa = kern.inputs[0]
    M, N, K = kern.rows, 8, kern.k
    A, Bt, C = _operands(fa, fa, "fp32", M, N, K)
    code = lambda t: t.view(INT_OF_SIZE[t.element_size()]).numpy()  # noqa: E731
    d, err, _ = R.run(_mod(mods, target), "sm90", name, fa, fa, "fp32", code(A), code(Bt),
                      C.numpy())
    assert err == 1 and not d.any()


def test_every_instruction_kernel_has_a_combo():
    """Each kernel of mma_instr.cu is run for at least one registry model above."""
    assert {c[1] for c in COMBOS} == set(KERNELS)
    assert {c[0] for c in COMBOS} == set(R.TARGET)


def test_wgmma_descriptor_outside_the_modelled_layout_is_named():
    """A swizzled descriptor is refused by name, not read in a wrong layout."""
    text = """
.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  .reg .pred %p<2>;
  .shared .align 128 .b8 sB[256];
  mov.b64 %rd1, 4611686018427387904;
  setp.ne.b32 %p1, 1, 0;
  mov.b32 %r1, 0;
  wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%r1,%r2,%r3,%r4}, {%r5,%r6,%r7,%r1}, %rd1, %p1, 1, 1, 0;
  ret;
}
"""
    mod = ptx.Module(text)
    with pytest.raises(ptx.Unsupported, match="swizzle"):
        mod.launch("k", 1, 128, [np.zeros(1, np.uint64)], arch="sm90")
