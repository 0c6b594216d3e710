"""Float -> fp8 conversions under emulate, as each target's compiled code does them (issue
37 item 2): the LLVM IR Triton 3.6 compiles for gfx942 / gfx90a, evaluated bit for bit
(llir_cast.py), the PTX for sm90 / sm89 evaluated by the checker, and torch's casts where
the formats agree (in range)."""
import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import llir_cast  # noqa: E402
import torch_mma_emu.triton as tmt  # noqa: E402
from torch_mma_emu.triton import ptx_check  # noqa: E402
from torch_mma_emu.triton.convert import to_fp8  # noqa: E402
from torch_mma_emu.triton.target_rules import fp8_cast  # noqa: E402


from triton_cast_kernel import amd_llir, cast_to as castk  # noqa: E402


FP8 = {"fp8_e4m3": (torch.float8_e4m3fn, tl.float8e4nv),
       "fp8_e5m2": (torch.float8_e5m2, tl.float8e5),
       "fp8_e4m3fnuz": (torch.float8_e4m3fnuz, tl.float8e4b8),
       "fp8_e5m2fnuz": (torch.float8_e5m2fnuz, tl.float8e5b16)}
SRC = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _adversarial_f32(seed=0):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(20000, generator=g) * torch.exp(torch.randn(20000, generator=g) * 4),
          torch.tensor([float("nan"), -float("nan"), float("inf"), -float("inf"), 0.0, -0.0,
                        1e6, -1e6, 65504., 65520., 70000., 448., 464., 465., 479.9, 480.,
                        57344., 61440., 61441., 240., 248., 249., 1e-9, -1e-9, 1e-40])]
    for dt, _ in FP8.values():               # every fp8 value, the ties and their neighbours
        v = torch.arange(256, dtype=torch.uint8).view(dt).float()
        s = torch.sort(v[torch.isfinite(v)]).values
        mid = (s[1:] + s[:-1]) / 2
        xs += [s, -s, mid, torch.nextafter(mid, s[1:]), torch.nextafter(mid, s[:-1])]
    return torch.cat(xs)


def _inputs(src):
    if src == "fp32":
        return _adversarial_f32()
    every = torch.arange(65536, dtype=torch.int32).to(torch.int16)   # every 16-bit pattern
    return every.view(SRC[src])


def _hw(fmt, f):             # v_cvt_pk_fp8_f32 / bf8 with Triton's clamp bit: the model itself
    dt = torch.float8_e4m3fnuz if fmt == "fp8" else torch.float8_e5m2fnuz
    rule = fp8_cast("MI300X", "fp32", "fp8_e4m3fnuz")
    return to_fp8(torch.from_numpy(f.copy()), dt, rule).view(torch.uint8).numpy()


# bf16 -> fnuz does not compile for gfx90a (Triton 3.6 aborts)
AMD_CASES = [(a, s, d) for a in ("MI250X", "MI300X") for s in SRC for d in FP8
             if not (a == "MI250X" and s == "bf16" and d.endswith("fnuz"))]


_LLIR: dict = {}


@pytest.mark.parametrize("arch,src,dst", AMD_CASES)
def test_amd_casts_equal_the_compiled_llvm_ir(arch, src, dst):
    if arch not in _LLIR:
        _LLIR[arch] = amd_llir(arch, [(s, d) for a, s, d in AMD_CASES if a == arch])
    x = _inputs(src)
    dt, tl_dt = FP8[dst]
    bits = x.view(torch.int32 if src == "fp32" else torch.int16).numpy().astype(np.int64)
    bits &= (1 << (8 * x.element_size())) - 1
    got = llir_cast.run(_LLIR[arch][src, dst], bits.astype(np.uint64), _hw).astype(np.uint8)
    want = to_fp8(x, dt, fp8_cast(arch, src, dst)).view(torch.uint8).numpy()
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, (x[bad[:5]].tolist(), got[bad[:5]], want[bad[:5]])


@pytest.mark.parametrize("arch", ["MI300X", "MI250X", "H100", "L40S"])
@pytest.mark.parametrize("dst", ["fp8_e4m3", "fp8_e5m2"])
def test_issue_reproducer_gives_torch_bits(arch, dst):
    dt, tl_dt = FP8[dst]
    x = torch.tensor([127.0, 31.4, 100.0, 1.0])
    o = torch.empty(4, dtype=dt)
    with tmt.emulate(arch):
        castk[(1,)](x, o, DST=tl_dt, N=4)
    assert torch.equal(o.view(torch.uint8), x.to(dt).view(torch.uint8)), o.float().tolist()


@pytest.mark.parametrize("arch", ["MI300X", "MI250X"])
@pytest.mark.parametrize("dst", list(FP8))
def test_amd_emulated_kernel_equals_the_model_and_torch_in_range(arch, dst):
    dt, tl_dt = FP8[dst]
    x = _adversarial_f32()[:4096]
    o = torch.empty(4096, dtype=dt)
    with tmt.emulate(arch):
        castk[(1,)](x, o, DST=tl_dt, N=4096)
    want = to_fp8(x, dt, fp8_cast(arch, "fp32", dst))
    assert torch.equal(o.view(torch.uint8), want.view(torch.uint8))
    ok = torch.isfinite(x) & (x.abs() <= torch.finfo(dt).max)
    if dst.endswith("fnuz") and arch == "MI250X":        # through fp16 first: double rounding
        ok &= x.to(torch.float16).float() == x
    assert torch.equal(o[ok].view(torch.uint8), x[ok].to(dt).view(torch.uint8))


@pytest.mark.parametrize("arch", ["H100", "L40S"])
@pytest.mark.parametrize("src", list(SRC))
@pytest.mark.parametrize("dst", ["fp8_e4m3", "fp8_e5m2"])
def test_nvidia_casts_equal_the_evaluated_ptx(arch, src, dst):
    dt, tl_dt = FP8[dst]
    x = _adversarial_f32()[-4096:].to(SRC[src])
    o = torch.empty(4096, dtype=dt)
    r = ptx_check.check(castk, (x, o), {"DST": tl_dt, "N": 4096}, arch=arch)
    assert r["equal"], r["mismatches"]
    if src == "fp32" and arch == "L40S":
        assert "cvt.rz.f16.f32" in r["ptx"]


def test_torchao_blockwise_fp8_quant_kernels_match_torch_on_mi300x(monkeypatch):
    try:
        import torch.utils._triton as tut
        from torchao.kernel import blockwise_quantization as bq
    except Exception as e:      # noqa: BLE001 - not installed or another layout
        pytest.skip(f"torchao blockwise quantization not importable: {e}")
    monkeypatch.setattr(tut, "has_triton", lambda: True)   # False on a CPU-only torch
    impls = bq._build_triton_impls()
    g = torch.Generator().manual_seed(0)
    a = torch.randn(4 * 512, generator=g) * torch.exp(torch.randn(4 * 512, generator=g))
    w = torch.randn(256, 256, generator=g)
    qa, sa = torch.empty(4 * 512, dtype=torch.float8_e4m3fn), torch.empty(16)
    qw, sw = torch.empty(256, 256, dtype=torch.float8_e4m3fn), torch.empty(4)
    with tmt.emulate("MI300X"):
        impls.act_quant[(16,)](a, qa, sa, BLOCK_SIZE=128)
        impls.weight_quant[(2, 2)](w, qw, sw, 256, 256, BLOCK_SIZE=128)
    ra = (a.reshape(16, 128) / sa[:, None]).reshape(-1).to(torch.float8_e4m3fn)
    assert torch.equal(qa.view(torch.uint8), ra.view(torch.uint8))
    rw = (w.reshape(2, 128, 2, 128) / sw.reshape(2, 1, 2, 1)).reshape(256, 256)
    assert torch.equal(qw.view(torch.uint8), rw.to(torch.float8_e4m3fn).view(torch.uint8))
