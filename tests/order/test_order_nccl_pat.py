"""NCCL's PAT reduce-scatter (order/nccl_pat.py): the port of PatRSAlgorithm gives exactly
the step sequences of NCCL 2.30.7's own code compiled on the host
(tests/data/nccl/pat_rs_steps.json, scripts/regen_nccl_pat.py); the simulated trees,
hand-derived cases, and that PAT is neither NCCL's ring nor gloo's order."""
import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from torch_mma_emu.order import nccl, nccl_pat
from torch_mma_emu.order.tree import SumTree

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABLE = os.path.join(ROOT, "tests", "data", "nccl", "pat_rs_steps.json")


def table():
    with open(TABLE) as f:
        return json.load(f)


def port_steps(c, sentinel):
    s = nccl_pat.PatRSSchedule(c["chunkCount"] * 4, c["offset"], c["end"], c["count"],
                               c["chunkCount"], c["rank"], c["nranks"])
    steps = [[sentinel if st[f] is None else st[f] for f in nccl_pat.FIELDS]
             for st in s.steps()]
    return s, steps


def test_port_gives_nccls_compiled_step_sequences():
    t = table()
    assert t["nccl_version"] == nccl.VERSION and tuple(t["fields"]) == nccl_pat.FIELDS
    assert {c["nranks"] for c in t["cases"]} == set(range(2, 17))
    full = 0
    for c in t["cases"]:
        s, steps = port_steps(c, t["sentinel"])
        assert s.parallel == c["parallelFactor"], c
        assert len(steps) == c["nsteps"], c
        if "steps" in c:
            full += 1
            assert steps == c["steps"], c
        digest = hashlib.sha256(json.dumps(steps, separators=(",", ":")).encode()).hexdigest()
        assert digest == c["sha256"], c
    assert full == sum(range(2, 6)) * 6      # 2-5 ranks in full, every rank and size
    # the table exercises aggregation and parallel groups, not only the plain schedule
    assert {c["parallelFactor"] for c in t["cases"]} >= {1, 2, 4, 8}


def test_hand_derived_trees():
    # 2 ranks: one addition; 3 ranks: block d = x[d+2] + (x[d+1] + x[d])
    assert nccl_pat.pat_reduce_scatter(2, 5).tree_at(0) == SumTree.parse("(0+1)")
    r3 = nccl_pat.pat_reduce_scatter(3, 10)
    for d in range(3):
        want = SumTree.parse(f"({(d + 2) % 3}+({(d + 1) % 3}+{d}))")
        assert r3.tree_at(10 * d) == want and r3.tree_at(10 * d + 9) == want
    # 4 ranks (rank d: phase 0 sends its own block d+1.. on dim 0, phase 1 adds what d-1
    # sent and passes it on dim 1, the last step adds dim 0's aggregate):
    # block d = x[d+3] + ((x[d+1] + x[d+2]) + x[d])
    r4 = nccl_pat.pat_reduce_scatter(4, 7)
    for d in range(4):
        a, b, c = ((d + k) % 4 for k in (3, 1, 2))
        assert r4.tree_at(7 * d + 3) == SumTree.parse(f"({a}+(({b}+{c})+{d}))")


@pytest.mark.parametrize("n", [3, 4, 5, 8, 16])
def test_pat_is_not_the_ring_and_ignores_size_and_channels(n):
    ring = nccl.ring_reduce_scatter(n, 4)
    pat = nccl_pat.pat_reduce_scatter(n, 4)
    assert pat.numel == ring.numel == 4 * n
    assert pat.tree_at(0) != ring.tree_at(0)
    # aggregation (small parts), several chunks, several channels: the same trees
    for count, ch in ((1, 1), (3000, 1), (300000, 3)):
        other = nccl_pat.pat_reduce_scatter(n, count, nchannels=ch)
        for d in range(n):
            assert other.tree_at(d * count) == pat.tree_at(4 * d)
            assert other.tree_at(d * count + count - 1) == pat.tree_at(4 * d)


def test_simulation_places_every_step_for_2_to_16_ranks():
    # the symbolic run refuses a read of an unwritten region, a region of other positions,
    # a deadlock, an output not summing every rank once: it must get through all of these
    for n in range(2, 17):
        # (count, channels, dtype): the last runs several chunks per channel, the last one
        # short (4 ranks: 4.8 MB halves the 512 KiB chunk once, 65536 floats, 5 chunks)
        for count, ch, dt in ((1, 1, "float16"), (37, 2, "float16"), (5000, 1, "float16"),
                              (70000, 3, "float16"), (300001, 1, "float32")):
            r = nccl_pat.pat_reduce_scatter(n, count, dt, nchannels=ch)
            assert r.numel == n * count
            assert all(sorted(t.leaves()) == list(range(n)) for t in r.trees())
            assert r.trees() == nccl_pat.pat_reduce_scatter(n, 1).trees()
    parts = nccl.channel_parts("reduce_scatter", 300001, "float32", 4, "simple", 1, "pat")
    assert parts == [(0, 0, 300001, 65536)]


def test_pat_fold_fp16_by_hand():
    # block 0 on 3 ranks: x2 + (x1 + x0); 1 + 2^-11 ties to 1, so PAT gives 1 where the
    # ring's (x1 + x2) + x0 = 2^-10 + 1 keeps it
    x = np.array([[1.0, 0, 0], [2.0 ** -11, 0, 0], [2.0 ** -11, 0, 0]], np.float16)
    pat = nccl.reduce_values(nccl_pat.pat_reduce_scatter(3, 1), x, np.float16)
    ring = nccl.reduce_values(nccl.ring_reduce_scatter(3, 1), x, np.float16)
    assert pat[0] == 1.0 and ring[0] == 1.0 + 2.0 ** -10


def test_bad_arguments():
    with pytest.raises(ValueError, match="nranks"):
        nccl_pat.pat_reduce_scatter(1, 4)
    with pytest.raises(ValueError, match="rank must be"):
        nccl_pat.PatRSSchedule(64, 0, 4, 4, 4, 5, 4)
    with pytest.raises(ValueError, match="offset < end"):
        nccl_pat.PatRSSchedule(64, 4, 4, 4, 4, 0, 4)


@pytest.mark.slow
def test_regen_script_reproduces_the_table(tmp_path):
    """Needs an NCCL 2.30.7 checkout in $NCCL_SRC and g++."""
    src = os.environ.get("NCCL_SRC")
    if not src or not shutil.which("g++"):
        pytest.skip("set NCCL_SRC to an NCCL 2.30.7 checkout (and have g++)")
    out = tmp_path / "pat.json"
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "regen_nccl_pat.py"), src,
                    "--out", str(out)], check=True)
    assert json.loads(out.read_text()) == table()
