"""Per-layer attribution: module paths in records (forward and backward), ``em.report``
against fp64 / another arch / another block, the plot, and ``mma-emu preview``."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_mma_emu.cli import main as cli_main
from torch_mma_emu.preview import emulate, preview_model
from torch_mma_emu.preview.tiny_gpt import tiny_gpt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.blocks = nn.Sequential(Block(), Block())
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        return self.out(self.blocks(self.inp(x)))


def _net(dtype=torch.bfloat16):
    torch.manual_seed(0)
    return Net().to(dtype), torch.randn(3, 8).to(dtype)


def test_records_carry_module_paths_forward_and_backward():
    net, x = _net()
    with emulate("sm90", record=True) as em:
        net(x.requires_grad_()).float().sum().backward()
    fwd = [r.module for r in em.records if r.phase == "forward" and r.product]
    assert fwd == ["inp", "blocks.0.fc1", "blocks.0.fc2", "blocks.1.fc1", "blocks.1.fc2", "out"]
    bwd = {r.module for r in em.records if r.phase == "backward" and r.product}
    assert bwd == set(fwd)
    assert sum(r.module == "blocks.1.fc1" for r in em.records
               if r.phase == "backward" and r.product) == 2


def test_report_against_fp64_matches_a_hand_computed_layer_error():
    net, x = _net()
    with torch.no_grad(), emulate("gfx90a", record=True) as em:
        y = net(x)
    rep = em.report()                                  # default: fp64
    rows = {r.path: r for r in rep.rows}
    assert list(rows) == ["inp", "blocks.0.fc1", "blocks.0.fc2", "blocks.0", "blocks.1.fc1",
                          "blocks.1.fc2", "blocks.1", "blocks", "out", "Net"]
    assert rows["blocks.0.fc1"].products == 1 and rows["blocks"].products == 4
    assert rows["Net"].products == 6 and rows["Net"].module == "Net"
    ref = net.double()(x.double())
    err = (y.double() - ref).abs().max().item()
    assert rows["Net"].max_abs == pytest.approx(err, rel=0, abs=0)
    assert rows["out"].max_abs == rows["Net"].max_abs
    assert all(r.dtype == "bfloat16" and r.rel_l2 > 0 for r in rep.rows)
    text = str(rep)
    assert "gfx90a against fp64" in text and "blocks.1.fc2" in text


def test_report_against_another_arch_and_another_block():
    torch.manual_seed(0)                 # wide layers: fp16 outputs that differ by arch
    net = nn.Sequential(nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, 16)).half()
    x = torch.randn(4, 512).half()
    with torch.no_grad(), emulate("sm80", record=True) as a:
        net(x)
    with torch.no_grad(), emulate("sm80", record=True) as a2:
        net(x)
    with torch.no_grad(), emulate("sm70", record=True) as b:
        net(x)
    same_arch = a.report(reference=a2)
    assert all(r.max_abs == 0 and r.max_ulp == 0 for r in same_arch.rows)
    vs_arch = a.report(reference="V100")               # rerun of the captured call
    vs_block = a.report(reference=b)
    assert [(r.path, r.max_abs) for r in vs_arch.rows] == \
        [(r.path, r.max_abs) for r in vs_block.rows]
    assert any(r.max_abs > 0 for r in vs_arch.rows)
    assert vs_arch.reference == "sm70"
    assert {r.path: r.products for r in vs_arch.rows} == {"0": 1, "1": 0, "2": 1,
                                                          "Sequential": 2}


def test_report_uses_the_weights_of_the_captured_call(tmp_path):
    net, x = _net()
    opt = torch.optim.SGD(net.parameters(), lr=1.0)
    with emulate("sm90", record=True) as em:
        net(x).float().sum().backward()
        opt.step()                                     # weights change after the forward
        net(x)                                         # a second call is not captured
    rep = em.report(plot=str(tmp_path / "layers.png"))
    # the reference re-ran the captured call (old weights): errors are rounding-sized
    assert max(r.rel_l2 for r in rep.rows) < 0.05
    assert (tmp_path / "layers.png").stat().st_size > 5_000


def test_report_errors_are_clear():
    with emulate("sm90") as em:
        pass
    with pytest.raises(ValueError, match="record=True"):
        em.report()
    with emulate("sm90", record=True) as em:
        torch.randn(2, 3) @ torch.randn(3, 2)
    with pytest.raises(ValueError, match="no module was called"):
        em.report()


def test_preview_model_is_public_with_defaults():
    model = tiny_gpt(seed=1, n_layer=1, d_model=32, d_ff=64, vocab=64, seq=8)
    res = preview_model(model, model.example_inputs(2), archs=["sm90", "MI300X"],
                        formats=["bf16"])
    assert {(r.fmt, r.arch) for r in res.runs} == {("bf16", "native"), ("bf16", "sm90"),
                                                  ("bf16", "gfx942")}
    assert res.layers == model.preview_layers() + ["output"]
    with pytest.raises(TypeError, match="nn.Module"):
        preview_model(lambda x: x, torch.zeros(1))
    with pytest.raises(ValueError, match="repeat"):
        preview_model(model, model.example_inputs(2), repeat=0)


def test_cli_preview_writes_a_report(tmp_path, capsys):
    out = tmp_path / "rep" / "report.png"
    rc = cli_main(["preview", "--model", "torch_mma_emu.preview.tiny_gpt:tiny_gpt",
                   "--model-kwargs", '{"n_layer": 1, "d_model": 32, "d_ff": 64, "vocab": 64, '
                   '"seq": 8}', "--arch", "sm80,H100,gfx942", "--formats", "fp16,bf16",
                   "--batch", "2", "--out", str(out), "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "gfx942 (MI300X)" in text and "emulated/native" in text
    assert out.stat().st_size > 10_000
    dump = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert {(r["format"], r["arch"]) for r in dump["runs"]} == {
        (f, a) for f in ("fp16", "bf16") for a in ("native", "sm80", "sm90", "gfx942")}


@pytest.mark.parametrize("args,match", [
    (["--model", "nonexistent_pkg.mod:make"], "cannot import"),
    (["--model", "no_colon"], "module:factory"),
    (["--arch", "sm999"], "sm999"),
    (["--formats", "fp12"], "fp12"),
    (["--arch", "sm70", "--formats", "fp8"], "fp8"),
    (["--input", "randn:2,x"], "randn:SHAPE"),
    (["--batch", "0"], "--batch"),
    (["--model-kwargs", "[1]"], "JSON object"),
])
def test_cli_preview_bad_arguments_exit_2_with_one_line(args, match, capsys):
    rc = cli_main(["preview", *args, "--no-progress", "--no-plot", "--out", "/tmp/x.png"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and match in err, err


def test_cli_preview_as_a_process_has_a_progress_bar_on_a_terminal_only(tmp_path):
    """tqdm's bar goes to stderr when it is a terminal (a pseudo-terminal here), and is left out
    when stderr is a pipe or a file (logs stay clean)."""
    import fcntl
    import pty
    import struct
    import termios
    cmd = [sys.executable, "-m", "torch_mma_emu", "preview", "--model-kwargs",
           '{"n_layer": 1, "d_model": 32, "d_ff": 64, "vocab": 64, "seq": 8}',
           "--arch", "sm90", "--formats", "bf16", "--batch", "2", "--no-plot"]
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run(cmd + ["--out", str(tmp_path / "a")], capture_output=True, text=True,
                       cwd=ROOT, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "run" not in r.stderr and (tmp_path / "a" / "preview.json").exists()
    main_fd, tty_fd = pty.openpty()
    fcntl.ioctl(tty_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # 0 columns: no bar
    p = subprocess.Popen(cmd + ["--out", str(tmp_path / "b")], stdout=subprocess.DEVNULL,
                         stderr=tty_fd, cwd=ROOT, env=env)
    os.close(tty_fd)
    chunks = []
    while True:
        try:
            data = os.read(main_fd, 4096)
        except OSError:          # the terminal closed: the process has ended
            break
        if not data:
            break
        chunks.append(data)
    assert p.wait(timeout=300) == 0
    os.close(main_fd)
    err = b"".join(chunks).decode(errors="replace")
    assert "preview" in err and "run" in err, err[-2000:]             # tqdm's bar
    assert (tmp_path / "b" / "preview.json").exists()


def test_no_global_hook_is_left_behind():
    from torch.nn.modules import module as nn_module
    net, x = _net()
    with emulate("sm90", record=True) as em:
        net(x)
    em.report()
    em.report(reference="sm80")
    assert not nn_module._has_any_global_hook()
