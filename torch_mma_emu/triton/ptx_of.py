"""A kernel's PTX for sm_90, compiled on the CPU (Triton's own pipeline: ASTSource -> TTIR ->
TTGIR -> LLVM IR -> PTX; no GPU, no ptxas), cached per kernel and specialisation, and the
instructions read out of it with their source locations (``.loc``).  contract.py reads which
additions the compiler contracted into fma; tests read which instructions a ``tl`` function
becomes (target_math.py's table)."""
from __future__ import annotations

import dataclasses
import re
from typing import Optional

_CACHE: dict = {}
_TL_OF_TORCH = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64",
                "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5", "int8": "i8",
                "uint8": "u8", "int16": "i16", "int32": "i32", "int64": "i64", "bool": "i1"}
OPTIONS = ("num_warps", "num_ctas", "num_stages", "enable_fp_fusion", "maxnreg")


@dataclasses.dataclass(frozen=True)
class Instr:
    op: str                      # "fma.rn.f32", "add.f32", ...
    dst: str                     # destination register ("" if none)
    srcs: tuple                  # operand registers / immediates
    loc: tuple                   # (file name, line, column); ("", 0, 0) before any .loc


def signature_of(jitfn, args, kwargs) -> Optional[tuple[dict, dict]]:
    """(signature, constexprs) of a launch, as the compiler takes them (None: an argument
    this cannot type, e.g. a tuple or a tensor descriptor)."""
    import torch
    names = [p.name for p in jitfn.params]
    values = dict(zip(names, args))
    values.update({k: v for k, v in kwargs.items() if k in names})
    sig, const = {}, {}
    for p in jitfn.params:
        v = values.get(p.name, p.default)
        if p.is_constexpr:
            sig[p.name], const[p.name] = "constexpr", v
        elif v is None:
            sig[p.name], const[p.name] = "constexpr", None
        elif isinstance(v, torch.Tensor):
            t = _TL_OF_TORCH.get(str(v.dtype).replace("torch.", ""))
            if t is None:
                return None
            sig[p.name] = "*" + t
        elif isinstance(v, bool):
            sig[p.name] = "i1"
        elif isinstance(v, int):
            sig[p.name] = "i32" if -2 ** 31 <= v < 2 ** 31 else "i64"
        elif isinstance(v, float):
            sig[p.name] = "fp32"
        else:
            return None
    return sig, const


def compile_ptx(jitfn, signature: dict, constexprs: dict, **options) -> str:
    """The PTX Triton compiles ``jitfn`` to for sm_90 with these options (cached)."""
    key = (jitfn, tuple(sorted(signature.items())),
           tuple(sorted((k, repr(v)) for k, v in constexprs.items())),
           tuple(sorted(options.items())))
    if key not in _CACHE:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from triton.compiler.compiler import make_backend
        from triton._C.libtriton import ir
        target = GPUTarget("cuda", 90, 32)
        src = ASTSource(fn=jitfn, signature=signature, constexprs=constexprs)
        backend = make_backend(target)
        opts = backend.parse_options({k: v for k, v in options.items() if v is not None})
        ctx = ir.context()
        ir.load_dialects(ctx)
        backend.load_dialects(ctx)
        mod = src.make_ir(target, opts, backend.get_codegen_implementation(opts),
                          backend.get_module_map(), ctx)
        stages, md = {}, {}
        backend.add_stages(stages, opts, src.language)
        cur = mod
        for name in ("ttir", "ttgir", "llir", "ptx"):
            cur = stages[name](cur, md)
        _CACHE[key] = cur
    return _CACHE[key]


_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"')
_INSTR = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.]*)\s+([^;]*);")


def instructions(ptx: str) -> list[Instr]:
    """Every instruction of ``ptx`` with the source location in force at it."""
    files = {m.group(1): m.group(2) for m in map(_FILE.match, ptx.splitlines()) if m}
    out, loc = [], ("", 0, 0)
    for line in ptx.splitlines():
        m = _LOC.match(line)
        if m:
            loc = (files.get(m.group(1), m.group(1)), int(m.group(2)), int(m.group(3)))
            continue
        m = _INSTR.match(line)
        if not m or line.lstrip().startswith((".", "//")):
            continue
        ops = [o.strip() for o in m.group(2).split(",")]
        dst = ops[0] if ops and ops[0].startswith("%") else ""
        out.append(Instr(m.group(1), dst, tuple(ops[1:] if dst else ops), loc))
    return out


def float_ops(ptx: str, kind: str = "f32") -> list[str]:
    """The opcodes of the ``kind`` floating-point instructions, in order."""
    return [i.op for i in instructions(ptx) if i.op.endswith("." + kind)
            and not i.op.startswith(("ld.", "st.", "mov.", "cvt.", "setp.", "selp."))]
