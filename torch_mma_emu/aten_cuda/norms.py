"""layer_norm and rms_norm forward as torch 2.13's CUDA kernel computes them:
``vectorized_layer_norm_kernel`` (``aten/src/ATen/native/cuda/layer_norm_kernel.cu``; the
fused rms_norm kernel is the same template with ``rms_norm = true``).  It runs when the row
length N is a multiple of 4, N <= 2^24, the dtype is fp32 / fp16 / bf16 and X, Y, gamma,
beta are 4-element aligned.  One CTA of 32 x 4 threads (``num_threads()`` = 128) per row:

* thread ``t`` reads the 4-vectors ``t, t + 128, ...`` and updates, per element in order,
  a float Welford state (mean, m2, count)::

      delta = x - mean;  count += 1;  coef = rcp.rn(count)
      mean  = fma(delta, coef, mean);  m2 = fma(delta, x - mean, m2)

  (rms_norm: ``m2 = fma(x, x, m2)``, no mean);
* ``shfl_down`` 16..1, then the 4 warps' halving through shared memory, each step
  ``combine(own, other)``: ``coef = rcp.rn(nA + nB)``, ``wA = nA*coef``, ``wB = nB*coef``,
  ``mean = fma(other.mean, wA, own.mean*wB)``,
  ``m2 = fma(nA * (delta*delta), wB, own.m2 + other.m2)`` (rms_norm: ``own.m2 + other.m2``);
* ``var = m2 / N`` (div.rn), ``rstd = rsqrt.approx.f32(var + eps)`` (``rsqrtf``);
* ``y = fma(gamma, rstd * (x - mean), beta)``; gamma only ``gamma * (rstd * (x - mean))``;
  beta only ``fma(x - mean, rstd, beta)``; rms_norm ``gamma * (rstd * x)``; rounded once to
  the input dtype.

The contractions are nvcc 13's for sm_90 (``nvcc -arch=sm_90 -ptx`` of the same
expressions: rcp.rn.f32, fma.rn.f32, rsqrt.approx.f32).  Other rows (N % 4 != 0, N > 2^24,
unaligned) run the unvectorised pair ``RowwiseMomentsCUDAKernel`` (``WelfordOps`` of
SharedReduceOps.h, ``cuda_utils::BlockReduce`` over 512 threads) +
``LayerNormForwardCUDAKernel``: :func:`evaluate_rowwise`.  fp64 is not modelled.
"""
from __future__ import annotations

import numpy as np
import torch

from .. import gpu_math
from ..gpu_math import fast
from .config import FLOATS as _FLOATS

__all__ = ["vectorized", "layer_norm", "rms_norm", "evaluate", "evaluate_rowwise", "moments",
           "kernel_name", "THREADS", "VEC", "KERNEL", "BLOCK_REDUCE_THREADS"]

THREADS = 128          # num_threads() = C10_WARP_SIZE * 4: a block of 32 x 4
VEC = 4                # vec_size, the same for every dtype
WARP = 32
KERNEL = "vectorized_layer_norm_kernel"
_F = np.float32


def vectorized(n: int, dtype: torch.dtype, *tensors) -> bool:
    """Whether rows of ``n`` elements of ``dtype`` run the vectorised kernel (the tensors:
    X and the defined gamma / beta, contiguous, each 4-element aligned by storage offset;
    the CUDA allocator's base is 512-byte aligned)."""
    if dtype not in _FLOATS or n <= 0 or n % VEC or n > 2 ** 24:
        return False
    return all(t.storage_offset() % VEC == 0 for t in tensors if t is not None)


def kernel_name(n: int, dtype: torch.dtype, *tensors) -> str:
    """The forward kernel(s) torch 2.13 launches for rows of ``n``."""
    if vectorized(n, dtype, *tensors):
        return f"{KERNEL}: block 32x4, {n // VEC} vectors of 4 per row"
    return ("RowwiseMomentsCUDAKernel (512 threads, WelfordOps) + "
            "LayerNormForwardCUDAKernel")


def _combine(own, other, rms: bool):
    """``cuWelfordCombine(dataB=own, dataA=other)`` on arrays."""
    m_b, s_b, c_b = own
    m_a, s_a, c_a = other
    if rms:
        return m_b, (s_b + s_a).astype(_F, copy=False), c_b
    count = (c_a + c_b).astype(_F, copy=False)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        coef = (_F(1) / count).astype(_F, copy=False)
        w_a = (c_a * coef).astype(_F, copy=False)
        w_b = (c_b * coef).astype(_F, copy=False)
        delta = (m_b - m_a).astype(_F, copy=False)
        mean = fast.fma(m_a, w_a, (m_b * w_b).astype(_F, copy=False))
        dd = (c_a * (delta * delta).astype(_F, copy=False)).astype(_F, copy=False)
        m2 = fast.fma(dd, w_b, (s_b + s_a).astype(_F, copy=False))
    pos = count > 0
    return (np.where(pos, mean, _F(0)).astype(_F, copy=False),
            np.where(pos, m2, _F(0)).astype(_F, copy=False),
            count)


def _halve(state, axis_len: int, rms: bool):
    """Halving over the last axis (``shfl_down`` / the shared-memory tree): step ``h``
    combines slot i with slot i + h; slot 0 ends with the result."""
    return _halve_with(state, axis_len, lambda own, other: _combine(own, other, rms))


def _block(X: np.ndarray, update, init, combine, kind: str = ""):
    """The vectorised kernel's order on rows of ``X`` (float32, [rows, N], N % 4 == 0):
    thread t updates its state with the 4-vectors t, t + 128, ... element by element
    (``update(state, x) -> state``), then ``combine`` halves over the 32 lanes of each warp
    (shfl_down) and over the 4 warps (shared memory).  Returns the block's state.
    ``kind`` "welford" / "rms" names ``update`` (:func:`_welford`, rms_norm's): the C++
    kernel of the same loop runs it where built (``gpu_math.fast.welford``)."""
    R, N = X.shape
    if kind and X.size >= fast.MIN_SIZE and fast.available():
        state = fast.welford(X, THREADS, VEC, rms=kind == "rms")
    else:
        state = _thread_loop(X, update, init)
    state = tuple(s.reshape(R, THREADS // WARP, WARP) for s in state)
    state = _halve_with(state, WARP, combine)                 # lane 0 of each warp
    return _halve_with(state, THREADS // WARP, combine)      # warp 0


def _thread_loop(X: np.ndarray, update, init):
    """Each thread's state after its elements (:func:`_block`), [rows, THREADS] each."""
    R, N = X.shape
    nv = N // VEC
    K = -(-nv // THREADS)
    V = np.zeros((R, K * THREADS, VEC), _F)
    V[:, :nv] = X.reshape(R, nv, VEC)
    V = np.ascontiguousarray(V.reshape(R, K, THREADS, VEC).transpose(1, 3, 0, 2))
    live = (np.arange(K * THREADS) < nv).reshape(K, THREADS)
    state = tuple(np.full((R, THREADS), v, _F) for v in init)
    full = live.all(axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(K):
            on = live[k][None, :]
            for ii in range(VEC):
                new = update(state, V[k, ii])
                state = new if full[k] else tuple(np.where(on, a, b)
                                                  for a, b in zip(new, state))
    return state


def _welford(state, x):
    mean, m2, cnt = state
    delta = (x - mean).astype(_F, copy=False)
    nc = (cnt + _F(1)).astype(_F, copy=False)
    coef = (_F(1) / nc).astype(_F, copy=False)
    nm = fast.fma(delta, coef, mean)
    return nm, fast.fma(delta, (x - nm).astype(_F, copy=False), m2), nc


def stats(X: np.ndarray, *, rms: bool = False):
    """``compute_stats`` for rows of ``X`` (float32, [rows, N], N % 4 == 0): per row the
    Welford mean (0 for rms_norm) and m2 / N (the variance, or the mean square)."""
    X = np.asarray(X, _F)
    N = X.shape[1]
    if rms:
        mean, m2, _ = _block(X, lambda st, x: (st[0], fast.fma(x, x, st[1]), st[2]),
                             (0, 0, 0), lambda own, other: _combine(own, other, True), "rms")
    else:
        mean, m2, _ = _block(X, _welford, (0, 0, 0),
                             lambda own, other: _combine(own, other, False), "welford")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        var = (m2 / _F(N)).astype(_F, copy=False)
    return mean.astype(_F, copy=False), var


def block_sum(X: np.ndarray) -> np.ndarray:
    """The vectorised kernel's reduction order as a plain float32 sum of each row: the
    per-thread loop and the lane / warp halving of :func:`stats` (the same code), with
    ``m2 + x`` in place of rms_norm's ``fma(x, x, m2)`` and ``own + other`` as the combine
    (rms_norm's combine; layer_norm's ``cuWelfordCombine`` pairs the same states).  What
    FPRev reveals (its probes need signed summands, which ``x * x`` cannot give)."""
    add = lambda own, other: ((own[0] + other[0]).astype(_F, copy=False),)   # noqa: E731
    return _block(np.asarray(X, _F), lambda st, x: ((st[0] + x).astype(_F, copy=False),),
                  (0,), add)[0]


def tree(n: int):
    """The ``SumTree`` of the vectorised kernel's reduction over a row of ``n`` (n % 4 == 0),
    written from the kernel's order (not by running :func:`block_sum`): thread t takes
    elements ``4 (t + 128 k) + i`` in (k, i) order, lane i of each warp then adds lane
    i + h for h = 16 .. 1, warp w adds warp w + h for h = 2, 1."""
    from ..order.builders import TreeBuilder
    if n < VEC or n % VEC:
        raise ValueError(f"the vectorised kernel takes rows of a multiple of {VEC}, got {n}")
    b = TreeBuilder(n)
    add = b.add
    acc = [None] * THREADS
    for i in range(n):
        t = (i // VEC) % THREADS
        acc[t] = add(acc[t], i)
    for base in range(0, THREADS, WARP):
        h = WARP // 2
        while h:
            for lane in range(h):
                acc[base + lane] = add(acc[base + lane], acc[base + lane + h])
            h //= 2
    h = THREADS // WARP // 2
    while h:
        for w in range(h):
            acc[w * WARP] = add(acc[w * WARP], acc[(w + h) * WARP])
        h //= 2
    return b.tree(acc[0])


def evaluate(X, gamma=None, beta=None, eps: float = 1e-5, *, rms: bool = False):
    """The kernel on float32 rows ``X`` [rows, N] (inputs already read as float): returns
    ``(y, mean, rstd)`` as float32 (y before the store's rounding; mean zeros for rms)."""
    X = np.asarray(X, _F)
    mean, var = stats(X, rms=rms)
    e = np.float32(eps)
    with np.errstate(over="ignore", invalid="ignore"):
        rstd = gpu_math.evaluate("rsqrt.approx.f32", (var + e).astype(_F, copy=False))
        r = rstd[:, None]
        if rms:
            p = (r * X).astype(_F, copy=False)
            y = p if gamma is None else (np.asarray(gamma, _F)[None] * p).astype(_F, copy=False)
            return y, np.zeros_like(mean), rstd
        d = np.subtract(X, mean[:, None], dtype=_F)
        g = None if gamma is None else np.asarray(gamma, _F)[None]
        b = None if beta is None else np.asarray(beta, _F)[None]
        if g is not None:
            p = np.multiply(r, d, out=d) if b is not None else (r * d).astype(_F, copy=False)
            y = fast.fma(g, p, b) if b is not None else (g * p).astype(_F, copy=False)
        elif b is not None:
            y = fast.fma(d, r, b)
        else:
            y = (r * d).astype(_F, copy=False)
    return np.asarray(y, _F), mean, rstd


# -- the unvectorised kernels: RowwiseMomentsCUDAKernel + LayerNormForwardCUDAKernel ----
BLOCK_REDUCE_THREADS = 512      # cuda_utils::kCUDABlockReduceNumThreads: 16 warps


def _welford_combine(a, b):
    """``WelfordOps::combine(a = own, b = other)``: the empty side gives the other back."""
    m_a, s_a, n_a = a
    m_b, s_b, n_b = b
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        delta = (m_b - m_a).astype(_F, copy=False)
        count = (n_a + n_b).astype(_F, copy=False)
        w = (n_b / count).astype(_F, copy=False)
        mean = fast.fma(delta, w, m_a)
        dd = ((delta * delta).astype(_F, copy=False) * n_a).astype(_F, copy=False)
        m2 = fast.fma(dd, w, (s_a + s_b).astype(_F, copy=False))
    a0, b0 = n_a == 0, n_b == 0
    pick = lambda va, vb, v: (                                          # noqa: E731
        np.where(a0, vb, np.where(b0, va, v)).astype(_F, copy=False))
    return pick(m_a, m_b, mean), pick(s_a, s_b, m2), pick(n_a, n_b, count)


def moments(X: np.ndarray):
    """``RowwiseMomentsCUDAKernel``: per row (mean, var) of float32 rows ``X`` [rows, N]:
    512 threads, thread ``j`` takes elements ``j, j + 512, ...`` into ``WelfordOps``
    (``mean += delta / n``: a division; ``m2 = fma(delta, x - mean, m2)``), ``BlockReduce``
    (``shfl_down`` 16..1 per warp, then warp 0 over the 16 warps' results), ``var = m2 / n``."""
    X = np.asarray(X, _F)
    R, N = X.shape
    T = BLOCK_REDUCE_THREADS
    K = -(-N // T)
    P = np.zeros((R, K * T), _F)
    P[:, :N] = X
    P = P.reshape(R, K, T)
    live = (np.arange(K * T) < N).reshape(K, T)
    mean = np.zeros((R, T), _F)
    m2 = np.zeros((R, T), _F)
    cnt = np.zeros((R, T), _F)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(K):
            on = live[k][None, :]
            x = P[:, k]
            nf = _F(k + 1)                  # every live thread has seen k + 1 elements
            delta = (x - mean).astype(_F, copy=False)
            nm = (mean + (delta / nf).astype(_F, copy=False)).astype(_F, copy=False)
            ns = fast.fma(delta, (x - nm).astype(_F, copy=False), m2)
            mean, m2 = np.where(on, nm, mean), np.where(on, ns, m2)
            cnt = np.where(on, nf, cnt)
    state = tuple(s.reshape(R, T // WARP, WARP) for s in (mean, m2, cnt))
    state = _halve_with(state, WARP, _welford_combine)        # WarpReduce per warp
    state = _halve_with(state, T // WARP, _welford_combine)   # warp 0 (identity lanes pass)
    mean, m2, n = state
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        var = (m2 / n).astype(_F, copy=False)
    return mean.astype(_F, copy=False), var


def _halve_with(state, w, combine):
    while w > 1:
        h = w // 2
        state = combine(tuple(s[..., :h] for s in state), tuple(s[..., h:w] for s in state))
        w = h
    return tuple(s[..., 0] for s in state)


def evaluate_rowwise(X, gamma=None, beta=None, eps: float = 1e-5, *, rms: bool = False):
    """The unvectorised pair on float32 rows: ``(y, mean, rstd)``; ``y = fma((x - mean) *
    rstd, gamma, beta)`` with gamma 1 and beta 0 where absent (rms_norm: ``x * rstd *
    gamma``, ``rstd = rsqrt(fma(mean, mean, var) + eps)``)."""
    X = np.asarray(X, _F)
    mean, var = moments(X)
    e = np.float32(eps)
    g = _F(1) if gamma is None else np.asarray(gamma, _F)[None]
    with np.errstate(over="ignore", invalid="ignore"):
        if rms:
            rstd = gpu_math.evaluate("rsqrt.approx.f32",
                                     (fast.fma(mean, mean, var) + e).astype(_F, copy=False))
            y = ((X * rstd[:, None]).astype(_F, copy=False) * g).astype(_F, copy=False)
            return y, np.zeros_like(mean), rstd
        rstd = gpu_math.evaluate("rsqrt.approx.f32", (var + e).astype(_F, copy=False))
        b = _F(0) if beta is None else np.asarray(beta, _F)[None]
        p = ((X - mean[:, None]).astype(_F, copy=False) * rstd[:, None]).astype(_F, copy=False)
        y = fast.fma(p, np.broadcast_to(g, X.shape), np.broadcast_to(b, X.shape))
    return np.asarray(y, _F), mean, rstd


def _rows(x: torch.Tensor, n: int) -> np.ndarray:
    return x.detach().reshape(-1, n).float().numpy()


def _flat(t, n):
    return None if t is None else t.detach().reshape(n).float().numpy()


def layer_norm(x: torch.Tensor, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """``native_layer_norm``'s ``(y, mean, rstd)`` with the vectorised kernel's bits (mean
    and rstd float32 for 16-bit inputs, shaped like PyTorch's: the leading dims then ones)."""
    n, lead = _check(x, normalized_shape, weight, bias)
    run = evaluate if vectorized(n, x.dtype, x, weight, bias) else evaluate_rowwise
    y, mean, rstd = run(_rows(x, n), _flat(weight, n), _flat(bias, n), eps)
    stat_shape = lead + (1,) * len(tuple(normalized_shape))
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    return (torch.from_numpy(y).reshape(x.shape).to(x.dtype),
            torch.from_numpy(mean).reshape(stat_shape).to(acc),
            torch.from_numpy(rstd).reshape(stat_shape).to(acc))


def rms_norm(x: torch.Tensor, normalized_shape, weight=None, eps=None):
    """``_fused_rms_norm``'s ``(y, rstd)``; ``eps`` None: float32's epsilon (2^-23)."""
    n, lead = _check(x, normalized_shape, weight, None)
    e = float(np.finfo(np.float32).eps) if eps is None else eps
    run = evaluate if vectorized(n, x.dtype, x, weight) else evaluate_rowwise
    y, _, rstd = run(_rows(x, n), _flat(weight, n), None, e, rms=True)
    stat_shape = lead + (1,) * len(tuple(normalized_shape))
    return (torch.from_numpy(y).reshape(x.shape).to(x.dtype),
            torch.from_numpy(rstd).reshape(stat_shape))


def _check(x, normalized_shape, weight, bias):
    shape = tuple(int(s) for s in normalized_shape)
    if not shape or tuple(x.shape[x.dim() - len(shape):]) != shape or x.dim() < len(shape):
        raise ValueError(f"normalized_shape {list(shape)} must be the trailing dimensions "
                         f"of the input's shape {list(x.shape)}")
    n = int(np.prod(shape))
    if x.dtype not in _FLOATS:
        raise TypeError(f"the layer_norm model takes fp32, fp16 or bf16, got {x.dtype}")
    if x.numel() >= 2 ** 31:
        raise ValueError("tensors of 2^31 or more elements are not modelled")
    for t, name in ((weight, "weight"), (bias, "bias")):
        if t is not None and t.numel() != n:
            raise ValueError(f"{name} must have {n} elements, got {t.numel()}")
    return n, tuple(x.shape[:x.dim() - len(shape)])
