"""Whole Triton programs against the hardware: each kernel natively on this GPU, and the
same kernel on CPU copies of its inputs inside ``torch_mma_emu.triton.emulate(<this GPU's
arch>)``, compared bit for bit (docs/triton.md, GPU step ``triton``).

    python scripts/gpu/triton_emulate.py --out $OUT/triton.md --archive $OUT/triton_mismatches.tar
    python scripts/gpu/triton_emulate.py --stand-in --quick --out /tmp/t.md   # no GPU

Kernels: a GEMM nobody in the project wrote (tests/triton_user_matmul.py, after Triton's
tutorial; the emulation runs the config the GPU's autotuner picked), triton_kernels.matmul
in every format this GPU's Triton takes (fp8 with max_num_imprecise_acc None / 32 / 128,
fp16 accumulators, the fp32 splits; and written ``acc += tl.dot(a, b)``, which the compiler
folds into the chain), an fp32 GEMM by broadcast multiply-and-sum (compiled to tf32 dots),
the 3-D-dot batched GEMM, row-wise reductions and math (triton_kernels/rowwise.py: sums
with aligned and unaligned rows and a contracted tail, softmax, layer norm, exp2 and
division; exact once the emulation runs reductions, contraction and approximate functions
as the compiled code does, issue 30), the fused attention (launched
with enable_fp_fusion=False), and the tl.dot_scaled MX GEMM.  Expected: every case bit-exact
(the emulation runs reductions in the compiled order, the GPU's ex2.approx and div.full and
the contracted fmas: issue 30); a case marked "info" would be reported, not counted.

Mismatching cases go into one tar (torch_mma_emu.hw.archive.Archive: inputs, native and
emulated outputs) for a re-run anywhere.  Exit 0 on the GPU whatever it finds, 1 if the harness fails.
``--stand-in``: no GPU; the "native" result is the emulation run again on fresh copies (a
self-test of the harness; ``--perturb CASE`` flips one output bit there), exit 1 on any
mismatch.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
import traceback
import warnings
from collections import Counter

import torch

from .. import triton as tmt
from ..formats import INT_OF_SIZE
from ..registry import ARCHS, DEFAULT_ARCH, canonical_arch
from ..triton.inductor import NotEmulatedError
from .common import bits

# the checkout holding the package: the user kernel is its tests/triton_user_matmul.py
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _user_matmul():
    """tests/triton_user_matmul.py, a GEMM nobody in the project wrote (imported by name
    where tests/ is on the path, else loaded from the checkout)."""
    if "triton_user_matmul" not in sys.modules:
        path = os.path.join(ROOT, "tests", "triton_user_matmul.py")
        spec = importlib.util.spec_from_file_location("triton_user_matmul", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["triton_user_matmul"] = mod     # Triton's JIT reads the source by module
        spec.loader.exec_module(mod)
    return sys.modules["triton_user_matmul"]


def rnd(g, shape, dt, scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).to(dt)


def cases(arch: str, quick: bool):
    """(name, expectation, make(g) -> inputs, run(inputs, emulating) -> output)."""
    from .. import triton_kernels as K
    um = _user_matmul()
    cap = ARCHS[canonical_arch(arch)].capability        # None on AMD
    nv = cap is not None
    cc = 10 * cap[0] + cap[1] if nv else 0
    out = []
    M, Kd, N = (96, 160, 80) if quick else (200, 384, 176)

    def user(dt, out_dtype):
        def make(g):
            return rnd(g, (M, Kd), dt), rnd(g, (Kd, N), dt)

        def run(x, emu):
            return um.matmul(*x, out_dtype=out_dtype)
        return make, run
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        out.append((f"user GEMM {str(dt)[6:]} -> fp32", "exact", *user(dt, torch.float32)))
    out.append(("user GEMM float16 -> float16", "exact", *user(torch.float16, None)))

    def gemm(fmt, dt, **kw):
        def make(g):
            return (rnd(g, (M, Kd), dt), rnd(g, (Kd, N), dt), rnd(g, (M, N), torch.float32))

        def run(x, emu):
            return K.matmul(*x, in_format=fmt if dt == torch.float32 else None, **kw)
        return make, run
    fmts = [("fp16", torch.float16), ("bf16", torch.bfloat16), ("fp32", torch.float32)]
    if nv and cc >= 80:
        fmts += [("tf32", torch.float32), ("tf32x3", torch.float32)]
    fmts += [("bf16x3", torch.float32)]
    for fmt, dt in fmts:
        out.append((f"matmul {fmt}", "exact", *gemm(fmt, dt)))
    out.append(("matmul fp16 -> fp16 acc", "exact", *gemm("fp16", torch.float16,
                                                           out_dtype=torch.float16)))
    if nv and cc >= 89:
        for imp in (None, 32, 128):
            out.append((f"matmul fp8_e4m3 imprecise={imp}", "exact",
                        *gemm("fp8_e4m3", torch.float8_e4m3fn, block_k=128,
                              max_num_imprecise_acc=imp)))
        out.append(("matmul fp8_e5m2 block 32x64", "exact",
                    *gemm("fp8_e5m2", torch.float8_e5m2, block_m=32)))

    # the compiler's rewrites the interpreter replays (torch_mma_emu/triton/combine.py):
    # acc += tl.dot(a, b) is the chain tl.dot(a, b, acc) (not for fp8 on sm90 unless
    # max_num_imprecise_acc=0), and an fp32 broadcast multiply-and-sum is a tf32 dot
    plus = [("fp16", torch.float16, {}), ("bf16", torch.bfloat16, {}),
            ("fp16", torch.float16, dict(out_dtype=torch.float16))]
    if nv and cc >= 80:
        plus.append(("tf32", torch.float32, {}))
    if nv and cc >= 89:
        plus += [("fp8_e4m3", torch.float8_e4m3fn, dict(block_k=128)),
                 ("fp8_e4m3", torch.float8_e4m3fn, dict(block_k=128, max_num_imprecise_acc=0))]
    for fmt, dt, kw in plus:
        what = "".join([" -> fp16 acc" if kw.get("out_dtype") else "",
                        " imprecise=0" if "max_num_imprecise_acc" in kw else ""])
        out.append((f"matmul {fmt}{what}, acc += tl.dot", "exact",
                    *gemm(fmt, dt, dot_form="plus_eq", **kw)))

    def by_sum(tile):
        def make(g):
            return (rnd(g, (M, Kd), torch.float32), rnd(g, (Kd, N), torch.float32),
                    rnd(g, (M, N), torch.float32))
        return make, lambda x, emu: K.sum_matmul(*x, block_m=tile, block_n=tile)
    for tile in (32, 64):
        out.append((f"sum_matmul fp32 {tile}x{tile} (sum of products)", "exact",
                    *by_sum(tile)))

    def bmm(dt):
        def make(g):
            return rnd(g, (4, 48, 96), dt), rnd(g, (4, 96, 40), dt)
        return make, lambda x, emu: K.bmm(*x)
    out.append(("bmm fp16 (3-D dots)", "exact", *bmm(torch.float16)))
    if nv and cc >= 89:
        out.append(("bmm fp8_e4m3 (3-D dots)", "exact", *bmm(torch.float8_e4m3fn)))

    def attention(integer, causal):
        Z, Nq, Nk, D = (1, 96, 80, 32) if quick else (2, 160, 144, 64)

        def make(g):
            if integer:      # scores are integers in [0, 12]: every exp2, sum and scaling
                #              is exact in any order (20 bits at most), only P @ V rounds
                idx = torch.rand(Z, Nq, D, generator=g).argsort(-1)[..., :12]
                q = torch.zeros(Z, Nq, D).scatter_(-1, idx, 1.0).half()
                k = torch.randint(0, 2, (Z, Nk, D), generator=g).half()
            else:
                q, k = rnd(g, (Z, Nq, D), torch.float16), rnd(g, (Z, Nk, D), torch.float16)
            return q, k, rnd(g, (Z, Nk, D), torch.float16)

        def run(x, emu):
            return K.attention(*x, causal=causal, qk_scale=1.0 if integer else None,
                               enable_fp_fusion=False)
        return make, run
    def rowwise(fn, dt, n, unaligned=False, **kw):
        def make(g):
            buf = rnd(g, (5, n + 1), dt) * torch.exp2(torch.randint(-8, 9, (5, n + 1),
                                                                    generator=g)).to(dt)
            return (buf[:, 1:] if unaligned else buf[:, :n].contiguous(),)
        return make, lambda x, emu: fn(*x, **kw)
    # the bits around the dots (issue 30): reductions in the compiled order (the pointer's
    # alignment changes the layout), the fma the compiler contracts, ex2.approx, div.full
    for dt, n, un in ((torch.float32, 256, False), (torch.float32, 256, True),
                      (torch.float16, 1000, False), (torch.bfloat16, 4096, True)):
        out.append((f"row_sum {str(dt)[6:]} n={n}{' unaligned' if un else ''} (* 0.1 + 1)",
                    "exact", *rowwise(K.row_sum, dt, n, un)))
    out.append(("softmax fp32 n=1000", "exact", *rowwise(K.softmax, torch.float32, 1000)))
    out.append(("softmax fp16 n=4096 8 warps", "exact",
                *rowwise(K.softmax, torch.float16, 4096, num_warps=8)))
    out.append(("layer_norm fp32 n=768", "exact", *rowwise(K.layer_norm, torch.float32, 768)))

    def exp2_div(g):
        return rnd(g, (4096,), torch.float32, 40.0), rnd(g, (4096,), torch.float32)
    out.append(("exp2 / d fp32", "exact", exp2_div, lambda x, emu: K.exp2_div(*x)))
    out.append(("attention integer scores", "exact", *attention(True, False)))
    out.append(("attention integer scores causal", "exact", *attention(True, True)))
    out.append(("attention random", "exact", *attention(False, False)))   # issue 30: ex2, order
    if nv:
        def scaled(fmt):
            def make(g):
                Mm, Nn, Kk = 128, 128, 256
                if fmt == "e2m1":
                    a = torch.randint(0, 256, (Mm, Kk // 2), generator=g, dtype=torch.uint8)
                    b = torch.randint(0, 256, (Kk // 2, Nn), generator=g, dtype=torch.uint8)
                else:
                    a, b = rnd(g, (Mm, Kk), torch.float8_e4m3fn), rnd(g, (Kk, Nn),
                                                                     torch.float8_e4m3fn)
                sa = torch.randint(118, 137, (Mm, Kk // 32), generator=g, dtype=torch.uint8)
                sb = torch.randint(118, 137, (Nn, Kk // 32), generator=g, dtype=torch.uint8)
                return a, sa, b, sb

            def run(x, emu):
                return K.scaled_matmul(*x, fmt)
            return make, run
        for fmt in ("e4m3", "e2m1"):
            out.append((f"scaled_matmul {fmt}", "exact", *scaled(fmt)))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="triton.md")
    p.add_argument("--archive", default=None, help="tar of mismatching cases (default: "
                   "triton_mismatches.tar beside --out; 'none' saves nothing)")
    p.add_argument("--arch", default=None, help="emulated arch (default: this GPU's)")
    p.add_argument("--stand-in", action="store_true", help="no GPU: a self-test")
    p.add_argument("--quick", action="store_true", help="smaller shapes")
    p.add_argument("--perturb", default=None, help="stand-in: flip a bit of this case's output")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if not args.stand_in and not torch.cuda.is_available():
        print("triton_emulate.py: no CUDA device (use --stand-in for the self-test)",
              file=sys.stderr)
        return 2
    if args.stand_in:
        arch, dev = args.arch or DEFAULT_ARCH, "cpu"
    else:
        from ..native import device_arch
        arch, dev = args.arch or device_arch(), "cuda"
    from .archive import Archive
    arch_path = None if args.archive == "none" else (
        args.archive or os.path.join(os.path.dirname(os.path.abspath(args.out)),
                                     "triton_mismatches.tar"))
    archive = Archive(arch_path)
    import triton
    lines = [f"# Triton kernels: {'stand-in' if args.stand_in else dev} vs "
             f"torch_mma_emu.triton.emulate({arch!r})", "",
             f"torch {torch.__version__}, triton {triton.__version__}"
             + ("" if args.stand_in else f", {torch.cuda.get_device_name()}"), "",
             "| case | emulated instructions | outputs | mismatching | max abs diff | "
             "expected | status |", "|---|---|---|---|---|---|---|"]
    failures = 0
    t0 = time.time()
    if args.stand_in:       # both sides run the first config of the autotuned kernel
        warnings.filterwarnings("ignore", ".*is autotuned over")
    for name, expect, make, run in cases(arch, args.quick):
        g = torch.Generator().manual_seed(args.seed)
        x = make(g)
        try:
            if args.stand_in:            # the stand-in "GPU" runs the first config
                with tmt.emulate(arch):
                    native = run(tuple(t.clone() for t in x), False)
                if name == args.perturb:
                    native.view(INT_OF_SIZE[native.element_size()]).view(-1)[0] ^= 1
            else:
                native = run(tuple(t.to(dev) for t in x), False)
                torch.cuda.synchronize()
                native = native.cpu()
            pick = None
            um = _user_matmul()
            if name.startswith("user") and getattr(um.matmul_kernel, "best_config", None):
                best = um.matmul_kernel.best_config       # what the GPU's autotuner chose
                pick = lambda cfgs, best=best: next(  # noqa: E731
                    (c for c in cfgs if c.all_kwargs() == best.all_kwargs()), cfgs[0])
            with tmt.emulate(arch, autotune=pick or "first") as em:
                emulated = run(tuple(t.clone() for t in x), True)
        except Exception as e:
            failures += 1
            lines.append(f"| {name} | - | - | - | - | {expect} | ERROR {type(e).__name__}: "
                         f"{str(e).splitlines()[0][:160]} |")
            traceback.print_exc()
            continue
        diff = bits(native) != bits(emulated)
        n = int(diff.sum())
        both_nan = torch.isnan(native.float()) & torch.isnan(emulated.float())
        n_nan = int((diff & both_nan).sum())
        mad = float((native.double() - emulated.double()).abs().nan_to_num(0).max()) \
            if native.numel() else 0.0
        status = "ok" if n == 0 else ("NaN payload only" if n == n_nan else
                                      ("differs (expected)" if expect == "info" else "MISMATCH"))
        if n and n != n_nan:
            where = archive.add(f"{name.replace(' ', '_')}.pt", dict(
                case=name, arch=arch, inputs=x, native=native, emulated=emulated,
                counts=dict(em.counts)))
            status += f" ({where})" if where else ""
            if expect == "exact":
                failures += args.stand_in or 0
        instr = "; ".join(f"{k} x{v}" for k, v in
                          (em.counts + getattr(em, "reductions", Counter())).items())
        lines.append(f"| {name} | {instr} | {native.numel()} | {n} | {mad:.3g} | {expect} | "
                     f"{status} |")
        print(lines[-1], flush=True)
        write(args.out, lines)               # after every case: a cut-off run keeps its rows
    row, bad = inductor_row(arch, args.stand_in)
    lines.append(row)
    print(row, flush=True)
    failures += bad
    lines += ["", f"{time.time() - t0:.0f} s."]
    write(args.out, lines)
    print(f"triton_emulate.py: {len(lines) - 8} rows, report {args.out}, exit "
          f"{int(bool(failures))}")
    return 1 if failures else 0


def _caused_by(e: BaseException, kind: type) -> bool:
    """``e`` or an exception it was raised from / during is a ``kind``."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, kind):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def inductor_row(arch: str, stand_in: bool):
    """torch.compile(backend="inductor") of a function that launches a dot kernel on CUDA
    tensors: on a GPU Inductor compiles the kernel and launches it itself, which inside a
    block must raise (torch_mma_emu/triton/inductor.py), never run natively.  Inferred from
    torch's source and tested on the launcher only, so checked here.  (row, failures)"""
    name = "torch.compile (inductor) launch inside emulate"
    if stand_in:
        return f"| {name} | - | - | - | - | refused | skipped (no GPU) |", 0
    from .. import triton_kernels as K
    a, b = (torch.randn(64, 128, device="cuda").half(), torch.randn(128, 64, device="cuda")
            .half())
    try:
        torch._dynamo.reset()
        f = torch.compile(lambda x, y: K.matmul(x, y), backend="inductor")
        ref = K.matmul(a, b)
        same = bool(torch.equal(f(a, b), ref))          # outside a block: native, compiled
        with tmt.emulate(arch) as em:
            f(a, b)
        status = ("emulated (the launch ran eagerly)" if em.counts else
                  "MISMATCH: ran natively inside the block")
    except RuntimeError as e:      # Dynamo may wrap the launcher's refusal: look at the chain
        status = ("ok: refused" if _caused_by(e, NotEmulatedError) else
                  f"ERROR RuntimeError: {str(e).splitlines()[0][:160]}")
    except Exception as e:
        status = f"ERROR {type(e).__name__}: {str(e).splitlines()[0][:160]}"
        traceback.print_exc()
    else:
        status += "" if same else " (compiled != eager outside the block)"
    return f"| {name} | - | - | - | - | refused | {status} |", int(status.startswith("ERROR"))


def write(path, lines):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
