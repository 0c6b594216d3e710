"""What the Triton zoo's tests share (tests/triton_emu/test_triton_zoo_*.py): third-party Triton kernels,
as their packages ship them, run on CPU tensors under ``torch_mma_emu.triton.emulate`` for
sm_90 (H100), sm_80 (A100) and gfx942 (MI300X).

``run_zoo`` opens ``tme.emulate(arch)`` (torch's own matrix products around the kernels,
e.g. the projection in a fused linear cross entropy) with ``tmt.emulate(arch)`` inside it and
counts the Triton launches; it asserts that at least one kernel launched in the interpreter
and that no torch matrix product ran natively (a Triton launch that escaped the interpreter
fails on this CPU-only machine: no driver).  ``check_dots`` asserts that the dots ran on the
arch's matrix path (wgmma / mma.sync on sm_90, mma.sync on sm_80, mfma on gfx942).  The
packages come from requirements-triton-zoo.txt (setup.py's ``triton-zoo`` extra, installed
by scripts/test.sh); without them the tests skip.
"""
from __future__ import annotations

import importlib
import warnings
from collections import Counter

import pytest
import torch

import torch_mma_emu as tme

pytest.importorskip("triton")
import torch_mma_emu.triton as tmt  # noqa: E402

ARCHS = {"sm90": "H100", "sm80": "A100", "gfx942": "MI300X"}
# the instruction path each arch's dots may take (target_rules.py names them in em.counts)
PATHS = {"sm90": ("wgmma", "mma.sync", "fma"), "sm80": ("mma.sync", "fma"),
         "gfx942": ("mfma", "fma")}
MATRIX = {"sm90": ("wgmma", "mma.sync"), "sm80": ("mma.sync",), "gfx942": ("mfma",)}


def need(module: str):
    """Import ``module`` or skip: not installed (requirements-triton-zoo.txt), or it fails
    to import on a CPU-only machine (named in the skip reason)."""
    try:
        return importlib.import_module(module)
    except Exception as e:       # noqa: BLE001 - any import failure is a skip, with its text
        pytest.skip(f"{module} not importable here (pip install -r "
                    f"requirements-triton-zoo.txt torch==<yours>): {type(e).__name__}: {e}")


def run_zoo(key: str, fn, keep_inputs: bool = False):
    """``fn()`` under the emulation of ``ARCHS[key]``: (its result, the Triton block, the
    launch counts).  Asserts that kernels launched and nothing multiplied natively."""
    arch = ARCHS[key]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # autotune / atomics / version notes: not the test
        with tme.emulate(arch) as pm, tmt.emulate(arch, keep_inputs=keep_inputs) as em:
            out = fn()
    launches = Counter(name for name, *_ in em.launches)
    native = {k: n for k, n in pm.counts.items() if k[2] == "native"}
    assert not native, f"torch matrix products ran natively: {native}"
    assert sum(launches.values()) > 0, "no Triton kernel launched"
    em.torch_counts = pm.counts               # torch's products, emulated (checked above)
    return out, em, launches


def check_dots(key: str, em, *, matrix: bool = True) -> None:
    """Every dot of ``em`` took one of ``key``'s paths; with ``matrix`` at least one ran on
    the matrix units (not the FMA fallback)."""
    names = [k for k in em.counts if not k.startswith("integer")]
    assert names, "no tl.dot ran"
    bad = [n for n in names if not n.startswith(PATHS[key])]
    assert not bad, f"{key}: dots on another arch's path: {bad}"
    if matrix:
        assert any(n.startswith(MATRIX[key]) for n in names), names


def close(out, ref, rtol, atol):
    out, ref = out.detach().double(), ref.detach().double()
    err = (out - ref).abs()
    bound = atol + rtol * ref.abs()
    assert torch.isfinite(out).all()
    assert bool((err <= bound).all()), f"max error {err.max().item():.3g}, " \
        f"worst ratio {(err / bound).max().item():.3g}"
