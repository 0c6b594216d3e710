"""CUDA reductions recorded for offline work (GPU step ``reductions``; issue 29, command 2).

    python scripts/gpu/reductions.py --out $OUT/reductions.npz
    python scripts/gpu/reductions.py --device cpu --out /tmp/r.npz     # no GPU: a self-test

``torch.sum``, ``torch.softmax`` and ``F.layer_norm`` (no affine) over the last dimension of
seeded inputs, on the device, in fp32, fp16 and bf16, at row lengths that are a power of two,
odd, and longer than one block.  Each op's output is kept with its input, so a reduction tree
(FPRev's, or the Triton emulation's) can be checked against them later without a GPU: the
trees of ``torch.sum`` come from ``mma-emu reveal sum`` (step ``fprev``); softmax's and
layer norm's sums are not plain sums of chosen values (exp, Welford), so their order is
fitted to these outputs instead.  Input families: ``normal`` (N(0,1)) and ``spread``
(N(0,1) times 2^U(-20, 20), half of the entries mirrored with the opposite sign, so that the
order of the additions shows in the result).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from .. import files
from .common import bits

LENGTHS = (1024, 4099, 16384)
ROWS = 2
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
OPS = {"sum": lambda x: torch.sum(x, -1),
       "softmax": lambda x: torch.softmax(x, -1),
       "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:])}


def inputs(n: int, family: str, dtype: torch.dtype, seed: int = 29) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1000003 + n * 7 + (family == "spread"))
    x = torch.randn(ROWS, n, generator=g, dtype=torch.float64)
    if family == "spread":
        x = x * torch.exp2(torch.randint(-20, 21, x.shape, generator=g).double())
        h = n // 2
        perm = torch.randperm(n, generator=g)
        x[:, perm[h:2 * h]] = -x[:, perm[:h]]
        x = x * (1 + 2.0 ** -12 * torch.randn(x.shape, generator=g, dtype=torch.float64))
    if dtype != torch.float32:      # keep fp16 in range
        x = x.clamp(-6e4, 6e4)
    return x.to(dtype)


def record(device: str, log=print) -> dict:
    arrays = {}
    for dname, dt in DTYPES.items():
        for fam in ("normal", "spread"):
            for n in LENGTHS:
                x = inputs(n, fam, dt)
                key = f"{dname}_{fam}_n{n}"
                arrays[f"in_{key}"] = bits(x).numpy()
                for op, fn in OPS.items():
                    try:
                        y = fn(x.to(device))
                        if device != "cpu":
                            torch.cuda.synchronize()
                        arrays[f"{op}_{key}"] = bits(y).numpy()
                    except Exception as e:  # noqa: BLE001   (record what runs)
                        log(f"[reductions] {op} {key}: {type(e).__name__}: {e}")
    return arrays


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="reductions.npz")
    p.add_argument("--device", default="cuda", help="'cpu': a self-test without a GPU")
    args = p.parse_args(argv)
    if args.device != "cpu" and not torch.cuda.is_available():
        print("reductions: no CUDA device (--device cpu for a self-test)", file=sys.stderr)
        return 2
    t0 = time.time()
    arrays = record(args.device)
    arrays["device"] = np.array(torch.cuda.get_device_name() if args.device != "cpu" else "cpu")
    arrays["torch"] = np.array(torch.__version__)
    with files.atomic_path(args.out) as tmp, open(tmp, "wb") as f:
        np.savez_compressed(f, **arrays)       # all or nothing
    print(f"[reductions] {len(arrays) - 2} arrays into {args.out} in {time.time() - t0:.1f} s",
          flush=True)
    return 0
