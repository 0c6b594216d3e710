"""Floating-point formats: how a bit pattern decodes to (sign, significand, exponent, class).

This table is the single source of truth for format parameters.  The C++ core receives
the same numbers (see ``Format.code`` and ``cpp.params``), the pure-Python reference
decodes with them, and the op uses ``torch_dtype`` to pick a format from a tensor.

Conventions used everywhere in the project:

* A finite value is ``(-1)**sign * sig * 2**(exp - man_bits)`` with an integer ``sig``.
  Normal numbers carry the implicit bit (``2**man_bits <= sig < 2**(man_bits+1)``);
  subnormals and zero have ``exp = emin`` (the format's minimum normal exponent) and
  ``sig < 2**man_bits``.
* ``nan_style`` says which encodings are special:
  ``"ieee"``  all-ones exponent: infinity (zero mantissa) or NaN;
  ``"fn"``    OCP e4m3fn: only S.1111.111 is NaN, no infinity;
  ``"fnuz"``  AMD fnuz: 0x80 (negative zero's code) is the only NaN, no infinity, no -0;
  ``"none"``  fp6/fp4: every code is a finite number;
  ``"e8m0"``  unsigned power of two, 0xFF is NaN, no zero.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

NAN_STYLES = ("ieee", "fn", "fnuz", "none", "e8m0")


@dataclass(frozen=True)
class Format:
    name: str
    code: int  # stable integer id shared with the C++ core
    exp_bits: int
    man_bits: int
    bias: int
    nan_style: str
    signed: bool = True
    # bits of the storage container the codes arrive in (tf32/xf32 live in fp32 words)
    container_bits: int = 0
    torch_dtype: torch.dtype | None = None
    description: str = ""

    @property
    def bits(self) -> int:
        return int(self.signed) + self.exp_bits + self.man_bits

    @property
    def emin(self) -> int:
        """Minimum normal exponent (also the exponent of subnormals and zero)."""
        if self.nan_style == "e8m0":
            return -self.bias
        return 1 - self.bias

    @property
    def emax(self) -> int:
        top = (1 << self.exp_bits) - 1
        if self.nan_style == "ieee":
            top -= 1  # all-ones exponent is reserved
        return top - self.bias

    @property
    def precision(self) -> int:
        """Significand bits including the implicit one."""
        return self.man_bits + 1

    @property
    def max_finite(self) -> float:
        return float(decode_value(self, self.max_finite_code))

    @property
    def max_finite_code(self) -> int:
        if self.nan_style == "ieee":
            return (((1 << self.exp_bits) - 2) << self.man_bits) | ((1 << self.man_bits) - 1)
        if self.nan_style == "fn":
            return (((1 << self.exp_bits) - 1) << self.man_bits) | ((1 << self.man_bits) - 2)
        if self.nan_style == "e8m0":
            return 0xFE
        return (((1 << self.exp_bits) - 1) << self.man_bits) | ((1 << self.man_bits) - 1)

    def __repr__(self) -> str:  # short, used in error messages
        return self.name


def _f(name, code, e, m, bias, style, dtype=None, signed=True, container=0, desc=""):
    return Format(name, code, e, m, bias, style, signed, container or 0, dtype, desc)


_F8 = {}
for _attr in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"):
    _F8[_attr] = getattr(torch, _attr, None)

FORMATS: dict[str, Format] = {
    f.name: f
    for f in [
        _f("fp64", 1, 11, 52, 1023, "ieee", torch.float64, desc="IEEE binary64"),
        _f("fp32", 2, 8, 23, 127, "ieee", torch.float32, desc="IEEE binary32"),
        _f("tf32", 3, 8, 10, 127, "ieee", None, container=32,
           desc="NVIDIA TensorFloat-32 (fp32 word, low 13 bits truncated)"),
        _f("xf32", 4, 8, 10, 127, "ieee", None, container=32,
           desc="AMD xf32 (fp32 word, low 13 bits truncated)"),
        _f("fp16", 5, 5, 10, 15, "ieee", torch.float16, desc="IEEE binary16"),
        _f("bf16", 6, 8, 7, 127, "ieee", torch.bfloat16, desc="bfloat16"),
        _f("fp8_e4m3", 7, 4, 3, 7, "fn", _F8["float8_e4m3fn"], desc="OCP FP8 E4M3 (e4m3fn)"),
        _f("fp8_e5m2", 8, 5, 2, 15, "ieee", _F8["float8_e5m2"], desc="OCP FP8 E5M2"),
        _f("fp8_e4m3fnuz", 9, 4, 3, 8, "fnuz", _F8["float8_e4m3fnuz"], desc="AMD FP8 E4M3 fnuz"),
        _f("fp8_e5m2fnuz", 10, 5, 2, 16, "fnuz", _F8["float8_e5m2fnuz"], desc="AMD BF8 E5M2 fnuz"),
        _f("fp6_e2m3", 11, 2, 3, 1, "none", desc="OCP MX FP6 E2M3 (uint8 codes)"),
        _f("fp6_e3m2", 12, 3, 2, 3, "none", desc="OCP MX FP6 E3M2 (uint8 codes)"),
        _f("fp4_e2m1", 13, 2, 1, 1, "none", desc="OCP MX FP4 E2M1 (uint8 codes)"),
        _f("ue8m0", 14, 8, 0, 127, "e8m0", _F8["float8_e8m0fnu"], signed=False,
           desc="MX block scale: unsigned power of two"),
        _f("ue4m3", 15, 4, 3, 7, "fn", _F8["float8_e4m3fn"], signed=False,
           desc="NVFP4 block scale: unsigned E4M3 (sign bit ignored)"),
    ]
}
# Element formats that may be fed to a matrix unit (scales excluded).
INPUT_FORMATS = tuple(n for n in FORMATS if n not in ("ue8m0", "ue4m3"))
SCALE_FORMATS = ("ue8m0", "ue4m3")


def scales_text(scale_format: str | None) -> str:
    """How a message names a scale format: "ue8m0 block scales", or "no scales" for None."""
    return f"{scale_format} block scales" if scale_format else "no scales"

ALIASES = {
    "float64": "fp64", "double": "fp64", "binary64": "fp64",
    "float32": "fp32", "float": "fp32", "single": "fp32", "binary32": "fp32",
    "float16": "fp16", "half": "fp16", "binary16": "fp16",
    "bfloat16": "bf16",
    "tensorfloat32": "tf32", "tf19": "tf32",
    "e4m3": "fp8_e4m3", "fp8e4m3": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3", "fp8_e4m3fn": "fp8_e4m3",
    "e5m2": "fp8_e5m2", "fp8e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2",
    "float8_e4m3fnuz": "fp8_e4m3fnuz", "e4m3fnuz": "fp8_e4m3fnuz", "fp8": "fp8_e4m3fnuz",
    "float8_e5m2fnuz": "fp8_e5m2fnuz", "e5m2fnuz": "fp8_e5m2fnuz", "bf8": "fp8_e5m2fnuz",
    "e2m3": "fp6_e2m3", "e3m2": "fp6_e3m2", "e2m1": "fp4_e2m1", "fp4": "fp4_e2m1",
    "e8m0": "ue8m0", "float8_e8m0fnu": "ue8m0",
}


def get_format(name: str | Format) -> Format:
    if isinstance(name, Format):
        return name
    key = str(name).lower().replace("-", "_")
    key = ALIASES.get(key, key)
    if key not in FORMATS:
        raise ValueError(
            f"unknown format {name!r}; known formats: {', '.join(FORMATS)}")
    return FORMATS[key]


def format_pair(text, who: str = "") -> tuple[str, str] | None:
    """``in_format`` as (A's format, B's format): "fmt" is both, "fmtA,fmtB" one each; None
    stays None.  Anything else ("", ",", "tf32,", three names, an unknown name) is a
    ValueError listing the formats, a non-string a TypeError; ``who`` prefixes the message."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise TypeError(f"{who}in_format must be a str ('tf32', 'fp6_e2m3,fp4_e2m1') or None, "
                        f"got {type(text).__name__}")
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > 2 or not all(parts):
        raise ValueError(f"{who}in_format={text!r} must be one format or two separated by a "
                         f"comma ('fmtA,fmtB'); formats: {', '.join(FORMATS)}")
    for p in parts:
        try:
            get_format(p)
        except ValueError as e:
            raise ValueError(f"{who}in_format={text!r}: {e}") from None
    return parts[0], parts[-1]


# ----------------------------------------------------------------------------------------
# Tensors: which torch dtype holds a format, which format a dtype holds, the accumulators.
# Every dtype <-> format <-> output-name question in the package is answered here.
# ----------------------------------------------------------------------------------------

# The accumulator (output) formats and their dtypes; the default accumulator is fp32 (fp64
# for fp64 inputs).
OUT_DTYPES = {"fp64": torch.float64, "fp32": torch.float32, "fp16": torch.float16}
_OUT_OF_DTYPE = {d: n for n, d in OUT_DTYPES.items()}

# Same-size integer dtypes, by bytes: the view that shows a tensor's bit patterns.
INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

# dtype -> the element format it fixes (float32 is fp32 unless in_format says tf32/xf32;
# scale dtypes are not element formats).
_DTYPE_TO_FORMAT = {f.torch_dtype: f.name for f in FORMATS.values()
                    if f.torch_dtype is not None and f.name in INPUT_FORMATS}
# scale dtype -> scale format (uint8 codes are E8M0 by default)
_SCALE_OF_DTYPE = {FORMATS[n].torch_dtype: n for n in SCALE_FORMATS
                   if FORMATS[n].torch_dtype is not None}


def storage_dtype(fmt: str | Format) -> torch.dtype:
    """The dtype of a tensor holding operands of ``fmt``: its own dtype, float32 words for
    tf32/xf32, uint8 codes where torch has none (fp6, fp4)."""
    fmt = get_format(fmt)
    if fmt.container_bits == 32:
        return torch.float32
    return fmt.torch_dtype if fmt.torch_dtype is not None else torch.uint8


# input format -> the floating dtype its values come in (formats given as uint8 codes left out)
FLOAT_DTYPES = {n: storage_dtype(n) for n in INPUT_FORMATS
                if storage_dtype(n).is_floating_point}
# every dtype an operand may have, each once
OPERAND_DTYPES = tuple(dict.fromkeys(storage_dtype(n) for n in INPUT_FORMATS))


def format_of_dtype(dtype: torch.dtype) -> Format | None:
    """The element format a tensor of ``dtype`` holds by default (None: uint8 codes, ints)."""
    name = _DTYPE_TO_FORMAT.get(dtype)
    return FORMATS[name] if name else None


def formats_of_dtype(dtype: torch.dtype) -> tuple[str, ...]:
    """Every element format a tensor of ``dtype`` may hold: its own, tf32/xf32 in float32
    words, any format of at most 8 bits as uint8 codes."""
    if dtype == torch.uint8:
        return tuple(n for n in INPUT_FORMATS if FORMATS[n].bits <= 8)
    return tuple(n for n in INPUT_FORMATS if storage_dtype(n) == dtype)


def scale_format_of_dtype(dtype: torch.dtype) -> str | None:
    """The block-scale format of a scale tensor's dtype (uint8: E8M0 codes), else None."""
    return "ue8m0" if dtype == torch.uint8 else _SCALE_OF_DTYPE.get(dtype)


def default_out(in_format: str) -> str:
    """The accumulator of an input format when out_dtype is not given."""
    return "fp64" if get_format(in_format).name == "fp64" else "fp32"


def out_format(out_dtype, who: str = "") -> str | None:
    """The output format name of ``out_dtype`` (a torch dtype or a format name; None stays
    None).  ``who`` prefixes the message ("emulated_mm: ") of the TypeError otherwise."""
    if out_dtype is None:
        return None
    if isinstance(out_dtype, torch.dtype):
        name = _OUT_OF_DTYPE.get(out_dtype)
    else:
        try:
            name = get_format(out_dtype).name
        except ValueError:
            name = None
    if name not in OUT_DTYPES:
        shown = out_dtype if isinstance(out_dtype, torch.dtype) else repr(out_dtype)
        raise TypeError(f"{who}out_dtype={shown} is not an accumulator type; allowed: "
                        "torch.float32, torch.float16 (where the arch has fp16 accumulation), "
                        "torch.float64 (fp64 inputs), or their names fp32, fp16, fp64")
    return name


# ----------------------------------------------------------------------------------------
# Scalar helpers (exact, pure Python).  Used by tests, the reference model and CLI tables.
# ----------------------------------------------------------------------------------------

def classify(fmt: Format, code: int) -> tuple[str, int, int, int]:
    """Decode ``code`` into ``(cls, sign, sig, exp)``; cls in {"zero","sub","normal","inf","nan"}.

    ``value = (-1)**sign * sig * 2**(exp - man_bits)`` for finite classes.
    """
    code = int(code)
    if fmt.container_bits == 32:  # tf32 / xf32 words: truncate to 10 mantissa bits
        code = (code >> 13) & ((1 << 19) - 1)
    m, e = fmt.man_bits, fmt.exp_bits
    if fmt.nan_style == "e8m0":
        code &= 0xFF
        if code == 0xFF:
            return ("nan", 0, 0, 0)
        return ("normal", 0, 1, code - fmt.bias)
    nbits = e + m + 1
    code &= (1 << nbits) - 1
    sign = (code >> (e + m)) & 1
    if not fmt.signed:
        sign = 0
    ebits = (code >> m) & ((1 << e) - 1)
    mant = code & ((1 << m) - 1)
    emax_code = (1 << e) - 1
    if fmt.nan_style == "ieee" and ebits == emax_code:
        return ("nan", sign, 0, 0) if mant else ("inf", sign, 0, 0)
    if fmt.nan_style == "fn" and ebits == emax_code and mant == (1 << m) - 1:
        return ("nan", sign, 0, 0)
    if fmt.nan_style == "fnuz" and sign == 1 and ebits == 0 and mant == 0:
        return ("nan", 0, 0, 0)
    if ebits == 0:
        return ("zero" if mant == 0 else "sub", sign, mant, fmt.emin)
    return ("normal", sign, mant | (1 << m), ebits - fmt.bias)


def decode_value(fmt: Format, code: int):
    """Exact value of a code as a ``fractions.Fraction`` (or float inf/nan)."""
    from fractions import Fraction

    cls, sign, sig, exp = classify(fmt, code)
    if cls == "nan":
        return float("nan")
    if cls == "inf":
        return float("-inf") if sign else float("inf")
    v = Fraction(sig) * Fraction(2) ** (exp - fmt.man_bits)
    return -v if sign else v


@lru_cache(maxsize=None)
def value_table(name: str) -> torch.Tensor:
    """float64 value of every code of a format with at most 8 bits (for uint8 codes)."""
    fmt = get_format(name)
    if fmt.bits > 8:
        raise ValueError(f"{fmt.name} has no small code table")
    return torch.tensor([float(decode_value(fmt, c)) for c in range(1 << fmt.bits)],
                        dtype=torch.float64)
