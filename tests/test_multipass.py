"""Multi-pass instructions (docs/model.md section 2.1): the Spec fields, their validation and
serialisation, hand-computed results that only the pass structure explains, and the op's
autograd / torch.compile paths on a multi-pass spec."""
import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import cpp
from torch_mma_emu import reference as ref
from torch_mma_emu.reference.gemm import instruction
from torch_mma_emu.spec import Spec

MMA_SYNC = dict(instruction="mma.sync.m16n8k32")


def fp8(vals):
    return torch.tensor(vals, dtype=torch.float32).to(torch.float8_e4m3fn)


def run(sp, a, b, c, out=torch.float16):
    A = fp8(a).reshape(1, -1)
    B = fp8(b).reshape(-1, 1)
    C = torch.tensor([[c]], dtype=out)
    return float(tme.emulated_mm(A, B, C, arch=sp, out_dtype=out))


def test_fields_layout_and_serialisation():
    sp = tme.spec("sm90", "fp8_e4m3", torch.float16, **MMA_SYNC)
    assert (sp.passes, sp.L, sp.width, sp.c_join, sp.instr_k) == (2, 16, 2, "final", 32)
    ks = sp.pass_ks()
    assert ks[0][:6] == [0, 1, 4, 5, 8, 9] and ks[1][:6] == [2, 3, 6, 7, 10, 11]
    assert sorted(ks[0] + ks[1]) == list(range(32))
    assert sp.pass_layout() == "alternating pairs"
    s = sp.to_string()
    assert "passes=2" in s and "pass_width=2" in s and "c_join=final" in s
    assert Spec.from_string(s) == sp
    # single-pass specs serialise without the new fields, as before they existed
    plain = tme.spec("sm90", "fp16")
    assert "passes" not in plain.to_string() and not plain.multipass
    # the params vector keeps every old field in place and appends passes, width, c_final
    p, old = list(cpp.params(sp)), list(cpp.params(plain))
    # (then the corners' zero_exp, zero_plus, group_keep, tr_renorm, c_emin: docs/model.md 6)
    assert len(p) == len(old) == 50 and p[-8:-5] == [2, 2, 1] and old[-8:-5] == [1, 16, 0]
    assert "passes=2x16 (alternating pairs, width 2) c_join=final" in sp.describe()


@pytest.mark.parametrize("bad,msg", [
    (dict(passes=0), "passes must be an int in 1..16"),
    (dict(passes=2.0), "passes must be an int"),
    (dict(passes=2, pass_width=3), "pass_width=3 must divide L=16"),
    (dict(passes=2, pass_width=-1), "pass_width must be an int >= 0"),
    (dict(c_join="middle"), "c_join must be one of"),
    (dict(passes=2, L=128), "a pass covers at most 64"),
    (dict(passes=8, L=64), "at most 256"),
])
def test_invalid_multipass_fields_are_refused(bad, msg):
    base = tme.spec("sm90", "fp8_e4m3", torch.float16, **MMA_SYNC)
    with pytest.raises(ValueError, match=msg):
        base.replace(**bad)


def test_multipass_needs_an_unscaled_fused_op():
    with pytest.raises(ValueError, match="passes > 1 or c_join='final' take one of"):
        tme.spec("sm90", "fp32").replace(c_join="final")                 # fma
    with pytest.raises(ValueError, match="take one of"):
        tme.spec("sm100", "fp8_e4m3", scale_format="ue8m0").replace(passes=2, L=16)
    with pytest.raises(ValueError, match="unknown spec field"):
        Spec.from_string("spec:op=t_fdpa,in_format=fp16,out_format=fp32,F=24,rho=rz_fp32,"
                         "L=8,npasses=2")


def test_cancellation_across_passes_by_hand():
    """s at k = 0, +B at i, -B at j (B = 1.5 * 2**4, s = B's half ulp in fp16 = 2**-7):
    the two-pass instruction keeps s only when i and j share a pass, as the recordings
    show; the library instruction (one fused sum of 32) always keeps it."""
    sp = tme.spec("sm90", "fp8_e4m3", torch.float16, **MMA_SYNC)
    qgmma = tme.spec("sm90", "fp8_e4m3", torch.float16).replace(F=25)
    B, s = 24.0, 2.0 ** -7

    def vec(i, j):
        a = [0.0] * 32
        a[0], a[i], a[j] = s, B, -B
        return a
    ones = [1.0] * 32
    for i, j, same in [(1, 4, True), (1, 2, False), (2, 3, True), (2, 6, True), (4, 7, False),
                       (30, 31, True), (29, 30, False)]:
        assert run(sp, vec(i, j), ones, 0.0) == (s if same else 0.0), (i, j)
        assert run(qgmma, vec(i, j), ones, 0.0) == s
    # c added last: c = s next to B in the first pass survives, B - B cancels across passes
    a = [0.0] * 32
    a[0], a[2] = B, -B
    assert run(sp, a, ones, s) == s
    assert run(sp.replace(c_join="first"), a, ones, s) == 0.0


def test_c_added_per_instruction_not_per_product():
    """K = 64 is two instructions: the second adds the first one's result last, and
    c_mode='epilogue' still adds C once at the very end."""
    sp = tme.spec("sm100", "fp8_e4m3", torch.float32, **MMA_SYNC)
    g = torch.Generator().manual_seed(5)
    A = (torch.randn(3, 64, generator=g) * 4).to(torch.float8_e4m3fn)
    B = (torch.randn(64, 2, generator=g) * 4).to(torch.float8_e4m3fn)
    C = torch.randn(3, 2, generator=g) * 100
    for mode in ("chain", "epilogue"):
        D = tme.emulated_mm(A, B, C, arch=sp, c_mode=mode)
        R = ref.mm(sp, A, B, C, c_mode=mode)
        assert torch.equal(D.view(torch.int32), R.view(torch.int32)), mode
    # by hand: instruction 2 = RZ(passes over k >= 32) + RNE(instruction 1)
    first = tme.emulated_mm(A[:, :32], B[:32], C, arch=sp)
    whole = tme.emulated_mm(A, B, C, arch=sp)
    second = tme.emulated_mm(A[:, 32:], B[32:], first, arch=sp)
    assert torch.equal(whole, second)


def test_reference_instruction_groups_by_the_formula():
    sp = tme.spec("sm90", "fp8_e4m3", torch.float16, **MMA_SYNC)
    one = 0x38                               # 1.0 in e4m3
    a = [0] * 32
    a[2] = one                               # only pass 1 has a product
    assert instruction(sp, a, [one] * 32, 0x3C00) == 0x4000     # 1 + 1 (fp16)
    with pytest.raises(ValueError, match="passes \\* L = 32"):
        instruction(sp, a[:16], a[:16], 0)


def test_autograd_and_compile_on_a_multipass_spec():
    sp = tme.spec("sm90", "fp16").replace(L=8, passes=2, pass_width=2, c_join="final")
    g = torch.Generator().manual_seed(1)
    A = torch.randn(4, 40, generator=g).half().requires_grad_()
    B = torch.randn(40, 3, generator=g).half().requires_grad_()
    C = torch.randn(4, 3, generator=g)
    D = tme.emulated_mm(A, B, C, arch=sp)
    R = ref.mm(sp, A.detach(), B.detach(), C)
    assert torch.equal(D.view(torch.int32), R.view(torch.int32))
    D.sum().backward()
    assert A.grad is not None and A.grad.shape == A.shape and torch.isfinite(A.grad).all()
    arch = sp.to_string()           # a Spec travels through the op as its string
    f = torch.compile(lambda a, b, c: tme.emulated_mm(a, b, c, arch=arch), fullgraph=True,
                      backend="eager")
    assert torch.equal(f(A.detach(), B.detach(), C), D.detach())
