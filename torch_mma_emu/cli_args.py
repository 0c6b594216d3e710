"""The pieces every ``mma-emu`` subcommand builds its parser from: one-line errors, example
epilogs, argument types.  The command line itself (``main``, the list of subcommands) is
:mod:`torch_mma_emu.cli`; each subcommand is a plugin module with ``register(subparsers)``."""
from __future__ import annotations

import argparse

from . import registry


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


def add_command(subparsers, name: str, *, help: str, description: str, examples_: tuple,
                func, check=None) -> argparse.ArgumentParser:
    """A subcommand's parser: ``help`` in the command list, ``description`` and the example
    command lines in its ``--help``; ``func(args)`` runs it, ``check(args, parser)`` (checks
    across arguments) runs before any work."""
    p = subparsers.add_parser(name, help=help, description=description,
                              epilog=examples(*examples_))
    p.set_defaults(func=func, **({"check": check} if check else {}))
    return p


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
