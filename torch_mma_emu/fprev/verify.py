"""``verify=True``: check a revealed tree on probes it was not built from.

Random probes - triplets (three-leaf supports: any binary tree has exactly one pair whose
LCA excludes the third leaf; a non-swamped or value-dependent sum does not), single pairs
on random supports with the masks' signs swapped (a fixed tree cannot tell +big at i from
+big at j), and on fp32/fp64 several mask pairs of different magnitudes at once - are run
on the target and compared with :func:`.simulate.predict`.  An order that depends on the
values, or changed between calls, fails here even if each answer looked like a count.

What probes cannot see: an algorithm that is not a tree of additions but behaves like one
at probe values (compensated summation), or a value-dependent order that is invariant
under permutations (summing in sorted order looks like one multi-term fused sum).
:func:`check_replay` catches those by comparing with :func:`.replay.replay` on random
inputs.
"""
from __future__ import annotations

import numpy as np

from .errors import InconsistentError
from .probes import decode
from .rows import Support
from .simulate import MASK_BASE, predict


def cross_check(target, tree, *, trials: int = 48, seed: int = 0) -> int:
    """Run ``trials`` random probes; raise :class:`InconsistentError` on a mismatch.
    Returns the number of probes used."""
    n, vals = target.n, target.values
    if n < 3:
        return 0
    rng = np.random.default_rng(seed)
    cap = min(n, vals.capacity)
    rows, W, Mk = [], np.zeros((trials, n), np.int64), np.zeros((trials, n), np.int64)
    prev = None
    for t in range(trials):
        kind = t % 3
        if kind == 0:
            sup = rng.choice(n, 3, replace=False)
        else:
            size = int(rng.integers(3, cap + 1))
            sup = rng.choice(n, size, replace=False) if size < n else np.arange(n)
        pairs = 1
        if kind == 2 and vals.mask_levels >= 3 and len(sup) >= 6:
            pairs = int(rng.integers(2, 4))
        leaves = rng.permutation(sup)[:2 * pairs]
        if t % 2 and t > 0 and prev is not None:
            sup, leaves, pairs = prev[0], prev[1][[1, 0]], 1  # the previous probe, swapped
        prev = (sup, leaves) if pairs == 1 else None
        masks = []
        for lvl in range(pairs):
            a, b = int(leaves[2 * lvl]), int(leaves[2 * lvl + 1])
            m = vals.big * 2.0 ** -lvl
            masks += [(a, m), (b, -m)]
            Mk[t, a] += MASK_BASE ** lvl
            Mk[t, b] -= MASK_BASE ** lvl
        W[t, sup] = 1
        rows.append((object(), ((Support(np.sort(sup)), 0),), tuple(masks), ()))
    want = predict(tree, W, Mk)
    got = decode(target.run(rows), vals, W.sum(axis=1))
    bad = np.flatnonzero(want != got)
    if len(bad):
        t = int(bad[0])
        raise InconsistentError(
            f"{target.describe()}: a check probe (support of {int(W[t].sum())} leaves, masks at "
            f"{rows[t][2][0][0]} ...) read {int(got[t])} units but the revealed tree predicts "
            f"{int(want[t])}: the target does not sum in one fixed order (value-dependent or "
            "non-deterministic), or uses exact multi-term sums the shortcuts cannot see "
            "(try shortcuts=False)")
    return trials


def check_replay(fn, tree, *, trials: int = 16, dtype=None, seed: int = 0, acc_dtype=None,
                 out_dtype=None, **replay_kw):
    """Compare ``fn`` (summing a 1-D tensor) with ``tree.replay`` on random normal inputs of
    ``dtype`` (default float32); raise :class:`InconsistentError` at the first mismatch.

    ``acc_dtype``: the format of the replayed additions (default: ``dtype``);
    ``out_dtype``: round the replayed sum once more to this format at the end, for
    implementations that accumulate in a wider format than they return (``torch.sum`` of
    fp16/bf16 adds in fp32 and rounds the result to fp16/bf16).  When neither is given
    and ``dtype`` is fp16/bf16, both models are tried - adding in ``dtype``, and adding in
    float32 with the result rounded to ``fn``'s output dtype - and the target passes if one
    of them reproduces every trial.  Other ``replay_kw`` go to :func:`.replay.replay`
    (fused-sum models as ``fused`` / ``exact``)."""
    import torch

    from ..order import evaluate as replay
    dtype = dtype or torch.float32
    narrow = (torch.float16, torch.bfloat16)
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(tree.n, generator=g, dtype=torch.float64).to(dtype)
          for _ in range(trials)]
    wants, outs = [], []
    for x in xs:
        y = fn(x)
        outs.append(y.dtype if isinstance(y, torch.Tensor) and y.is_floating_point() else None)
        wants.append(float(y))
    out_default = out_dtype or next((d for d in outs if d is not None), None)
    models = [(acc_dtype, out_dtype)]
    if acc_dtype is None and out_dtype is None and dtype in narrow:
        models.append((torch.float32, out_default if out_default in narrow else dtype))

    def run(acc, out):
        for t, (x, want) in enumerate(zip(xs, wants)):
            got = float(replay(tree, x[None], dtype=acc, **replay_kw)[0])
            if out is not None:
                got = float(torch.tensor(got, dtype=torch.float64).to(out))
            if not (want == got or (want != want and got != got)):
                return t, want, got
        return None

    first = None
    for acc, out in models:
        bad = run(acc, out)
        if bad is None:
            return
        first = first or bad
    t, want, got = first
    raise InconsistentError(
        f"on random input {t} the target gave {want!r} but summing in the revealed "
        f"order gives {got!r}: it does not add in this fixed order (value-dependent "
        "order, compensated summation, or a different fused-sum model)"
        + (" - tried adding in the input dtype and adding in float32 with the result "
           "rounded to the output dtype" if len(models) > 1 else ""))
