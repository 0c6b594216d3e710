"""The command line (mma-emu / python -m torch_mma_emu)."""
import subprocess
import sys

from torch_mma_emu.cli import build_parser, main


def run(capsys, *argv):
    rc = main(list(argv))
    return rc, capsys.readouterr()


def test_archs_lists_every_arch(capsys):
    rc, out = run(capsys, "archs")
    assert rc == 0
    for a in ("sm70", "sm86", "sm120", "gfx908", "gfx90a", "gfx942"):
        assert a in out.out
    assert "kind::mxf4nvf4" in out.out and "H100" in out.out


def test_compare_reproduces_table8(capsys):
    rc, out = run(capsys, "compare")
    assert rc == 0
    rows = {line.split()[0]: line.split() for line in out.out.splitlines()[3:]}
    assert rows["sm70"][2:] == ["N/A", "N/A", "0", "N/A", "-0.875", "-0.875"]
    assert rows["sm90"][2:] == ["-0.75", "-0.75", "-0.75", "0", "-0.875", "-0.875"]
    assert rows["gfx942"][2:] == ["-0.5", "-0.5", "-0.5", "-1", "-0.875", "-0.875"]
    assert "0 or -0.375" in out.out  # CDNA2 bf16, both instructions


def test_compare_random(capsys):
    rc, out = run(capsys, "compare", "--random", "--size", "16", "--arch", "sm90", "--format", "fp8_e4m3")
    assert rc == 0
    lines = [l for l in out.out.splitlines() if l.startswith("sm90")]
    assert len(lines) == 2  # fp32 and fp16 outputs
    # FP8 on Hopper with fp32 output keeps 13 bits: far more than one fp32 ulp of error
    assert float(lines[0].split()[-2]) > 10


def test_errors_exit_2(capsys):
    rc, out = run(capsys, "compare", "--arch", "sm99")
    assert rc == 2 and "unknown arch" in out.err


def test_module_entry_point():
    p = subprocess.run([sys.executable, "-m", "torch_mma_emu", "archs", "--arch", "V100"],
                       capture_output=True, text=True, check=True)
    assert "HMMA.884" in p.stdout


def test_parser_has_subcommands():
    actions = [a for a in build_parser()._actions if a.dest == "command"][0]
    assert {"archs", "compare"} <= set(actions.choices)
