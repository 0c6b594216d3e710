"""What the probes run on: a *target* computes many dot-product-accumulates at once.

Every target answers ``target.mm(A, B, C, scale_a, scale_b)`` with the operand conventions
of :func:`torch_mma_emu.emulated_mm` for a batch of S independent dot products:
``A`` (S, 1, K), ``B`` (S, K, 1), ``C`` (S, 1, 1) in the output dtype, scales (S, 1, nblk) /
(S, nblk, 1); it returns D (S, 1, 1) in the output dtype.  One call evaluates a whole batch
of probe vectors, so an emulated target costs one C++ call per probe family.

Kinds of target (:func:`make_target`):

* an arch name or a :class:`~torch_mma_emu.spec.Spec`: :class:`EmulatedTarget`;
* ``"native"``: :class:`NativeTarget`, the GPU's own matrix instruction through
  ``torch_mma_emu.native.mma_instruction`` (needs CUDA);
* a callable ``f(a_values, b_values, c_value) -> float`` computing one dot-product-accumulate
  (block-scaled formats: ``f(a, b, c, scale_a, scale_b)`` with one scale per block):
  :class:`CallableTarget`;
* a :class:`Target` instance, used as is.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import torch

from ..formats import (FORMATS, INT_OF_SIZE, OUT_DTYPES, Format, default_out, get_format,
                       out_format, storage_dtype, value_table)
from ..spec import Spec
from ..tf32 import tf32_truncate



@dataclass(frozen=True)
class Interface:
    """The types a target takes and returns (what the user declares, not what is probed)."""

    fmt_a: Format
    fmt_b: Format
    out: Format
    scale_format: str | None = None
    block_size: int = 0

    @property
    def out_dtype(self) -> torch.dtype:
        return OUT_DTYPES[self.out.name]

    @property
    def scaled(self) -> bool:
        return self.scale_format is not None

    @property
    def in_format_arg(self) -> str | None:
        """``in_format`` for emulated_mm where the dtypes do not say it."""
        if self.fmt_a.torch_dtype is None or self.fmt_b.torch_dtype is None or \
                self.fmt_a.container_bits or self.fmt_b.container_bits:
            return f"{self.fmt_a.name},{self.fmt_b.name}"
        return None

    def describe(self) -> str:
        pair = self.fmt_a.name if self.fmt_a == self.fmt_b else \
            f"{self.fmt_a.name} x {self.fmt_b.name}"
        sc = f", {self.scale_format} scales per {self.block_size}" if self.scaled else ""
        return f"{pair} -> {self.out.name}{sc}"


def spec_interface(sp: Spec) -> Interface:
    """The types a spec takes and returns."""
    return Interface(sp.fmt_a, sp.fmt_b, FORMATS[sp.out_format], sp.scale_format,
                     sp.block_size)


class ProbeTargetError(RuntimeError):
    """The target itself failed (a user callable raised or returned something unusable)."""


class Target:
    """Base class: a black-box matrix unit with a known :class:`Interface`."""

    label = "target"

    def __init__(self, iface: Interface):
        self.iface = iface
        self.calls = 0
        self.evaluations = 0

    def mm(self, A, B, C, scale_a=None, scale_b=None) -> torch.Tensor:
        raise NotImplementedError

    def __call__(self, A, B, C, scale_a=None, scale_b=None) -> torch.Tensor:
        self.calls += 1
        self.evaluations += A.shape[0]
        D = self.mm(A, B, C, scale_a, scale_b)
        S = A.shape[0]
        if not isinstance(D, torch.Tensor) or D.dtype != self.iface.out_dtype or \
                D.numel() != S:
            got = (f"a {D.dtype} tensor of shape {tuple(D.shape)}"
                   if isinstance(D, torch.Tensor) else type(D).__name__)
            raise TypeError(f"{self.label}: mm() must return {S} outputs as a "
                            f"{self.iface.out_dtype} tensor (S, 1, 1); got {got}")
        return D

    def describe(self) -> str:
        return f"{self.label} ({self.iface.describe()})"


class EmulatedTarget(Target):
    """``emulated_mm`` on an arch (with the registry's model) or on a Spec."""

    def __init__(self, iface: Interface, arch, instruction=None):
        super().__init__(iface)
        self.arch, self.instruction = arch, instruction
        self.label = f"emulated {arch.to_string() if isinstance(arch, Spec) else arch}"
        if isinstance(arch, Spec):
            self.label = f"emulated spec ({arch.describe()})"

    def mm(self, A, B, C, scale_a=None, scale_b=None):
        from ..ops import emulated_mm
        return emulated_mm(A, B, C, arch=self.arch, in_format=self.iface.in_format_arg,
                           out_dtype=self.iface.out_dtype, instruction=self.instruction,
                           scale_a=scale_a, scale_b=scale_b)


class NativeTarget(Target):
    """The GPU's own matrix instruction (``torch_mma_emu.native.mma_instruction``).

    A batch of S dot products runs as (R, K) @ (K, R) products whose diagonal holds the R
    wanted outputs (C on the diagonal, zeros elsewhere); K is zero-padded to a multiple of
    the instruction's K, which appends all-zero chunks that leave the accumulator as it is.
    """

    label = "native"
    rows = 64

    def __init__(self, iface: Interface, instruction=None, device="cuda"):
        super().__init__(iface)
        if not torch.cuda.is_available():
            raise RuntimeError("target 'native' runs the GPU's matrix instruction, but CUDA is "
                               "not available here; probe an emulated arch or a callable")
        try:
            from .. import native
        except ImportError as e:
            raise RuntimeError("target 'native' needs torch_mma_emu.native (the instruction-"
                               f"level kernels), which this build lacks: {e}") from e
        if not hasattr(native, "mma_instruction"):
            raise RuntimeError("torch_mma_emu.native has no mma_instruction; target 'native' "
                               "needs it")
        self.native, self.device = native, torch.device(device)
        fa, fb = iface.fmt_a.name, iface.fmt_b.name
        if instruction is None:
            cands = native.instructions_for(fa, self.device)
            if not cands:
                raise RuntimeError(f"this GPU ({native.device_arch(self.device)}) has no "
                                   f"instruction for {fa} in torch_mma_emu.native")
            instruction = cands[0]
        if instruction not in native.INSTRUCTIONS:
            raise ValueError(f"unknown instruction {instruction!r}; known: "
                             f"{', '.join(native.INSTRUCTIONS)}")
        self.instruction = instruction
        self.k = native.INSTRUCTIONS[instruction].k
        self.fmt = fa if fa == fb else f"{fa},{fb}"
        self.label = (f"native {torch.cuda.get_device_name(self.device)} "
                      f"({native.device_arch(self.device)}, {instruction})")

    def mm(self, A, B, C, scale_a=None, scale_b=None):
        if scale_a is not None:
            raise RuntimeError("the native instruction kernels take no block scales")
        S, _, K = A.shape
        Kp = max(self.k, -(-K // self.k) * self.k)
        dev, R = self.device, self.rows
        a = torch.zeros((S, Kp), dtype=A.dtype, device=dev)
        a[:, :K] = A[:, 0, :].to(dev)
        b = torch.zeros((S, Kp), dtype=B.dtype, device=dev)
        b[:, :K] = B[:, :, 0].to(dev)
        c = C.reshape(S).to(dev)
        out = torch.empty(S, dtype=self.iface.out_dtype, device=dev)
        eye = torch.eye(R, dtype=torch.bool, device=dev)
        for s0 in range(0, S, R):
            r = min(R, S - s0)
            cm = torch.zeros((r, r), dtype=self.iface.out_dtype, device=dev)
            cm[eye[:r, :r]] = c[s0:s0 + r]
            D = self.native.mma_instruction(a[s0:s0 + r], b[s0:s0 + r].t(), cm,
                                            in_format=self.fmt,
                                            out_dtype=self.iface.out_dtype,
                                            instruction=self.instruction)
            out[s0:s0 + r] = D.diagonal()
        return out.reshape(S, 1, 1).cpu()


class CallableTarget(Target):
    """Wraps ``f(a_values, b_values, c_value) -> float`` (one dot-product-accumulate, exact
    input values as Python floats); evaluated once per probe vector.  ``f`` may also return a
    0-d tensor of the output dtype (then NaN encodings come through bit for bit)."""

    def __init__(self, iface: Interface, fn):
        super().__init__(iface)
        if not callable(fn):
            raise TypeError(f"a callable target must be callable, got {type(fn).__name__}")
        self.fn = fn
        self.label = f"callable {getattr(fn, '__qualname__', repr(fn))}"
        want = 5 if iface.scaled else 3
        try:
            inspect.signature(fn).bind(*range(want))
        except TypeError as e:
            sig = "f(a, b, c, scale_a, scale_b)" if iface.scaled else "f(a, b, c)"
            raise TypeError(f"a callable target for {iface.describe()} is called as {sig}: "
                            f"{e}") from e
        except ValueError:      # no signature (a builtin): find out on the first call
            pass

    def mm(self, A, B, C, scale_a=None, scale_b=None):
        a = values_of(A[:, 0, :], self.iface.fmt_a)
        b = values_of(B[:, :, 0], self.iface.fmt_b)
        c = C.reshape(-1).to(torch.float64)
        if scale_a is not None:
            sa = scale_values(scale_a[:, 0, :], self.iface.scale_format)
            sb = scale_values(scale_b[:, :, 0], self.iface.scale_format)
        out = torch.empty(A.shape[0], dtype=self.iface.out_dtype)
        for s in range(A.shape[0]):
            args = (a[s].tolist(), b[s].tolist(), float(c[s]))
            if scale_a is not None:
                args += (sa[s].tolist(), sb[s].tolist())
            try:
                r = self.fn(*args)
            except Exception as e:
                raise ProbeTargetError(f"{self.label} raised {type(e).__name__}: {e} "
                                       f"(on a={args[0]}, b={args[1]}, c={args[2]})") from e
            if isinstance(r, torch.Tensor) and r.numel() == 1:
                out[s] = r.reshape(()).to(self.iface.out_dtype)
            elif isinstance(r, (float, int)) and not isinstance(r, bool):
                out[s] = torch.tensor(float(r), dtype=torch.float64).to(self.iface.out_dtype)
            else:
                raise ProbeTargetError(f"{self.label} must return a float or a one-element "
                                       f"tensor; it returned {r!r:.80} (on a={args[0]}, "
                                       f"b={args[1]}, c={args[2]})")
        return out.reshape(-1, 1, 1)


# ------------------------------------------------------------------------------------
# encoding and decoding operands
# ------------------------------------------------------------------------------------

def _code_table(fmt: Format) -> dict:
    """value -> code for a small code-only format (fp6/fp4); -0.0 keyed separately."""
    tab = {}
    for code, v in enumerate(value_table(fmt.name).tolist()):
        if math.isnan(v):
            continue
        key = ("-0" if math.copysign(1.0, v) < 0 else v) if v == 0 else v
        tab.setdefault(key, code)
    return tab


_TABLES: dict[str, dict] = {}


def encode(values: torch.Tensor, fmt: Format) -> torch.Tensor:
    """float64 values, each exactly representable in ``fmt`` -> the tensor emulated_mm takes."""
    dt = storage_dtype(fmt)
    if dt != torch.uint8:
        t = values.to(torch.float32).to(dt) if dt != torch.float64 else values.clone()
        back = t.to(torch.float64)
        same = (back == values) | (torch.isnan(back) & torch.isnan(values))
        if not bool(same.all()):
            bad = values[~same][0].item()
            raise ValueError(f"{bad!r} is not exactly representable in {fmt.name}")
        if fmt.container_bits == 32 and not torch.equal(tf32_truncate(t).view(torch.int32),
                                                        t.view(torch.int32)):
            raise ValueError(f"value not representable in {fmt.name} (low 13 bits set)")
        return t
    tab = _TABLES.setdefault(fmt.name, _code_table(fmt))
    flat = values.reshape(-1).tolist()
    codes = []
    for v in flat:
        key = ("-0" if math.copysign(1.0, v) < 0 else v) if v == 0 else v
        if key not in tab:
            raise ValueError(f"{v!r} is not a {fmt.name} value")
        codes.append(tab[key])
    return torch.tensor(codes, dtype=torch.uint8).reshape(values.shape)


def values_of(t: torch.Tensor, fmt: Format) -> torch.Tensor:
    """The exact float64 values of operands as emulated_mm reads them."""
    if t.dtype == torch.uint8:
        return value_table(fmt.name)[t.long()]
    if fmt.container_bits == 32:
        return tf32_truncate(t).to(torch.float64)
    return t.to(torch.float64)


def encode_scales(values: torch.Tensor, scale_format: str) -> torch.Tensor:
    """Scale values (powers of two for ue8m0) -> scale tensors for emulated_mm."""
    if scale_format == "ue8m0":
        m, e = torch.frexp(values)
        if not bool((m == 0.5).all()):
            raise ValueError("ue8m0 scales must be powers of two")
        codes = (e - 1 + 127)
        if bool(((codes < 0) | (codes > 254)).any()):
            raise ValueError("ue8m0 scale out of range 2**-127 .. 2**127")
        codes = codes.to(torch.uint8)
        e8 = getattr(torch, "float8_e8m0fnu", None)
        return codes.view(e8) if e8 is not None else codes
    t = values.to(torch.float32).to(torch.float8_e4m3fn)
    if not bool((t.to(torch.float64) == values).all()):
        raise ValueError("ue4m3 scale not representable")
    return t


def scale_values(t: torch.Tensor, scale_format: str) -> torch.Tensor:
    codes = t.contiguous().view(torch.uint8).long()
    if scale_format == "ue8m0":
        v = torch.exp2((codes - 127).double())
        return torch.where(codes == 255, torch.full_like(v, float("nan")), v)
    return (codes & 0x7F).to(torch.uint8).view(torch.float8_e4m3fn).to(torch.float64)


MASK64 = (1 << 64) - 1


def signed64(code: int) -> int:
    """A 64-bit pattern as the int64 that holds it in a tensor."""
    return code - (1 << 64) if code >= 1 << 63 else code


def output_codes(D: torch.Tensor) -> torch.Tensor:
    """Bit patterns of an output tensor as int64: non-negative for fp16/fp32; fp64 patterns
    with the sign bit set are negative (``int(x) & MASK64`` gives the pattern)."""
    bits = D.contiguous().view(INT_OF_SIZE[D.element_size()]).to(torch.int64).reshape(-1)
    width = 8 * D.element_size()
    if width < 64:
        bits = bits & ((1 << width) - 1)
    return bits


# ------------------------------------------------------------------------------------
# resolving what the user passed
# ------------------------------------------------------------------------------------

def _out_name(out_dtype, fa: Format) -> str:
    return out_format(out_dtype) or default_out(fa.name)


def interface(in_format, out_dtype=None, scale_format=None, block_size=None) -> Interface:
    """Build an :class:`Interface`; ``in_format`` is a format name or "fmtA,fmtB"."""
    if in_format is None:
        raise ValueError("in_format is required (e.g. 'fp16', 'bf16', 'tf32', 'fp8_e4m3', "
                         "'fp8_e4m3,fp8_e5m2')")
    if isinstance(in_format, (tuple, list)):
        if len(in_format) != 2:
            raise ValueError(f"in_format as a pair is (format of A, format of B), got "
                             f"{in_format!r}")
        fa_name, fb_name = in_format
    else:
        fa_name, _, fb_name = str(in_format).partition(",")
    fa = get_format(fa_name)
    fb = get_format(fb_name or fa_name)
    for f in (fa, fb):
        if f.name in ("ue8m0", "ue4m3"):
            raise ValueError(f"{f.name} is a scale format, not an element format; pass it as "
                             "scale_format=")
    out = FORMATS[_out_name(out_dtype, fa)]
    if (out.name == "fp64") != (fa.name == "fp64" and fb.name == "fp64"):
        raise ValueError(f"fp64 results come from fp64 x fp64 (DFMA/DMMA) only; got "
                         f"{fa.name} x {fb.name} -> {out.name} (narrow formats accumulate "
                         "in fp32 or fp16)")
    sf = None if scale_format is None else str(scale_format).lower()
    if sf is not None and sf not in ("ue8m0", "ue4m3"):
        raise ValueError(f"scale_format must be 'ue8m0' or 'ue4m3', got {scale_format!r}")
    bs = 0
    if sf is not None:
        bs = block_size if block_size is not None else (32 if sf == "ue8m0" else 16)
        if bs not in (16, 32):
            raise ValueError(f"block_size must be 16 or 32, got {block_size!r}")
    elif block_size:
        raise ValueError("block_size needs a scale_format")
    return Interface(fa, fb, out, sf, bs)


def make_target(target, in_format=None, out_dtype=None, *, scale_format=None,
                block_size=None, instruction=None) -> Target:
    """A :class:`Target` from an arch name, a Spec, ``"native"``, a callable or a Target.

    For a Spec the formats default to the spec's; for an arch name the registry's model for
    (arch, in_format, out_dtype[, instruction, scale_format, block_size]) is used.
    """
    if instruction is not None and not isinstance(instruction, str):
        raise TypeError(f"instruction must be a name (str), got {instruction!r}")
    if isinstance(target, Target):
        if in_format is not None:
            asked = interface(in_format, out_dtype or target.iface.out.name,
                              scale_format if scale_format is not None else
                              target.iface.scale_format,
                              block_size if block_size is not None else
                              (target.iface.block_size or None))
            if asked != target.iface:
                raise ValueError(f"the target computes {target.iface.describe()}; asked for "
                                 f"{asked.describe()}")
        return target
    if isinstance(target, Spec):
        iface = interface(in_format or f"{target.fmt_a.name},{target.fmt_b.name}",
                          out_dtype or target.out_format,
                          scale_format if scale_format is not None else target.scale_format,
                          block_size if block_size is not None else
                          (target.block_size or None))
        if iface != spec_interface(target):
            raise ValueError(f"the spec takes {spec_interface(target).describe()}; asked for "
                             f"{iface.describe()}")
        return EmulatedTarget(iface, target)
    iface = interface(in_format, out_dtype, scale_format, block_size)
    if isinstance(target, str):
        if target == "native":
            return NativeTarget(iface, instruction)
        from ..registry import spec as registry_spec
        sp = registry_spec(target, iface.fmt_a.name, iface.out.name,
                           in_format_b=iface.fmt_b.name, instruction=instruction,
                           scale_format=iface.scale_format,
                           block_size=iface.block_size or None)
        t = EmulatedTarget(iface, sp)
        t.label = f"emulated {sp.arch}" + (f" {instruction}" if instruction else "")
        return t
    if callable(target):
        return CallableTarget(iface, target)
    raise TypeError("target must be an arch name, a Spec, 'native', a callable "
                    f"f(a, b, c) -> float, or a probe Target; got {type(target).__name__}")
