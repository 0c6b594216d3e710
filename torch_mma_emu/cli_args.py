"""The pieces every ``mma-emu`` subcommand builds its parser from: one-line errors, example
epilogs, argument types.  The command line itself (``main``, the list of subcommands) is
:mod:`torch_mma_emu.cli`; each subcommand is a plugin module with ``register(subparsers)``."""
from __future__ import annotations

import argparse

from . import registry
from .codec import decimal_int
from .limits import check


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2, no usage block) and help text laid out as
    written, so each subcommand's examples keep their lines."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _get_value(self, action, arg_string):
        # an empty value is never meant: code reading `if args.x:` would take it as not given
        if arg_string == "" and action.nargs not in (argparse.REMAINDER, argparse.PARSER):
            raise argparse.ArgumentError(action, "must not be empty")
        return super()._get_value(action, arg_string)


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


def integer(text: str, minimum: int | None = None) -> int:
    """argparse type: an integer in ASCII decimal digits (``1_000``, ``0x10``, fullwidth or
    Arabic-Indic digits are refused), at least ``minimum``."""
    v = decimal_int(text)
    if v is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer (ASCII decimal digits)")
    if minimum is not None and v < minimum:
        want = "a positive integer" if minimum == 1 else f"at least {minimum}"
        raise argparse.ArgumentTypeError(f"must be {want}, got {v}")
    return v


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return integer(text, 1)


def seed(text: str) -> int:
    """argparse type: a random seed, 0 .. 2**63 - 1."""
    v = integer(text, 0)
    if v >= 1 << 63:
        raise argparse.ArgumentTypeError(f"must be below 2**63, got {v}")
    return v


def bounded(name: str, minimum: int = 1):
    """argparse type: an integer >= ``minimum`` and within the bound ``name`` of
    :data:`.limits.BOUNDS` (the message names the environment variable that raises it)."""
    def parse(text: str) -> int:
        v = integer(text, minimum)
        try:
            return check(name, v)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = name   # argparse names the type in its messages
    return parse


def one_line(e: BaseException) -> str:
    """An exception's message on one line: whitespace collapsed, a C++ backtrace (torch's
    "Exception raised from ...", "frame #N") cut off, at most 400 characters."""
    text = str(e)
    for cut in ("Exception raised from", "frame #0", "\nframe #"):
        if cut in text:
            text = text[:text.index(cut)]
    text = " ".join(text.split())
    if len(text) > 400:
        text = text[:397] + "..."
    return text or type(e).__name__


def finite_float(text: str) -> float:
    """argparse type: a finite number in ASCII (no nan, inf, or other scripts' digits)."""
    import math
    try:
        v = float(text) if text.isascii() else None
    except ValueError:
        v = None
    if v is None or not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return v


def format_list(text: str) -> str:
    """argparse type: an input format or 'fmtA,fmtB' (formats.format_pair), kept as given."""
    from .formats import format_pair
    try:
        format_pair(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).replace("in_format=", "")) from None
    return text


def arch_name(text: str) -> str:
    """argparse type: an arch name or alias, returned canonical."""
    try:
        return registry.canonical_arch(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
