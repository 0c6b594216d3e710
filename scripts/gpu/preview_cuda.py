#!/usr/bin/env python
"""The preview on CUDA tensors (issue 10, item 6): the shipped TinyGPT, forward and backward,
natively, under ``emulate("MI300X")`` and after ``convert(model, "sm80")``, with the
emulated / native time ratio measured in the same run and the products the mode routed
(the CUDA attention handlers must show up: flash / efficient / cuDNN attention ops).

    python scripts/gpu/preview_cuda.py [--batch 16] [--reps 5] [--dtypes float32,bfloat16]

Prints one table and one JSON line (``PREVIEW_JSON {...}``) for the report.  Exit code 1 when
an emulated run gives non-finite values or no attention product was routed, 2 on bad use.
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time

import torch

from torch_mma_emu.preview import convert, emulate
from torch_mma_emu.preview.tiny_gpt import tiny_gpt


def step(model, tokens):
    model.zero_grad(set_to_none=True)
    logits = model(tokens)
    logits.float().logsumexp(-1).mean().backward()
    grads = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
    return logits.detach().float(), grads


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, reps):
    fn()
    _sync()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        _sync()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def rel(x, ref):
    return float((x.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-300))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # tests: cpu
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("preview_cuda: no CUDA device", file=sys.stderr)
        return 2
    dev = torch.device(args.device)
    rows, bad = [], 0
    for dname in args.dtypes.split(","):
        dt = getattr(torch, dname, None)
        if not isinstance(dt, torch.dtype):
            print(f"preview_cuda: unknown dtype {dname!r}", file=sys.stderr)
            return 2
        base = tiny_gpt(seed=0).train().to(dev, dt)
        tokens = base.example_inputs(args.batch).to(dev)
        ref_logits, ref_grads = step(base, tokens)
        t_native = timed(lambda: step(base, tokens), args.reps)

        def under_mode():
            with emulate("MI300X") as em:
                out = step(base, tokens)
            return out, em

        (lg, gr), em = under_mode()
        t_mode = timed(lambda: under_mode(), args.reps)
        attn = {k: n for k, n in em.counts.items() if "attention" in k[0]}
        conv = convert(copy.deepcopy(base), "sm80")
        lg2, gr2 = step(conv, tokens)
        t_conv = timed(lambda: step(conv, tokens), args.reps)
        for name, (l, g), t, extra in (("emulate(MI300X)", (lg, gr), t_mode, attn),
                                       ("convert(sm80)", (lg2, gr2), t_conv, {})):
            finite = bool(torch.isfinite(l).all() and torch.isfinite(g).all())
            row = dict(dtype=dname, run=name, finite=finite, logits_rel=rel(l, ref_logits),
                       grads_rel=rel(g, ref_grads), t_native=t_native, t_emulated=t,
                       ratio=t / t_native,
                       attention_ops={f"{k[0]} {k[1]} {k[2]}": n for k, n in extra.items()})
            rows.append(row)
            if not finite or (name.startswith("emulate") and not extra):
                bad += 1
    print(f"{'dtype':9} {'run':16} {'finite':6} {'logits rel':>11} {'grads rel':>10} "
          f"{'native ms':>10} {'emulated ms':>12} {'ratio':>7}  attention products routed")
    for r in rows:
        print(f"{r['dtype']:9} {r['run']:16} {str(r['finite']):6} {r['logits_rel']:11.2e} "
              f"{r['grads_rel']:10.2e} {1e3 * r['t_native']:10.2f} {1e3 * r['t_emulated']:12.2f} "
              f"{r['ratio']:6.1f}x  {r['attention_ops'] or '-'}")
    gpu = torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"
    print("PREVIEW_JSON " + json.dumps(dict(gpu=gpu, batch=args.batch,
                                            torch=torch.__version__, rows=rows)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
