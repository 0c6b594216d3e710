"""The elementary operation on codes, the GEMM chain (docs/model.md section 2) and tensor I/O."""
from __future__ import annotations

import dataclasses
from typing import Sequence

import torch

from ..formats import (FORMATS, INT_OF_SIZE, OUT_DTYPES, formats_of_dtype, get_format,
                       storage_dtype)
from ..registry import spec as registry_spec
from ..spec import Spec
from . import ieee
from .elementary_ops import OPS
from .rounding import encode
from .values import decode, x_of

# Scale code used for K-blocks that lie entirely in the zero padding (no scale given).
NEUTRAL_SCALE = {"ue8m0": 127, "ue4m3": 0x38}  # both encode 1.0


def _as_spec(spec) -> Spec:
    return spec if isinstance(spec, Spec) else registry_spec(spec)


def scales_per_chunk(spec: Spec) -> int:
    """Number of K-block scales covering one chunk of L elements."""
    return max(1, spec.L // spec.block_size)


def elementary(spec: Spec, a_codes: Sequence[int], b_codes: Sequence[int], c_code: int,
               scale_a_codes: Sequence[int] | None = None,
               scale_b_codes: Sequence[int] | None = None, c_format: str | None = None) -> int:
    """One elementary operation on one chunk; returns the output code (``spec.out_format``).

    ``a_codes``/``b_codes``: exactly ``spec.L`` codes in ``spec.fmt_a``/``spec.fmt_b`` (tf32 /
    xf32 as fp32 words); ``c_code``: the accumulator in the output format (or in
    ``c_format``: a C the instruction reads as it is, docs/model.md 6.4); scales (scaled ops
    only): the codes of the K-blocks covering the chunk (``max(1, L // block_size)`` each).
    """
    spec = _as_spec(spec)
    L = spec.L
    if len(a_codes) != L or len(b_codes) != L:
        raise ValueError(f"elementary takes exactly L={L} codes of a and b "
                         f"(got {len(a_codes)}, {len(b_codes)})")
    fa, fb, fo = spec.fmt_a.name, spec.fmt_b.name, spec.out_format
    a = [decode(fa, x) for x in a_codes]
    b = [decode(fb, x) for x in b_codes]
    c = decode(c_format or fo, c_code)
    sa = sb = None
    if spec.scaled:
        n = scales_per_chunk(spec)
        if scale_a_codes is None or scale_b_codes is None or \
                len(scale_a_codes) != n or len(scale_b_codes) != n:
            raise ValueError(f"{spec.op} needs {n} scale code(s) of a and of b per chunk")
        sa = [decode(spec.scale_format, x) for x in scale_a_codes]
        sb = [decode(spec.scale_format, x) for x in scale_b_codes]
    result = OPS[spec.op](spec, a, b, c, sa, sb)
    return encode(fo, result, nan_code=spec.nan_encoding)


def epilogue_add(spec: Spec, acc_code: int, c_code: int) -> int:
    """``RNE_out(acc + c)``: one IEEE addition in the output format (docs/model.md 2)."""
    fo = spec.out_format
    r = ieee.add(fo, x_of(decode(fo, acc_code)), x_of(decode(fo, c_code)))
    return encode(fo, r, nan_code=spec.nan_encoding)


def single_pass(spec: Spec) -> Spec:
    """The fused operation one pass of a multi-pass instruction runs (L = the pass's k)."""
    return dataclasses.replace(spec, passes=1, pass_width=0, c_join="first")


def instruction(spec: Spec, a_codes: Sequence[int], b_codes: Sequence[int], acc_code: int) -> int:
    """One multi-pass instruction (docs/model.md section 2.1) over exactly
    ``passes * L`` codes (zero padded): pass p sums the k with ``(k // width) % passes == p``
    in ascending k, its result rounded to the output format and carried into pass p + 1;
    c (``acc_code``) is the first pass's accumulator (``c_join="first"``) or is added after
    the last pass by one IEEE addition (``"final"``)."""
    n = spec.passes * spec.L
    if len(a_codes) != n or len(b_codes) != n:
        raise ValueError(f"a multi-pass instruction takes passes * L = {n} codes")
    one = single_pass(spec)
    groups: dict[int, list[int]] = {}
    for k in range(n):
        groups.setdefault((k // spec.width) % spec.passes, []).append(k)
    t = 0 if spec.c_join == "final" else acc_code      # code 0 is +0 in every output format
    for p in sorted(groups):
        ks = groups[p]
        t = elementary(one, [a_codes[k] for k in ks], [b_codes[k] for k in ks], t)
    return epilogue_add(spec, t, acc_code) if spec.c_join == "final" else t


def dot(spec: Spec, a_codes: Sequence[int], b_codes: Sequence[int], c_code: int,
        scale_a_codes: Sequence[int] | None = None, scale_b_codes: Sequence[int] | None = None,
        c_mode: str = "chain", c_format: str | None = None) -> int:
    """One output element over any K: the chain of elementary operations (docs/model.md 2).

    ``acc = c``; for each chunk of L consecutive k (ascending, the last one zero padded)
    ``acc = op(chunk, acc)``; ``K = 0`` gives ``c``.  ``c_mode="epilogue"``: ``acc`` starts at
    +0 and ``D = RNE_out(acc + c)``.  Scales: one per K-block of ``spec.block_size`` over the
    whole K (``ceil(K / block_size)``); blocks lying entirely in the padding use scale 1.0.
    ``c_format``: the format ``c_code`` is in when it is not the output format (it must be
    ``spec.c_format``): the first chunk reads it as it is, anything else converts it.
    """
    spec = _as_spec(spec)
    K = len(a_codes)
    if c_format is not None:
        if c_format != spec.c_format:
            raise ValueError(f"c in {c_format} needs a spec with c_format={c_format!r}")
        if c_mode == "epilogue" or spec.multipass or K == 0:   # read in the output format
            c_code = encode(spec.out_format, x_of(decode(c_format, c_code)))
            c_format = None
    if len(b_codes) != K:
        raise ValueError(f"a has {K} codes but b has {len(b_codes)}")
    if c_mode not in ("chain", "epilogue"):
        raise ValueError(f"c_mode must be 'chain' or 'epilogue', got {c_mode!r}")
    L = spec.L
    if spec.scaled:
        bs = spec.block_size
        nblocks = -(-K // bs)
        if scale_a_codes is None or scale_b_codes is None or \
                len(scale_a_codes) != nblocks or len(scale_b_codes) != nblocks:
            raise ValueError(f"{spec.op} needs ceil(K / {bs}) = {nblocks} scale codes of a "
                             "and of b")
    acc = c_code if c_mode == "chain" else 0
    if spec.multipass:
        n = spec.passes * L
        for k0 in range(0, K, n):
            a_chunk = list(a_codes[k0:k0 + n])
            b_chunk = list(b_codes[k0:k0 + n])
            pad = n - len(a_chunk)
            acc = instruction(spec, a_chunk + [0] * pad, b_chunk + [0] * pad, acc)
        return epilogue_add(spec, acc, c_code) if c_mode == "epilogue" else acc
    for k0 in range(0, K, L):
        a_chunk = list(a_codes[k0:k0 + L])
        b_chunk = list(b_codes[k0:k0 + L])
        pad = L - len(a_chunk)
        a_chunk += [0] * pad
        b_chunk += [0] * pad
        sa = sb = None
        if spec.scaled:
            first = k0 // spec.block_size
            n = scales_per_chunk(spec)
            neutral = NEUTRAL_SCALE[spec.scale_format]
            sa = [scale_a_codes[i] if i < nblocks else neutral for i in range(first, first + n)]
            sb = [scale_b_codes[i] if i < nblocks else neutral for i in range(first, first + n)]
        acc = elementary(spec, a_chunk, b_chunk, acc, sa, sb, c_format if k0 == 0 else None)
    if c_mode == "epilogue":
        acc = epilogue_add(spec, acc, c_code)
    return acc


# --------------------------------------------------------------------------------------
# Tensors <-> codes
# --------------------------------------------------------------------------------------



def tensor_to_codes(t: torch.Tensor) -> list:
    """Bit patterns of a floating-point (or uint8 code) tensor as nested lists of
    non-negative Python ints (same shape)."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.uint8:
        return t.tolist()
    bits = t.element_size() * 8
    if not t.is_floating_point() or t.element_size() not in INT_OF_SIZE:
        raise TypeError(f"cannot take codes of a {t.dtype} tensor")
    ints = t.view(INT_OF_SIZE[t.element_size()]).to(torch.int64)
    if bits < 64:
        ints = ints & ((1 << bits) - 1)
        return ints.tolist()
    mask = (1 << 64) - 1
    return _map_nested(ints.tolist(), lambda v: v & mask)


def _map_nested(x, f):
    if isinstance(x, list):
        return [_map_nested(y, f) for y in x]
    return f(x)


def codes_to_tensor(codes, out_format: str) -> torch.Tensor:
    """Tensor of ``out_format`` (fp64 / fp32 / fp16) holding exactly these bit patterns."""
    fmt = get_format(out_format)
    bits = fmt.bits
    signed = lambda v: v - (1 << bits) if v >= (1 << (bits - 1)) else v  # noqa: E731
    ints = torch.tensor(_map_nested(codes, lambda v: signed(int(v))), dtype=torch.int64)
    return ints.to(INT_OF_SIZE[bits // 8]).view(OUT_DTYPES[fmt.name])


def _check_input(t: torch.Tensor, fmt_name: str, what: str):
    fmt = FORMATS[fmt_name]
    need = {torch.uint8: "torch.uint8 codes"}.get(storage_dtype(fmt), str(storage_dtype(fmt)))
    if fmt.container_bits == 32:
        need += " (fp32 words)"
    if fmt_name not in formats_of_dtype(t.dtype):
        raise TypeError(f"{what} in format {fmt_name} must be a {need} tensor, got {t.dtype}")


def _scale_codes(t: torch.Tensor, what: str) -> list:
    if t.dtype not in (torch.uint8,) and t.element_size() != 1:
        raise TypeError(f"{what} must hold 8-bit scale codes (uint8, float8_e8m0fnu or "
                        f"float8_e4m3fn), got {t.dtype}")
    return t.detach().cpu().contiguous().view(torch.uint8).tolist()


def mm(spec, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor | None = None,
       scale_a: torch.Tensor | None = None, scale_b: torch.Tensor | None = None,
       c_mode: str = "chain") -> torch.Tensor:
    """Reference ``D = A @ B + C`` for 2-D tensors, element by element through :func:`dot`.

    ``A`` (M, K), ``B`` (K, N) with dtypes matching ``spec``'s formats (float32 for tf32/xf32,
    uint8 codes for fp6/fp4); ``C`` (broadcastable to (M, N)) or ``None`` (zeros) is first
    converted to the output dtype with ``.to`` (RNE), except a C in ``spec.c_format`` (read
    as it is by the first chunk, docs/model.md 6.4).  ``scale_a`` (M, ceil(K/bs)) and
    ``scale_b`` (ceil(K/bs), N) for scaled specs.  Returns the output-dtype tensor.
    """
    spec = _as_spec(spec)
    if A.dim() != 2 or B.dim() != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"mm takes A (M, K) and B (K, N); got {tuple(A.shape)} and "
                         f"{tuple(B.shape)}")
    _check_input(A, spec.fmt_a.name, "A")
    _check_input(B, spec.fmt_b.name, "B")
    M, K = A.shape
    N = B.shape[1]
    out_dtype = OUT_DTYPES[spec.out_format]
    c_format = None
    if C is None:
        Cc = torch.zeros((M, N), dtype=out_dtype)
    elif spec.c_format is not None and C.dtype == OUT_DTYPES.get(spec.c_format):
        c_format, Cc = spec.c_format, C.expand(M, N)
    else:
        Cc = C.to(out_dtype).expand(M, N)
    a = tensor_to_codes(A)
    bT = tensor_to_codes(B.t())
    c = tensor_to_codes(Cc)
    sa = sbT = None
    if spec.scaled:
        if scale_a is None or scale_b is None:
            raise ValueError(f"{spec.op} needs scale_a and scale_b")
        sa = _scale_codes(scale_a, "scale_a")
        sbT = _scale_codes(scale_b.t(), "scale_b")
    out = [[dot(spec, a[i], bT[j], c[i][j],
                sa[i] if sa is not None else None, sbT[j] if sbT is not None else None,
                c_mode=c_mode, c_format=c_format)
            for j in range(N)] for i in range(M)]
    return codes_to_tensor(out, spec.out_format).reshape(M, N)
