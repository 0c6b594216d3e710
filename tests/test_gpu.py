"""GPU tests (marker ``gpu``; skipped without CUDA): the CUDA kernel against the CPU kernel
bit for bit, the native paths (instruction kernel, Triton, cuBLAS) against the emulator.
scripts/validate_hw.py runs the same comparisons with >= 1e6 outputs per entry."""
import zlib

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import native
from torch_mma_emu.inputs import FAMILIES, operands
from torch_mma_emu.registry import all_specs
from helpers import bits

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

SPECS = all_specs()


def cuda(kw):
    return {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}


def same(kw, **extra):
    cpu = tme.emulated_mm(**kw, **extra)
    gpu = tme.emulated_mm(**cuda(kw), **extra)
    assert gpu.device.type == "cuda" and gpu.dtype == cpu.dtype and gpu.shape == cpu.shape
    diff = (bits(cpu) != bits(gpu)).nonzero()
    assert diff.numel() == 0, (f"{diff.shape[0]} of {cpu.numel()} outputs differ; first at "
                               f"{diff[0].tolist()}: cpu {bits(cpu)[tuple(diff[0])]:#x} "
                               f"cuda {bits(gpu)[tuple(diff[0])]:#x}")


def _id(s):
    b = f"x{s.in_format_b}" if s.in_format_b else ""
    sc = f"-{s.scale_format}{s.block_size}" if s.scaled else ""
    return f"{s.arch}-{s.in_format}{b}-{s.out_format}{sc}-{zlib.crc32(s.instruction.encode()) % 997}"


@pytest.fixture(scope="module", autouse=True)
def _cuda_build():
    if not hasattr(torch.ops.mma_emu, "_mma_instr"):
        pytest.fail("torch_mma_emu was built without its CUDA kernels (bash scripts/build_ext.sh "
                    "with a CUDA torch and nvcc)")


@pytest.mark.parametrize("spec", SPECS, ids=_id)
def test_cuda_kernel_matches_cpu_kernel(spec):
    K = 2 * spec.L + spec.L // 2 + 1
    for fam in FAMILIES:
        g = torch.Generator().manual_seed(zlib.crc32(f"{spec.to_string()}{fam}".encode()))
        same(operands(spec, 37, 41, K, fam, g))
    g = torch.Generator().manual_seed(1)
    same(operands(spec, 19, 23, K, "normal", g), c_mode="epilogue")


@pytest.mark.parametrize("arch,fmt,out", [("sm90", "fp16", None), ("sm90", "fp16", torch.float16),
                                          ("sm90", "fp8_e4m3", None), ("sm80", "tf32", None),
                                          ("sm100", "fp8_e5m2", None), ("sm70", "fp16", None)])
def test_fast_path_tiles_edges_and_specials(arch, fmt, out):
    # sizes off the 32 x 32 tile and the 32-element K tile; bitstream rows take the core path
    spec = tme.spec(arch, fmt, out)
    for fam, (M, N, K) in zip(FAMILIES, [(67, 95, 300), (33, 31, 65), (70, 130, 97)]):
        g = torch.Generator().manual_seed(M * N + K)
        same(operands(spec, M, N, K, fam, g))
        same(operands(spec, M, N, K, fam, g), c_mode="epilogue")


def test_batch_strides_broadcast_and_empty():
    spec = tme.spec("sm90", "fp16")
    g = torch.Generator().manual_seed(3)
    kw = operands(spec, 20, 30, 50, "bitstream", g, batch=(4,))
    kw["A"] = kw["A"].mT.contiguous().mT          # column-major A
    kw["B"] = kw["B"][:1]                          # broadcast B over the batch
    kw["C"] = kw["C"][0, :1, :]                    # broadcast C over batch and rows
    same(kw)
    for M, N, K in [(0, 5, 7), (5, 0, 7), (5, 7, 0), (1, 1, 1)]:
        g = torch.Generator().manual_seed(M + N + K)
        kw = operands(spec, M, N, K, "normal", g)
        same(kw)
        same(kw, c_mode="epilogue")


def test_cuda_kernel_on_a_side_stream_and_second_device():
    spec = tme.spec("sm90", "bf16")
    g = torch.Generator().manual_seed(4)
    kw = operands(spec, 64, 64, 64, "normal", g)
    want = tme.emulated_mm(**kw)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        got = tme.emulated_mm(**cuda(kw))
    s.synchronize()
    assert torch.equal(bits(want), bits(got))
    if torch.cuda.device_count() > 1:
        got = tme.emulated_mm(**{k: (v.to("cuda:1") if isinstance(v, torch.Tensor) else v)
                                 for k, v in kw.items()})
        assert got.device == torch.device("cuda:1") and torch.equal(bits(want), bits(got))


def test_large_product_uses_the_fast_path_and_matches():
    spec = tme.spec("sm90", "fp16")
    g = torch.Generator().manual_seed(5)
    kw = operands(spec, 512, 384, 1024, "normal", g)
    same(kw)


# ---------------------------------------------------------------------------------------
# native paths against the emulator of this GPU's arch
# ---------------------------------------------------------------------------------------

def _arch():
    return native.device_arch()


def _native_vs_emulated(fmt, out, path, families=FAMILIES, M=128, N=64, K=128):
    arch = _arch()
    spec = tme.spec(arch, fmt, out)
    bad = {}
    for fam in families:
        g = torch.Generator().manual_seed(zlib.crc32(f"{fmt}{path}{fam}".encode()))
        kw = cuda(operands(spec, M, N, K, fam, g))
        if path == "cublas":
            got = native.native_mm(kw["A"], kw["B"], kw["C"], backend="cublas",
                                   in_format=fmt, out_dtype=out)
            want = tme.emulated_mm(**kw, c_mode="epilogue")
        elif path == "triton":
            got = native.native_mm(kw["A"], kw["B"], kw["C"], backend="triton",
                                   in_format=fmt, out_dtype=out)
            want = tme.emulated_mm(**kw)
        else:
            got = native.mma_instruction(kw["A"], kw["B"], kw["C"], in_format=fmt, out_dtype=out)
            want = tme.emulated_mm(**kw)
        n = int((bits(got) != bits(want)).sum())
        if n:
            bad[fam] = n
    return bad


def _formats():
    cap = torch.cuda.get_device_capability() if torch.cuda.is_available() else (0, 0)
    f = [("fp16", torch.float32), ("bf16", torch.float32), ("tf32", torch.float32)]
    if cap >= (8, 9):
        f += [("fp8_e4m3", torch.float32), ("fp8_e5m2", torch.float32)]
    return f


@pytest.mark.parametrize("fmt,out", _formats(), ids=lambda x: str(x))
def test_instruction_kernel_matches_emulator(fmt, out):
    if not native.instructions_for(fmt):
        pytest.skip(f"no instruction for {fmt} here")
    assert _native_vs_emulated(fmt, out, "mma") == {}


@pytest.mark.parametrize("fmt,out", _formats(), ids=lambda x: str(x))
def test_triton_kernel_matches_emulator(fmt, out):
    pytest.importorskip("triton")
    assert _native_vs_emulated(fmt, out, "triton") == {}


def test_single_instruction_per_output():
    fmt = "fp16"
    ins = native.instructions_for(fmt)[0]
    K = native.INSTRUCTIONS[ins][1]
    assert _native_vs_emulated(fmt, torch.float32, "mma", K=K) == {}


def test_cublas_runs_and_is_close():
    # cuBLAS may split K: only closeness is asserted here; validate_hw reports its bits
    A = torch.randn(64, 256, device="cuda").half()
    B = torch.randn(256, 32, device="cuda").half()
    C = torch.randn(64, 32, device="cuda")
    D = native.native_mm(A, B, C, backend="cublas")
    assert D.dtype == torch.float32 and D.shape == (64, 32)
    R = C.double() + A.double() @ B.double()
    assert torch.allclose(D.double(), R, rtol=1e-3, atol=1e-3)


def test_native_mm_shapes_and_errors_on_cuda():
    A = torch.randn(2, 1, 16, 32, device="cuda").half()
    B = torch.randn(3, 32, 16, device="cuda").half()
    D = native.native_mm(A, B, backend="triton")
    assert D.shape == (2, 3, 16, 16)
    with pytest.raises(ValueError, match="c_mode"):
        native.native_mm(A, B, torch.zeros(16, 16, device="cuda"), backend="cublas", c_mode="chain")
    with pytest.raises(ValueError, match="multiple"):
        native.mma_instruction(A[0, 0, :, :24], B[0, :24], instruction="mma.m16n8k16")
    with pytest.raises(ValueError, match="CUDA device"):
        native.native_mm(A.cpu(), B.cpu())


@pytest.mark.parametrize("ins", list(native.INSTRUCTIONS))
def test_each_instruction_kernel_matches_the_model_of_that_instruction(ins):
    """mma.sync k8/k16/k32 and wgmma, each against native.instruction_spec (issue 10)."""
    _, k, _, fmts, _, _ = native.INSTRUCTIONS[ins]
    ran = 0
    for fmt in fmts:
        if ins not in native.instructions_for(fmt):
            continue
        for out in ((torch.float32,) if fmt in ("bf16", "tf32") else (torch.float32, torch.float16)):
            spec, src = native.instruction_spec(_arch(), fmt, out, ins)
            if spec is None:
                continue                       # no model yet: validate_hw archives its samples
            for fam in FAMILIES:
                g = torch.Generator().manual_seed(zlib.crc32(f"{ins}{fmt}{fam}".encode()))
                kw = cuda(operands(spec, 64, 24, 3 * k, fam, g))
                got = native.mma_instruction(kw["A"], kw["B"], kw["C"], in_format=fmt,
                                             out_dtype=out, instruction=ins)
                want = tme.emulated_mm(**kw)
                n = int((bits(got) != bits(want)).sum())
                assert n == 0, f"{ins} {fmt} {out} {fam}: {n} differ from {spec.describe()} ({src})"
                ran += 1
    if not ran:
        pytest.skip(f"{ins}: not on this GPU, or no model yet")


@pytest.mark.parametrize("fmt,K", [("tf32", 8), ("tf32", 24), ("fp32", 8), ("fp16", 40)])
def test_triton_kernel_runs_the_padded_chain(fmt, K):
    """K off Triton's 16-deep blocks: the kernel equals the emulator on operands zero-padded
    to triton_kernels.run_k(K) (the all-zero steps it adds)."""
    pytest.importorskip("triton")
    from torch_mma_emu.triton_kernels import matmul, run_k
    spec = tme.spec(_arch(), fmt)
    K2 = run_k(K, fmt)
    for fam in FAMILIES:
        g = torch.Generator().manual_seed(zlib.crc32(f"pad{fmt}{K}{fam}".encode()))
        kw = operands(spec, 64, 64, K, fam, g)
        kw["A"][:8] = -0.0                    # -0 results, which extra all-zero steps flip
        kw["C"][:4] = -0.0
        got = matmul(kw["A"].cuda(), kw["B"].cuda(), kw["C"].cuda(), in_format=fmt)
        pad = dict(kw, A=torch.cat([kw["A"], torch.zeros(64, K2 - K, dtype=kw["A"].dtype)], 1),
                   B=torch.cat([kw["B"], torch.zeros(K2 - K, 64, dtype=kw["B"].dtype)], 0))
        want = tme.emulated_mm(**pad)
        assert torch.equal(bits(got), bits(want)), f"{fmt} K={K} {fam}"
