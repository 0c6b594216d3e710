"""FPRev recovers declared schedules, and a revealed tree run as ``Schedule.from_tree``
reproduces the schedule it came from bit for bit.

The expected trees are built here from the documented semantics (slices of chains of
L-product fused operations, reductions, promotion into an fp32 accumulator), not by the
code under test."""
import zlib

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import fprev
from torch_mma_emu.fprev import SumTree
from torch_mma_emu.inputs import operands
from torch_mma_emu.schedule import Schedule

ARCH, L, K = "sm90", 16, 256     # sm90 fp16 -> fp32: 16-product fused operations


class Builder:
    def __init__(self, n):
        self.n, self.nodes = n, []

    def node(self, kind, children):
        self.nodes.append((kind, list(children)))
        return self.n + len(self.nodes) - 1

    def chain(self, k0, k1, acc=None):
        for c0 in range(k0, k1, L):
            ch = list(range(c0, min(k1, c0 + L))) + ([acc] if acc is not None else [])
            acc = self.node("fused" if len(ch) > 2 else "add", ch)
        return acc

    def add(self, x, y):
        return self.node("add", [x, y])

    def tree(self):
        return SumTree(self.n, self.nodes)


def expected(s: Schedule) -> SumTree:
    b = Builder(K + 1)
    C = K
    if s.promote_every:
        acc = C if s.c_mode == "chain" else None
        for b0 in range(0, K, s.promote_every):
            blk = b.chain(b0, b0 + s.promote_every)
            acc = blk if acc is None else b.add(acc, blk)   # +0 + first block is invisible
        if s.c_mode == "epilogue":
            b.add(acc, C)
        return b.tree()
    size = K // s.split_k
    parts = [b.chain(k0, k0 + size) for k0 in range(0, K, size)]
    if s.reduce == "sequential":
        acc = parts[0]
        for p in parts[1:]:
            acc = b.add(acc, p)
    else:
        while len(parts) > 1:
            parts = [b.add(parts[i], parts[i + 1]) for i in range(0, len(parts), 2)]
        acc = parts[0]
    b.add(acc, C)
    return b.tree()


DECLARED = [Schedule(split_k=s, reduce=r) for s in (2, 4, 8) for r in ("sequential", "pairwise")]
DECLARED += [Schedule(promote_every=p, c_mode=c) for p in (64, 128) for c in ("chain", "epilogue")]


@pytest.mark.parametrize("sched", DECLARED, ids=lambda s: s.to_string()[9:])
def test_fprev_recovers_schedule_and_tree_reproduces_it(sched):
    def mm(A, B, C=None):
        return tme.emulated_mm(A, B, C, arch=ARCH, schedule=sched)

    tree = fprev.reveal_matmul(8, 8, K, mm=mm, dtype=torch.float16, with_c=True)
    assert tree == expected(sched), tree.to_text()
    from_tree = Schedule.from_tree(tree)
    spec = tme.spec(ARCH, "fp16")
    for family in ("normal", "cancel", "bitstream"):
        g = torch.Generator().manual_seed(zlib.crc32(f"{sched}{family}".encode()))
        kw = operands(spec, 6, 5, K, family, g)
        D1 = tme.emulated_mm(kw["A"], kw["B"], kw["C"], arch=ARCH, schedule=sched)
        D2 = tme.emulated_mm(kw["A"], kw["B"], kw["C"], arch=ARCH, schedule=from_tree)
        assert torch.equal(D1.view(torch.int32), D2.view(torch.int32)), family


@pytest.mark.parametrize("arch, dtype, out", [
    ("sm90", torch.float16, torch.float32), ("sm80", torch.float16, torch.float16),
    ("sm80", torch.bfloat16, torch.float32), ("gfx942", torch.float16, torch.float32),
    ("gfx90a", torch.float16, torch.float32), ("sm90", torch.float32, torch.float32),
    ("sm70", torch.float16, torch.float32)])
def test_revealed_plain_chain_reproduces_the_chain(arch, dtype, out):
    k = 15 if arch == "gfx90a" else 40   # FPRev's probe range on gfx90a fp16: <= 16 summands
    tree = fprev.reveal_matmul(8, 8, k, mm="emulated", arch=arch, dtype=dtype, out_dtype=out,
                               with_c=True)
    s = Schedule.from_tree(tree)
    spec = tme.spec(arch, {torch.float16: "fp16", torch.bfloat16: "bf16",
                           torch.float32: "fp32"}[dtype], {torch.float32: "fp32",
                                                           torch.float16: "fp16"}[out])
    for family in ("normal", "cancel", "bitstream"):
        g = torch.Generator().manual_seed(zlib.crc32(f"{arch}{dtype}{family}".encode()))
        kw = operands(spec, 5, 4, k, family, g)
        D1 = tme.emulated_mm(kw["A"], kw["B"], kw["C"], arch=arch, out_dtype=out)
        D2 = tme.emulated_mm(kw["A"], kw["B"], kw["C"], arch=arch, out_dtype=out, schedule=s)
        i = torch.int16 if out == torch.float16 else torch.int32
        assert torch.equal(D1.view(i), D2.view(i)), (family, tree.to_text())


def test_tree_without_c_leaf_adds_c_in_the_epilogue():
    g = torch.Generator().manual_seed(0)
    A, B, C = torch.randn(4, 32, generator=g).half(), torch.randn(32, 3, generator=g).half(), \
        torch.randn(4, 3, generator=g)
    tree = fprev.reveal_matmul(8, 8, 32, mm="emulated", arch="sm90", dtype=torch.float16)
    D = tme.emulated_mm(A, B, C, arch="sm90", schedule=Schedule.from_tree(tree))
    assert torch.equal(D, tme.emulated_mm(A, B, arch="sm90") + C)


def _chain_tree(K, L, with_c):
    """The plain chain as a tree: C (leaf K) is the first operation's accumulator."""
    b = Builder(K + 1 if with_c else K)
    acc = K if with_c else None
    start = 0
    if L == 1 and not with_c:   # an FMA chain from +0: FPRev sees (0 + 1) first
        acc, start = b.node("add", [0, 1]), 2
    for c0 in range(start, K, L):
        ch = list(range(c0, min(K, c0 + L))) + ([acc] if acc is not None else [])
        acc = b.node("fused" if len(ch) > 2 else "add", ch)
    return b.tree()


def _spec_id(s):
    return (f"{s.arch}-{s.in_format}{'x' + s.in_format_b if s.in_format_b else ''}-"
            f"{s.out_format}-{s.instruction[:12]}")


def _assert_tree_runs_like_the_instruction(spec, K, tree_of):
    """emulated_mm with Schedule.from_tree(tree_of(with_c)) gives the plain product's bits,
    with and without C, on the three input families."""
    for with_c, family in ((True, "bitstream"), (False, "normal"), (True, "cancel")):
        g = torch.Generator().manual_seed(zlib.crc32(f"{spec.to_string()}{family}".encode()))
        kw = operands(spec, 3, 2, K, family, g)
        C = kw.pop("C") if with_c else None
        kw.pop("C", None)
        want = tme.emulated_mm(**kw, C=C)
        got = tme.emulated_mm(**kw, C=C, schedule=Schedule.from_tree(tree_of(with_c)))
        i = {2: torch.int16, 4: torch.int32, 8: torch.int64}[want.element_size()]
        assert torch.equal(want.view(i), got.view(i)), (family, want, got)


UNSCALED = [s for s in tme.registry.all_specs() if not s.scaled]
# Multi-pass instructions (Hopper/Blackwell mma.sync.m16n8k32 fp8) are not one operation
# per chunk: their tree is the pass tree below.
SINGLE = [s for s in UNSCALED if s.passes == 1 and s.c_join == "first"]
MULTI = [s for s in UNSCALED if not (s.passes == 1 and s.c_join == "first")]


def _pass_tree(spec, K, with_c):
    """The tree a multi-pass instruction chain implies: per instruction, one fused node per
    pass over its k ((k // w) % passes == p), each pass taking the previous one as its
    accumulator; c (or the previous instruction's result) joins the first pass, or in one
    IEEE addition after the last pass (c_join="final")."""
    w = spec.pass_width or spec.L
    span = spec.passes * spec.L
    b = Builder(K + 1 if with_c else K)
    acc = K if with_c else None
    for k0 in range(0, K, span):
        t = None if spec.c_join == "final" else acc
        for p in range(spec.passes):
            ks = [k0 + k for k in range(span) if (k // w) % spec.passes == p and k0 + k < K]
            ch = ks + ([t] if t is not None else [])
            t = b.node("fused" if len(ch) > 2 else "add", ch) if len(ch) > 1 else ks[0]
        acc = t if (spec.c_join != "final" or acc is None) else b.node("add", [t, acc])
    return b.tree()


@pytest.mark.parametrize("spec", MULTI, ids=_spec_id)
def test_pass_tree_runs_multipass_rows_like_the_instruction(spec):
    """A multi-pass row's pass tree through the interpreter gives the instruction's bits.
    Binary nodes add in the workspace (fp32), so with an fp16 output only one instruction
    is exact as a tree (one final rounding of an fp32 sum of two fp16 values is innocuous;
    a second instruction would take an unrounded accumulator)."""
    span = spec.passes * spec.L
    K = span if spec.out_format == "fp16" else 2 * span + span // 2 + 1
    _assert_tree_runs_like_the_instruction(spec, K, lambda with_c: _pass_tree(spec, K, with_c))


@pytest.mark.parametrize("spec", SINGLE, ids=_spec_id)
def test_chain_tree_runs_every_registry_entry_like_the_chain(spec):
    """Every elementary operation (fma, ftz_addmul, e/t/tr/gtr_fdpa) run through the tree
    interpreter gives the chain's bits, partial last chunk and specials included."""
    cap = spec.L       # an instruction (ftz_addmul: L products, its accumulator flushed once)
    K = 2 * cap + cap // 2 + 1
    _assert_tree_runs_like_the_instruction(spec, K, lambda with_c: _chain_tree(K, cap, with_c))
