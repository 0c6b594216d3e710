"""``aten.embedding_dense_backward`` as torch 2.13's CUDA kernels sum it
(aten_cuda/embedding.py, preview/aten_embedding.py): the model against a slow per-thread
reference written separately (one loop per CUDA thread, as the kernels' threads run: the
feature kernel's warps with their match masks and leaders, the segment kernels' partial
segments and their scatter), in float32, bfloat16 and float16, with repeated indices,
padding_idx, scale_grad_by_freq and both size paths; then under ``emulate``: a TinyGPT
training step whose embedding gradients are the model's, and the CPU's bits differing."""
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu.aten_cuda import embedding as emb
from torch_mma_emu.preview import aten_embedding
from torch_mma_emu.preview.tiny_gpt import tiny_gpt


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


F32 = np.float32


def _rn32(v: Fraction) -> F32:
    """``v`` rounded to the nearest float32, ties to even (the test data stay normal)."""
    if v == 0:
        return F32(0)
    lo = F32(float(v))
    cands = {lo, np.nextafter(lo, F32(np.inf)), np.nextafter(lo, F32(-np.inf))}
    return min(cands, key=lambda r: (abs(Fraction(float(r)) - v),
                                     int(np.asarray(r).view(np.uint32)) & 1))


def _to(dtype):
    """float32 scalar -> the value of dtype's nearest (torch's CPU conversion, RN-even)."""
    def rnd(x: F32) -> F32:
        if dtype == torch.float32:
            return F32(x)
        return F32(torch.tensor(float(x), dtype=torch.float32).to(dtype).float().item())
    return rnd


def _ref_feature(G, idx, num_weights, padding_idx, dtype):
    """embedding_backward_feature_kernel, thread by thread: block (32, 32), one thread per
    feature f and warp y; a batch of 1024 indices, chunks of 32; each warp whose row is not
    padding finds the warps of its chunk with the same row (its match mask); the lowest of
    them adds the others' values to its own in warp order, in float32, and adds the result,
    cast to the dtype, to the weight row in the dtype."""
    n, D = G.shape
    rnd = _to(dtype)
    W = np.zeros((num_weights, D), F32)
    for f in range(D):
        for batch in range(0, n, 1024):
            end = min(batch + 1024, n)
            for chunk in range(batch, end, 32):
                m = min(32, end - chunk)
                smem = [F32(G[chunk + y, f]) for y in range(m)]
                for y in range(m):
                    dst = idx[chunk + y]
                    if dst == padding_idx:
                        continue
                    mask = [x for x in range(m) if idx[chunk + x] == dst]
                    if mask[0] != y:
                        continue
                    acc = smem[y]
                    for other in mask[1:]:
                        acc = F32(acc + smem[other])
                    W[dst, f] = rnd(F32(W[dst, f] + rnd(acc)))
    return W


def _ref_segments(G, idx, num_weights, padding_idx, scale_by_freq, dtype):
    """The sort + segment path, thread by thread: positions sorted by index (stable);
    segments of equal indices, cut every 10 rows; one thread per (partial, feature) sums
    ``weight = grad * (1/count) + weight`` (an FMA, exact arithmetic rounded once) or
    ``weight + grad`` from 0; one thread per (segment, feature) adds its partials from 0
    and stores the sum, cast to the dtype, unless the segment's index is padding_idx."""
    n, D = G.shape
    rnd = _to(dtype)
    order = sorted(range(n), key=lambda p: (idx[p], p))
    sidx = [idx[p] for p in order]
    starts = [i for i in range(n) if i == 0 or sidx[i] != sidx[i - 1]]
    W = np.zeros((num_weights, D), F32)
    for s, begin in enumerate(starts):
        end = starts[s + 1] if s + 1 < len(starts) else n
        count = end - begin
        scale = _rn32(Fraction(1) / Fraction(count))
        partials = []
        for pb in range(begin, end, 10):
            w = [F32(0)] * D
            for i in range(pb, min(pb + 10, end)):
                for f in range(D):
                    g = F32(G[order[i], f])
                    if scale_by_freq:
                        w[f] = _rn32(Fraction(float(g)) * Fraction(float(scale))
                                     + Fraction(float(w[f])))
                    else:
                        w[f] = F32(w[f] + g)
            partials.append(w)
        if sidx[begin] == padding_idx:
            continue
        for f in range(D):
            acc = F32(0)
            for p in partials:
                acc = F32(acc + p[f])
            W[sidx[begin], f] = rnd(acc)
    return W


def _case(n, D, vocab, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, vocab, (n,), generator=g)
    grad = (torch.randn(n, D, generator=g) *
            torch.exp2(torch.randint(-6, 6, (n, D), generator=g).float())).to(dtype)
    return grad, idx


def _bits(t):
    t = t.detach().contiguous()
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16).numpy()


def _check(grad, idx, vocab, padding_idx, scale, ref):
    got = aten_embedding.model(grad, idx, vocab, padding_idx, scale)
    want = torch.from_numpy(ref).to(grad.dtype)        # exact: ref holds dtype values
    bad = np.flatnonzero(_bits(got).ravel() != _bits(want).ravel())
    assert bad.size == 0, f"{bad.size} of {got.numel()} differ, first at {bad[:5]}"
    return got


DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("padding_idx", [-1, 2])
def test_feature_kernel_matches_threads(dtype, padding_idx):
    grad, idx = _case(200, 3, 7, dtype, seed=1)        # ~29 per row, 7 chunks of 32
    idx[:40] = 2                                       # a whole chunk on one row
    assert emb.path(idx.numel(), False) == "feature"
    ref = _ref_feature(grad.float().numpy(), idx.tolist(), 7, padding_idx, dtype)
    got = _check(grad, idx, 7, padding_idx, False, ref)
    if padding_idx == 2:
        assert not got[2].any()


@pytest.mark.parametrize("dtype", DTYPES)
def test_segments_match_threads(dtype):
    grad, idx = _case(3100, 2, 40, dtype, seed=2)       # > 3072 indices: sort + segments
    idx[:25] = 39                                      # segment lengths 25+: 3 partials
    assert emb.path(idx.numel(), False) == "segments"
    ref = _ref_segments(grad.float().numpy(), idx.tolist(), 41, 5, False, dtype)
    got = _check(grad, idx, 41, 5, False, ref)
    assert not got[5].any() and not got[40].any()      # padding row, unseen row


@pytest.mark.parametrize("dtype", DTYPES)
def test_scale_grad_by_freq_matches_threads(dtype):
    grad, idx = _case(300, 3, 9, dtype, seed=3)         # few indices, but scaled: segments
    idx[:3] = 8
    assert emb.path(idx.numel(), True) == "segments"
    ref = _ref_segments(grad.float().numpy(), idx.tolist(), 10, 0, True, dtype)
    _check(grad, idx, 10, 0, True, ref)


def test_path_threshold_and_zero_signs():
    assert emb.path(emb.FEATURE_MAX_INDICES, False) == "feature"
    assert emb.path(emb.FEATURE_MAX_INDICES + 1, False) == "segments"
    assert emb.path(1, True) == "segments"
    grad = torch.tensor([[-0.0], [-0.0]])                # rows start at +0: +0 + -0 = +0
    for n_rep in (1, 1600):                             # both paths
        g, i = grad.repeat(n_rep, 1), torch.zeros(2 * n_rep, dtype=torch.long)
        out = aten_embedding.model(g, i, 2, -1, False)
        assert math.copysign(1, out[0, 0].item()) == 1.0
    empty = aten_embedding.model(torch.zeros(0, 4), torch.zeros(0, dtype=torch.long), 3, -1,
                                 False)
    assert empty.shape == (3, 4) and not empty.any()


def test_bad_input():
    with pytest.raises(ValueError, match="indices must lie in"):
        emb.dense_backward(np.zeros((2, 3), F32), np.array([0, 5]), 3)
    with pytest.raises(ValueError, match="not modelled"):
        emb.dense_backward(np.zeros((2, 3)), np.array([0, 1]), 3, dtype="float64")
    with pytest.raises(ValueError, match="num_indices"):
        emb.dense_backward(np.zeros((3, 3), F32), np.array([0, 1]), 3)


def _grads_into(module):
    """The gradient that reaches ``module``'s output, captured by a hook."""
    seen = []

    def fwd(mod, inp, out):
        out.register_hook(lambda g: seen.append(g.detach().clone()))
    module.register_forward_hook(fwd)
    return seen


def test_tiny_gpt_training_step():
    m = tiny_gpt(vocab=8).train()                      # 128 tokens of 8: rows repeat
    x = m.example_inputs(4)
    tok, pos = _grads_into(m.tok), _grads_into(m.pos)
    with tme.emulate("sm90", record=True) as em:
        m(x).float().logsumexp(-1).sum().backward()
    s = em.summary()
    assert "aten.embedding_dense_backward" not in em.recorder.natives
    assert "embedding_dense_backward" not in (s.split("ran natively", 1) + [""])[1]
    recs = [r for r in em.records if "embedding_dense_backward" in r.op]
    assert len(recs) == 2 and all(r.kind == "reduction" and "2.13.0" in r.format for r in recs)
    want_tok = aten_embedding.model(tok[0], x, m.config.vocab, -1, False)
    want_pos = aten_embedding.model(pos[0], torch.arange(m.config.seq), m.config.seq, -1,
                                    False)
    assert torch.equal(_bits_t(m.tok.weight.grad), _bits_t(want_tok))
    assert torch.equal(_bits_t(m.pos.weight.grad), _bits_t(want_pos))
    native = torch.ops.aten.embedding_dense_backward(tok[0], x, m.config.vocab, -1, False)
    assert not torch.equal(_bits_t(native), _bits_t(want_tok))   # the CPU sums otherwise


def _bits_t(t):
    return torch.from_numpy(_bits(t).copy())


def test_cpu_bits_differ_and_what_stays_native():
    grad, idx = _case(500, 8, 3, torch.float32, seed=4)  # ~167 rows into each of 3
    cpu = torch.ops.aten.embedding_dense_backward(grad, idx, 3, -1, False)
    with tme.emulate("sm90", record=True) as em:
        gpu = torch.ops.aten.embedding_dense_backward(grad, idx, 3, -1, False)
    assert torch.equal(_bits_t(gpu), _bits_t(aten_embedding.model(grad, idx, 3, -1, False)))
    assert (_bits_t(gpu) != _bits_t(cpu)).sum() > 0
    assert "aten.embedding_dense_backward" not in em.recorder.natives
    assert "ran natively" not in em.summary()
    for arch, g in (("gfx942", grad), ("sm90", grad.double())):
        with tme.emulate(arch, record=True) as em:
            out = torch.ops.aten.embedding_dense_backward(g, idx, 3, -1, False)
        assert torch.equal(out, torch.ops.aten.embedding_dense_backward(g, idx, 3, -1, False))
        assert "aten.embedding_dense_backward" in em.summary().split("ran natively", 1)[1]


def test_out_overload_int32_indices_and_nd_grad():
    grad, idx = _case(120, 4, 5, torch.bfloat16, seed=5)
    grad3, idx3 = grad.view(2, 60, 4), idx.view(2, 60).int()     # (B, T) indices, int32
    want = aten_embedding.model(grad, idx, 5, 1, False)
    out = torch.empty(0, dtype=torch.bfloat16)
    with tme.emulate("sm80", record=True) as em:
        got = torch.ops.aten.embedding_dense_backward(grad3, idx3, 5, 1, False)
        torch.ops.aten.embedding_dense_backward.out(grad3, idx3, 5, 1, False, out=out)
    assert torch.equal(_bits_t(got), _bits_t(want)) and torch.equal(_bits_t(out), _bits_t(want))
    assert [r.op for r in em.records] == ["aten.embedding_dense_backward.default",
                                          "aten.embedding_dense_backward.out"]


@pytest.mark.parametrize("n", [emb.FEATURE_MAX_INDICES, emb.FEATURE_MAX_INDICES + 1])
def test_threshold_boundary_matches_threads(n):
    grad, idx = _case(n, 1, 3, torch.float16, seed=6)   # ~1000 rows into each of 3
    ref = (_ref_feature(grad.float().numpy(), idx.tolist(), 3, -1, torch.float16)
           if n <= 3072 else
           _ref_segments(grad.float().numpy(), idx.tolist(), 3, -1, False, torch.float16))
    _check(grad, idx, 3, -1, False, ref)
