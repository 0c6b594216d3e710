"""What the exp_*.py experiment scripts share: their command line and their plot file.

Imported by the scripts as ``from exp_common import ...`` (a script's own folder is on
sys.path when Python runs it)."""
import argparse
import contextlib


def parser(doc: str, size: int) -> argparse.ArgumentParser:
    """--arch, --size (M = N) and --out (the plot), with the script's docstring as its help."""
    p = argparse.ArgumentParser(description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="sm90")
    p.add_argument("--size", type=int, default=size, help="M = N")
    p.add_argument("--out", help="write the plot (png/svg/pdf)")
    return p


@contextlib.contextmanager
def figure(path: str, *grid, figsize):
    """A matplotlib figure (``plt.subplots(*grid)``) to draw on, written to ``path`` after."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(*grid, figsize=figsize)
    yield axes
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


def norm_err(D, exact) -> float:
    """The norm-wise relative error ||D - exact|| / ||exact|| (in fp64)."""
    return ((D.double() - exact).norm() / exact.norm()).item()
