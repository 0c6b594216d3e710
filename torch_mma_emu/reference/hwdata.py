"""Run the reference model over recorded tensor-core samples (``tests/data/hwdata/*.npz``).

Each file holds uint32 binary32 bit patterns ``a`` (S, K), ``b`` (S, K), ``c`` (S,) and the
GPU's answer ``d`` (S,); ``index.json`` gives arch / in_format / out_dtype per file.  For
fp16-output files ``c`` is first rounded to fp16 with RNE and ``d`` is the fp16 output
widened exactly to binary32.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..limits import setting
from ..registry import spec as registry_spec
from .rounding import encode, round_xval
from .values import decode, x_of
from .gemm import dot

_HERE = Path(__file__).resolve()
CANDIDATE_DIRS = [_HERE.parents[2] / "tests" / "data" / "hwdata"]


def hwdata_dir() -> Path | None:
    """Where the recorded samples are: ``$MMA_EMU_HWDATA``, else tests/data/hwdata."""
    env = setting("hwdata")      # set: a folder holding index.json, else a ValueError
    if env:
        return Path(env)
    for d in CANDIDATE_DIRS:
        if (d / "index.json").is_file():
            return d
    return None


def load_index(directory: Path | None = None) -> list[dict]:
    directory = directory or hwdata_dir()
    with open(Path(directory) / "index.json") as f:
        return json.load(f)


def fp32_word_to_code(fmt_name: str, word: int) -> int:
    """Code of ``fmt_name`` holding exactly the binary32 value ``word`` (tf32/xf32: the word)."""
    from ..formats import FORMATS

    fmt = FORMATS[fmt_name]
    if fmt.container_bits == 32 or fmt_name == "fp32":
        return int(word)
    return encode(fmt, x_of(decode("fp32", word)))


def fp32_word_to_out(out_format: str, word: int) -> int:
    """The accumulator input ``c`` in the output format (fp16: RNE, as the GPU converts)."""
    if out_format == "fp32":
        return int(word)
    return encode(out_format, round_xval(out_format, x_of(decode("fp32", word)), "rne"))


def out_to_fp32_word(out_format: str, code: int) -> int:
    """An output code widened exactly to a binary32 pattern (NaN: payload shifted left)."""
    if out_format == "fp32":
        return int(code)
    if out_format == "fp16":
        d = decode("fp16", code)
        if d.is_nan:
            return ((code >> 15) << 31) | (0xFF << 23) | ((code & 0x3FF) << 13)
        return encode("fp32", x_of(d))
    raise ValueError(out_format)


def instruction_for_entry(entry: dict) -> str | None:
    """The id of the instruction an index entry's ``instruction`` names (the variant
    ``mma.sync.m16n8k32`` on Hopper / Blackwell), else None: the default (``wmma (mma.sync)``
    names the API, not an instruction)."""
    from ..registry import row
    try:
        return row(entry["arch"], entry["in_format"], entry["out_dtype"],
                   instruction=entry.get("instruction", "")).instruction
    except ValueError:
        return None


def spec_for_entry(entry: dict):
    return registry_spec(entry["arch"], entry["in_format"], entry["out_dtype"],
                         instruction=instruction_for_entry(entry))


def check_file(entry: dict, directory: Path | None = None, indices=None, c_mode="chain"):
    """Run the reference over one file's samples; returns ``(n_checked, mismatches)`` where
    ``mismatches`` is a list of ``(index, got_word, want_word)``."""
    import numpy as np

    directory = Path(directory or hwdata_dir())
    data = np.load(directory / entry["file"])
    A, B, C, D = data["a"], data["b"], data["c"], data["d"]
    sp = spec_for_entry(entry)
    fa, fb, fo = sp.fmt_a.name, sp.fmt_b.name, sp.out_format
    if indices is None:
        indices = range(A.shape[0])
    mismatches = []
    n = 0
    for i in indices:
        a = [fp32_word_to_code(fa, int(w)) for w in A[i]]
        b = [fp32_word_to_code(fb, int(w)) for w in B[i]]
        c = fp32_word_to_out(fo, int(C[i]))
        got = out_to_fp32_word(fo, dot(sp, a, b, c, c_mode=c_mode))
        want = int(D[i])
        n += 1
        if got != want:
            mismatches.append((int(i), got, want))
    return n, mismatches
