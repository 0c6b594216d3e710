"""Compile a Triton kernel for a GPU target on the CPU (no GPU: Triton stops at TTGIR, its
GPU-specific IR) and list its dot operations: which instruction family each became, the
operand and result element types.  tests/triton_emu/test_triton_choice.py checks
torch_mma_emu.triton.choose against it."""
import re

import torch
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.compiler.compiler import make_backend
from triton._C.libtriton import ir

TARGETS = {"sm75": ("cuda", 75, 32), "sm80": ("cuda", 80, 32), "sm89": ("cuda", 89, 32),
           "sm90": ("cuda", 90, 32), "sm100": ("cuda", 100, 32), "sm120": ("cuda", 120, 32),
           "gfx90a": ("hip", "gfx90a", 64), "gfx942": ("hip", "gfx942", 64)}
ELEM = {"f16": "fp16", "bf16": "bf16", "f32": "fp32", "f64": "fp64", "f8E4M3FN": "fp8_e4m3",
        "f8E5M2": "fp8_e5m2", "f8E4M3FNUZ": "fp8_e4m3fnuz", "f8E5M2FNUZ": "fp8_e5m2fnuz",
        "i8": "u8"}
TL_OF_TORCH = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32",
               torch.float64: "fp64", torch.float8_e4m3fn: "fp8e4nv",
               torch.float8_e5m2: "fp8e5", torch.float8_e4m3fnuz: "fp8e4b8",
               torch.uint8: "u8", torch.int32: "i32", torch.int64: "i64"}


def ttgir(jitfn, signature, constexprs, arch, num_warps=4) -> str:
    target = GPUTarget(*TARGETS[arch])
    src = ASTSource(fn=jitfn, signature=signature, constexprs=constexprs)
    backend = make_backend(target)
    opts = backend.parse_options({"num_warps": num_warps})
    ctx = ir.context()
    ir.load_dialects(ctx)
    backend.load_dialects(ctx)
    mod = src.make_ir(target, opts, backend.get_codegen_implementation(opts),
                      backend.get_module_map(), ctx)
    stages, md = {}, {}
    backend.add_stages(stages, opts, src.language)
    return str(stages["ttgir"](stages["ttir"](mod, md), md))


def signature_of(jitfn, args, kwargs):
    """(signature, constexprs) of a launch, from its arguments."""
    sig, const = {}, {}
    names = [p.name for p in jitfn.params]
    values = dict(zip(names, args))
    values.update({k: v for k, v in kwargs.items() if k in names})
    for p in jitfn.params:
        if p.name not in values:
            values[p.name] = p.default
        v = values[p.name]
        if p.is_constexpr:
            sig[p.name] = "constexpr"
            const[p.name] = v
        elif isinstance(v, torch.Tensor):
            sig[p.name] = "*" + TL_OF_TORCH[v.dtype]
        elif isinstance(v, bool):
            sig[p.name] = "i1"
        elif isinstance(v, int):
            sig[p.name] = "i32" if -2**31 <= v < 2**31 else "i64"
        elif isinstance(v, float):
            sig[p.name] = "fp32"
        else:
            raise TypeError(f"cannot type argument {p.name}={v!r}")
    return sig, const


def dots(text: str) -> list:
    """[(path, operand format, result format)] of every dot in TTGIR, in program order."""
    layouts = dict(re.findall(r"^(#\w+) = #ttg\.(nvidia_mma<\{versionMajor = \d|amd_mfma)",
                              text, re.M))
    out = []
    for line in text.splitlines():
        line = line.strip()
        m = re.search(r"(ttng\.warp_group_dot|ttng\.tc_gen5_mma_scaled|ttng\.tc_gen5_mma|"
                      r"tt\.dot_scaled|tt\.dot) ", line)
        if not m or line.startswith("#"):
            continue
        op = m.group(1)
        types = re.findall(r"(?:tensor|memdesc)<(?:\d+x)+(\w+)", line.split(" : ", 1)[-1])
        res = re.search(r"-> tensor<(?:\d+x)+(\w+)", line)
        if op == "ttng.warp_group_dot":
            path = "wgmma"
        elif op.startswith("ttng.tc_gen5"):
            path = "tcgen05"
        else:
            parent = re.search(r"parent = (#\w+)", line)
            kind = layouts.get(parent.group(1), "") if parent else ""
            path = ("mfma" if kind == "amd_mfma" else
                    "mma.sync" if kind.endswith("2") else "fma")
        if op.endswith("scaled"):
            path += " scaled"
        r = res.group(1) if res else (types[2] if len(types) > 2 else "?")  # tcgen05: TMEM acc
        out.append((path, ELEM.get(types[0], types[0]) if types else "?", ELEM.get(r, r)))
    return out
