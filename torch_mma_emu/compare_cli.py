"""``mma-emu compare``: one input through every arch and format (:mod:`.compare`)."""
from __future__ import annotations

import sys

from . import registry
from .cli_args import add_command, arch_name, positive_int
from .compare import TreeRuns, eq10_text, random_jobs, random_table
from .formats import FLOAT_DTYPES
from .text_table import format_table

RANDOM_FORMATS = tuple(FLOAT_DTYPES)


def register(subparsers) -> None:
    """Add ``compare`` to an ``argparse`` sub-parser collection."""
    c = add_command(
        subparsers, "compare", func=cmd_compare, check=_check_compare,
        help="one input through every arch and format",
        description="Seed 003 eq. 10 through every arch and format (Table 8), or with "
                    "--random a random GEMM's error in ulps against the exact product.",
        examples_=("mma-emu compare", "mma-emu compare --arch sm90 --arch MI300X",
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


def _archs(args) -> list[str]:
    return list(dict.fromkeys(args.arch)) if args.arch else registry.archs()  # H100 = sm90


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
    archs = _archs(args)
    if not random_jobs(archs, args.format):
        parser.error(f"no selected arch ({', '.join(archs)}) has input format "
                     f"{' or '.join(args.format)}; see mma-emu archs")


def cmd_compare(args) -> int:
    archs = _archs(args)
    sched = args.schedule_obj
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
    if TreeRuns.MARK in text:
        print(f"'{TreeRuns.MARK}': the tree's nodes sum more products than those "
              "instructions fuse (docs/schedules.md, Trees)")
    if TreeRuns.MARK_SCHEDULE in text:
        print(f"'{TreeRuns.MARK_SCHEDULE}': cuBLAS's fp16 merges need an fp32 output, "
              "residue_tile a multiple of the instruction's K, split_grain whole scale blocks "
              "(docs/schedules.md, Semantics)")
    return 0
