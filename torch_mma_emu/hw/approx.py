"""The GPU's approximate fp32 instructions, recorded and compared with the project's models
(GPU step ``approx``; issue 29, command 2).

    python scripts/gpu/approx.py --out $OUT/approx.npz --report $OUT/approx.md --time-limit 150
    python scripts/gpu/approx.py --stand-in --out /tmp/a.npz --report /tmp/a.md   # no GPU

Two things per PTX instruction of ``INSTRUCTIONS`` (run through Triton's
``tl.inline_asm_elementwise`` on bit patterns, so nothing but the instruction touches them):

* **a recording** small enough to commit: every one of the 2^16 values of the top 16 bits
  (sign, exponent, 7 fraction bits: every segment of a table indexed by the leading fraction
  bits, in every binade) with seeded random low bits, plus the special values; for the
  two-operand ``div.full.f32`` the same numerators over a seeded permutation of them as
  denominators, plus every pair of special values.  ``approx.npz`` holds the inputs once and
  one output array per instruction (tests/data/gpu_math/ when committed).
* **a sweep**: the models of ``torch_mma_emu.gpu_math`` (where that module has the
  instruction) against the hardware on as many inputs as the time allows: contiguous 2^22-wide
  blocks of the 2^32 fp32 bit patterns taken in a seeded random order (all of them when there
  is time), the model evaluated by a pool of worker processes (one per core).  The report
  gives, per instruction, the inputs checked, the fraction of 2^32 they are, the mismatches
  and the first mismatching inputs; up to ``KEEP`` mismatching inputs per instruction go into
  the npz (``mismatch_<name>``: input bits, hardware bits, model bits) for ``fit``-style work.

``--stand-in``: no GPU; the "hardware" is the model itself (or, for an instruction without a
model, float64 math rounded to fp32), ``--perturb NAME`` flips the last bit of some of its
outputs: a self-test of the recording, the sweep and the mismatch count.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import sys
import time
from collections import deque

import numpy as np

from .. import files

# PTX instruction -> (number of operands, the body of its inline assembly on .f32 registers)
INSTRUCTIONS = {
    "ex2.approx.f32": (1, "ex2.approx.f32 r, a;"),
    "ex2.approx.ftz.f32": (1, "ex2.approx.ftz.f32 r, a;"),
    "lg2.approx.f32": (1, "lg2.approx.f32 r, a;"),
    "lg2.approx.ftz.f32": (1, "lg2.approx.ftz.f32 r, a;"),
    "rcp.approx.f32": (1, "rcp.approx.f32 r, a;"),
    "rcp.approx.ftz.f32": (1, "rcp.approx.ftz.f32 r, a;"),
    "rsqrt.approx.f32": (1, "rsqrt.approx.f32 r, a;"),
    "rsqrt.approx.ftz.f32": (1, "rsqrt.approx.ftz.f32 r, a;"),
    "sqrt.approx.f32": (1, "sqrt.approx.f32 r, a;"),
    "sin.approx.f32": (1, "sin.approx.f32 r, a;"),
    "cos.approx.f32": (1, "cos.approx.f32 r, a;"),
    "tanh.approx.f32": (1, "tanh.approx.f32 r, a;"),
    "div.full.f32": (2, "div.full.f32 r, a, b;"),
}
SPECIALS = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
                     0x7F800001, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000,
                     0x80800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xBF800000, 0x3F000000,
                     0x40000000, 0x42FE0000, 0x43000000, 0xC2FC0000, 0xC3150000, 0x3F7FFFFF,
                     0x3F800001, 0x40490FDB, 0x3FC90FDB, 0x49742400, 0x4B000000, 0x33800000,
                     0x34000000, 0x00400000], dtype=np.uint32)
BLOCK = 1 << 22            # inputs per sweep task
KEEP = 4096                # mismatching inputs kept per instruction
SEED = 29


def recording_inputs(seed: int = SEED) -> dict:
    """The recording's inputs as uint32 bit patterns: ``x`` (2^16 segments + specials) and,
    for two-operand instructions, ``y``."""
    rng = np.random.default_rng(seed)
    top = np.arange(1 << 16, dtype=np.uint32) << 16
    x = np.concatenate([top | rng.integers(0, 1 << 16, top.size, dtype=np.uint32), SPECIALS])
    sx, sy = np.meshgrid(SPECIALS, SPECIALS, indexing="ij")
    y = np.concatenate([x[:top.size][rng.permutation(top.size)], SPECIALS])
    return dict(x=x, x2=np.concatenate([x, sx.ravel()]), y=np.concatenate([y, sy.ravel()]))


def operands(name: str, ins: dict):
    return (ins["x"],) if INSTRUCTIONS[name][0] == 1 else (ins["x2"], ins["y"])


# --- the hardware (Triton on the GPU) ---------------------------------------------------------

_KERNELS: dict = {}


def _kernel(arity: int):
    """One Triton kernel per arity; the instruction is a constexpr string of inline PTX."""
    if arity in _KERNELS:
        return _KERNELS[arity]
    import triton
    import triton.language as tl

    if arity == 1:
        @triton.jit
        def k(x_ptr, y_ptr, o_ptr, n, ASM: tl.constexpr, BLOCK_SIZE: tl.constexpr):
            offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
            m = offs < n
            x = tl.load(x_ptr + offs, mask=m)
            r = tl.inline_asm_elementwise(ASM, "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1)
            tl.store(o_ptr + offs, r, mask=m)
    else:
        @triton.jit
        def k(x_ptr, y_ptr, o_ptr, n, ASM: tl.constexpr, BLOCK_SIZE: tl.constexpr):
            offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
            m = offs < n
            x = tl.load(x_ptr + offs, mask=m)
            y = tl.load(y_ptr + offs, mask=m)
            r = tl.inline_asm_elementwise(ASM, "=r,r,r", [x, y], dtype=tl.int32, is_pure=True,
                                          pack=1)
            tl.store(o_ptr + offs, r, mask=m)
    _KERNELS[arity] = k
    return k


def asm(name: str) -> str:
    """Inline PTX on int32 operands: move the bits into .f32 registers, run the instruction,
    move the result's bits out (no conversion anywhere)."""
    arity, body = INSTRUCTIONS[name]
    regs = ".reg .f32 a, b, r;" if arity == 2 else ".reg .f32 a, r;"
    movs = "mov.b32 a, $1; " + ("mov.b32 b, $2; " if arity == 2 else "")
    return "{ " + regs + " " + movs + body + " mov.b32 $0, r; }"


def hardware(name: str, *xs: np.ndarray):
    """The GPU's outputs (uint32 bits) of instruction ``name`` on bit patterns ``xs``."""
    import torch
    ts = [torch.from_numpy(x.astype(np.uint32).view(np.int32)).cuda() for x in xs]
    out = torch.empty_like(ts[0])
    n = ts[0].numel()
    bs = 1024
    _kernel(len(ts))[(-(-n // bs),)](ts[0], ts[-1], out, n, ASM=asm(name), BLOCK_SIZE=bs)
    return out.cpu().numpy().view(np.uint32)


# --- the models --------------------------------------------------------------------------------

def model_table() -> dict:
    """{instruction: exact?} for the instructions torch_mma_emu.gpu_math models ({} without it)."""
    try:
        from ..gpu_math import FUNCTIONS
    except ImportError:
        return {}
    out = {}
    for name in INSTRUCTIONS:
        rec = FUNCTIONS.get(name)
        if rec is not None:
            out[name] = bool(rec["exact"] if isinstance(rec, dict) else getattr(rec, "exact", False))
    return out


def model(name: str, *xs: np.ndarray) -> np.ndarray:
    """The model's outputs (uint32 bits) of ``name`` on bit patterns ``xs``."""
    from ..gpu_math import evaluate
    args = [np.ascontiguousarray(x, dtype=np.uint32).view(np.float32) for x in xs]
    with np.errstate(all="ignore"):          # NaN and Inf inputs are part of the sweep
        r = evaluate(name, *args)
    return np.ascontiguousarray(np.asarray(r, dtype=np.float32)).view(np.uint32)


def float64_reference(name: str, *xs: np.ndarray) -> np.ndarray:
    """Stand-in for an instruction without a model: the function in float64, rounded to fp32."""
    with np.errstate(all="ignore"):
        v = [x.astype(np.uint32).view(np.float32).astype(np.float64) for x in xs]
        f = {"ex2": np.exp2, "lg2": np.log2, "rcp": lambda a: 1.0 / a,
             "rsqrt": lambda a: 1.0 / np.sqrt(a), "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos,
             "tanh": np.tanh, "div": lambda a, b: a / b}[name.split(".")[0]]
        return f(*v).astype(np.float32).view(np.uint32)


def same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Equal bits, any NaN equal to any NaN (the GPU's canonical NaN is not a model's business)."""
    fa, fb = a.view(np.float32), b.view(np.float32)
    return (a == b) | (np.isnan(fa) & np.isnan(fb))


# --- the sweep ----------------------------------------------------------------------------------

def _sweep_task(task):
    """Worker: the model on one block, compared with the hardware's bits there.  A one-operand
    block is a range of bit patterns (rebuilt here from its start); a two-operand one comes
    with its operands."""
    name, start, xs, hw = task
    if xs is None:
        xs = ((np.arange(BLOCK, dtype=np.uint64) + start).astype(np.uint32),)
    m = model(name, *xs)
    keep = np.flatnonzero(~same(hw, m))
    return name, hw.size, keep.size, np.stack([xs[0][keep[:KEEP]], hw[keep[:KEEP]],
                                               m[keep[:KEEP]]] + [x[keep[:KEEP]] for x in xs[1:]])


def _blocks(name, order, seed):
    """(start, operands or None) of each block of the sweep of ``name``, in order."""
    for b in order:
        if INSTRUCTIONS[name][0] == 1:
            yield int(b) * BLOCK, None
        else:
            r = np.random.default_rng([seed, int(b)])
            yield None, tuple(r.integers(0, 1 << 32, BLOCK, dtype=np.uint64).astype(np.uint32)
                              for _ in range(2))


def sweep(names, hw_fn, time_limit: float, workers: int, log, seed: int = SEED, blocks=None):
    """{name: dict(checked, mismatches, kept)}: the model against ``hw_fn(name, *xs)`` over
    seeded random 2^22-wide blocks of the fp32 bit patterns (random pairs for two-operand
    instructions) until each instruction's share of ``time_limit`` is spent (a bit-exact model
    twice an approximate one's; at least one block each) or every block is done.  At most two
    blocks per worker are in flight (16 MB each)."""
    order = np.random.default_rng(seed).permutation((1 << 32) // BLOCK) if blocks is None \
        else np.asarray(blocks)
    res = {n: dict(checked=0, mismatches=0, kept=[]) for n in names}
    if not names:
        return res
    end = time.time() + time_limit
    weight = {n: 1 + bool(models.get(n)) for n in names} if (models := model_table()) else \
        dict.fromkeys(names, 1)            # a bit-exact model gets twice an approximate one's time

    def take(r, got):
        _, count, nbad, kept = got
        r["checked"] += count
        r["mismatches"] += nbad
        if sum(k.shape[1] for k in r["kept"]) < KEEP and kept.shape[1]:
            r["kept"].append(kept)

    with mp.get_context("spawn").Pool(workers) as pool:
        for i, name in enumerate(names):     # each gets its share of what is left, >= 1 block
            now = time.time()
            share = weight[name] / sum(weight[n] for n in names[i:])
            deadline, r, pending = now + max(0.0, end - now) * share, res[name], deque()
            for j, (start, xs) in enumerate(_blocks(name, order, seed)):
                if j and time.time() > deadline:
                    break
                hw = hw_fn(name, *xs) if xs is not None else hw_fn(
                    name, (np.arange(BLOCK, dtype=np.uint64) + start).astype(np.uint32))
                pending.append(pool.apply_async(_sweep_task, ((name, start, xs, hw),)))
                while len(pending) >= 2 * workers:
                    take(r, pending.popleft().get())
            while pending:
                take(r, pending.popleft().get())
            log(f"[approx] sweep {name:22} {r['checked']:>11} inputs "
                f"({r['checked'] / 2 ** 32:.2%} of 2^32), {r['mismatches']} mismatches")
    return res


# --- the command ----------------------------------------------------------------------------------

def render(rec: dict, sw: dict, models: dict, device: str, seconds: float) -> str:
    lines = [f"# The GPU's approximate fp32 instructions ({device})", "",
             "Recorded by `scripts/gpu/approx.py` (torch_mma_emu/hw/approx.py): outputs on the "
             "2^16 top-16-bit segments plus special values (approx.npz), and the models of "
             "`torch_mma_emu.gpu_math` against the hardware on contiguous 2^22-wide blocks of the "
             f"2^32 inputs in a seeded random order ({seconds:.0f} s).", "",
             "| instruction | model | recorded | inputs swept | of 2^32 | mismatches | first mismatch (x -> hw, model) |",
             "|---|---|---|---|---|---|---|"]
    for name in INSTRUCTIONS:
        m = models.get(name)
        mtxt = "none" if m is None else ("bit-exact" if m else "approximate")
        s = sw.get(name)
        if s is None:
            lines.append(f"| `{name}` | {mtxt} | {rec.get(name, 0)} | - | - | - | - |")
            continue
        first = "-"
        if s["kept"]:
            k = s["kept"][0]
            first = f"{k[0, 0]:#010x} -> {k[1, 0]:#010x}, {k[2, 0]:#010x}"
        lines.append(f"| `{name}` | {mtxt} | {rec.get(name, 0)} | {s['checked']} | "
                     f"{s['checked'] / 2 ** 32:.2%} | {s['mismatches']} | {first} |")
    return "\n".join(lines) + "\n"


def _save_npz(path: str, arrays: dict) -> None:
    """The arrays into ``path`` (.npz), all or nothing (torch_mma_emu.files)."""
    with files.atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez_compressed(f, **arrays)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="approx.npz")
    p.add_argument("--report", default="approx.md")
    p.add_argument("--time-limit", type=float, default=150.0, help="seconds for the sweep")
    p.add_argument("--only", default=None, help="comma list of instructions")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    p.add_argument("--stand-in", action="store_true", help="no GPU: a self-test")
    p.add_argument("--perturb", default=None, help="stand-in: flip the last bit of some outputs")
    args = p.parse_args(argv)
    names = list(INSTRUCTIONS) if not args.only else args.only.split(",")
    bad = [n for n in names if n not in INSTRUCTIONS]
    if bad:
        print(f"approx: unknown instruction(s) {bad}; known: {', '.join(INSTRUCTIONS)}",
              file=sys.stderr)
        return 2
    t0 = time.time()
    models = model_table()

    def log(s):
        print(s, flush=True)

    if args.stand_in:
        def hw_fn(name, *xs):
            out = model(name, *xs) if name in models else float64_reference(name, *xs)
            if name == args.perturb:
                out = out.copy()
                out[::997] ^= 1
            return out
        device = "stand-in: the model as the hardware"
    else:
        import torch
        if not torch.cuda.is_available():
            print("approx: no CUDA device (use --stand-in for a self-test)", file=sys.stderr)
            return 2
        hw_fn = hardware
        device = torch.cuda.get_device_name()
    ins = recording_inputs()
    arrays = {"x": ins["x"], "x2": ins["x2"], "y": ins["y"]}
    rec = {}
    parts = args.out + ".parts"       # one .npy per instruction as it is recorded: a kill
    os.makedirs(parts, exist_ok=True)  # keeps every earlier one (the .npz is written once)
    for name in names:
        try:
            arrays[name.replace(".", "_")] = hw_fn(name, *operands(name, ins))
            rec[name] = arrays[name.replace(".", "_")].size
            with files.atomic_path(os.path.join(parts, name.replace(".", "_") + ".npy")) as t:
                np.save(t, arrays[name.replace(".", "_")])
        except Exception as e:  # noqa: BLE001   (one instruction failing must not stop the rest)
            log(f"[approx] {name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    _save_npz(args.out, arrays)
    shutil.rmtree(parts, ignore_errors=True)     # all in the .npz now
    log(f"[approx] recorded {len(rec)} instructions into {args.out} "
        f"({os.path.getsize(args.out)} bytes)")
    swept = sorted((n for n in names if n in models and n in rec), key=lambda n: not models[n])
    sw = sweep(swept, hw_fn, args.time_limit, args.workers, log)
    for name, s in sw.items():
        if s["kept"]:
            arrays["mismatch_" + name.replace(".", "_")] = np.concatenate(s["kept"], 1)[:, :KEEP]
    _save_npz(args.out, arrays)
    files.atomic_write(args.report, render(rec, sw, models, device, time.time() - t0))
    log(f"[approx] report {args.report}; {time.time() - t0:.0f} s")
    if args.stand_in:
        return 1 if any(s["mismatches"] for n, s in sw.items() if n != args.perturb) else 0
    return 0
