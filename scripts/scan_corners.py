"""Do the recorded hardware samples (tests/data/hwdata) reach the corners where MMA-Sim and we
differ (docs/model.md section 6)?  For every file: how many samples end in a zero (and its
sign) from a nonzero exact sum or an exact cancellation, how many have zero terms while the
largest nonzero term lies below MMA-Sim's zero-term exponent, how many the alternative of each
corner's old choice (a Spec field) changes and which side the hardware takes, and (where
mmasim is installed) how many mmasim itself gets wrong.

    python scripts/scan_corners.py [--no-mmasim]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import torch_mma_emu as tme  # noqa: E402
from torch_mma_emu.registry import spec as registry_spec  # noqa: E402

DATA = ROOT / "tests" / "data" / "hwdata"
DT = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32,
      "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
OUT = {"fp32": torch.float32, "fp16": torch.float16}
MARCH = {"sm70": "Volta", "sm80": "Ampere", "sm89": "Ada Lovelace", "sm90": "Hopper"}
PTX = {"fp16": "f16", "bf16": "bf16", "tf32": "tf32", "fp8_e4m3": "e4m3", "fp8_e5m2": "e5m2"}
# MMA-Sim's zero-term exponent per arch and output (mmasim 2.1.1, nv_ptx/sim.py)
E_ZERO = {("sm70", "fp16"): -19, ("sm80", "fp16"): -20, ("sm89", "fp16"): -20,
          ("sm90", "fp16"): -21, ("sm100", "fp16"): -21, ("sm70", "fp32"): -131,
          ("sm80", "fp32"): -132, ("sm89", "fp32"): -132, ("sm90", "fp32"): -133,
          ("sm100", "fp32"): -133}


def mmasim_instruction(e) -> str | None:
    """The mma.sync instruction of mmasim the file's samples ran on (None: not modelled)."""
    arch, fi, fo = e["arch"], e["in_format"], e["out_dtype"]
    if arch not in MARCH or (fi.startswith("fp8") and arch != "sm89"):
        return None
    o, t = ("f16" if fo == "fp16" else "f32"), PTX[fi]
    if arch == "sm70":
        return f"m8n8k4.{o}.f16.f16.{o}"
    if fi == "tf32":
        return "m16n8k8.f32.tf32.tf32.f32"
    if fi.startswith("fp8"):
        return f"m16n8k32.{o}.{t}.{t}.{o}"
    return f"m16n8k16.{o}.{t}.{t}.{o}"


def load(e):
    z = np.load(DATA / e["file"])
    f = lambda k: torch.from_numpy(z[k].astype(np.int64).astype(np.int32)).view(torch.float32)
    return f("a"), f("b"), f("c"), f("d")


def exponent(x: float) -> int:
    return int(np.frexp(x)[1]) - 1


def scan(e, alternatives, use_mmasim: bool) -> dict:
    a, b, c, d = load(e)
    fi, fo = e["in_format"], e["out_dtype"]
    A, B = a.to(DT[fi]), b.to(DT[fi])
    odt = OUT[fo]
    C = c.to(odt) if fo == "fp16" else c
    res = {"file": e["file"], "samples": len(d)}
    dz = d.view(torch.int32)
    neg0, pos0 = int((dz == -2**31).sum()), int((dz == 0).sum())
    nz_round, cancel, below = [0, 0], [0, 0], 0     # [+0, -0] counts
    ez = E_ZERO.get((e["arch"], fo))
    for i in range(len(d)):
        terms = [Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a[i], b[i])]
        s = sum(terms, Fraction(0)) + Fraction(float(c[i]))
        if float(d[i]) == 0.0:
            sign = int(dz[i] < 0)
            if s != 0:
                nz_round[sign] += 1
            elif any(t != 0 for t in terms):
                cancel[sign] += 1
        nonzero = [t for t in terms if t != 0] + ([Fraction(float(c[i]))] if float(c[i]) else [])
        has_zero = len(nonzero) < len(terms) + 1
        if ez is not None and has_zero and nonzero and \
                max(exponent(float(abs(t))) for t in nonzero) < ez:
            below += 1
    res.update(d_neg0=neg0, d_pos0=pos0, nonzero_sum_to_zero_plus_minus=nz_round,
               cancel_to_zero_plus_minus=cancel, zero_terms_all_below_e_zero=below)
    base = registry_spec(e["arch"], fi, fo, instruction=_instruction(e))
    kw = dict(in_format="tf32" if fi == "tf32" else None, out_dtype=odt)
    run = lambda sp: tme.emulated_mm(A.unsqueeze(1), B.unsqueeze(2), c.reshape(-1, 1, 1),
                                     arch=sp, **kw).reshape(-1).float().view(torch.int32)
    ours = run(base)
    res["ours_wrong"] = int((ours != dz).sum())
    for name, change in alternatives.items():
        try:
            alt = run(base.replace(**change(base)))
        except (ValueError, TypeError) as err:
            res[name] = f"n/a ({err})"
            continue
        changed = alt != ours
        res[name] = {"changed": int(changed.sum()),
                     "hardware_takes_alternative": int((changed & (alt == dz)).sum()),
                     "hardware_takes_default": int((changed & (ours == dz)).sum())}
    st = mmasim_instruction(e) if use_mmasim else None
    if st is not None:
        from mmasim.nv_ptx import MMA
        m = MMA(MARCH[e["arch"]], st)
        Am = A if fi != "tf32" else a
        got = m.dpa(Am, B if fi != "tf32" else b, C).to(odt).float().view(torch.int32)
        nan = torch.isnan(d) & torch.isnan(got.view(torch.float32))
        res["mmasim"] = st
        res["mmasim_wrong"] = int(((got != dz) & ~nan).sum())
    return res


def _instruction(e):
    if e["in_format"].startswith("fp8") and e["arch"] in ("sm90", "sm100"):
        return "mma.sync.m16n8k32"
    return None


# our old choices (docs/model.md section 6): the defaults now follow mmasim
ALTERNATIVES = {
    "zero_sign_keep": lambda s: {"zero_sign": "keep"},
    "zero_exp_none": lambda s: {"zero_exp": None},
    "zero_exp_none_zero_sign_keep": lambda s: {"zero_exp": None, "zero_sign": "keep"},
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-mmasim", action="store_true")
    args = ap.parse_args(argv)
    use = not args.no_mmasim and importlib.util.find_spec("mmasim") is not None
    index = json.loads((DATA / "index.json").read_text())
    for e in index:
        print(json.dumps(scan(e, ALTERNATIVES, use)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
