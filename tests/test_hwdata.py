"""Every recorded tensor-core sample (tests/data/hwdata, V100/A100/L40S/H100/B200) reproduced
bit for bit by emulated_mm on the registry's model of the instruction the file's index entry
names (the warp-level fp8 mma.sync.m16n8k32 of Hopper / Blackwell is an instruction variant)."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import torch_mma_emu as tme

DATA = Path(__file__).parent / "data" / "hwdata"
INDEX = json.loads((DATA / "index.json").read_text())
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32,
          "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
OUT = {"fp32": torch.float32, "fp16": torch.float16}


def instruction_of(entry, arch=None):
    """The registry instruction the entry's ``instruction`` names: the variant whose name
    contains it (``mma.sync.m16n8k32``), else the default (``wmma (mma.sync)`` is the API)."""
    names = tme.instructions(arch or entry["arch"], entry["in_format"], entry["out_dtype"])
    want = entry.get("instruction", "").replace(" ", "").lower()
    hits = [n for n in names if want and want in n.replace(" ", "").lower()]
    return hits[0] if hits else None


def run_file(entry, arch=None, **kw):
    z = np.load(DATA / entry["file"])
    a = torch.from_numpy(z["a"].astype(np.int64).astype(np.int32)).view(torch.float32)
    b = torch.from_numpy(z["b"].astype(np.int64).astype(np.int32)).view(torch.float32)
    c = torch.from_numpy(z["c"].astype(np.int64).astype(np.int32)).view(torch.float32)
    d = torch.from_numpy(z["d"].astype(np.int64).astype(np.int32)).view(torch.float32)
    dt = DTYPES[entry["in_format"]]
    A, B = a.to(dt), b.to(dt)
    assert torch.equal(A.float(), a) and torch.equal(B.float(), b), "inputs not exact"
    out = OUT[entry["out_dtype"]]
    in_format = "tf32" if entry["in_format"] == "tf32" else None
    if "instruction" not in kw and arch is None:
        kw["instruction"] = instruction_of(entry)
    D = tme.emulated_mm(A.unsqueeze(1), B.unsqueeze(2), c.reshape(-1, 1, 1),
                        arch=arch or entry["arch"], in_format=in_format, out_dtype=out, **kw)
    got = D.reshape(-1).float().view(torch.int32)
    want = d.view(torch.int32)
    return got, want


@pytest.mark.parametrize("entry", INDEX, ids=[e["file"].removesuffix(".npz") for e in INDEX])
def test_recorded_samples_bit_exact(entry):
    got, want = run_file(entry)
    bad = (got != want).nonzero().flatten()
    assert got.numel() == entry["samples"]
    assert bad.numel() == 0, f"{bad.numel()} mismatches, first at sample {bad[:5].tolist()}"


@pytest.mark.parametrize("entry,wrong", [
    (INDEX[0], "sm70"),   # A100 bf16 -> sm70 has no bf16: error, checked elsewhere
])
def test_wrong_arch_is_rejected(entry, wrong):
    with pytest.raises(ValueError, match="no instruction for bf16"):
        run_file(entry, arch=wrong)


def test_index_names_instructions():
    """The fp8 files of Hopper and Blackwell run through the mma.sync variant, the others
    through the default instruction."""
    for e in INDEX:
        name = instruction_of(e)
        if e["arch"] in ("sm90", "sm100") and e["in_format"].startswith("fp8"):
            assert name is not None and "mma.sync.m16n8k32" in name, e["file"]
        elif e["arch"] != "sm89":
            assert name is None, e["file"]


@pytest.mark.parametrize("name", ["H100_fp8_e4m3_to_fp16", "B200_fp8_e4m3_to_fp16",
                                  "B200_fp8_e4m3_to_fp32"])
def test_warp_fp8_differs_from_library_instruction(name):
    """The default (wgmma / tcgen05.mma) model misses many of the mma.sync samples: the
    recordings tell the two instructions apart."""
    e = next(x for x in INDEX if x["file"] == name + ".npz")
    got, want = run_file(e, instruction=None)
    assert (got != want).sum() > 1000


@pytest.mark.parametrize("change", [dict(pass_width=4), dict(pass_width=16),
                                    dict(c_join="first"), dict(passes=1, L=32),
                                    dict(F=16)])
def test_warp_fp8_fp16_model_is_pinned(change):
    """Each part of the two-pass model is visible in the fp16 recordings: changing the pass
    layout, where c joins or F (down to 16) breaks samples."""
    e = next(x for x in INDEX if x["file"] == "H100_fp8_e4m3_to_fp16.npz")
    sp = tme.spec("sm90", "fp8_e4m3", torch.float16, instruction="mma.sync.m16n8k32")
    got, want = run_file(e, arch=sp.replace(**change))
    assert (got != want).sum() > 0


def test_data_discriminates_archs():
    """The samples are not trivially reproduced by any model: H100 fp16 data under the A100
    model (F = 24, L = 8) must mismatch."""
    h100 = next(e for e in INDEX if e["file"] == "H100_fp16_to_fp32.npz")
    got, want = run_file(h100, arch="sm80")
    assert (got != want).sum() > 100
