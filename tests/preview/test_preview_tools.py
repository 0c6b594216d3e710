"""The preview tools: divergence measures, TinyGPT, the model-preview engine, the fp16
training preview, `mma-emu preview` and the training script end to end."""
import json
import os
import subprocess
import sys

import pytest
import torch

from torch_mma_emu.preview.divergence import (capture, divergence, top1_agreement, ulp_distance,
                                           ulp_of, ulps_from_reference)
from torch_mma_emu.preview.fp16_training import TaskConfig, train
from torch_mma_emu.preview.model_preview import preview_model, runs_for
from torch_mma_emu.preview.tiny_gpt import tiny_gpt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_ulp_of_known_spacings():
    ref = torch.tensor([1.0, 1.5, 2.0, 0.0, 2.0 ** -130, -3.0], dtype=torch.float64)
    assert ulp_of(ref, torch.float32).tolist() == [2.0 ** -23, 2.0 ** -23, 2.0 ** -22,
                                                   2.0 ** -149, 2.0 ** -149, 2.0 ** -22]
    assert ulp_of(ref[:3], torch.bfloat16).tolist() == [2.0 ** -7, 2.0 ** -7, 2.0 ** -6]
    assert ulp_of(torch.tensor([1.0, 0.0], dtype=torch.float64), torch.float16).tolist() == \
        [2.0 ** -10, 2.0 ** -24]
    x = torch.tensor([1.0 + 2 ** -7], dtype=torch.bfloat16)
    assert ulps_from_reference(x, torch.tensor([1.0], dtype=torch.float64)).item() == 1.0


def test_ulp_distance_counts_representable_numbers():
    a = torch.tensor([1.0, -1.0, 0.0, -0.0, 1.0, float("nan")], dtype=torch.float32)
    b = torch.tensor([1.0, -1.0, -0.0, 2 ** -149, float(torch.tensor(1.0).nextafter(
        torch.tensor(2.0))), float("nan")], dtype=torch.float32)
    assert ulp_distance(a, b).tolist() == [0, 0, 0, 1, 1, 0]
    # across zero: -min_subnormal to +min_subnormal is 2 steps
    s = torch.tensor([2 ** -149], dtype=torch.float32)
    assert ulp_distance(-s, s).item() == 2
    with pytest.raises(TypeError, match="dtypes differ"):
        ulp_distance(a, a.double())


def test_divergence_and_top1():
    ref = torch.tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]], dtype=torch.float64)
    x = ref.to(torch.bfloat16)
    d = divergence(x, ref)
    assert d["max_abs"] == 0 and d["max_ulp"] == 0 and d["rel_l2"] == 0
    y = torch.tensor([[1.0, 3.5, 3.0], [3.0, 2.0, 1.0]], dtype=torch.float64)
    assert top1_agreement(y, ref) == 0.5
    assert divergence(y.float(), ref)["max_abs"] == 1.5


def test_tiny_gpt_is_deterministic_and_leaves_the_global_rng():
    state = torch.random.get_rng_state()
    a, b = tiny_gpt(seed=3), tiny_gpt(seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    idx = a.example_inputs(2)
    out = capture(a, a.preview_layers(), idx)
    assert list(out) == ["blocks.0", "blocks.1", "ln_f", "output"]
    assert out["output"].shape == (2, 32, 256)
    with pytest.raises(ValueError, match="no modules named"):
        capture(a, ["nope"], idx)


def test_runs_for_lists_what_each_arch_supports():
    runs = runs_for(["sm70", "sm80", "gfx942"], ["tf32", "xf32", "bf16", "fp8"])
    got = [(r.fmt, r.arch) for r in runs]
    assert got == [("tf32", "sm80"), ("xf32", "gfx942"), ("bf16", "native"), ("bf16", "sm80"),
                   ("bf16", "gfx942"), ("fp8", "gfx942")]
    assert runs[-1].options == {"formats": {"mm": "fp8_e4m3fnuz", "addmm": "fp8_e4m3fnuz"}}
    with pytest.raises(ValueError, match="unknown preview format"):
        runs_for(["sm80"], ["fp12"])


def test_preview_model_engine_small():
    model = tiny_gpt(seed=0, n_layer=1, d_model=32, d_ff=64, vocab=64, seq=8)
    res = preview_model(model, (model.example_inputs(2),), model.preview_layers(),
                        ["sm80", "gfx90a"], ["fp16", "bf16"])
    labels = [(r.fmt, r.arch) for r in res.runs]
    assert labels == [("fp16", "native"), ("fp16", "sm80"), ("fp16", "gfx90a"),
                      ("bf16", "native"), ("bf16", "sm80"), ("bf16", "gfx90a")]
    for r in res.runs:
        assert set(r.vs_fp64) == {"blocks.0", "ln_f", "output"}
        assert 0 < r.vs_fp64["output"]["max_abs"] < 0.5 and 0 <= r.top1_vs_fp64 <= 1
        assert r.seconds > 0 and r.native_seconds > 0
    emulated = [r for r in res.runs if r.arch != "native"]
    assert all(sum(r.counts.values()) > 0 for r in emulated)
    pair = res.between["fp16"][("sm80", "gfx90a")]
    assert 0 <= pair["identical"] <= 1 and pair["max_ulp"] >= 0


def test_fp16_training_gfx90a_flushes_the_early_layer_gradients():
    c = TaskConfig(steps=2)
    sm80, gfx = train(c, "sm80"), train(c, "gfx90a")
    assert sm80.losses[0] == pytest.approx(gfx.losses[0], rel=1e-3)   # same start
    assert sm80.zero_grad == [0.0] * 6 and gfx.zero_grad[0] > 0.2   # (1.0 after ~50 steps)
    assert sm80.subnormal_grad[0] > 0.5             # the gradients there are subnormal
    fixed = train(c, "gfx90a", loss_scale=1024.0)
    assert fixed.zero_grad[0] == 0.0


@pytest.mark.slow
def test_training_preview_diverges_over_time():
    c = TaskConfig(steps=100)
    sm80, gfx = train(c, "sm80"), train(c, "gfx90a")
    assert gfx.losses[-1] > 1.5 * sm80.losses[-1]


def _script(name, *args, tmp):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", name), *args,
                           "--out", str(tmp)], capture_output=True, text=True, env=env,
                          timeout=600, cwd=ROOT)


def test_preview_command_with_a_custom_factory(tmp_path):
    (tmp_path / "mynet.py").write_text(
        "import torch\n"
        "def make(width=8):\n"
        "    torch.manual_seed(0)\n"
        "    return torch.nn.Sequential(torch.nn.Conv2d(3, width, 3), torch.nn.ReLU(),\n"
        "                               torch.nn.Flatten(), torch.nn.LazyLinear(5))\n")
    env_path = str(tmp_path)
    sys.path.insert(0, env_path)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "torch_mma_emu", "preview", "--model", "mynet:make", "--model-kwargs", '{"width": 4}',
             "--input", "randn:2,3,6,6", "--archs", "sm75,gfx942", "--formats", "fp16,bf16",
             "--repeat", "1", "--no-plot", "--out", str(tmp_path / "o")],
            capture_output=True, text=True, timeout=600, cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=f"{ROOT}:{env_path}"))
    finally:
        sys.path.remove(env_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "emulated / native" in r.stdout and "gfx942 (MI300X)" in r.stdout
    dump = json.loads((tmp_path / "o" / "preview.json").read_text())
    assert {(x["format"], x["arch"]) for x in dump["runs"]} == {
        ("fp16", "native"), ("fp16", "sm75"), ("fp16", "gfx942"), ("bf16", "native"),
        ("bf16", "gfx942")}


@pytest.mark.slow
def test_preview_command_default_with_plot(tmp_path):
    pytest.importorskip("matplotlib")
    r = subprocess.run([sys.executable, "-m", "torch_mma_emu", "preview", "--repeat", "1",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=600,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "preview.png").stat().st_size > 10_000


@pytest.mark.slow
def test_train_preview_script(tmp_path):
    pytest.importorskip("matplotlib")
    r = _script("train_preview.py", "--steps", "40", tmp=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "train_preview.png").stat().st_size > 10_000
    assert "final loss gfx90a / sm80" in r.stdout
