"""``mma-emu probe`` and ``mma-emu fit``."""
import json
from pathlib import Path

import torch

from torch_mma_emu.cli import main

HW = Path(__file__).parent.parent / "data" / "hwdata"


def run(capsys, *argv):
    rc = main(list(argv))
    return rc, capsys.readouterr()


def test_probe_one_format_prints_the_feature_table(capsys):
    rc, out = run(capsys, "probe", "--arch", "sm80", "--format", "fp16", "--no-order")
    assert rc == 0, out.err
    text = out.out
    assert "fused length (block FMA width)     8" in text
    assert "Feature tests (seed 000 Table III)" in text
    row = next(line for line in text.splitlines() if line.startswith("fp16    fp32"))
    assert row.split()[-3:] == ["8", "n/a", "RZ"]     # width, order (skipped), rounding


def test_probe_infer_and_verify_prints_table4(capsys):
    rc, out = run(capsys, "probe", "--arch", "gfx942", "--format", "fp16", "--verify", "2000",
                  "--no-order")
    assert rc == 0, out.err
    assert "Model parameters (seed 003 Table 4)" in out.out
    row = next(line for line in out.out.splitlines() if "TR-FDPA" in line)
    assert row.split()[4:] == ["TR-FDPA", "8", "24", "31", "RNE-FP32", "align", "RD"]
    assert "0 mismatches in 2000 inputs" in out.out


def test_probe_json(capsys):
    rc, out = run(capsys, "probe", "--arch", "sm90", "--format", "fp8_e4m3", "--infer",
                  "--no-order", "--json")
    assert rc == 0, out.err
    doc = json.loads(out.out)
    feats = doc["reports"][0]["features"]
    assert feats["block_width"]["value"] == {"lo": 32, "hi": 32}
    assert doc["specs"][0].startswith("spec:")


def test_probe_every_format_of_an_arch(capsys):
    rc, out = run(capsys, "probe", "--arch", "gfx90a", "--no-order")
    assert rc == 0, out.err
    lines = out.out.splitlines()
    assert any(line.startswith("fp16") for line in lines)
    assert any(line.startswith("bf16") for line in lines)


def test_probe_native_without_a_gpu_says_so(capsys):
    if torch.cuda.is_available():
        return
    rc, out = run(capsys, "probe", "--native", "--format", "fp16")
    assert rc == 2 and "CUDA is not available" in out.err
    rc, out = run(capsys, "probe", "--native")
    assert rc == 2 and "no CUDA device" in out.err


def test_probe_bad_format_exits_2(capsys):
    rc, out = run(capsys, "probe", "--arch", "sm80", "--format", "fp8_e4m3")
    assert rc == 2 and "no instruction for fp8" in out.err


def test_fit_files_and_directories(capsys):
    rc, out = run(capsys, "fit", str(HW / "V100_fp16_to_fp32.npz"),
                  str(HW / "A100_tf32_to_fp32.npz"))
    assert rc == 0, out.err
    assert "t_fdpa L=4 F=23 rho=rz_fp32 zero_sign=plus zero_exp=-131 = registry sm70" in out.out
    assert "Model parameters (seed 003 Table 4)" in out.out
    rc, out = run(capsys, "fit", str(HW / "V100_fp16_to_fp16.npz"), "--json")
    doc = json.loads(out.out)
    assert len(doc[0]["specs"]) > 1 and doc[0]["undetermined"]


def test_fit_multipass_and_closest_misses(capsys, tmp_path):
    """The fp16 mma.sync recording: found with passes (Table 4 says so); with
    --single-pass nothing fits and the JSON lists the closest with mismatch counts."""
    import numpy as np
    z = np.load(HW / "H100_fp8_e4m3_to_fp16.npz")
    f = tmp_path / "h100_mma_sync.npz"
    np.savez(f, **{k: z[k][:400] for k in "abcd"})
    rc, out = run(capsys, "fit", str(f), "--format", "fp8_e4m3", "--out", "fp16", "--limit", "2")
    assert rc == 0, out.err
    assert "passes=2x16 (alternating pairs, width 2) c_join=final" in out.out
    assert "2 passes (alternating pairs), c added last" in out.out
    rc, out = run(capsys, "fit", str(f), "--format", "fp8_e4m3", "--out", "fp16", "--json",
                  "--single-pass")
    assert rc == 0, out.err
    doc = json.loads(out.out)[0]
    assert doc["specs"] == [] and doc["closest"]
    assert all(c["mismatches"] > 0 for c in doc["closest"])


def test_fit_errors_exit_2(capsys, tmp_path):
    rc, out = run(capsys, "fit", str(tmp_path))
    assert rc == 2 and "no .npz files" in out.err
    bad = tmp_path / "x.npz"
    __import__("numpy").savez(bad, a=[1.0])
    rc, out = run(capsys, "fit", str(bad))
    assert rc == 2 and "in_format" in out.err
