"""Bad input to the probe API gets a clear exception, and small-n / odd-format paths stay
right (found in review: a false pass with ks=[0], fp64 codes, narrow -> fp64, ...)."""
from pathlib import Path

import numpy as np
import pytest
import torch

from torch_mma_emu import probe, registry
from torch_mma_emu.cli import main
from torch_mma_emu.probe.samples import random_samples
from torch_mma_emu.probe.targets import ProbeTargetError, make_target

HW = Path(__file__).parent.parent / "data" / "hwdata"
SM80 = registry.spec("sm80", "fp16", "fp32")


@pytest.mark.parametrize("kw,msg", [(dict(ks=[0]), "ks must be"), (dict(ks=[]), "ks must be"),
                                    (dict(ks=[2.5]), "ks must be"),
                                    (dict(families=()), "families must be"),
                                    (dict(families=("x",)), "families must be"),
                                    (dict(batch=0), "batch must be"),
                                    (dict(seed=None), "seed must be")])
def test_verify_rejects_bad_schedules(kw, msg):
    with pytest.raises(ValueError, match=msg):
        probe.verify(SM80.replace(F=10, arch="custom"), "sm80", 300, **kw)
    with pytest.raises(ValueError, match="n must be"):
        probe.verify(SM80, "sm80", True)


def test_small_n_reaches_every_family_and_length():
    s = random_samples(make_target("sm80", "fp16"), 300, [3, 5, 8, 17, 24])
    labels = {b.label for b in s.batches}
    assert len(labels) == 15 and len(s) == 300


def test_fp64_patterns_are_unsigned():
    sp = registry.spec("sm80", "fp64", "fp64")
    res = probe.verify(sp, lambda a, b, c: -1.0, 30, in_format="fp64", out_dtype="fp64")
    assert res.counterexample.target_code == 0xBFF0000000000000


def test_narrow_inputs_do_not_accumulate_in_fp64():
    with pytest.raises(ValueError, match="fp64 results come from fp64 x fp64"):
        probe.features(lambda a, b, c: 0.0, "fp16", "fp64")


def test_callable_targets_fail_clearly():
    with pytest.raises(TypeError, match=r"called as f\(a, b, c\)"):
        probe.features(lambda a, b: 0.0, "fp16")

    def boom(a, b, c):
        raise KeyError("x")
    with pytest.raises(ProbeTargetError, match="raised KeyError"):
        probe.features(boom, "fp16")
    for bad in (None, "1.0", [1.0], torch.ones(2)):
        with pytest.raises(ProbeTargetError, match="must return a float"):
            probe.features(lambda a, b, c, r=bad: r, "fp16")


def test_target_instance_with_other_formats_is_refused():
    t = make_target("sm80", "fp16")
    with pytest.raises(ValueError, match="the target computes"):
        probe.features(t, "bf16")


def test_verify_compares_block_sizes():
    sp32 = registry.spec("sm100", "fp4_e2m1", "fp32", scale_format="ue8m0", block_size=32)
    sp16 = registry.spec("sm100", "fp4_e2m1", "fp32", scale_format="ue8m0", block_size=16)
    with pytest.raises(ValueError, match="ue8m0 scales per 32"):
        probe.verify(sp32, sp16, 10)


def test_fit_rejects_bad_samples():
    z = np.load(HW / "V100_fp16_to_fp32.npz")
    a, b, c, d = z["a"], z["b"], z["c"], z["d"]
    with pytest.raises(ValueError, match="K >= 1"):
        probe.fit((a[:, :0], b[:, :0], c, d), "fp16")
    with pytest.raises(ValueError, match="at least one row"):
        probe.fit((a[:0], b[:0], c[:0], d[:0]), "fp16")
    with pytest.raises(ValueError, match=r"lacks \['d'\]"):
        probe.fit({"a": a, "b": b, "c": c}, "fp16")
    with pytest.raises(ValueError, match="ops must name"):
        probe.fit((a, b, c, d), "fp16", ops=["nope"])
    with pytest.raises(ValueError, match="not fp16 values"):     # fp32 data read as fp16
        probe.fit((a, b, c, d), "fp16", "fp16")
    with pytest.raises(ValueError, match="limit must be"):
        probe.fit((a, b, c, d), "fp16", limit=0)


def test_fit_marks_what_the_registry_filled_in():
    res = probe.fit(HW / "H100_bf16_to_fp32.npz")
    assert "emax_floor from the registry" in res.describe()


def test_fit_cli_keeps_the_index_output_type(capsys):
    rc = main(["fit", str(HW / "V100_fp16_to_fp16.npz"), "--format", "fp16", "--limit", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "rne_fp16" in out


def test_cli_rejects_non_positive_counts(capsys):
    for argv in (["probe", "--arch", "sm80", "--format", "fp16", "--verify", "-5"],
                 ["fit", str(HW), "--limit", "0"]):
        assert main(argv) == 2      # argparse's error: one line, code 2, no SystemExit
    assert "must be a positive integer" in capsys.readouterr().err


def test_cli_spec_missing_fields(capsys):
    rc = main(["probe", "--spec", "spec:op=t_fdpa"])
    assert rc == 2 and "lacks the field(s) in_format, out_format" in capsys.readouterr().err


def test_carry_bits_match_the_evidence():
    f = probe.features("sm80", "fp16", order=False)["carry_bits"]
    assert f.value == 3 and "= 30.0 exactly" in f.detail    # 30 < 2**5: 5 integer bits


def test_exact_sums_show_no_product_groups():
    f = probe.features("gfx908", "fp16", order=False)["product_groups"]
    assert f.value is None and "exact fused sum" in f.detail
