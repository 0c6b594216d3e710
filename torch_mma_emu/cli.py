"""Command line: ``mma-emu`` / ``python -m torch_mma_emu``.

    mma-emu archs                     the supported arch x format matrix and models
    mma-emu compare                   seed 003 eq. 10 on every arch and format (Table 8)
    mma-emu compare --random          random GEMM: max / mean error in ulps against fp64
    mma-emu reveal ...                accumulation order (torch_mma_emu.fprev)
    mma-emu probe ... / fit ...       feature probing and model fitting (torch_mma_emu.probe)
    mma-emu preview ...               a model on emulated GPUs (torch_mma_emu.preview)

Subcommands of other modules plug in through a ``register(subparsers)`` function (add the
module to ``PLUGINS``): it adds its parsers and ``set_defaults(func=run)`` (optionally
``check=fn(args, parser)`` for checks across arguments, run before any work).  A bad value
exits with code 2 and one line naming what is allowed (``Parser.error``; ValueError and
TypeError from a command too); a closed stdout pipe ends quietly.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

import torch

from . import registry
from .formats import FLOAT_DTYPES, FORMATS, OUT_DTYPES, default_out


def format_table(header: list[str], rows: list[list], title: str | None = None) -> str:
    """A plain-text table (no dependencies, stable for tests and logs)."""
    cells = [[str(h) for h in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    out = [title] if title else []
    out.append("  ".join(h.ljust(w) for h, w in zip(cells[0], widths)).rstrip())
    out.append(line)
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells[1:]]
    return "\n".join(out)


# ------------------------------------------------------------------------------- archs

def cmd_archs(args) -> int:
    rows = []
    for r in registry.table():
        if args.arch and args.arch != r["arch"]:
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

def _unscaled_formats(arch: str) -> list[str]:
    fmts = []
    for r in registry.rows_for(arch):
        if r.scale_format is None:
            fmts += [f for f in r.formats if f in FLOAT_DTYPES and f not in fmts]
    return fmts


def _call(A, B, C, arch, fmt, **kw):
    from .ops import emulated_mm
    inf = fmt if fmt in ("tf32", "xf32") else None
    return emulated_mm(A.to(FLOAT_DTYPES[fmt]), B.to(FLOAT_DTYPES[fmt]), C, arch=arch, in_format=inf, **kw)


class _TreeRuns:
    """compare with a tree schedule: a row whose instruction cannot run the tree (a node wider
    than its fused length) is marked and skipped, not fatal; when no row can run it, the
    first reason is the error."""
    MARK = "cannot run the tree"

    def __init__(self, schedule):
        self.tree = schedule is not None and schedule.tree is not None
        self.reasons: list[str] = []
        self.ran = 0

    def call(self, *args, **kw):
        if not self.tree:
            return _call(*args, **kw)
        try:
            out = _call(*args, **kw)
        except ValueError as e:
            if "tree" not in str(e):
                raise
            self.reasons.append(f"{args[3]} {args[4]}: {e}")
            return None
        self.ran += 1
        return out

    def finish(self) -> None:
        """Raises the first reason when no row could run the tree."""
        if self.tree and self.reasons and not self.ran:
            raise ValueError(self.reasons[0])


EQ10 = ([-2.0 ** 13, -0.5, -0.25, -0.125], [2.0 ** 10, 1.0, 1.0, 1.0], 2.0 ** 23)


def eq10_table(archs: list[str], schedule=None) -> tuple[list[str], list[list]]:
    """Seed 003 eq. 10 through every arch and (unscaled) format: Table 8."""
    a, b, c = (torch.tensor(EQ10[0], dtype=torch.float64).reshape(1, 4),
               torch.tensor(EQ10[1], dtype=torch.float64).reshape(4, 1), EQ10[2])
    cols = ["tf32/xf32", "bf16", "fp16", "fp8 (e5m2)", "fp32", "fp64"]
    rows = []
    runs = _TreeRuns(schedule)
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
                C = torch.tensor([[c]], dtype=OUT_DTYPES[default_out(f)])
                d = runs.call(a, b, C, arch, f, instruction=instr, schedule=schedule)
                outs.append(runs.MARK if d is None else f"{d.item():g}")
            row.append(" or ".join(dict.fromkeys(outs)))
        rows.append(row)
    runs.finish()
    return ["arch", "family"] + cols, rows


def _ulp(x: torch.Tensor, out: str) -> torch.Tensor:
    """Unit in the last place of the output format at |x| (subnormal spacing below)."""
    f = FORMATS[out]
    e = torch.floor(torch.log2(x.abs().clamp_min(2.0 ** f.emin)))
    return torch.exp2(e - f.man_bits)


def _rounded_inputs(A, B, f):
    """A and B rounded to input format ``f``, as float64."""
    if f in ("tf32", "xf32"):   # the instructions drop the low 13 bits
        return tuple((x.float().view(torch.int32) & ~0x1FFF).view(torch.float32).double()
                     for x in (A, B))
    return A.to(FLOAT_DTYPES[f]).double(), B.to(FLOAT_DTYPES[f]).double()


def random_jobs(archs, formats=None) -> list[tuple[str, str, str]]:
    """(arch, input format, output format) rows of ``compare --random``."""
    jobs = []
    for arch in archs:
        for f in _unscaled_formats(arch):
            if formats and f not in formats:
                continue
            for out in ("fp64",) if f == "fp64" else ("fp32", "fp16"):
                try:
                    registry.spec(arch, f, out)
                except ValueError:
                    continue
                jobs.append((arch, f, out))
    return jobs


def random_table(archs, size, seed, formats=None, progress=False, schedule=None):
    """Random size^3 GEMM through every (arch, format, output): error in ulps against the
    exact result (:mod:`torch_mma_emu.exact_gemm`: exact slice matmuls, O(size^2) memory),
    computed once per distinct pair of rounded inputs, for every output's C."""
    from tqdm import tqdm

    from .exact_gemm import exact_gemm
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(size, size, generator=g, dtype=torch.float64)
    B = torch.randn(size, size, generator=g, dtype=torch.float64)
    C = torch.randn(size, size, generator=g, dtype=torch.float64)
    jobs = random_jobs(archs, formats)
    outs_of: dict[str, list] = {}
    for _, f, out in jobs:
        outs_of.setdefault(f, [])
        if out not in outs_of[f]:
            outs_of[f].append(out)
    bar = tqdm(total=len(outs_of) + len(jobs), disable=not progress, unit="step",
               desc="compare --random", leave=False, file=sys.stderr)
    exact, done = {}, []        # done: (rounded A, rounded B, {out: exact}) already computed
    for f, outs in outs_of.items():
        Ai, Bi = _rounded_inputs(A, B, f)
        same = next((d for d in done if torch.equal(d[0], Ai) and torch.equal(d[1], Bi)
                     and set(outs) <= set(d[2])), None)
        if same is None:            # the exact results of the rounded inputs, one per output
            bar.set_postfix_str(f"exact result for {f}")
            res = exact_gemm(Ai, Bi, [C.to(OUT_DTYPES[o]).double() for o in outs])
            same = (Ai, Bi, dict(zip(outs, res)))
            done.append(same)
        bar.update(1)
        for o in outs:
            exact[(f, o)] = same[2][o]
    rows = []
    runs = _TreeRuns(schedule)
    for arch, f, out in jobs:
        bar.set_postfix_str(f"{arch} {f} -> {out}")
        odt = OUT_DTYPES[out]
        D = runs.call(A, B, C.to(odt), arch, f, out_dtype=odt, schedule=schedule)
        bar.update(1)
        if D is None:
            rows.append([arch, f, out, registry.spec(arch, f, out).describe(), runs.MARK, "", ""])
            continue
        D = D.double()
        ref = exact[(f, out)]
        err = ((D - ref) / _ulp(ref, out)).abs()
        rows.append([arch, f, out, registry.spec(arch, f, out).describe(),
                     f"{err.max().item():.3g}", f"{err.mean().item():.3g}",
                     f"{err.median().item():.3g}"])
    bar.close()
    runs.finish()
    return ["arch", "input", "out", "model", "max err (ulp)", "mean err (ulp)",
            "median (ulp)"], rows


def cmd_compare(args) -> int:
    archs = list(dict.fromkeys(args.arch)) if args.arch else registry.archs()  # H100 = sm90
    sched = getattr(args, "schedule_obj", None)
    if sched is not None:
        print(f"schedule: {sched.describe()}")
    if args.random:
        hdr, rows = random_table(archs, args.size, args.seed, args.format,
                                 progress=not args.no_progress and sys.stderr.isatty(),
                                 schedule=sched)
        text = format_table(hdr, rows, title=(
            f"Random {args.size}x{args.size}x{args.size} GEMM, A, B, C ~ N(0,1) rounded to the "
            "input format; error of the emulated result against the exact product of the "
            "rounded inputs (correctly rounded to fp64), in ulps of the output format at the "
            "exact value (results near 0 after cancellation give the large maxima)"))
    else:
        text = eq10_text(archs, sched)
    print(text)
    if _TreeRuns.MARK in text:
        print(f"'{_TreeRuns.MARK}': the tree's nodes sum more products than those "
              "instructions fuse (docs/schedules.md, Trees)")
    return 0


def eq10_text(archs, schedule=None) -> str:
    """What ``mma-emu compare`` prints (also the README's copy, scripts/update_readme.py)."""
    hdr, rows = eq10_table(archs, schedule)
    return format_table(hdr, rows, title=(
        "Seed 003 eq. 10: a = (-2^13, -0.5, -0.25, -0.125), b = (2^10, 1, 1, 1), c = 2^23; "
        "exact answer -0.875 (Table 8)"))


# ------------------------------------------------------------------------------- main

class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2, no usage block) and help text laid out as
    written, so each subcommand's examples keep their lines."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def examples(*lines: str) -> str:
    """An ``epilog`` listing example command lines."""
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {v}")
    return v


def arch_name(text: str) -> str:
    """argparse type: an arch name or alias, returned canonical."""
    try:
        return registry.canonical_arch(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


RANDOM_FORMATS = tuple(FLOAT_DTYPES)

# Subcommands of other modules: each has register(subparsers), which adds its parsers and
# sets ``func`` (called with the parsed args, returns the exit code).  Add a module here to
# add a subcommand.
PLUGINS = ["torch_mma_emu.fprev.cli", "torch_mma_emu.probe.cli", "torch_mma_emu.preview.cli"]


def _add_archs(sub) -> None:
    a = sub.add_parser("archs", help="list supported architectures, formats and models",
                       description="The supported arch x format models and the GPUs of each "
                                   "arch.",
                       epilog=examples("mma-emu archs", "mma-emu archs --arch H100"))
    a.add_argument("--arch", type=arch_name, help="only this arch (name or alias)")
    a.set_defaults(func=cmd_archs)


def _add_compare(sub) -> None:
    c = sub.add_parser(
        "compare", help="one input through every arch and format",
        description="Seed 003 eq. 10 through every arch and format (Table 8), or with "
                    "--random a random GEMM's error in ulps against the exact product.",
        epilog=examples("mma-emu compare", "mma-emu compare --arch sm90 --arch MI300X",
                        "mma-emu compare --random --size 256 --format fp16 --format bf16"))
    c.add_argument("--random", action="store_true", help="random GEMM, error in ulps vs fp64")
    c.add_argument("--arch", action="append", type=arch_name,
                   help="restrict to these archs (repeatable)")
    c.add_argument("--format", action="append", choices=RANDOM_FORMATS, metavar="FORMAT",
                   help="with --random: restrict to these input formats (repeatable): "
                        + ", ".join(RANDOM_FORMATS))
    c.add_argument("--size", type=positive_int, default=None,
                   help="with --random: matrix size N of the N x N x N GEMM (default 128)")
    c.add_argument("--seed", type=int, default=None, help="with --random: random seed (0)")
    c.add_argument("--no-progress", action="store_true", help="no progress bar")
    c.add_argument("--schedule", help="run every product with this schedule: a JSON file "
                   "(mma-emu reveal matmul --schedule-out), a preset or a schedule string")
    c.set_defaults(func=cmd_compare, check=_check_compare)


def _check_compare(args, parser) -> None:
    """Combinations argparse cannot check, refused before any work."""
    args.schedule_obj = None
    if args.schedule:
        from .schedule import load_schedule
        try:
            args.schedule_obj = load_schedule(args.schedule)
        except (ValueError, TypeError, OSError) as e:
            parser.error(f"--schedule: {e}")
    if not args.random:
        given = [f"--{n}" for n in ("format", "size", "seed") if getattr(args, n) is not None]
        if given:
            parser.error(f"{', '.join(given)} {'apply' if len(given) > 1 else 'applies'} only "
                         "with --random")
        return
    args.size = 128 if args.size is None else args.size
    args.seed = 0 if args.seed is None else args.seed
    archs = list(dict.fromkeys(args.arch)) if args.arch else registry.archs()  # H100 = sm90
    if not random_jobs(archs, args.format):
        parser.error(f"no selected arch ({', '.join(archs)}) has input format "
                     f"{' or '.join(args.format)}; see mma-emu archs")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="mma-emu", description=(
        "Bit-accurate emulation of GPU matrix units (NVIDIA Tensor Cores, AMD Matrix Cores)."),
        epilog=examples("mma-emu archs", "mma-emu compare", "mma-emu compare --random --size 512",
                        "mma-emu reveal sum --n 64", "mma-emu probe --arch sm90 --format fp16",
                        "mma-emu <command> --help"))
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_archs(sub)
    _add_compare(sub)
    for mod in PLUGINS:
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name and mod.startswith(e.name):
                continue  # subpackage not installed
            raise
        m.register(sub)
    return p


def _subparser(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The parser of the subcommand that was given (for its one-line errors)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(getattr(args, action.dest, None), parser)
    return parser


def main(argv=None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if getattr(args, "check", None):
            args.check(args, _subparser(parser, args))
        rc = int(args.func(args) or 0)
        sys.stdout.flush()              # a closed pipe shows here, not at interpreter exit
        return rc
    except (ValueError, TypeError) as e:
        print(f"mma-emu: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:             # `mma-emu archs | head`: the reader is gone, stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())   # no second error when Python flushes at exit
        return 0
    except KeyboardInterrupt:
        print("mma-emu: interrupted", file=sys.stderr)
        return 130
    except SystemExit as e:             # argparse: --help (0) or a one-line usage error (2)
        return e.code if isinstance(e.code, int) else 2


if __name__ == "__main__":
    sys.exit(main())
