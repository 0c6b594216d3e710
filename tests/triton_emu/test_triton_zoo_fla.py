"""fla-core's chunked linear-attention kernels as shipped (``chunk_gla``,
``chunk_simple_gla``, ``chunk_delta_rule``), forward and backward, under emulate on sm_90,
sm_80 and gfx942 (tests/triton_emu/triton_zoo.py), against float64 recurrences of the same math written
here from the models' definitions (gated linear attention: S_t = diag(exp(g_t)) S_{t-1} +
k_t^T v_t, o_t = scale q_t S_t; simple GLA: one scalar gate per head; delta rule:
S_t = S_{t-1} + beta_t k_t^T (v_t - k_t S_{t-1})).  These kernels use tensor loop variables
(``i_t.to(tl.int64)``), autotuning and many dots per program."""
import pytest
import torch
import torch.nn.functional as F

from triton_zoo import ARCHS, check_dots, need, run_zoo

gla = need("fla.ops.gla")
simple_gla = need("fla.ops.simple_gla")
delta_rule = need("fla.ops.delta_rule")

B, T, H, K, V = 1, 64, 2, 32, 32


def _gla_ref(q, k, v, g, scale):       # g: (B, T, H, K) log gates, or (B, T, H) scalar
    S = q.new_zeros(B, H, K, V)
    o = []
    for t in range(T):
        gt = g[:, t].exp()
        S = S * (gt[..., None] if gt.dim() == 3 else gt[..., None, None]) \
            + k[:, t, :, :, None] * v[:, t, :, None, :]
        o.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, S))
    return torch.stack(o, 1)


def _delta_ref(q, k, v, beta, scale):
    S = q.new_zeros(B, H, K, V)
    o = []
    for t in range(T):
        u = (v[:, t] - torch.einsum("bhk,bhkv->bhv", k[:, t], S)) * beta[:, t, :, None]
        S = S + k[:, t, :, :, None] * u[..., None, :]
        o.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, S))
    return torch.stack(o, 1)


def _inputs(seed, gate):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, T, H, d, generator=g) for d in (K, K, V))
    if gate == "delta":
        k = F.normalize(k, dim=-1)
        extra = torch.rand(B, T, H, generator=g).sigmoid()
    else:
        extra = F.logsigmoid(torch.randn(B, T, H, *((K,) if gate == "gla" else ()),
                                         generator=g)) / 4
    return [x.to(torch.bfloat16) for x in (q, k, v, extra)]


def _close(out, ref, frac):
    err = (out.double() - ref).abs().max().item()
    assert err <= frac * ref.abs().max().item(), f"error {err:.3g} vs max {ref.abs().max():.3g}"


CASES = {"chunk_gla": (lambda: gla.chunk_gla, "gla", _gla_ref),
         "chunk_simple_gla": (lambda: simple_gla.chunk_simple_gla, "simple", _gla_ref),
         "chunk_delta_rule": (lambda: delta_rule.chunk_delta_rule, "delta", _delta_ref)}


@pytest.mark.parametrize("key", list(ARCHS))
@pytest.mark.parametrize("name", list(CASES))
def test_fla_forward_backward(name, key):
    op, gate, ref_fn = CASES[name]
    ins = _inputs(list(CASES).index(name), gate)
    leaves = [x.clone().requires_grad_() for x in ins]
    w = torch.randn(B, T, H, V, generator=torch.Generator().manual_seed(7))
    scale = K ** -0.5

    def run():
        o, _ = op()(*leaves, scale=scale)
        return (o, *torch.autograd.grad((o.float() * w).sum(), leaves))
    (o, *grads), em, launches = run_zoo(key, run)
    dl = [x.double().requires_grad_() for x in ins]
    ref = ref_fn(*dl, scale)
    rgrads = torch.autograd.grad((ref * w.double()).sum(), dl)
    _close(o, ref.detach(), 2e-2)                         # bf16 in and out
    for g_, r_ in zip(grads, rgrads):
        _close(g_, r_, 3e-2)
    check_dots(key, em)
    assert len(launches) >= 4                             # several kernels, fwd and bwd
