"""``mma-emu archs``: the supported arch x format models and the GPUs of each arch."""
from __future__ import annotations

from . import registry
from .cli_args import add_command, arch_name
from .text_table import format_table


def register(subparsers) -> None:
    """Add ``archs`` to an ``argparse`` sub-parser collection."""
    a = add_command(subparsers, "archs", func=cmd_archs,
                    help="list supported architectures, formats and models",
                    description="The supported arch x format models and the GPUs of each "
                                "arch.",
                    examples_=("mma-emu archs", "mma-emu archs --arch H100"))
    a.add_argument("--arch", type=arch_name, help="only this arch (name or alias)")


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
