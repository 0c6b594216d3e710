"""scripts/gpu/nccl_orders.py, the GPU step that holds real NCCL to order.nccl: its CPU
comparison accepts a recording equal to the model, finds a changed tree, and the recorder
says why it cannot run on a machine without enough GPUs."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from torch_mma_emu.order import nccl

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "nccl_orders.py"
spec = importlib.util.spec_from_file_location("nccl_orders", SCRIPT)
step = importlib.util.module_from_spec(spec)
spec.loader.exec_module(step)


def _fake_record():
    """What a GPU run would record if NCCL summed as modelled."""
    cases = []
    for algo, proto, ch in step.CASES:
        case = dict(algo=algo, proto=proto, channels=ch, world_size=4, numel=3000,
                    rings=[[0, 2, 1, 3]] * ch if algo == "ring" else [],
                    tree_lines=[])
        case["revealed"] = step.model_ranges(case).to_list()
        cases.append(case)
    return dict(nccl="2.30.7", cases=cases)


def test_compare_accepts_the_model_and_finds_a_changed_tree(tmp_path, capsys):
    rec = _fake_record()
    assert step.compare(rec) == 0
    ring = rec["cases"][0]
    assert len(ring["revealed"]) > 1
    # another ring (0 1 2 3) than the log line's: a different chain somewhere
    ring["revealed"] = nccl.ring_allreduce(4, 3000, proto="simple", nchannels=1).to_list()
    assert step.compare(rec) == 1
    path = tmp_path / "nccl_orders.json"
    path.write_text(json.dumps(rec))
    r = subprocess.run([sys.executable, str(SCRIPT), "--compare", str(path)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "DIFFERENT" in r.stdout and r.stdout.count("equal") == 5


def test_record_without_gpus_says_why(tmp_path):
    rec = step.record(str(tmp_path), [2], 64)      # this machine: no CUDA device
    assert all("needs 2 GPUs" in c["error"] for c in rec["cases"])
    assert step.compare(rec) == 0
    assert json.loads((tmp_path / "nccl_orders.json").read_text())["cases"]


def test_bad_input_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2]")
    for args in (["--compare", str(bad)], [], ["--out", str(tmp_path), "--world-sizes", "1"]):
        r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                           text=True)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
