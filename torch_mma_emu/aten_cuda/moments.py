"""``torch.var`` / ``std`` / ``var_mean`` / ``std_mean`` as PyTorch 2.13's CUDA kernel
computes them: ``std_var_kernel_impl`` (aten/src/ATen/native/cuda/ReduceMomentKernel.cu)
runs ``gpu_reduce_kernel<scalar_t, out_t, 2>`` - the same ``reduce_kernel`` as sum and mean
with ``vt0 = input_vec_size = 2`` (the "unrolling factor 2 for welford" of that file) - over
``WelfordOps<scalar_t, float, int32_t, pair<out_t, out_t>>`` (ATen/native/SharedReduceOps.h).

The launch (config.py) and the order of reduces and combines (reduce.py: per-thread
accumulators per vector lane or per unrolled step, lanes, warps, the last CTA's fold) are
the sums'; only the arithmetic differs.  As nvcc 13.0 compiles the header
(tests/data/aten_moments/welford.cu, its PTX beside it):

* ``reduce(acc, x)``: ``n' = n + 1`` (int32), ``nf' = float(n')``, ``d = x - mean``,
  ``mean' = mean + d / nf'`` (``div.rn`` then ``add``), ``m2' = fma(d, x - mean', m2)``;
* ``combine(a, b)``: ``a`` if ``b.nf == 0``, ``b`` if ``a.nf == 0``, else
  ``d = b.mean - a.mean``, ``nf = a.nf + b.nf``, ``r = b.nf / nf`` (``div.rn``),
  ``mean = fma(d, r, a.mean)``, ``m2 = fma((d * d) * a.nf, r, a.m2 + b.m2)``;
* ``project``: ``var = m2 / (nf > correction ? nf - correction : 0)`` (``div.rn``),
  ``sqrt.rn`` for std, the mean cast to the input dtype; one rounding to the output dtype.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..gpu_math.ieee import fma
from .config import FLOATS, ReduceConfig, set_reduce_config
from .reduce import evaluate
from .sums import layout, rows

VT0 = 2                     # gpu_reduce_kernel<scalar_t, out_t, 2>: vt0 = input_vec_size = 2
OPS = ("var", "std", "var_mean", "std_mean")


class WelfordState:
    """An array of ``WelfordData<float, int32_t>`` (mean, m2, n, nf) for reduce.py's order:
    ``state + data`` is ``WelfordOps::reduce``, ``state + state`` its ``combine``."""
    __slots__ = ("mean", "m2", "n", "nf")

    def __init__(self, mean, m2, n, nf):
        self.mean, self.m2, self.n, self.nf = mean, m2, n, nf

    @classmethod
    def identity(cls, shape):
        z = np.zeros(shape, np.float32)
        return cls(z, z.copy(), np.zeros(shape, np.int64), z.copy())

    # -- array protocol used by reduce.py --------------------------------------------------
    @property
    def shape(self):
        return self.mean.shape

    def new_zeros(self, shape):
        return WelfordState.identity(shape)

    def _map(self, f):
        return WelfordState(f(self.mean), f(self.m2), f(self.n), f(self.nf))

    def __getitem__(self, key):
        return self._map(lambda a: a[key])

    def __setitem__(self, key, other):
        for f in self.__slots__:
            getattr(self, f)[key] = getattr(other, f)

    def reshape(self, *shape):
        return self._map(lambda a: a.reshape(*shape))

    def moveaxis(self, src, dst):
        return self._map(lambda a: np.moveaxis(a, src, dst))

    # -- the arithmetic ---------------------------------------------------------------------
    def __add__(self, other):
        with np.errstate(all="ignore"):
            if isinstance(other, WelfordState):
                return _combine(self, other)
            return _reduce(self, np.asarray(other, np.float32))


def _reduce(a: WelfordState, x: np.ndarray) -> WelfordState:
    n = a.n + 1
    nf = n.astype(np.float32)
    d = (x - a.mean).astype(np.float32)
    mean = (a.mean + (d / nf).astype(np.float32)).astype(np.float32)
    m2 = fma(d, (x - mean).astype(np.float32), a.m2)
    return WelfordState(mean, m2, n, nf)


def _combine(a: WelfordState, b: WelfordState) -> WelfordState:
    d = (b.mean - a.mean).astype(np.float32)
    nf = (a.nf + b.nf).astype(np.float32)
    r = (b.nf / nf).astype(np.float32)
    mean = fma(d, r, a.mean)
    m2 = fma(((d * d).astype(np.float32) * a.nf).astype(np.float32), r,
             (a.m2 + b.m2).astype(np.float32))
    out = WelfordState(mean, m2, np.full_like(a.n, -1), nf)
    for keep, other in ((b.nf == 0, a), (a.nf == 0, b)):     # a.nf == 0 is tested first
        if keep.any():
            for f in WelfordState.__slots__:
                getattr(out, f)[keep] = getattr(other, f)[keep]
    return out


class WelfordOps:
    """``ops`` for reduce.evaluate: identity accumulators of WelfordData."""

    @staticmethod
    def zeros(shape):
        return WelfordState.identity(shape)


def project(acc: WelfordState, correction: float, take_sqrt: bool):
    """``WelfordOps::project``: (var or std, mean) in float32, before the output cast."""
    c = np.float32(correction)
    with np.errstate(all="ignore"):
        divisor = np.where(acc.nf > c, (acc.nf - c).astype(np.float32), np.float32(0))
        var = (acc.m2 / divisor).astype(np.float32)
        if take_sqrt:
            var = np.sqrt(var).astype(np.float32)
    return var, acc.mean


def config_for(x: torch.Tensor, dim, gpu) -> ReduceConfig:
    """The launch of the var / std reduction of ``x`` over ``dim`` on ``gpu``."""
    return set_reduce_config(layout(x, dim), input_vec_size=VT0, sms=gpu.sms,
                             max_threads_per_sm=gpu.max_threads_per_sm, vt0=VT0)


def _dims(x, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.dim()))
    dim = [dim] if isinstance(dim, int) else list(dim)
    nd = max(x.dim(), 1)
    for d in dim:
        if not -nd <= int(d) < nd:
            raise IndexError(f"dimension {d} out of range for a {x.dim()}-d tensor")
    return [int(d) % nd for d in dim]


def moments(x: torch.Tensor, dim=None, *, correction: Optional[float] = 1,
            keepdim: bool = False, op: str = "var", gpu=None):
    """``torch.<op>(x, dim, correction=..., keepdim=...)`` (``op``: var, std, var_mean,
    std_mean) with the bits of torch 2.13's CUDA kernel on ``gpu`` (a registry.Gpu or a
    name; default the H100 SXM).  Returns a tensor, or a (var/std, mean) pair."""
    from ..registry import gpu as find_gpu
    if op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)}; got {op!r}")
    if x.dtype not in FLOATS:
        raise TypeError(f"the CUDA var/std model takes {', '.join(map(str, FLOATS))}; "
                        f"got {x.dtype}")
    if x.numel() == 0 or x.numel() >= 2 ** 31:
        raise ValueError("the CUDA var/std model takes a non-empty tensor of fewer than "
                         "2^31 elements")
    gpu = find_gpu(gpu) if not hasattr(gpu, "sms") else gpu
    correction = 1.0 if correction is None else float(correction)
    dims = _dims(x, dim)
    cfg = config_for(x, dim, gpu)
    X, offs = rows(x, dim)
    Xn = X.float().contiguous().numpy()
    es = x.element_size()
    shifts = (offs * es % (VT0 * es)) // es
    acc = evaluate(Xn, cfg, shifts, ops=WelfordOps)
    var, mean = project(acc, correction, op.startswith("std"))
    kept = [d for d in range(x.dim()) if d not in dims]
    shape = [x.shape[d] if d in kept else 1 for d in range(x.dim())] if keepdim else \
        [x.shape[d] for d in kept]
    # pair<out_t, out_t>: each float rounds once to the output dtype; the mean went
    # through static_cast<scalar_t> first (the same dtype here)
    v = torch.from_numpy(np.ascontiguousarray(var)).reshape(shape).to(x.dtype)
    if not op.endswith("_mean"):
        return v
    return v, torch.from_numpy(np.ascontiguousarray(mean)).reshape(shape).to(x.dtype)


def describe(x: torch.Tensor, dim=None, gpu=None) -> str:
    from ..registry import gpu as find_gpu
    gpu = find_gpu(gpu) if not hasattr(gpu, "sms") else gpu
    return "WelfordOps <2, 2>, " + config_for(x, dim, gpu).describe()


__all__ = ["moments", "describe", "config_for", "project", "WelfordOps", "WelfordState",
           "VT0", "FLOATS", "OPS"]
