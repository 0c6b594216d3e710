"""Which input format, accumulator and output a routed product uses: the :class:`Policy`.

One policy is built per ``emulate(...)`` context or ``convert(...)`` call and asked, for every
matrix product, for a :class:`Plan`.  The rules (docs/preview.md, "Formats"):

* fp16 / bf16 / fp8 / fp64 tensors keep their format;
* fp32 tensors use TF32 where PyTorch's settings allow it (``torch.backends.cuda.matmul``
  for matmuls and attention, ``torch.backends.cudnn`` for convolutions, read when the policy
  is built) and the arch has a TF32 instruction; otherwise the arch's fp32 path (an IEEE FMA
  chain).  AMD xf32 (gfx942) is only used when asked for (``fp32_format="xf32"``);
* ``formats={"mm": "bf16", ...}`` overrides the format per op kind: operands are cast to it
  (RNE; fp8 with a per-tensor "tensorwise" scale, as float8 recipes do) and the result is
  cast back to the op's own output dtype;
* fp16 accumulation (NVIDIA ``HMMA`` with fp16 C/D) when ``torch.backends.cuda.matmul.
  allow_fp16_accumulation`` is set (or ``fp16_accumulation=True``) and the arch has it;
* ``fp16_alt_impl``: the rocBLAS / MIOpen "alternate implementation" for MI200 that runs fp16
  GEMMs and convolutions as bf16 (PyTorch enables it for the backward pass on ROCm); off by
  default, so that ``gfx90a`` shows what its fp16 instruction does;
* bf16 on sm70 / sm75 (no bf16 tensor-core instruction): upcast to fp32 and the fp32 FMA
  chain, result rounded to bf16, as cuBLAS's non-tensor-core fallback does (unverified).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Mapping, Optional

import torch

from ..formats import (FLOAT_DTYPES, FORMATS, OUT_DTYPES, default_out, format_of_dtype,
                       get_format)
from ..registry import ARCHS, archs_text, archs_with, canonical_arch, spec as registry_spec
from ..schedule_fields import Schedule
from ..spec import Spec, arch_label, as_spec

__all__ = ["Plan", "Policy", "OP_KINDS", "FORMAT_CHOICES", "tf32_settings"]

# Op kinds a format can be chosen for (keys of ``formats=``).
OP_KINDS = ("mm", "addmm", "bmm", "baddbmm", "conv", "attention", "scaled_mm")
# Values ``formats=`` accepts besides format names.
SPECIAL_CHOICES = ("auto", "native")
FORMAT_CHOICES = tuple(FLOAT_DTYPES)     # the formats that come in float tensors
FP32_FORMATS = ("auto", "fp32", "tf32", "xf32")
BIAS_MODES = ("epilogue", "chain")
ALT_IMPL = ("off", "backward", "always")
FP8 = ("fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz", "fp8_e5m2fnuz")



def _own_format(dtype: torch.dtype) -> Optional[str]:
    """The format a float tensor of ``dtype`` holds (None: integers and codes)."""
    f = format_of_dtype(dtype)
    return f.name if f is not None else None


@dataclass(frozen=True)
class Plan:
    """How one product is emulated.

    ``cast``: dtype the operands are converted to first (None: keep them);
    ``in_format``: passed to ``emulated_mm`` (``"tf32"`` / ``"xf32"`` for fp32 words);
    ``acc_dtype``: ``emulated_mm``'s ``out_dtype`` (the accumulator), the epilogue runs in it;
    ``fp8_scale``: scale each operand per tensor into the fp8 range before casting;
    ``label``: short name for records and tables;  ``native``: leave the op to PyTorch.
    """

    arch: str
    label: str
    acc_dtype: torch.dtype = torch.float32
    cast: Optional[torch.dtype] = None
    in_format: Optional[str] = None
    fp8_scale: bool = False
    native: bool = False
    schedule: Optional[str] = None   # emulated_mm's schedule (serialised), see schedule.py


NATIVE = Plan(arch="", label="native", native=True)


def _read(obj, name):
    try:
        return getattr(obj, name)
    except (AttributeError, RuntimeError):
        return None


def tf32_settings() -> tuple[bool, bool]:
    """(matmul allows TF32, convolution allows TF32) from PyTorch's current settings.

    Reads the ``fp32_precision`` API (torch >= 2.9) and falls back to the legacy
    ``allow_tf32`` flags; mixing both APIs makes the legacy getters raise, so the new one
    is asked first.
    """
    root = _read(torch.backends, "fp32_precision")

    def resolve(node, legacy_getter):
        p = _read(node, "fp32_precision") if node is not None else None
        if p in (None, "none"):
            p = root if root not in (None, "none") else None
        if p is not None:
            return p == "tf32"
        v = legacy_getter()
        return bool(v) if v is not None else False

    mm = resolve(_read(torch.backends.cuda, "matmul"),
                 lambda: _read(torch.backends.cuda.matmul, "allow_tf32"))
    conv = resolve(_read(torch.backends.cudnn, "conv"),
                   lambda: _read(torch.backends.cudnn, "allow_tf32"))
    return mm, conv


def _fp16_accumulation_flag() -> bool:
    return bool(_read(torch.backends.cuda.matmul, "allow_fp16_accumulation") or False)


@lru_cache(maxsize=1024)
def arch_has(arch: str, fmt: str, out: str = "fp32") -> bool:
    """Whether ``arch`` has a registry row for ``fmt`` inputs and ``out`` results."""
    try:
        registry_spec(arch, fmt, out)
        return True
    except ValueError:
        return False


@lru_cache(maxsize=256)
def _has_pair(arch: str, fa: str, fb: str) -> bool:
    try:
        registry_spec(arch, fa, "fp32", in_format_b=fb)
        return True
    except ValueError:
        return False


def _supported(arch: str) -> list[str]:
    return [f for f in FORMAT_CHOICES if arch_has(arch, f, default_out(f))]


def _elsewhere(fa: str, fb: Optional[str] = None) -> str:
    """"; fp8_e4m3 runs on sm89 (Ada Lovelace), ..." for a message: the archs (from the
    registry) with an instruction for these inputs."""
    where = archs_with(None, fa, fb)
    pair = fa if fb in (None, fa) else f"{fa} x {fb}"
    return f"; {pair} runs on {archs_text(where)}" if where else ""


def _check_schedules(schedule) -> dict:
    """``schedule``: one schedule for every product, or ``{op kind | "default": schedule}``
    (a Schedule, a preset name or a serialised schedule each)."""
    from ..schedule import as_schedule
    if schedule is None:
        return {}
    if not isinstance(schedule, Mapping):
        return {"default": as_schedule(schedule)}
    from ..cublaslt import as_choice
    out = {}
    for key, val in schedule.items():
        if key not in OP_KINDS and key != "default":
            raise ValueError(f"schedule: unknown op kind {key!r}; allowed: "
                             f"{', '.join(OP_KINDS)}, default")
        if key == "scaled_mm" and as_choice(val) is not None:
            out[key] = as_choice(val)      # a per-call choice (cublaslt.py)
            continue
        out[key] = as_schedule(val)
    return out


class Policy:
    """Format choices for one preview; see the module docstring for the rules."""

    def __init__(self, arch, *, formats: Optional[Mapping[str, str]] = None,
                 fp32_format: str = "auto", bias: str = "epilogue",
                 fp16_accumulation: Optional[bool] = None, fp16_alt_impl: str = "off",
                 schedule=None):
        self.schedules = _check_schedules(schedule)
        # per-call choices (a callable or a recorded table for scaled_mm: cublaslt.py)
        self.choosers = {k: v for k, v in self.schedules.items()
                         if v is not None and not isinstance(v, Schedule)}
        for k in self.choosers:
            del self.schedules[k]
        # what records call each one: the preset name given, else the schedule's description
        given = schedule if isinstance(schedule, Mapping) else {"default": schedule}
        self.schedule_names = {k: given[k] if isinstance(given[k], str) and
                               not given[k].startswith("schedule:") else v.describe()
                               for k, v in self.schedules.items() if v is not None}
        self.schedule_names.update({k: given[k] if isinstance(given[k], str) else repr(v)
                                    for k, v in self.choosers.items()})
        self.spec: Optional[Spec] = as_spec(arch)
        self.target_name = arch if isinstance(arch, str) else None   # a GPU name counts
        if self.spec is not None:   # the op's schema takes the arch as a string
            self.arch = self.spec.to_string()
            self.arch_name = arch_label(self.spec)   # its description, for messages
        elif isinstance(arch, str):
            self.arch = self.arch_name = canonical_arch(arch)
        else:
            raise TypeError(f"arch must be an arch name ({', '.join(ARCHS)}) or a Spec, "
                            f"got {type(arch).__name__}")
        if fp32_format not in FP32_FORMATS:
            raise ValueError(f"fp32_format must be one of {', '.join(FP32_FORMATS)}, "
                             f"got {fp32_format!r}")
        if bias not in BIAS_MODES:
            raise ValueError(f"bias must be 'epilogue' (cuBLAS-style: alpha*AB + beta*C after "
                             f"the product) or 'chain' (C seeds the accumulator), got {bias!r}")
        if fp16_alt_impl not in ALT_IMPL:
            raise ValueError(f"fp16_alt_impl must be one of {', '.join(ALT_IMPL)}, "
                             f"got {fp16_alt_impl!r}")
        if fp16_accumulation is not None and not isinstance(fp16_accumulation, bool):
            raise TypeError("fp16_accumulation must be None (follow torch.backends.cuda."
                            "matmul.allow_fp16_accumulation), True or False")
        self.fp32_format = fp32_format
        self.bias = bias
        self.fp16_alt_impl = fp16_alt_impl
        self.formats = self._check_formats(formats)
        self.matmul_tf32, self.conv_tf32 = tf32_settings()
        self.fp16_accumulation = (_fp16_accumulation_flag() if fp16_accumulation is None
                                  else fp16_accumulation)
        if self.spec is None:
            if fp32_format in ("tf32", "xf32") and not arch_has(self.arch, fp32_format):
                raise ValueError(f"fp32_format={fp32_format!r}: {self.arch} has no "
                                 f"{fp32_format} instruction; it supports "
                                 f"{', '.join(_supported(self.arch))}{_elsewhere(fp32_format)}")
            if fp16_alt_impl != "off" and not arch_has(self.arch, "bf16"):
                raise ValueError(f"fp16_alt_impl={fp16_alt_impl!r} runs fp16 products as "
                                 f"bf16, but {self.arch} has no bf16 instruction")

    # -- construction checks -----------------------------------------------------------
    def _check_formats(self, formats):
        if formats is None:
            return {}
        if not isinstance(formats, Mapping):
            raise TypeError("formats must be a dict {op kind: format}, op kinds: "
                            f"{', '.join(OP_KINDS)} or 'default'")
        out = {}
        for key, val in formats.items():
            if key not in OP_KINDS and key != "default":
                raise ValueError(f"formats: unknown op kind {key!r}; allowed: "
                                 f"{', '.join(OP_KINDS)}, default")
            if not isinstance(val, str):
                raise TypeError(f"formats[{key!r}] must be a format name, got {val!r}")
            if val in SPECIAL_CHOICES:
                out[key] = val
                continue
            if key == "scaled_mm":
                raise ValueError("formats['scaled_mm'] takes 'auto' or 'native' (its fp8 "
                                 "operands and scales fix the format)")
            try:
                name = get_format(val).name
            except ValueError:
                name = None
            if name not in FORMAT_CHOICES:
                raise ValueError(f"formats[{key!r}]={val!r}; allowed: "
                                 f"{', '.join(SPECIAL_CHOICES + FORMAT_CHOICES)}")
            if self.spec is None:
                if not arch_has(self.arch, name, default_out(name)):
                    raise ValueError(f"formats[{key!r}]={val!r}: {self.arch} has no {name} "
                                     f"instruction; it supports "
                                     f"{', '.join(_supported(self.arch))}{_elsewhere(name)}")
            out[key] = name
        return out

    # -- per-product decision ----------------------------------------------------------
    def choice(self, kind: str) -> str:
        return self.formats.get(kind, self.formats.get("default", "auto"))

    def schedule_for(self, kind: str):
        """The Schedule given for products of ``kind`` (its own entry, else "default"), or
        None when none was given."""
        return self.schedules.get(kind, self.schedules.get("default"))

    def chooser_for(self, kind: str):
        """The per-call choice given for ``kind`` (a callable taking (M, N, K, fmt_a, fmt_b,
        out_dtype, fast_accum) and returning a Schedule, a preset name or None), or None."""
        return self.choosers.get(kind)

    def schedule_name(self, kind: str) -> str:
        """How records name the schedule of ``kind`` (the preset name given, else its
        description)."""
        return self.schedule_names.get(kind, self.schedule_names.get("default", ""))

    def plan(self, kind: str, a_dtype: torch.dtype, b_dtype: torch.dtype,
             backward: bool = False) -> Plan:
        """The plan for one product of ``kind`` with operands of these dtypes."""
        p = self._plan(kind, a_dtype, b_dtype, backward)
        sched = self.schedule_for(kind)
        if sched is None or p.native:
            return p
        if sched.input_precision is not None and (p.cast or a_dtype) != torch.float32:
            sched = sched.replace(input_precision=None)   # it applies to fp32 products only
        return replace(p, schedule=None if sched.is_plain else sched.to_string())

    def _plan(self, kind: str, a_dtype: torch.dtype, b_dtype: torch.dtype,
              backward: bool = False) -> Plan:
        choice = self.choice(kind)
        if choice == "native":
            return NATIVE
        if a_dtype != b_dtype:
            fa, fb = _own_format(a_dtype), _own_format(b_dtype)
            if fa in FP8 and fb in FP8 and choice == "auto" and self.spec is None:
                if not _has_pair(self.arch, fa, fb):  # e.g. e4m3 x e5m2 (fp8 training)
                    raise ValueError(f"emulate: {self.arch} has no instruction for {fa} x "
                                     f"{fb} inputs{_elsewhere(fa, fb)}")
                return Plan(self.arch, f"{fa} x {fb}")
            return NATIVE  # PyTorch raises its own error for mixed dtypes
        own = _own_format(a_dtype)
        if own is None:
            return NATIVE  # an integer product
        if self.spec is not None:
            return self._spec_plan(own)
        if choice != "auto":
            return self._override_plan(kind, own, choice, backward)
        return self._auto_plan(kind, own, backward)

    def _spec_plan(self, own: str) -> Plan:
        s = self.spec
        fmt = s.fmt_a.name
        acc = OUT_DTYPES[s.out_format]
        if fmt in ("tf32", "xf32"):
            return Plan(self.arch, fmt, acc, cast=None if own == "fp32" else torch.float32,
                        in_format=f"{fmt},{s.fmt_b.name}" if s.fmt_b.name != fmt else fmt)
        cast = FORMATS[fmt].torch_dtype
        if cast is None:
            raise ValueError(f"emulate: a custom spec with {fmt} inputs cannot be fed from "
                             "float tensors (fp4/fp6 codes need block scales)")
        if s.fmt_b.name != fmt:
            raise ValueError(f"emulate: the spec takes {fmt} x {s.fmt_b.name}; a model's "
                             "products have one dtype on both sides, so give a spec with "
                             "one input format")
        return Plan(self.arch, fmt, acc, cast=None if cast == FORMATS[own].torch_dtype else cast,
                    fp8_scale=fmt in FP8 and own not in FP8)

    def _override_plan(self, kind: str, own: str, fmt: str, backward: bool) -> Plan:
        if fmt in ("tf32", "xf32"):
            return Plan(self.arch, fmt, cast=None if own == "fp32" else torch.float32,
                        in_format=fmt)
        if fmt == own:       # the tensors' own format: as "auto", but fp32 stays fp32
            return self._auto_plan(kind, own, backward, keep_fp32=True)
        acc = torch.float64 if fmt == "fp64" else torch.float32
        scaled = fmt in FP8 and own not in FP8
        label = f"{fmt} (tensorwise scaled)" if scaled else fmt
        return Plan(self.arch, label, acc, cast=FORMATS[fmt].torch_dtype, fp8_scale=scaled)

    def _auto_plan(self, kind: str, own: str, backward: bool, keep_fp32=False) -> Plan:
        arch = self.arch
        if own == "fp64":
            return Plan(arch, "fp64", torch.float64)
        if own == "fp32":
            if not keep_fp32:
                want = self.fp32_format
                if want == "auto":
                    allowed = self.conv_tf32 if kind == "conv" else self.matmul_tf32
                    want = "tf32" if allowed and arch_has(arch, "tf32") else "fp32"
                if want in ("tf32", "xf32"):
                    return Plan(arch, want, in_format=want)
            return Plan(arch, "fp32")
        if own == "fp16":
            alt = self.fp16_alt_impl == "always" or (
                self.fp16_alt_impl == "backward" and backward)
            if alt and kind != "attention":  # rocBLAS/MIOpen only, not attention kernels
                return Plan(arch, "bf16 (fp16 alt impl)", cast=torch.bfloat16)
            if (self.fp16_accumulation and kind not in ("attention", "conv")   # cuBLAS only
                    and arch_has(arch, "fp16", "fp16")):
                return Plan(arch, "fp16 (fp16 acc)", torch.float16)
            return Plan(arch, "fp16")
        if own == "bf16":
            if not arch_has(arch, "bf16"):
                return Plan(arch, "bf16 via fp32 FMA", cast=torch.float32)
            return Plan(arch, "bf16")
        if not arch_has(arch, own):
            raise ValueError(f"emulate: {arch} has no {own} instruction (PyTorch has no "
                             f"{own} GEMM there either); it supports "
                             f"{', '.join(_supported(arch))}{_elsewhere(own)}")
        return Plan(arch, own)

    def describe(self) -> str:
        parts = [f"arch={self.arch_name}", f"fp32={self.fp32_format}"
                 f" (tf32 allowed: matmul={self.matmul_tf32}, conv={self.conv_tf32})",
                 f"bias={self.bias}"]
        if self.formats:
            parts.append("formats=" + ",".join(f"{k}:{v}" for k, v in self.formats.items()))
        if self.fp16_accumulation:
            parts.append("fp16 accumulation")
        if self.fp16_alt_impl != "off":
            parts.append(f"fp16 alt impl={self.fp16_alt_impl}")
        return ", ".join(parts)
