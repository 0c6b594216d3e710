"""Helpers shared by the tests (tests/ is on sys.path under pytest's default import mode)."""
import contextlib
import os
import zlib

import pytest
import torch

from torch_mma_emu.cpp import params

_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw encodings of a tensor (on the CPU), for bit-exact comparisons."""
    return t.detach().cpu().contiguous().view(_INT[t.element_size()])


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical: same dtype, shape and encodings (NaN payloads and signed zeros too)."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def rnd(*shape, dtype=torch.bfloat16, seed=0, scale=1.0) -> torch.Tensor:
    """Seeded standard-normal values (times ``scale``) rounded to ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


@contextlib.contextmanager
def env(**kv):
    """Environment variables set (a value) or removed (None) for the calls inside, restored
    after."""
    old = {k: os.environ.get(k) for k in kv}
    for k, v in kv.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = str(v)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def cpu_path(mode):
    """The CPU kernel's path for the calls inside: None (its default choice), "scalar"
    (MMA_EMU_SCALAR=1), or an instruction-set cap "avx2" / "avx512" (MMA_EMU_CPU_ISA)."""
    return env(MMA_EMU_SCALAR="1" if mode == "scalar" else None,
               MMA_EMU_CPU_ISA=mode if mode not in (None, "scalar") else None)


def fast_path(spec, mode=None) -> str:
    """The CPU kernel's path for this spec under cpu_path(mode): "avx512:fdpa", "scalar"..."""
    with cpu_path(mode):
        return torch.ops.mma_emu._cpu_fast_path(list(params(spec)))


def seeded(*key) -> torch.Generator:
    """A generator seeded from ``key`` (a stable hash of its repr): one stream per test case."""
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


def mm_on_path(kw, mode, c_mode="chain"):
    """``tme.emulated_mm(**kw)`` on the CPU kernel's path ``mode`` (see :func:`cpu_path`)."""
    import torch_mma_emu as tme
    with cpu_path(mode):
        return tme.emulated_mm(**kw, c_mode=c_mode)


def assert_same_bits(D, R, what):
    """D and R have the same encodings; else say how many differ and where the first is."""
    diff = (bits(D) != bits(R)).nonzero()
    assert diff.numel() == 0, (f"{diff.shape[0]} mismatches {what}; first at {diff[0].tolist()}: "
                               f"{bits(D)[tuple(diff[0])]:#x} vs {bits(R)[tuple(diff[0])]:#x}")


def triton_as_modelled(ok: bool, what: str) -> None:
    """Assert that the installed Triton compiles ``what`` as the modelled Triton (3.6) does;
    with a Triton version that disagrees (3.8) a difference is the known gap the emulation warns about
    (torch_mma_emu.triton.hook.version_warning): an xfail that names it, not a pass."""
    if ok:
        return
    import triton
    from torch_mma_emu.triton.hook import version_warning
    if version_warning(triton.__version__):
        pytest.xfail(f"Triton {triton.__version__} compiles {what} otherwise than the "
                     "modelled Triton 3.6 (the emulation warns)")
    raise AssertionError(f"the installed Triton compiles {what} otherwise than modelled")


def fdpa_kwargs(spec, A, B, C, scales=None):
    """emulated_mm's keyword arguments for spec on codes A, B and C: the output dtype, both
    formats where a dtype does not name them, and unit block scales (or ``scales``)."""
    from torch_mma_emu.formats import FORMATS
    fa, fb = FORMATS[spec.in_format], FORMATS[spec.in_format_b or spec.in_format]
    kw = dict(A=A, B=B, C=C, arch=spec,
              out_dtype={"fp32": torch.float32, "fp16": torch.float16}[spec.out_format])
    if fa.torch_dtype is None or fb.torch_dtype is None:
        kw["in_format"] = f"{fa.name},{fb.name}"
    if spec.scaled:
        K = A.shape[-1]
        nb = -(-K // spec.block_size)
        unit = 0x38 if spec.scale_format == "ue4m3" else 127  # the code of 1.0
        one = torch.full((A.shape[0], nb), unit, dtype=torch.uint8)
        sa, sb = scales if scales is not None else (one, one.new_full((nb, B.shape[-1]), unit))
        want = (torch.float8_e4m3fn if spec.scale_format == "ue4m3"
                else getattr(torch, "float8_e8m0fnu", None))
        kw["scale_a"] = sa.view(want) if want is not None else sa
        kw["scale_b"] = sb.view(want) if want is not None else sb
    return kw


def row_specs():
    """Every registry row on its first input format: the unscaled rows once, the block-scaled
    rows at each of their block sizes."""
    from torch_mma_emu.registry import ROWS
    return ([r.make_spec(r.formats[0], r.formats[0], 0) for r in ROWS if r.scale_format is None]
            + [r.make_spec(r.formats[0], r.formats[0], bs) for r in ROWS if r.scale_format
               for bs in r.block_sizes])


def row_id(s) -> str:
    """A test id for a spec of row_specs()."""
    b = f"x{s.in_format_b}" if s.in_format_b else ""
    inst = "" if s.passes == 1 else f"-{s.passes}pass"
    sc = f"-{s.scale_format}{s.block_size}" if s.scaled else ""
    return f"{s.arch}-{s.op}-{s.in_format}{b}-{s.out_format}{sc}-L{s.L}{inst}"
