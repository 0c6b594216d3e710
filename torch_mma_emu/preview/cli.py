"""``mma-emu preview``: run :func:`~torch_mma_emu.preview.model_preview.preview_model` on a
model from the shell and write a report (table on stdout, PNG and JSON).

    mma-emu preview                                              # TinyGPT, every arch
    mma-emu preview --model pkg.mod:factory --arch sm80,sm90,gfx942 --out report.png
    mma-emu preview --model mypkg.nets:make --input randn:8,3,32,32 --formats bf16,fp8

``--model module:factory`` takes any importable factory returning an ``nn.Module`` (or a
``(module, example_input)`` pair).  Inputs come from ``model.example_inputs(batch, seed)``
when the model has it, else from ``--input randn:SHAPE`` / ``randint:HIGH:SHAPE``.  Compared
layers: ``model.preview_layers()`` when defined, else ``--layers``, else the model's
top-level children.  ``--out`` ending in ``.png`` names the plot (the JSON goes next to it);
otherwise it is a folder receiving preview.png and preview.json.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import time

import torch

from ..cli_args import bounded, seed
from ..codec import decimal_int
from ..files import atomic_path, atomic_write, regular_file
from ..limits import BOUNDS, MIB, LimitError, check, limit
from ..registry import ARCHS, canonical_arch
from .model_preview import FORMATS, MODEL_DTYPE, preview_model, run_options, runs_for

__all__ = ["register", "load_model", "make_input", "render", "plot", "fmt_ratio"]


def load_model(spec: str, kwargs: dict):
    mod, _, fn = spec.partition(":")
    if not fn:
        raise ValueError(f"--model must be module:factory (e.g. "
                         f"torch_mma_emu.preview.tiny_gpt:tiny_gpt), got {spec!r}")
    try:
        factory = getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"--model {spec}: cannot import it ({e})") from None
    if not callable(factory):
        raise ValueError(f"--model {spec}: {fn} is not callable")
    with _BoundedBuild(f"--model {spec} with --model-kwargs {json.dumps(kwargs)[:80]}"):
        made = factory(**kwargs)
    if isinstance(made, tuple):
        model, example = made
        return model, (example,) if isinstance(example, torch.Tensor) else tuple(example)
    if not isinstance(made, torch.nn.Module):
        raise ValueError(f"--model {spec} returned {type(made).__name__}, not an nn.Module "
                         "(or a (module, example_input) pair)")
    return made, None


class _BoundedBuild(torch.overrides.TorchFunctionMode):
    """Counts the bytes of the new storages the model's factory makes and stops it (a
    LimitError) when they pass MMA_EMU_MAX_MODEL_MIB: a model asked to be huge is refused
    while it is built, before it takes the machine's memory."""

    def __init__(self, what: str):
        super().__init__()
        self.what, self.top = what, limit("model_mib") * MIB
        self.seen: set = set()
        self.bytes = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.device.type != "meta":
            try:
                st = out.untyped_storage()
                key = (st.data_ptr(), st.nbytes())
            except (RuntimeError, NotImplementedError):
                return out
            if key not in self.seen:
                self.seen.add(key)
                self.bytes += key[1]
                if self.bytes > self.top:
                    b = BOUNDS["model_mib"]
                    raise LimitError(f"{self.what}: its tensors pass the bound of "
                                     f"{self.top // MIB} {b.what}; set {b.env} to raise it")
        return out


def make_input(spec: str, seed: int) -> torch.Tensor:
    kind, _, rest = spec.partition(":")
    g = torch.Generator().manual_seed(seed)
    try:
        if kind == "randn":
            return torch.randn(*_positive(rest.split(",")), generator=g)
        if kind == "randint":
            high, _, shape = rest.partition(":")
            return torch.randint(0, _positive([high])[0], tuple(_positive(shape.split(","))),
                                 generator=g)
    except LimitError:
        raise
    except ValueError:
        pass
    raise ValueError(f"--input must be randn:SHAPE or randint:HIGH:SHAPE with positive "
                     f"integers (randn:2,3,32,32, randint:256:4,32), got {spec!r}")


def _positive(items) -> list:
    vals = [decimal_int(s.strip()) for s in items]
    if not vals or any(v is None or v <= 0 for v in vals):
        raise ValueError("not positive")
    check("elements", math.prod(vals), "--input: elements")
    return vals


def fmt_num(x: float) -> str:
    if x != x:
        return "nan"
    if x == 0:
        return "0"
    return f"{x:.2e}" if (abs(x) < 1e-2 or abs(x) >= 1e4) else f"{x:.3f}"


def fmt_ratio(x: float) -> str:
    """A time ratio with the digits it needs: "412x", "14.2x", "0.25x", "<0.01x" (never
    "0x"); "-" where unknown."""
    if x != x or x in (float("inf"), float("-inf")):
        return "-"
    if x < 0.01:
        return "<0.01x"
    return f"{x:.0f}x" if x >= 100 else f"{x:.3g}x"


def fmt_ms(seconds: float) -> str:
    """Milliseconds: "459.9", "0.41" (a fast native pass is not printed as "0.0")."""
    ms = seconds * 1e3
    return f"{ms:.1f}" if ms >= 1 or ms != ms else f"{ms:.2g}"


def table(rows, header):
    w = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).rjust(w[i]) if i else str(c).ljust(w[i])  # noqa: E731
                               for i, c in enumerate(r))
    return "\n".join([line(header), line(["-" * n for n in w])] + [line(r) for r in rows])


def render(res, layers) -> str:
    """The text report: logits and layers against fp64, archs against each other, times."""
    # native time of a dtype: the best of all its timings (one next to each emulated run;
    # fp8 previews run the bf16 model), so that a burst of other work on a shared machine
    # does not skew the ratios
    best = {f: min(r.native_seconds for r in res.runs if MODEL_DTYPE[r.fmt] == MODEL_DTYPE[f])
            for f in res.between}
    out = []
    out.append("== logits against the fp64 run, and forward time emulated / native ==")
    rows = []
    for r in res.runs:
        d = r.vs_fp64["output"]
        sec = best[r.fmt] if r.arch == "native" else r.seconds
        rows.append([r.fmt, r.label, fmt_num(d["max_abs"]), fmt_num(d["max_ulp"]),
                     fmt_num(d["median_ulp"]), f"{100 * r.top1_vs_fp64:.1f}%",
                     fmt_ms(sec), fmt_ratio(sec / best[r.fmt])])
    out.append(table(rows, ["format", "arch", "max abs", "max ulp", "median ulp",
                            "top-1 = fp64", "fwd ms", "emulated/native"]))
    out.append("\n== per layer against the fp64 run: max |error| / median error in ulps ==")
    rows = [[r.fmt, r.label] + [f"{fmt_num(r.vs_fp64[k]['max_abs'])} / "
                                f"{r.vs_fp64[k]['median_ulp']:.2f}" for k in layers]
            for r in res.runs]
    out.append(table(rows, ["format", "arch"] + layers))
    out.append("\n== logits between archs of one format: max distance in ulps "
               "('=' bit-identical), top-1 disagreements ==")
    for fmt, pairs in res.between.items():
        names = [r.arch for r in res.runs if r.fmt == fmt and r.arch != "native"]
        if len(names) < 2:
            continue
        cell = {}
        for (a, b), p in pairs.items():
            cell[a, b] = cell[b, a] = "=" if p["identical"] == 1 else str(p["max_ulp"])
        rows = [[a] + ["" if a == b else cell[a, b] for b in names] for a in names]
        out.append(f"-- {fmt} --")
        out.append(table(rows, [""] + names))
        dis = [f"{a}/{b} {100 * (1 - p['top1']):.1f}%" for (a, b), p in pairs.items()
               if p["top1"] < 1]
        out.append("top-1 disagreements: " + (", ".join(dis) if dis else "none"))
    out.append("\n== forward-pass time, emulated / native, measured in this run ==")
    rows = []
    fp32_native = best.get("fp32", float("nan"))
    for fmt in res.between:
        em = sorted(r.seconds for r in res.runs if r.fmt == fmt and r.arch != "native")
        if not em:
            continue
        nat = best[fmt]
        med = em[len(em) // 2]
        rows.append([fmt, fmt_ms(nat), fmt_ms(med), fmt_ratio(med / nat),
                     fmt_ratio(med / fp32_native)])
    out.append(table(rows, ["format", "native ms (same dtype)", "emulated ms (median arch)",
                            "ratio", "ratio vs native fp32"]))
    em = [r for r in res.runs if r.arch != "native"]
    te, tn = sum(r.seconds for r in em), sum(best[r.fmt] for r in em)
    out.append(f"all {len(em)} emulated forward passes: {te:.2f} s; native forward passes of "
               f"the same dtypes: {tn:.3f} s; ratio {fmt_ratio(te / tn)} (best of --repeat "
               "each, after an untimed run of each)")
    fast = sorted({f"{r.fmt} {r.arch}" for r in em if r.seconds < best[r.fmt]})
    if fast:
        out.append(f"note: emulated ran faster than native ({', '.join(fast)}): other work on "
                   "this machine slowed the native passes (PyTorch's threads stall on OpenMP "
                   "barriers when other jobs share the cores); --threads 1 and a larger "
                   "--repeat measure them")
    return "\n".join(out)


def plot(res, layers, path, title) -> None:
    """Per-layer error against fp64 per format (top) and how often archs differ (bottom)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fmts = [f for f in res.between if any(r.fmt == f for r in res.runs)]
    if "tf32" in fmts and "xf32" in fmts:  # one column for the reduced fp32 formats
        fmts.remove("xf32")
    col = {f: ("tf32" if f == "xf32" and "tf32" in fmts else f) for f in res.between}
    fig, axes = plt.subplots(2, len(fmts), figsize=(4.2 * len(fmts), 8.2), squeeze=False)
    archs = list(ARCHS)
    cmap = plt.get_cmap("tab20")
    for j, fmt in enumerate(fmts):
        ax = axes[0][j]
        for r in (r for r in res.runs if col[r.fmt] == fmt):
            ys = [max(r.vs_fp64[k]["rel_l2"], 1e-30) for k in layers]
            style = dict(color="k", ls="--", lw=2) if r.arch == "native" else dict(
                color=cmap(archs.index(r.arch) % 20), marker="o", ms=3)
            ax.plot(range(len(layers)), ys, label=r.label + (f" {r.fmt}" if r.fmt != fmt else ""),
                    **style)
        ax.set_yscale("log")
        ax.set_xticks(range(len(layers)))
        ax.set_xticklabels(layers, rotation=45, ha="right", fontsize=7)
        ax.set_title(f"{fmt}{' / xf32' if fmt == 'tf32' and 'xf32' in col else ''}: "
                     "relative L2 error vs fp64")
        ax.legend(fontsize=6)
        ax = axes[1][j]
        names = [r.arch for r in res.runs if r.fmt == fmt and r.arch != "native"]
        n = len(names)
        mat = np.zeros((n, n))
        for (a, b), p in res.between[fmt].items():
            i, k = names.index(a), names.index(b)
            mat[i, k] = mat[k, i] = 100 * (1 - p["identical"])
        im = ax.imshow(mat, cmap="Reds", vmin=0, vmax=100)
        ax.set_xticks(range(n))
        ax.set_xticklabels(names, rotation=90, fontsize=7)
        ax.set_yticks(range(n))
        ax.set_yticklabels(names, fontsize=7)
        for (a, b), p in res.between[fmt].items():
            i, k = names.index(a), names.index(b)
            txt = "=" if p["identical"] == 1 else f"{p['max_ulp']}"
            if p["top1"] < 1:
                txt += f"\n{100 * (1 - p['top1']):.0f}%!"
            for (u, v) in ((i, k), (k, i)):
                ax.text(v, u, txt, ha="center", va="center", fontsize=5)
        ax.set_title(f"{fmt}: % of logits that differ between archs\n(numbers: max ulp "
                     "distance; n%!: top-1 disagreement)", fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="torch_mma_emu.preview.tiny_gpt:tiny_gpt",
                   help="module:factory returning an nn.Module (default: the built-in TinyGPT)")
    p.add_argument("--model-kwargs", default="{}", help="JSON kwargs for the factory")
    p.add_argument("--input", help="randn:SHAPE or randint:HIGH:SHAPE (models without "
                   "example_inputs)")
    p.add_argument("--layers", help="comma-separated module names to compare")
    p.add_argument("--arch", "--archs", dest="archs", default="all",
                   help="comma-separated archs / aliases (sm80,H100,MI300X) or 'all'")
    p.add_argument("--formats", default=None,
                   help=f"comma-separated, from {','.join(FORMATS)} (default: every format "
                        "one of the archs has)")
    p.add_argument("--batch", type=bounded("preview_batch"), default=4,
                   help="examples per forward pass (at most MMA_EMU_MAX_PREVIEW_BATCH)")
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument("--repeat", type=bounded("preview_repeat"), default=1,
                   help="timed forward passes per run (the best is kept)")
    p.add_argument("--threads", type=bounded("threads"),
                   help="torch.set_num_threads for the whole run")
    p.add_argument("--out", default="out/preview",
                   help="report.png (JSON next to it) or a folder (preview.png, preview.json)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def register(subparsers) -> None:
    """Add ``preview`` to the ``mma-emu`` sub-commands."""
    from ..cli_args import examples
    p = subparsers.add_parser(
        "preview", help="a model's numerics on emulated GPUs: per-layer report and plot",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=examples("mma-emu preview",
                        "mma-emu preview --model pkg.mod:factory --arch sm80,sm90,gfx942 "
                        "--out report.png",
                        "mma-emu preview --model mypkg.nets:make --input randn:8,3,32,32 "
                        "--formats bf16,fp8"))
    _add_arguments(p)
    p.set_defaults(func=run)


REPORT_FORMAT = "torch_mma_emu.preview"     # the JSON's "format": what --out may replace


def _out_paths(out: str) -> tuple[str, str]:
    if out.lower().endswith(".png"):
        return out, out[:-4] + ".json"
    return os.path.join(out, "preview.png"), os.path.join(out, "preview.json")


def _check_args(args) -> tuple[list, list]:
    for name in ("batch", "repeat"):
        if getattr(args, name) <= 0:
            raise ValueError(f"--{name} must be a positive integer, got {getattr(args, name)}")
    if args.threads is not None and args.threads <= 0:
        raise ValueError(f"--threads must be a positive integer, got {args.threads}")
    archs = list(ARCHS) if args.archs == "all" else [a for a in args.archs.split(",") if a]
    if not archs:
        raise ValueError("--arch: give at least one arch (or 'all')")
    archs = [canonical_arch(a) for a in archs]          # ValueError names the known archs
    if args.formats is None:
        formats = [f for f in FORMATS if any(run_options(f, a) is not None for a in archs)]
    else:
        formats = [f for f in args.formats.split(",") if f]
        bad = [f for f in formats if f not in FORMATS]
        if bad or not formats:
            raise ValueError(f"--formats: unknown {', '.join(bad) or '(none given)'}; "
                             f"allowed: {', '.join(FORMATS)}")
    runs_for(archs, formats)                               # a format no arch has: ValueError
    try:
        kwargs = json.loads(args.model_kwargs)
    except json.JSONDecodeError as e:
        raise ValueError(f"--model-kwargs is not JSON: {e}") from None
    if not isinstance(kwargs, dict):
        raise ValueError("--model-kwargs must be a JSON object, e.g. '{\"width\": 4}'")
    args.model_kwargs_obj = kwargs
    png, js = _out_paths(args.out)
    folder = os.path.dirname(png) or "."
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise ValueError(f"--out: {folder} is not a folder")
    for path in (png, js):
        regular_file(path, "--out: the output", may_be_missing=True)
    if os.path.exists(js) and not _is_report(js):      # the user named the .png, not this
        raise ValueError(f"--out {args.out} writes its numbers to {js}, which exists and is "
                         "not a preview report: move it, or choose another --out")
    return archs, formats


def _is_report(path: str) -> bool:
    """Whether ``path`` holds a report this command wrote (replacing it is expected)."""
    try:
        if os.path.getsize(path) > 64 * 1024 * 1024:
            return False
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(d, dict) and (d.get("format") == REPORT_FORMAT or
                                    {"model", "layers", "runs"} <= set(d))


def run(args) -> int:
    archs, formats = _check_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, example = load_model(args.model, args.model_kwargs_obj)
    if args.input:
        inputs = (make_input(args.input, args.seed),)
    elif example is not None:
        inputs = example
    elif hasattr(model, "example_inputs"):
        inputs = model.example_inputs(args.batch, args.seed)
        inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    else:
        raise ValueError(f"--model {args.model}: the model has no example_inputs(batch, seed); "
                         "pass --input")
    layers = args.layers.split(",") if args.layers else None
    bar = None
    if not args.no_progress:
        from tqdm import tqdm
        total = sum(r.arch != "native" for r in runs_for(archs, formats))
        bar = tqdm(total=total, desc="preview", unit="run", file=sys.stderr, leave=False,
                   disable=not sys.stderr.isatty())

    def progress(label):
        if bar is not None:
            bar.set_postfix_str(label.strip())
            bar.update(1)
    t0 = time.perf_counter()
    try:
        res = preview_model(model, inputs, layers, archs, formats, repeat=args.repeat,
                            progress=progress)
    finally:
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - t0
    names = res.layers
    print(f"model {args.model} ({sum(p.numel() for p in model.parameters())} parameters), "
          f"input {[tuple(t.shape) for t in inputs]}")
    print(render(res, names))
    png, js = _out_paths(args.out)
    os.makedirs(os.path.dirname(png) or ".", exist_ok=True)
    dump = dict(format=REPORT_FORMAT, model=args.model, layers=names, wall_seconds=wall, runs=[
        dict(format=r.fmt, arch=r.arch, options={k: str(v) for k, v in r.options.items()},
             vs_fp64=r.vs_fp64, top1_vs_fp64=r.top1_vs_fp64, seconds=r.seconds,
             native_seconds=r.native_seconds,
             counts={" | ".join(k): v for k, v in r.counts.items()}) for r in res.runs],
        between={f: {f"{a} vs {b}": p for (a, b), p in pairs.items()}
                 for f, pairs in res.between.items()})
    atomic_write(js, json.dumps(dump, indent=1, default=lambda x: None if x != x else x))
    if not args.no_plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("\nno plot: matplotlib is not installed (pip install matplotlib); the table "
                  "above and the JSON hold the same numbers")
        else:
            plot(res, names, png, f"{args.model}: emulated GPUs against fp64")
            print(f"\nwrote {png}")
    print(f"wrote {js}  (total {wall:.1f} s)")
    return 0
