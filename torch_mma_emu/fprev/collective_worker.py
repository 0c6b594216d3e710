"""One rank of :func:`torch_mma_emu.fprev.reveal_collective`, started as
``python -m torch_mma_emu.fprev.collective_worker CONFIG.json RANK``: a module of the package,
so starting it never re-imports the caller's ``__main__`` (scripts without a main guard and
notebooks work)."""
import json
import os
import sys

from .collectives import ready_file, run_worker


def main(argv: list[str]) -> None:
    config_path, rank = argv
    with open(config_path) as f:
        config = json.load(f)
    # torch is imported: the parent may start the next rank (its bounded pool)
    with open(ready_file(os.path.dirname(config_path), int(rank)), "w"):
        pass
    run_worker(int(rank), *config)


if __name__ == "__main__":
    main(sys.argv[1:])
