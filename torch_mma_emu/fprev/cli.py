"""``mma-emu reveal sum|dot|mv|matmul|allreduce ...``: the CLI face of :mod:`torch_mma_emu.fprev`.

The package CLI calls :func:`register` with its sub-parser collection; :func:`main` runs the
``reveal`` command alone (``python -m torch_mma_emu.fprev.cli reveal sum --n 64``).
Prints the one-line description and the probes used; ``--out`` writes a picture (.png,
.svg, .pdf), DOT (.dot), the compact text (.txt) or JSON (.json).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

from ..cli_args import (Parser, add_command, arch_name, bounded, examples, finite_float,
                         format_list, integer, one_line, positive_int)
from ..codec import decimal_int
from ..files import atomic_write, regular_file
from ..limits import check
from ..registry import DEFAULT_ARCH
from .collectives import BACKENDS

DTYPES = ("float32", "float64", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
          "float8_e4m3fnuz", "float8_e5m2fnuz")
OUT_SUFFIXES = (".png", ".svg", ".pdf", ".dot", ".txt", ".json")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", default="float32", choices=DTYPES, help="input dtype")
    p.add_argument("--device", default="cpu", type=_device, help="cpu or cuda[:i]")
    p.add_argument("--algorithm", default="default",
                   choices=("default", "fprev", "basic", "modified"),
                   help="ours (default) or seed 001's Algorithm 4 / 2 / 5")
    p.add_argument("--verify", action="store_true",
                   help="run every probe twice and check the tree on extra probes")
    p.add_argument("--big", type=_power_of_two, help="mask magnitude (a power of two)")
    p.add_argument("--unit", type=_power_of_two, help="the scaled one (a power of two)")
    p.add_argument("--out", help="write the tree: " + ", ".join(OUT_SUFFIXES))
    p.add_argument("--json", action="store_true", help="print the tree as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def register(subparsers) -> None:
    """Add the ``reveal`` command to an ``argparse`` sub-parser collection."""
    rev = add_command(
        subparsers, "reveal", func=handler,
        help="reveal the accumulation order of a sum, matmul or collective (FPRev)",
        description="Reveal the summation tree an implementation really uses (seed 001).",
        examples_=("mma-emu reveal sum --n 64",
                   "mma-emu reveal matmul --k 32 --backend emulated --arch sm80 "
                   "--dtype float16 --out tree.png",
                   "mma-emu reveal allreduce --world-size 4", "mma-emu reveal sum --help"))
    kinds = rev.add_subparsers(dest="target", required=True, metavar="TARGET")

    s = kinds.add_parser("sum", help="torch.sum (or numpy.sum) of n elements / over a dim",
                         epilog=examples("mma-emu reveal sum --n 64",
                                         "mma-emu reveal sum --n 32 --library numpy",
                                         "mma-emu reveal sum --shape 8,16 --dim 1 --out t.json"))
    s.add_argument("--n", type=_summands, help="number of summands (1-D sum)")
    s.add_argument("--shape", type=_shape,
                   help="comma-separated shape, with --dim: sum over one dim")
    s.add_argument("--dim", type=integer)
    s.add_argument("--library", default="torch", choices=("torch", "numpy"))
    s.set_defaults(check=_check_sum)
    _common(s)

    d = kinds.add_parser("dot", help="torch.dot (or numpy.dot) of two n-vectors",
                         epilog=examples("mma-emu reveal dot --n 64 --dtype float16"))
    d.add_argument("--n", type=_summands, required=True)
    d.add_argument("--library", default="torch", choices=("torch", "numpy"))
    _common(d)

    v = kinds.add_parser("mv", help="torch.mv of an m x n matrix",
                         epilog=examples("mma-emu reveal mv --n 128"))
    v.add_argument("--m", type=_rows, default=64)
    v.add_argument("--n", type=_summands, required=True)
    _common(v)

    m = kinds.add_parser("matmul", help="an (m x k) @ (k x n) product, summing over k",
                         epilog=examples("mma-emu reveal matmul --k 256",
                                         "mma-emu reveal matmul --k 32 --backend emulated "
                                         "--arch sm80 --dtype float16 --out tree.png",
                                         "mma-emu reveal matmul --k 64 --backend cublas "
                                         "--device cuda --dtype bfloat16"))
    m.add_argument("--m", type=_rows, default=64)
    m.add_argument("--n", type=_rows, default=8)
    m.add_argument("--k", type=_summands, required=True)
    m.add_argument("--backend", default="torch",
                   choices=("torch", "emulated", "reference", "cublas", "triton"))
    m.add_argument("--arch", type=arch_name, help="arch for emulated/reference (sm90)")
    m.add_argument("--in-format", type=format_list,
                   help="tf32, xf32, ... where the dtype is ambiguous")
    m.add_argument("--out-dtype", choices=("float32", "float16", "float64"))
    m.add_argument("--instruction", help="non-default instruction of the arch")
    m.add_argument("--with-c", action="store_true", help="C is summand k")
    m.add_argument("--c-mode", default="chain", choices=("chain", "epilogue"))
    m.add_argument("--no-batch", action="store_true", help="probe row 0 only")
    m.add_argument("--schedule", help="emulated backend: a schedule file, preset or string")
    m.add_argument("--schedule-out", help="write the revealed order as a schedule (JSON) "
                   "for emulated_mm(schedule=...) / mma-emu compare --schedule")
    m.set_defaults(check=_check_matmul)
    _common(m)

    a = kinds.add_parser("allreduce", help="torch.distributed all_reduce / reduce_scatter",
                         epilog=examples("mma-emu reveal allreduce --world-size 4",
                                         "mma-emu reveal allreduce --world-size 3 --op "
                                         "reduce_scatter --numel 12 --out trees.json"))
    a.add_argument("--world-size", type=_world_size, required=True,
                   help="ranks, one process each (at most MMA_EMU_MAX_WORLD_SIZE: 4 per core, "
                        "0.5 GiB of available memory each)")
    a.add_argument("--numel", type=_summands, default=16)
    a.add_argument("--op", default="all_reduce", choices=("all_reduce", "reduce_scatter"))
    a.add_argument("--backend", default=None, choices=BACKENDS,
                   help="torch.distributed backend (checked for this machine before starting;"
                        " default gloo); nccl-emu / rccl-emu: gloo processes summing in "
                        "NCCL's / RCCL 2.21.5's modelled order")
    a.add_argument("--algo", choices=("ring", "tree", "pat", "symmetric"), default=None,
                   help="--backend nccl-emu / rccl-emu: the algorithm (default ring; pat: "
                        "NCCL's reduce_scatter only; symmetric: NCCL, unverified)")
    a.add_argument("--proto", choices=("simple", "ll", "ll128"), default=None,
                   help="--backend nccl-emu / rccl-emu: the protocol (default simple)")
    a.add_argument("--nchannels", type=positive_int, default=None,
                   help="--backend nccl-emu / rccl-emu: channels (default 1 ring, 2 tree)")
    a.add_argument("--msccl", metavar="FILE", default=None,
                   help="an MSCCL allreduce XML (RCCL's tools/msccl-algorithms/): run where "
                        "RCCL would run it (implies --backend rccl-emu)")
    a.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    a.add_argument("--verify", action="store_true")
    a.add_argument("--out", help="write the distinct trees (numbered) / JSON")
    a.add_argument("--json", action="store_true")
    a.add_argument("--no-progress", action="store_true", help="no progress bar")


# argparse types: the summands of one order, the other dimensions, the ranks (limits.py)
_summands = bounded("reveal_n")
_rows = bounded("elements")
_world_size = bounded("world_size", minimum=2)


def _device(text: str) -> str:
    """argparse type: cpu, cuda or cuda:i (ASCII digits)."""
    kind, colon, index = text.partition(":")
    if kind == "cpu" and not colon or kind == "cuda" and (
            not colon or decimal_int(index) is not None and int(index) >= 0):
        return text
    raise argparse.ArgumentTypeError(f"must be cpu, cuda or cuda:i, got {text!r}")


def _power_of_two(text: str) -> float:
    """argparse type: a positive power of two (--big, --unit)."""
    v = finite_float(text)
    if v <= 0 or math.frexp(v)[0] != 0.5:
        raise argparse.ArgumentTypeError(f"must be a positive power of two, got {text!r}")
    return v


def _check_sum(args, parser) -> None:
    """reveal sum: --n (1-D) or --shape with --dim, refused before any work otherwise."""
    if args.shape is None and args.n is None:
        parser.error("reveal sum needs --n, or --shape with --dim")
    if args.shape is not None and args.n is not None:
        parser.error("give --n (a 1-D sum) or --shape with --dim, not both")
    if (args.shape is None) != (args.dim is None):
        parser.error("--shape and --dim go together (the sum over one dim of a tensor)")


def _check_matmul(args, parser) -> None:
    """reveal matmul: the emulated backends' arguments only with those backends."""
    given = [f"--{n.replace('_', '-')}" for n in ("arch", "in_format", "instruction", "schedule")
             if getattr(args, n) is not None]
    if given and args.backend not in ("emulated", "reference"):
        parser.error(f"{', '.join(given)} {'apply' if len(given) > 1 else 'applies'} to "
                     f"--backend emulated or reference, not {args.backend}")
    args.arch = args.arch or DEFAULT_ARCH


def _shape(text: str) -> tuple:
    """argparse type: a comma-separated shape of positive integers."""
    try:
        shape = tuple(positive_int(x.strip()) for x in text.split(","))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be comma-separated positive integers such as "
                                         f"8,16; got {text!r}") from None
    try:
        check("elements", math.prod(shape), "its elements")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return shape


def _opts(args) -> dict:
    return dict(algorithm=args.algorithm, verify=args.verify,
                progress=not args.no_progress and sys.stderr.isatty())


def _dt(name):
    import torch
    return getattr(torch, name) if name else None


def handler(args) -> int:
    """Run ``mma-emu reveal ...``; returns the exit code."""
    from . import (FPRevError, reveal_allreduce, reveal_dot, reveal_matmul, reveal_mv,
                   reveal_sum)
    for flag in ("out", "schedule_out"):   # before any work: a bad path costs no revelation
        path = getattr(args, flag, None)
        why = path and (_bad_out(path) if flag == "out" else _not_regular(path))
        if why:
            print(f"mma-emu reveal: error: --{flag.replace('_', '-')} {path}: {why}",
                  file=sys.stderr)
            return 2
    try:
        if args.target == "allreduce":
            backend = args.backend or ("rccl-emu" if args.msccl else "gloo")
            emu = {k: getattr(args, k) for k in ("algo", "proto", "nchannels", "msccl")
                   if getattr(args, k) is not None}
            if emu and backend not in ("nccl-emu", "rccl-emu"):
                raise ValueError(f"--{'/--'.join(emu)} only apply to --backend nccl-emu or "
                                 "rccl-emu")
            if emu.get("algo") in ("pat", "symmetric") and backend != "nccl-emu":
                raise ValueError(f"--algo {emu['algo']} is an NCCL algorithm: use --backend "
                                 "nccl-emu")
            if emu.get("algo") == "pat" and args.op != "reduce_scatter":
                raise ValueError("--algo pat is NCCL's reduce-scatter algorithm (NCCL has no "
                                 "PAT all-reduce): add --op reduce_scatter")
            if args.msccl and backend != "rccl-emu":
                raise ValueError("--msccl applies to --backend rccl-emu")
            if args.msccl:                        # a bad file costs no process start
                from ..order.msccl import MscclAlgorithm
                emu["msccl"] = MscclAlgorithm(args.msccl)
            res = reveal_allreduce(args.world_size, backend=backend, numel=args.numel,
                                   op=args.op, dtype=_dt(args.dtype), verify=args.verify,
                                   progress=not args.no_progress and sys.stderr.isatty(),
                                   nccl_emu=emu if backend.endswith("-emu") else None)
            return _report_collective(res, args)
        vals = dict(dtype=_dt(args.dtype), big=args.big, unit=args.unit)
        if args.target == "sum":
            if args.shape is None and args.n is None:     # (parsers that skip _check_sum)
                raise ValueError("reveal sum needs --n, or --shape with --dim")
            tree = reveal_sum(args.n, shape=args.shape, dim=args.dim, device=args.device,
                              library=args.library, **vals, **_opts(args))
        elif args.target == "dot":
            tree = reveal_dot(args.n, device=args.device, library=args.library, **vals,
                              **_opts(args))
        elif args.target == "mv":
            tree = reveal_mv(args.m, args.n, device=args.device, **vals, **_opts(args))
        else:
            mm_kwargs = None
            if args.schedule:
                from ..schedule import load_schedule
                if args.backend != "emulated":
                    raise ValueError("--schedule applies to --backend emulated")
                mm_kwargs = {"schedule": load_schedule(args.schedule)}
            tree = reveal_matmul(args.m, args.n, args.k, mm=args.backend, device=args.device,
                                 out_dtype=_dt(args.out_dtype), arch=args.arch,
                                 in_format=args.in_format, with_c=args.with_c,
                                 c_mode=args.c_mode, instruction=args.instruction,
                                 batch=not args.no_batch, mm_kwargs=mm_kwargs, **vals,
                                 **_opts(args))
    except (FPRevError, ValueError, TypeError, RuntimeError, IndexError) as e:
        print(f"mma-emu reveal: error: {_torch_says(e, args)}", file=sys.stderr)
        return 2
    meta = tree.meta
    print(f"{meta['target']}: {tree.describe()}")
    print(f"probes: {meta['probes']} in {meta['calls']} calls, {meta['seconds']:.3f} s "
          f"({meta['algorithm']}{', verified' if meta['verified'] else ''})")
    if args.json:
        print(tree.to_json())
    if args.out:
        try:
            _write(tree, args.out)
        except (OSError, RuntimeError, ImportError, ValueError) as e:
            print(f"mma-emu reveal: error: writing {args.out}: {one_line(e)}", file=sys.stderr)
            return 2
        print(f"wrote {args.out}")
    if getattr(args, "schedule_out", None):
        import json
        from ..schedule import Schedule
        d = Schedule.from_tree(tree).to_dict(
            target=str(meta["target"]), k=args.k, with_c=args.with_c, dtype=args.dtype)
        try:
            atomic_write(args.schedule_out, json.dumps(d, indent=1))
        except (OSError, ValueError) as e:
            print(f"mma-emu reveal: error: writing {args.schedule_out}: {one_line(e)}",
                  file=sys.stderr)
            return 2
        print(f"wrote schedule {args.schedule_out} ({d['describe']})")
    return 0


def _torch_says(e: Exception, args) -> str:
    """The error on one line; torch's bare "'op' not implemented for 'Dtype'" said in ours."""
    msg = one_line(e)
    if "not implemented for" in msg:
        msg = (f"torch on {getattr(args, 'device', 'cpu')} cannot run reveal {args.target} "
               f"in {args.dtype} (torch: {msg}); try float16, bfloat16, float32 or float64")
    return msg


def _bad_out(path: str) -> str:
    """Why ``--out path`` cannot be written ('' when it can)."""
    import shutil
    ext = os.path.splitext(path)[1].lower()
    if ext not in OUT_SUFFIXES:
        return f"must end with one of {', '.join(OUT_SUFFIXES)}"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"no folder {folder}"
    if ext in (".png", ".svg", ".pdf") and shutil.which("dot") is None:
        return "pictures need graphviz's dot on the PATH; write .dot, .txt or .json instead"
    return _not_regular(path)


def _not_regular(path: str) -> str:
    """Why an output ``path`` is refused: it exists and is not a regular file ('' if fine)."""
    try:
        regular_file(path, "output", may_be_missing=True)
    except ValueError as e:
        return str(e).split(f"{path} ", 1)[-1]
    return ""


def _write(tree, path: str) -> None:
    ext = os.path.splitext(path)[1].lower()
    if ext == ".json":
        atomic_write(path, tree.to_json(indent=1))
    elif ext == ".txt":
        atomic_write(path, tree.to_text() + "\n")
    else:
        tree.render(path)


def _report_collective(res, args) -> int:
    print(res.describe())
    print(f"probes: {res.probes} collectives, {res.checked} random inputs replayed")
    if args.json:
        print(json.dumps(res.to_dict()))
    if args.out:
        root, ext = os.path.splitext(args.out)
        if ext.lower() == ".json":
            atomic_write(args.out, json.dumps(res.to_dict(), indent=1))
            print(f"wrote {args.out}")
        else:
            for i, t in enumerate(res.trees()):
                path = f"{root}{i}{ext}"
                _write(t, path)
                print(f"wrote {path}")
    return 0


def main(argv=None) -> int:
    parser = Parser(prog="mma-emu")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    if getattr(args, "check", None):
        args.check(args, parser)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
