"""What a GPU lease records to confirm the models of PyTorch's CUDA kernels
(torch_mma_emu/aten_cuda; issue 39), and the CPU stand-in that compares a record with them.
Part of the GPU step ``reductions`` (scripts/gpu/reductions.py, hw/reductions.py).

Each case is an op on inputs made here on the CPU from fixed seeds (their bits are stored
with the result, so nothing depends on the GPU's generator): ``(key, inputs, op on the
device, model)``:

* softmax / log_softmax forward at each ``host_softmax`` path's sizes (persistent 1000,
  ``Reg`` 4099, ``Smem`` 10000 fp32 / 20000 16-bit, ``cunn_SoftMaxForward`` 20001, the
  spatial kernel on dim 1 of 4 x 100 x 3), and their backward (persistent 1000, block 4099);
* affine ``layer_norm`` (vectorised 1024, unvectorised 1030), its input gradient (from the
  device's own statistics) and ``rms_norm`` with a weight;
* ``var`` of rows of 4099, ``std_mean`` of 2^20 elements (multi-CTA), ``var(correction=0)``
  over dim 0 of 300 x 8 (outputs along lanes);
* ``embedding_dense_backward``: the feature kernel (2000 indices into 50 rows, padding_idx
  3), the sort + segment kernels (5000 into 30) and ``scale_grad_by_freq`` (600 into 20);
* the elementwise sweeps: exp, log, tanh, erf, rsqrt, sigmoid, silu, gelu, gelu(tanh) on every
  float16 and bfloat16 pattern and 65,536 float32 inputs (special values, random bits, a grid
  over [-20, 20]); their backward kernels on every 16-bit pattern with fixed gradients;

all in fp32, fp16 and bf16.  :func:`record` runs them on a device, :func:`compare` runs the
models on the CPU (the GPU row from the recorded SM count), :func:`model_record` builds the
record the models predict (the stand-in's self-test: compare it, then flip a bit).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .common import bits

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
ELEMENTWISE = ("exp", "log", "tanh", "erf", "rsqrt", "sigmoid", "silu", "gelu", "gelu_tanh")
BACKWARD = ("sigmoid_backward", "tanh_backward", "silu_backward", "gelu_backward",
            "gelu_tanh_backward")
FP32_SWEEP = 1 << 16


def _gen(key: str) -> torch.Generator:
    return torch.Generator().manual_seed(sum(map(ord, key)) * 7919 + len(key))


def _randn(shape, key, dtype, scale=1.0):
    return (torch.randn(shape, generator=_gen(key)) * scale).to(dtype)


def fp32_sweep(n: int = FP32_SWEEP) -> torch.Tensor:
    """Special values, random bit patterns and a grid over [-20, 20] (float32)."""
    special = np.array([0, 0x80000000, 1, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF,
                        0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0x3F800000,
                        0xBF800000], np.uint32)
    rng = np.random.default_rng(39)
    rand = rng.integers(0, 1 << 32, n // 2, dtype=np.uint64).astype(np.uint32)
    grid = np.linspace(-20, 20, n - special.size - rand.size, dtype=np.float32)
    return torch.from_numpy(np.concatenate([special.view(np.float32), rand.view(np.float32),
                                            grid]))


def all_patterns(dtype: torch.dtype) -> torch.Tensor:
    return torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(dtype)


# ---- the cases ---------------------------------------------------------------------------
def _softmax_sizes(dtype):
    smem = 10000 if dtype == torch.float32 else 20000
    return (1000, 4099, smem, 20001)


PREFIX = "k39_"                 # keys apart from the older arrays of the same record


def cases():
    """``[(key, inputs, device_fn(*inputs), model_fn(gpu, *inputs))]`` (all CPU tensors;
    keys start with :data:`PREFIX`)."""
    return [(PREFIX + k, *rest) for k, *rest in _cases()]


def _cases():
    from ..aten_cuda import backward as bw
    from ..aten_cuda import embedding
    from ..aten_cuda import gamma_beta as gb
    from ..aten_cuda import host_softmax as hs
    from ..aten_cuda import moments, norms
    from ..aten_cuda import norms_backward as nb
    from ..aten_cuda import softmax_backward as sb
    from ..aten_cuda.elementwise import evaluate as ew_eval
    out = []
    for dn, dt in DTYPES.items():
        for log in (False, True):
            op = "log_softmax" if log else "softmax"
            fn = torch.log_softmax if log else torch.softmax
            for n in _softmax_sizes(dt):
                k = f"{op}_{dn}_n{n}"
                out.append((k, (_randn((2, n), k, dt, 4),), lambda x, fn=fn: fn(x, -1),
                            lambda g, x, log=log: hs.softmax(x, -1, log_softmax=log)[0]))
            k = f"{op}_{dn}_spatial"
            out.append((k, (_randn((4, 100, 3), k, dt, 4),), lambda x, fn=fn: fn(x, 1),
                        lambda g, x, log=log: hs.softmax(x, 1, log_softmax=log)[0]))
            bop = torch.ops.aten._log_softmax_backward_data if log else \
                torch.ops.aten._softmax_backward_data
            for n in (1000, 4099):
                k = f"{op}_backward_{dn}_n{n}"
                y = fn(_randn((2, n), k, torch.float32, 4), -1).to(dt)
                gr = _randn((2, n), k + "g", dt)
                out.append((k, (gr, y), lambda g_, y_, bop=bop, dt=dt: bop(g_, y_, -1, dt),
                            lambda g, g_, y_, log=log, dt=dt:
                            sb.softmax_backward(g_, y_, -1, dt, log_softmax=log)[0]))
        for n in (1024, 1030):
            k = f"layer_norm_affine_{dn}_n{n}"
            x, w, b = _randn((2, n), k, dt, 3), _randn((n,), k + "w", dt), \
                _randn((n,), k + "b", dt)
            out.append((k, (x, w, b), lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b),
                        lambda g, x, w, b: norms.layer_norm(x, x.shape[-1:], w, b)[0]))
            k = f"layer_norm_bw_{dn}_n{n}"          # dX (aten_cuda/norms_backward.py)
            x, w, dy = _randn((2, n), k, dt, 3), _randn((n,), k + "w", dt), \
                _randn((2, n), k + "g", dt)
            out.append((k, (dy, x, w), _layer_norm_dx,
                        lambda g, dy, x, w: nb.layer_norm_grad_input(
                            dy, x, x.shape[-1], *norms.layer_norm(x, x.shape[-1:], w)[1:], w)))
            k = f"rms_norm_{dn}_n{n}"
            x, w = _randn((2, n), k, dt, 3), _randn((n,), k + "w", dt)
            out.append((k, (x, w), lambda x, w: F.rms_norm(x, x.shape[-1:], w),
                        lambda g, x, w: norms.rms_norm(x, x.shape[-1:], w)[0]))
        for m in (40, 100, 200, 300):       # dgamma / dbeta, one key per one-pass tiling
            k = f"layer_norm_dgdb_{dn}_m{m}"      # (aten_cuda/gamma_beta.py)
            x, w, b, dy = _randn((m, 100), k, dt, 3), _randn((100,), k + "w", dt), \
                _randn((100,), k + "b", dt), _randn((m, 100), k + "g", dt)
            out.append((k, (dy, x, w, b), _layer_norm_dgdb,
                        lambda g, dy, x, w, b: torch.cat(gb.gamma_beta_grads(
                            dy, x, 100, *norms.layer_norm(x, (100,), w, b)[1:], g.sms))))
        k = f"var_rows_{dn}"
        out.append((k, (_randn((4, 4099), k, dt, 2) + 3,), lambda x: torch.var(x, -1),
                    lambda g, x: moments.moments(x, -1, op="var", gpu=g)))
        k = f"var_cols_{dn}"
        out.append((k, (_randn((300, 8), k, dt, 2),), lambda x: torch.var(x, 0, correction=0),
                    lambda g, x: moments.moments(x, 0, correction=0, op="var", gpu=g)))
        k = f"std_mean_all_{dn}"
        out.append((k, (_randn((1 << 20,), k, dt, 2) + 1,),
                    lambda x: torch.stack(torch.std_mean(x)),
                    lambda g, x: torch.stack(moments.moments(x, op="std_mean", gpu=g))))
        for k, n, D, V, pad, freq in ((f"embedding_bw_feature_{dn}", 2000, 64, 50, 3, False),
                                      (f"embedding_bw_segments_{dn}", 5000, 40, 30, -1, False),
                                      (f"embedding_bw_freq_{dn}", 600, 16, 20, 2, True)):
            ix = torch.randint(0, V, (n,), generator=_gen(k + "i"))
            out.append((k, (_randn((n, D), k, dt), ix),
                        lambda gr, ix, V=V, pad=pad, freq=freq:
                        torch.ops.aten.embedding_dense_backward(gr, ix, V, pad, freq),
                        lambda g, gr, ix, V=V, pad=pad, freq=freq:
                        embedding.embedding_dense_backward(gr, ix.cpu(), V, pad, freq)))
        sweep = fp32_sweep() if dt == torch.float32 else all_patterns(dt)
        name = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[dn]
        for op in ELEMENTWISE:
            k = f"ew_{op}_{dn}"
            dev = {"gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
                   "silu": F.silu}.get(op, getattr(torch, op, None))
            out.append((k, (sweep,), dev, lambda g, x, op=op, name=name:
                        _ew_model(ew_eval, op, x, name)))
        for op in BACKWARD:
            if dt == torch.float32:
                b = fp32_sweep()
            else:
                b = all_patterns(dt)
            k = f"bw_{op}_{dn}"
            gr = _randn(b.shape, k, dt)
            dev = _backward_device(op)
            out.append((k, (gr, b), dev, lambda g, gr, b, op=op: bw.apply(op, gr, b)))
    return out


def _layer_norm_dx(dy, x, w):
    """The device's layer_norm dX from its own forward statistics (dgamma / dbeta not asked)."""
    n = x.shape[-1]
    _, mean, rstd = torch.native_layer_norm(x, (n,), w, None, 1e-5)
    return torch.ops.aten.native_layer_norm_backward(dy, x, (n,), mean, rstd, w, None,
                                                     [True, False, False])[0]


def _layer_norm_dgdb(dy, x, w, b):
    """The device's layer_norm (dgamma, dbeta), concatenated, from its own forward
    statistics (dX not asked)."""
    n = x.shape[-1]
    _, mean, rstd = torch.native_layer_norm(x, (n,), w, b, 1e-5)
    _, dg, db = torch.ops.aten.native_layer_norm_backward(dy, x, (n,), mean, rstd, w, b,
                                                          [False, True, True])
    return torch.cat([dg, db])


def _ew_model(ew_eval, op, x, name):
    a = x.view(torch.int16).numpy().view(np.uint16) if name == "bfloat16" else x.numpy()
    y = np.ascontiguousarray(ew_eval(op, a, name))
    if name == "bfloat16":
        return torch.from_numpy(y.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(y)


def _backward_device(op):
    aten = torch.ops.aten
    if op == "gelu_tanh_backward":
        return lambda g, x: aten.gelu_backward(g, x, approximate="tanh")
    return lambda g, x: getattr(aten, op)(g, x)


# ---- record, compare, predict ------------------------------------------------------------
BIG = 8192          # inputs with more elements are regenerated here, only a head is stored


def _store(arrays, key, ins):
    for i, t in enumerate(ins):
        b = bits(t).numpy().reshape(-1)
        if b.size > BIG:
            arrays[f"head{i}_{key}"] = b[:64]
        else:
            arrays[f"in{i}_{key}"] = b


def record(device: str, log=print) -> dict:
    """``{in{i}_<key>: input bits (or head{i}_<key>: the first 64 of a large one, which
    :func:`compare` regenerates), <key>: output bits}`` of every case run on ``device``."""
    arrays = {}
    for key, ins, dev, _ in cases():
        _store(arrays, key, ins)
        try:
            y = dev(*(t.to(device) for t in ins))
            arrays[key] = bits(y.cpu()).numpy()
        except Exception as e:  # noqa: BLE001   (record what runs)
            log(f"[reductions] {key}: {type(e).__name__}: {e}")
    return arrays


def _inputs(z, key, like):
    ins = []
    for i, t in enumerate(like):
        if f"in{i}_{key}" in z:
            b = torch.from_numpy(np.ascontiguousarray(z[f"in{i}_{key}"]))
            ins.append(b.view(t.dtype).reshape(t.shape))
            continue
        head = z[f"head{i}_{key}"] if f"head{i}_{key}" in z else None
        if head is not None and not np.array_equal(bits(t).numpy().reshape(-1)[:64], head):
            raise ValueError(f"the input of {key} does not regenerate here (another "
                             "torch's generator?)")
        ins.append(t)
    return ins


def compare(z, gpu) -> list:
    """``[(key, differing, total)]``: each recorded case's output against its model on
    ``gpu`` (a registry.Gpu), run on the recorded inputs."""
    rows = []
    for key, like, _, model in cases():
        if key not in z:
            continue
        with np.errstate(all="ignore"):
            y = model(gpu, *_inputs(z, key, like))
        got = bits(y).numpy().astype(np.int64).reshape(-1)
        want = z[key].astype(np.int64).reshape(-1)
        nan = _nan_pairs(y, want)
        rows.append((key, int(((got != want) & ~nan).sum()), int(want.size)))
    return rows


def _nan_pairs(y, want_bits):
    """Both NaN (any payload): the GPU's and the model's NaN patterns may differ."""
    yf = y.detach().float().reshape(-1)
    dt = y.dtype
    w = torch.from_numpy(want_bits.astype({torch.float32: np.int32}.get(dt, np.int16)))
    wf = w.view(dt).float()
    return (torch.isnan(yf) & torch.isnan(wf)).numpy()


def model_record(gpu) -> dict:
    """The record the models predict on ``gpu``: the inputs and the modelled outputs."""
    arrays = {}
    for key, ins, _, model in cases():
        _store(arrays, key, ins)
        with np.errstate(all="ignore"):
            arrays[key] = bits(model(gpu, *ins)).numpy()
    return arrays


__all__ = ["cases", "record", "compare", "model_record", "fp32_sweep", "all_patterns",
           "ELEMENTWISE", "BACKWARD", "DTYPES"]
