"""Command line: ``mma-emu`` / ``python -m torch_mma_emu``.

    mma-emu archs                     the supported arch x format matrix and models
    mma-emu compare                   seed 003 eq. 10 on every arch and format (Table 8)
    mma-emu compare --random          random GEMM: max / mean error in ulps against fp64
    mma-emu reveal ...                accumulation order (torch_mma_emu.fprev)
    mma-emu probe ... / fit ...       feature probing and model fitting (torch_mma_emu.probe)
    mma-emu preview ...               a model on emulated GPUs (torch_mma_emu.preview)

Every subcommand is a plugin module (listed in ``PLUGINS``) with a ``register(subparsers)``
function: it adds its parsers (:func:`.cli_args.add_command`) with ``func=run`` and optionally
``check=fn(args, parser)`` for checks across arguments, run before any work.  A bad value
exits with code 2 and one line naming what is allowed (``cli_args.Parser.error``; an
exception from a command too, its message on one line, never a traceback or a C++ frame);
a closed stdout pipe ends quietly.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from .cli_args import Parser, examples, one_line

# The subcommands, in the order ``mma-emu --help`` lists them: each module has
# register(subparsers), which adds its parsers and sets ``func`` (called with the parsed args,
# returns the exit code).  Add a module here to add a subcommand.
PLUGINS = ["torch_mma_emu.archs_cli", "torch_mma_emu.compare_cli", "torch_mma_emu.fprev.cli",
           "torch_mma_emu.probe.cli", "torch_mma_emu.preview.cli"]


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="mma-emu", description=(
        "Bit-accurate emulation of GPU matrix units (NVIDIA Tensor Cores, AMD Matrix Cores)."),
        epilog=examples("mma-emu archs", "mma-emu compare", "mma-emu compare --random --size 512",
                        "mma-emu reveal sum --n 64", "mma-emu probe --arch sm90 --format fp16",
                        "mma-emu <command> --help"))
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for mod in PLUGINS:
        importlib.import_module(mod).register(sub)
    return p


def _subparser(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The parser of the subcommand that was given (for its one-line errors)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(getattr(args, action.dest, None), parser)
    return parser


def main(argv=None) -> int:
    if sys.stdout is None:              # `mma-emu archs >&-`: Python has no stdout at all
        if sys.stderr is not None:
            print("mma-emu: error: standard output is closed (>&-); give the command "
                  "somewhere to write (> /dev/null discards it)", file=sys.stderr)
        return 2
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if getattr(args, "check", None):
            args.check(args, _subparser(parser, args))
        rc = int(args.func(args) or 0)
        sys.stdout.flush()              # a closed pipe shows here, not at interpreter exit
        return rc
    except BrokenPipeError:
        return _closed_pipe()
    except (ValueError, TypeError, OSError, LookupError, RuntimeError, MemoryError) as e:
        print(f"mma-emu: error: {one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mma-emu: interrupted", file=sys.stderr)
        return 130
    except SystemExit as e:             # argparse: --help (0) or a one-line usage error (2)
        return e.code if isinstance(e.code, int) else 2
    except Exception as e:              # a bug: still one line, no traceback (issue 32)
        print(f"mma-emu: internal error: {type(e).__name__}: {one_line(e)} (please report "
              "it with the command line)", file=sys.stderr)
        return 2


def _closed_pipe() -> int:
    """`mma-emu archs | head`: the reader is gone, stop quietly."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())   # no second error when Python flushes at exit
    return 0


if __name__ == "__main__":
    sys.exit(main())
