"""Command line: ``mma-emu`` / ``python -m torch_mma_emu``.

    mma-emu archs                     the supported arch x format matrix and models
    mma-emu compare                   seed 003 eq. 10 on every arch and format (Table 8)
    mma-emu compare --random          random GEMM: max / mean error in ulps against fp64
    mma-emu reveal ...                accumulation order (torch_mma_emu.fprev)
    mma-emu probe ... / fit ...       feature probing and model fitting (torch_mma_emu.probe)
    mma-emu preview ...               a model on emulated GPUs (torch_mma_emu.preview)

Subcommands of other subpackages plug in through a ``register(subparsers)`` function.
"""
from __future__ import annotations

import argparse
import importlib
import sys

import torch

from . import registry
from .formats import FORMATS

PLUGINS = ("torch_mma_emu.fprev.cli", "torch_mma_emu.probe.cli", "torch_mma_emu.preview.cli")


def format_table(header: list[str], rows: list[list], title: str | None = None) -> str:
    """A plain-text table (no dependencies, stable for tests and logs)."""
    cells = [[str(h) for h in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    out = [title] if title else []
    out.append("  ".join(h.ljust(w) for h, w in zip(cells[0], widths)))
    out.append(line)
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells[1:]]
    return "\n".join(out)


# ------------------------------------------------------------------------------- archs

def cmd_archs(args) -> int:
    rows = []
    for r in registry.table():
        if args.arch and registry.canonical_arch(args.arch) != r["arch"]:
            continue
        rows.append([r["arch"], r["family"], r["formats"], r["out"], r["scale"], r["model"],
                     r["instruction"]])
    print(format_table(["arch", "family", "inputs", "out", "scales", "model", "instruction"],
                       rows, title="Supported matrix-unit models (tme.spec(arch, format, out))"))
    if not args.arch:
        print()
        gp = [[a.name, a.family, ", ".join(a.gpus), ", ".join(a.aliases)]
              for a in registry.ARCHS.values()]
        print(format_table(["arch", "family", "GPUs", "aliases"], gp))
    return 0


# ------------------------------------------------------------------------------- compare

_TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32,
          "tf32": torch.float32, "xf32": torch.float32, "fp64": torch.float64,
          "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2,
          "fp8_e4m3fnuz": torch.float8_e4m3fnuz, "fp8_e5m2fnuz": torch.float8_e5m2fnuz}


def _unscaled_formats(arch: str) -> list[str]:
    fmts = []
    for r in registry.rows_for(arch):
        if r.scale_format is None:
            fmts += [f for f in r.formats if f in _TORCH and f not in fmts]
    return fmts


def _call(A, B, C, arch, fmt, **kw):
    from .ops import emulated_mm
    inf = fmt if fmt in ("tf32", "xf32") else None
    return emulated_mm(A.to(_TORCH[fmt]), B.to(_TORCH[fmt]), C, arch=arch, in_format=inf, **kw)


EQ10 = ([-2.0 ** 13, -0.5, -0.25, -0.125], [2.0 ** 10, 1.0, 1.0, 1.0], 2.0 ** 23)


def eq10_table(archs: list[str]) -> tuple[list[str], list[list]]:
    """Seed 003 eq. 10 through every arch and (unscaled) format: Table 8."""
    a, b, c = (torch.tensor(EQ10[0], dtype=torch.float64).reshape(1, 4),
               torch.tensor(EQ10[1], dtype=torch.float64).reshape(4, 1), EQ10[2])
    cols = ["tf32/xf32", "bf16", "fp16", "fp8 (e5m2)", "fp32", "fp64"]
    rows = []
    for arch in archs:
        fmts = _unscaled_formats(arch)
        row = [arch, registry.ARCHS[arch].family]
        for col in cols:
            want = {"tf32/xf32": ("tf32", "xf32"), "fp8 (e5m2)": ("fp8_e5m2", "fp8_e5m2fnuz")}.get(col, (col,))
            f = next((x for x in fmts if x in want), None)
            if f is None:
                row.append("N/A")
                continue
            outs = []
            for instr in registry.instructions(arch, f):
                C = torch.tensor([[c]], dtype=torch.float64 if f == "fp64" else torch.float32)
                outs.append(f"{_call(a, b, C, arch, f, instruction=instr).item():g}")
            row.append(" or ".join(dict.fromkeys(outs)))
        rows.append(row)
    return ["arch", "family"] + cols, rows


def _ulp(x: torch.Tensor, out: str) -> torch.Tensor:
    """Unit in the last place of the output format at |x| (subnormal spacing below)."""
    f = FORMATS[out]
    e = torch.floor(torch.log2(x.abs().clamp_min(2.0 ** f.emin)))
    return torch.exp2(e - f.man_bits)


def _split(x: torch.Tensor):
    """Veltkamp split of float64 values into 26-bit halves (hi + lo == x exactly)."""
    t = x * 134217729.0  # 2^27 + 1
    hi = t - (t - x)
    return hi, x - hi


def exact_gemm(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """C + A @ B for float64 inputs, correctly rounded to float64 (exact products by
    Dekker's TwoProduct, exact sums by math.fsum)."""
    import math
    ah, al = _split(A)
    bh, bl = _split(B)
    # a*b = ah*bh + ah*bl + al*bh + al*bl, each partial product exact in binary64
    parts = [torch.einsum("ik,kj->ijk", x, y) for x in (ah, al) for y in (bh, bl)]
    terms = torch.cat(parts + [C.unsqueeze(-1)], dim=-1).reshape(-1, 4 * A.shape[1] + 1)
    out = [math.fsum(row) for row in terms.tolist()]
    return torch.tensor(out, dtype=torch.float64).reshape(C.shape)


def random_table(archs, size, seed, formats=None):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(size, size, generator=g, dtype=torch.float64)
    B = torch.randn(size, size, generator=g, dtype=torch.float64)
    C = torch.randn(size, size, generator=g, dtype=torch.float64)
    rows, exact_cache = [], {}
    for arch in archs:
        for f in _unscaled_formats(arch):
            if formats and f not in formats:
                continue
            for out in ("fp64",) if f == "fp64" else ("fp32", "fp16"):
                try:
                    s = registry.spec(arch, f, out)
                except ValueError:
                    continue
                odt = {"fp32": torch.float32, "fp16": torch.float16, "fp64": torch.float64}[out]
                Cc = C.to(odt)
                if (f, out) not in exact_cache:  # exact result of the rounded inputs
                    Ai = A.to(_TORCH[f]).to(torch.float64)
                    Bi = B.to(_TORCH[f]).to(torch.float64)
                    if f in ("tf32", "xf32"):
                        Ai = (A.float().view(torch.int32) & ~0x1FFF).view(torch.float32).double()
                        Bi = (B.float().view(torch.int32) & ~0x1FFF).view(torch.float32).double()
                    exact_cache[(f, out)] = exact_gemm(Ai, Bi, Cc.double())
                exact = exact_cache[(f, out)]
                D = _call(A, B, Cc, arch, f, out_dtype=odt).double()
                err = ((D - exact) / _ulp(exact, out)).abs()
                rows.append([arch, f, out, s.describe(), f"{err.max().item():.3g}",
                             f"{err.mean().item():.3g}", f"{err.median().item():.3g}"])
    return ["arch", "input", "out", "model", "max err (ulp)", "mean err (ulp)",
            "median (ulp)"], rows


def cmd_compare(args) -> int:
    archs = [registry.canonical_arch(a) for a in args.arch] if args.arch else registry.archs()
    if args.random:
        hdr, rows = random_table(archs, args.size, args.seed, args.format)
        print(format_table(hdr, rows, title=(
            f"Random {args.size}x{args.size}x{args.size} GEMM, A, B, C ~ N(0,1) rounded to the "
            "input format; error of the emulated result against the exact product of the "
            "rounded inputs (correctly rounded to fp64), in ulps of the output format at the "
            "exact value (results near 0 after cancellation give the large maxima)")))
    else:
        hdr, rows = eq10_table(archs)
        print(format_table(hdr, rows, title=(
            "Seed 003 eq. 10: a = (-2^13, -0.5, -0.25, -0.125), b = (2^10, 1, 1, 1), c = 2^23; "
            "exact answer -0.875 (Table 8)")))
    return 0


# ------------------------------------------------------------------------------- main

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mma-emu", description=(
        "Bit-accurate emulation of GPU matrix units (NVIDIA Tensor Cores, AMD Matrix Cores)."))
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("archs", help="list supported architectures, formats and models")
    a.add_argument("--arch", help="only this arch")
    a.set_defaults(func=cmd_archs)
    c = sub.add_parser("compare", help="one input through every arch and format")
    c.add_argument("--random", action="store_true", help="random GEMM, error in ulps vs fp64")
    c.add_argument("--arch", action="append", help="restrict to these archs (repeatable)")
    c.add_argument("--format", action="append", help="restrict --random to these input formats")
    c.add_argument("--size", type=int, default=128, help="matrix size for --random")
    c.add_argument("--seed", type=int, default=0)
    c.set_defaults(func=cmd_compare)
    for mod in PLUGINS:
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name and mod.startswith(e.name):
                continue  # subpackage not installed
            raise
        m.register(sub)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError) as e:
        print(f"mma-emu: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
