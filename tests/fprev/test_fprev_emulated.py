"""Matrix-unit models: the trees FPRev reveals in ``emulated_mm`` (and the exact reference).

Seed 001 Figure 4: NVIDIA fp16 Tensor Cores sum in chains of (4+1)-, (8+1)- and
(16+1)-term fused sums on Volta, Ampere and Hopper.  Every registry entry is revealed and
compared with the tree its elementary operation implies (seed 003 Algorithms 1-11):

* FMA chains: sequential;
* T-FDPA (NVIDIA), TR-FDPA and GTR-FDPA (AMD CDNA3): (L+1)-term fused chains.  CDNA3 adds
  c in a separate rounded step and fp8 even/odd groups separately, but a cancelled group
  keeps its exponent, which swamps c and the other group: FPRev sees one fused sum;
* E-FDPA (AMD CDNA1): (L+1)-term *exact* (non-swamped) chains;
* FTZ-AddMul (AMD CDNA2): pairwise additions within groups of P, groups chained.

Entries whose input range cannot swamp their accumulator (fp8 e4m3 with 25 kept fraction
bits) must raise, never give a tree.  Block-scaled (MX/NVFP4) and fp6/fp4 entries take uint8
codes and scales and are not probed.
"""
import pytest
import torch

from torch_mma_emu import fprev, registry
from torch_mma_emu.formats import FORMATS
from torch_mma_emu.fprev import ProbeRangeError, builders as B, replay

import torch_mma_emu as tme

BACKENDS = ["emulated", "reference"]
OUT = {"fp32": torch.float32, "fp16": torch.float16, "fp64": torch.float64}


def multipass_tree(sp, K: int) -> fprev.SumTree:
    """Multi-pass instructions (docs/model.md 2.1): per instruction, a fused sum per pass
    (the next pass fusing the previous result), then the accumulator added last."""
    b = B._Builder(K)
    acc = None
    n = sp.instr_k
    for k0 in range(0, K, n):
        t = None
        for ks in sp.pass_ks():
            terms = [k0 + k for k in ks if k0 + k < K]
            t = b.node("fused", ([] if t is None else [t]) + terms)
        acc = t if acc is None else b.node("add", [t, acc])
    return b.tree(acc)


def expected(op: str, K: int, L: int, P: int) -> fprev.SumTree:
    if op == "fma":
        return B.sequential(K)
    if op in ("t_fdpa", "tr_fdpa", "gtr_fdpa"):
        return B.fused_chain(K, L)
    if op == "e_fdpa":
        return B.fused_chain(K, L, kind="exact")
    if op == "ftz_addmul":
        return B.blocked(K, P, combine="sequential", inner="pairwise")
    raise AssertionError(op)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("arch, L", [("sm70", 4), ("sm80", 8), ("sm90", 16)])
def test_figure_4_fp16_chains(backend, arch, L):
    K = 32 if backend == "reference" else 64
    tree = fprev.reveal_matmul(16, 4, K, mm=backend, arch=arch, dtype=torch.float16)
    assert tree == B.fused_chain(K, L)
    assert tree.describe() == f"chain of ({L}+1)-term fused sums over consecutive chunks"


def _entries():
    seen = {}
    for sp in registry.all_specs():
        if sp.scale_format or sp.in_format_b:
            continue
        key = (sp.op, sp.L, sp.P, sp.in_format, sp.out_format, sp.F, sp.F2, sp.flush_inputs,
               sp.passes, sp.width, sp.c_join)
        seen.setdefault(key, sp)
    return list(seen.values())


def _dtype(sp):
    fmt = FORMATS[sp.in_format]
    if fmt.container_bits == 32:
        return torch.float32, sp.in_format
    return fmt.torch_dtype, None


ENTRIES = _entries()


@pytest.mark.parametrize("sp", ENTRIES, ids=[f"{s.arch}-{s.op}-L{s.L}-{s.in_format}-"
                                             f"{s.out_format}" for s in ENTRIES])
def test_registry_entry_shapes(sp):
    dtype, in_format = _dtype(sp)
    if dtype is None:
        pytest.skip(f"{sp.in_format} is given as uint8 codes; its range cannot swamp anyway")
    K = 48
    kw = dict(mm="emulated", arch=sp.arch, dtype=dtype, in_format=in_format,
              out_dtype=OUT[sp.out_format], instruction=sp.instruction)
    keep = max(sp.F, sp.F2)
    fmt = FORMATS[sp.in_format]
    if sp.op != "e_fdpa" and fmt.bits == 8 and fmt.exp_bits == 4 and keep > 16:
        with pytest.raises(ProbeRangeError, match="range is too narrow"):
            fprev.reveal_matmul(32, 4, K, **kw)
        return
    if (sp.op == "t_fdpa" and sp.in_format == "fp8_e4m3") or \
            (sp.op == "ftz_addmul" and sp.in_format == "fp16"):
        # the units summed before a mask reach big's kept precision for K > 16
        # (tests/fprev/test_fprev_review.py): refused at K = 48, revealed at K = 16
        with pytest.raises(ProbeRangeError, match="range is too narrow"):
            fprev.reveal_matmul(32, 4, K, **kw)
        K = 16
    tree = fprev.reveal_matmul(32, 4, K, **kw)
    want = multipass_tree(sp, K) if sp.multipass else expected(sp.op, K, sp.L, sp.P)
    assert tree == want, tree.describe()


@pytest.mark.parametrize("backend", BACKENDS)
def test_c_in_the_chain_or_in_an_epilogue(backend):
    K, L = 32, 16
    b = B._Builder(K + 1)
    acc = b.node("fused", [K] + list(range(L)))  # C is fused with the first chunk
    chain = b.tree(b.node("fused", [acc] + list(range(L, K))))
    epi = B._Builder(K + 1)
    epi_tree = epi.tree(epi.node("add", [epi.fused_chain(list(range(K)), L), K]))
    kw = dict(mm=backend, arch="sm90", dtype=torch.float16, with_c=True)
    assert fprev.reveal_matmul(8, 2, K, **kw) == chain
    assert fprev.reveal_matmul(8, 2, K, c_mode="epilogue", **kw) == epi_tree


def _random_operands(K, dtype, n=8):
    g = torch.Generator().manual_seed(3)
    A = (torch.randn(n, K, generator=g) * 4).to(dtype)
    A = torch.where(A.abs() < 2 ** -6, torch.ones_like(A), A)   # normal numbers only
    B_ = (2.0 ** torch.randint(-3, 4, (K, 1), generator=g)).to(dtype)  # exact products
    return A, B_


@pytest.mark.parametrize("arch, dtype, out, model", [
    ("sm80", torch.float16, torch.float32, fprev.truncated_sum(24)),
    ("sm80", torch.float16, torch.float16, fprev.truncated_sum(24, "float16", "rne")),
    ("sm90", torch.bfloat16, torch.float32, fprev.truncated_sum(25)),
    ("gfx908", torch.float16, torch.float32, fprev.exact_sum("float32")),
])
def test_replay_reproduces_emulated_mm(arch, dtype, out, model):
    """The revealed tree plus the fused-sum model of seed 003 Algorithm 7 (or the exact
    sum of Algorithm 6) reproduces emulated_mm bit for bit on random inputs."""
    K = 64
    tree = fprev.reveal_matmul(16, 4, K, mm="emulated", arch=arch, dtype=dtype, out_dtype=out)
    A, Bm = _random_operands(K, dtype)
    D = tme.emulated_mm(A, Bm, arch=arch, out_dtype=out)[:, 0].double()
    prods = A.double() * Bm[:, 0].double()
    got = replay(tree, prods, dtype=str(out).replace("torch.", ""), fused=model, exact=model)
    assert torch.equal(torch.from_numpy(got), D)


def test_reference_needs_no_extension():
    tree = fprev.reveal_matmul(8, 2, 24, mm="reference", arch="gfx908", dtype=torch.float16)
    assert tree == B.fused_chain(24, 4, kind="exact")
