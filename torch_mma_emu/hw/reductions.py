"""CUDA reductions recorded for offline work (GPU step ``reductions``; issue 29, command 2).

    python scripts/gpu/reductions.py --out $OUT/reductions.npz
    python scripts/gpu/reductions.py --device cpu --out /tmp/r.npz     # no GPU: a self-test
    python scripts/gpu/reductions.py --compare $OUT/reductions.npz       # CPU: models vs record

``torch.sum``, ``torch.softmax`` and ``F.layer_norm`` (no affine) over the last dimension of
seeded inputs, on the device, in fp32, fp16 and bf16, at row lengths that are a power of two,
odd, and longer than one block.  Each op's output is kept with its input, so a reduction tree
(FPRev's, or the Triton emulation's) can be checked against them later without a GPU: the
trees of ``torch.sum`` come from ``mma-emu reveal sum`` (step ``fprev``); softmax's and
layer norm's sums are not plain sums of chosen values (exp, Welford), so their order is
fitted to these outputs instead.  Input families: ``normal`` (N(0,1)) and ``spread``
(N(0,1) times 2^U(-20, 20), half of the entries mirrored with the opposite sign, so that the
order of the additions shows in the result).  Issue 39's cases (hw/aten_checks.py: softmax
paths and backward, affine layer_norm, rms_norm, var / std, the elementwise sweeps and their
backward) are recorded too, and ``--compare`` runs the models of torch_mma_emu.aten_cuda
against all of them.
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


# issue 39: what confirms the models of torch's CUDA sum / mean (torch_mma_emu.aten_cuda):
# all-element sums from 2^20 to 2^24 (single and multi-CTA grids, which depend on the SM
# count), their means, and views starting 1-3 elements past an aligned address
SUM_ALL = (1 << 20, 1 << 22, 1 << 24)
OFFSETS = (1, 2, 3)
OFFSET_N = 4099


def _spread(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g)
    return x * torch.exp2(torch.randint(-20, 21, (n,), generator=g).float())


def _model_arrays(device: str) -> dict:
    """The issue-39 arrays: ``allsum_n*``, ``allmean_n*``, ``offsum_k*`` with inputs."""
    out = {}
    for n in SUM_ALL:
        x = _spread(n, n)       # regenerated on the CPU by compare(): only a prefix kept
        out[f"head_all_n{n}"] = bits(x[:64]).numpy()
        xd = x.to(device)
        out[f"allsum_n{n}"] = bits(xd.sum().cpu()).numpy()
        out[f"allmean_n{n}"] = bits(xd.mean().cpu()).numpy()
    for k in OFFSETS:
        x = _spread(OFFSET_N + 8, 100 + k)
        out[f"in_off_k{k}"] = bits(x).numpy()
        out[f"offsum_k{k}"] = bits(x.to(device)[k:k + OFFSET_N].sum().cpu()).numpy()
    return out


def _props(device: str) -> dict:
    if device == "cpu":
        return {}
    p = torch.cuda.get_device_properties(torch.device(device))
    return {"sms": np.array(p.multi_processor_count),
            "max_threads_per_sm": np.array(p.max_threads_per_multi_processor)}


def compare(path: str, gpu=None) -> list[tuple[str, int, int]]:
    """The CPU stand-in: each recorded CUDA sum / mean against torch_mma_emu.aten_cuda's
    model on the recorded device's SM count (or ``gpu``), each recorded softmax (every
    dtype and row length: persistent and block kernels) against aten_cuda.host_softmax,
    and issue 39's cases (hw/aten_checks.py: softmax paths and backward, affine layer_norm,
    rms_norm, var / std, the elementwise sweeps and their backward):
    ``[(key, differing, total)]``."""
    from ..aten_cuda import reduce
    from ..registry import Gpu, gpu as find_gpu
    z = np.load(path)
    if gpu is None:
        if "sms" not in z:
            raise ValueError(f"{path}: no device properties recorded (a --device cpu "
                             "self-test); name the GPU to compare against")
        gpu = Gpu(str(z["device"]), "", int(z["sms"]), int(z["max_threads_per_sm"]))
    else:
        gpu = find_gpu(gpu)
    f32 = lambda a: torch.from_numpy(a.astype(np.int32)).view(torch.float32)  # noqa: E731
    rows = []
    for key in sorted(z.files):
        if key.startswith(("allsum_", "allmean_")):
            suffix = key.split("_", 1)[1]
            x = _spread(int(suffix[1:]), int(suffix[1:]))
            if not np.array_equal(bits(x[:64]).numpy(), z["head_all_" + suffix]):
                raise ValueError(f"{path}: the {suffix} input does not regenerate here "
                                 "(another torch's generator?)")
            y = reduce(x, op="sum" if key.startswith("allsum") else "mean", gpu=gpu)
        elif key.startswith("offsum_"):
            k = int(key.split("_k")[1])
            y = reduce(f32(z[f"in_off_k{k}"])[k:k + OFFSET_N], gpu=gpu)
        elif key.startswith("sum_fp32_"):
            y = reduce(f32(z["in_" + key[4:]]), -1, gpu=gpu)
        elif key.startswith("softmax_") and _softmax_model():
            from ..aten_cuda import host_softmax
            dt = DTYPES[key.split("_")[1]]
            ints = np.ascontiguousarray(z["in_" + key[8:]])        # the input's bits
            y, _ = host_softmax.softmax(torch.from_numpy(ints).view(dt), -1)
        else:
            continue
        want = z[key].astype(np.int32).reshape(-1)
        got = bits(y).numpy().astype(np.int32).reshape(-1)
        rows.append((key, int((want != got).sum()), int(want.size)))
    if _softmax_model():            # issue 39's cases (hw/aten_checks.py) need the math models
        from . import aten_checks
        rows += aten_checks.compare(z, gpu)
    return rows


def _softmax_model() -> bool:
    """Whether the softmax models can run here (the CUDA expf / logf models present):
    every recorded row length, the persistent warp kernel and the block kernels
    (aten_cuda/host_softmax.py)."""
    from ..aten_cuda import softmax as sm
    return sm.device_math() is not None


def record(device: str, log=print) -> dict:
    from . import aten_checks
    arrays = _model_arrays(device)
    arrays.update(_props(device))
    arrays.update(aten_checks.record(device, log))
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
    p.add_argument("--compare", metavar="NPZ", help="no recording: compare NPZ (a GPU's "
                   "record) with the models of torch's CUDA sum / mean, on the CPU")
    p.add_argument("--gpu", help="with --compare: the GPU row (registry.GPUS) to model "
                   "instead of the recorded SM count")
    args = p.parse_args(argv)
    if args.compare:
        try:
            rows = compare(args.compare, args.gpu)
        except (OSError, ValueError, KeyError) as e:
            print(f"reductions: {e}", file=sys.stderr)
            return 2
        for key, bad, total in rows:
            print(f"{key:<32} {bad:>6} of {total} differ")
        return 0 if all(b == 0 for _, b, _ in rows) else 1
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
