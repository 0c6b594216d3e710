#!/usr/bin/env python
"""Training preview: an fp16 MLP trained under emulated sm80 (A100) and gfx90a (MI250X),
whose fp16 matrix instructions flush subnormal inputs (seed 003 section 2.2).

    python scripts/train_preview.py                 # ~1-2 minutes on 2 CPU cores
    python scripts/train_preview.py --steps 100 --out out/train

Runs: sm80; gfx90a; gfx90a with loss scaling x1024; gfx90a with the bf16 alternate
implementation in the backward pass (what rocBLAS / MIOpen do on MI200 when PyTorch asks).
Writes train_preview.png and train_preview.json under --out (default out/preview/).
"""
import argparse
import dataclasses
import json
import os
import sys

from torch_mma_emu.preview.fp16_training import TaskConfig, train

RUNS = [("sm80 (A100)", "sm80", 1.0, "off"),
        ("gfx90a (MI250X)", "gfx90a", 1.0, "off"),
        ("gfx90a + loss scale 1024", "gfx90a", 1024.0, "off"),
        ("gfx90a + bf16 alt impl (backward)", "gfx90a", 1.0, "backward")]


def plot(results, path, c):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    lo = min(min(r.losses) for r in results) * 0.8
    hi = max(max(r.losses) for r in results) * 1.2
    for ax, keep in ((axes[0], lambda r: r.label.startswith("sm80")),
                     (axes[1], lambda r: r.label.startswith("gfx90a"))):
        for r in results:
            if keep(r):
                style = ("--" if "loss scale" in r.label else ":" if "alt impl" in r.label
                         else "-")
                ax.plot(r.losses, style, label=r.label, lw=2.2 if style == ":" else 1.6)
        if ax is axes[1]:
            ax.plot(results[0].losses, color="grey", lw=0.8, alpha=0.6, label=results[0].label)
        ax.set_yscale("log")
        ax.set_ylim(lo, hi)
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (MSE)")
        ax.legend(fontsize=8)
    axes[0].set_title("emulated sm80: fp16 subnormals kept")
    axes[1].set_title("emulated gfx90a: fp16 subnormals flushed")
    ax = axes[2]
    n = len(results[0].zero_grad)
    xs = list(range(n))
    w = 0.27
    sm80, gfx = results[0], results[1]
    ax.bar([x - w for x in xs], sm80.subnormal_grad, w, label="dY subnormal (sm80 run)")
    ax.bar(xs, sm80.zero_grad, w, label="dW == 0 (sm80)")
    ax.bar([x + w for x in xs], gfx.zero_grad, w, label="dW == 0 (gfx90a)")
    ax.set_xticks(xs)
    ax.set_xticklabels([f"L{i + 1}" for i in xs])
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("Linear layer (input side first)")
    ax.set_ylabel("fraction of entries (last step)")
    ax.set_title("why: gradients reaching early layers are subnormal")
    ax.legend(fontsize=8)
    fig.suptitle(f"fp16 MLP ({c.depth}x{c.hidden} tanh, gain {c.gain}), full-batch SGD on "
                 f"{c.n} rows, no loss scaling unless noted")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=TaskConfig.steps)
    ap.add_argument("--lr", type=float, default=TaskConfig.lr)
    ap.add_argument("--depth", type=int, default=TaskConfig.depth)
    ap.add_argument("--gain", type=float, default=TaskConfig.gain)
    ap.add_argument("--seed", type=int, default=TaskConfig.seed)
    ap.add_argument("--out", default="out/preview")
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    c = TaskConfig(steps=args.steps, lr=args.lr, depth=args.depth, gain=args.gain,
                   seed=args.seed)
    results = []
    for label, arch, scale, alt in RUNS:
        print(f"  training {label} ...", file=sys.stderr)
        results.append(train(c, arch, loss_scale=scale, fp16_alt_impl=alt, label=label))
    marks = sorted({0, c.steps // 10, c.steps // 4, c.steps // 2, c.steps - 1})
    w = max(len(r.label) for r in results)
    print(f"training loss at steps {marks} (fp16 MLP, {c.depth} hidden layers of {c.hidden}):")
    for r in results:
        print(f"  {r.label:<{w}}  " + "  ".join(f"{r.losses[i]:.3e}" for i in marks)
              + f"   ({r.seconds:.1f} s)")
    print("\nlast step, per Linear layer (input side first):")
    for r in results:
        print(f"  {r.label:<{w}}  dW==0: " + " ".join(f"{z:4.2f}" for z in r.zero_grad)
              + "   dY subnormal: " + " ".join(f"{s:4.2f}" for s in r.subnormal_grad))
    ratio = results[1].losses[-1] / results[0].losses[-1]
    print(f"\nfinal loss gfx90a / sm80: {ratio:.2f}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "train_preview.json"), "w") as fh:
        json.dump(dict(config=dataclasses.asdict(c),
                       runs=[dataclasses.asdict(r) for r in results]), fh, indent=1)
    if not args.no_plot:
        png = os.path.join(args.out, "train_preview.png")
        plot(results, png, c)
        print(f"wrote {png}")


if __name__ == "__main__":
    main()
