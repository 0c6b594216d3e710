"""The one text form of Spec and Schedule (torch_mma_emu/codec.py): both round-trip every
value exactly, Spec strings are what they always were (urllib-style escapes), Schedule
strings escape only the separators, and a malformed string (unknown or repeated field,
bad value, bad escape, a number beyond fp64) is a ValueError naming the field."""
import dataclasses
from urllib.parse import quote

import pytest

import torch_mma_emu as tme
from torch_mma_emu import codec
from torch_mma_emu.registry import all_specs
from torch_mma_emu.schedule import PRESETS, Schedule
from torch_mma_emu.spec import FIELD_KINDS, Spec, parse_spec


def _urllib_form(sp: Spec) -> str:
    """How Spec.to_string wrote specs before the codec (urllib.parse.quote, safe='')."""
    omitted = {("passes", 1), ("pass_width", 0), ("c_join", "first"), ("zero_sign", "keep"),
               ("cancelled_group", "drop"), ("tr_renorm", False)}
    parts = []
    for k in FIELD_KINDS:
        v = getattr(sp, k)
        if v is None or v == "" or (k, v) in omitted:
            continue
        parts.append(f"{k}={int(v) if isinstance(v, bool) else quote(str(v), safe='')}")
    return "spec:" + ",".join(parts)


ODD = tme.spec("sm90", "fp16").replace(instruction="a, b=c % d (é ☃)/x+y~z", arch="my arch")


@pytest.mark.parametrize("sp", list(all_specs()) + [ODD], ids=lambda s: s.to_string()[5:60])
def test_spec_strings_unchanged_and_round_trip(sp):
    s = sp.to_string()
    assert s == _urllib_form(sp)          # seeds derived from spec strings stay the same
    assert Spec.from_string(s) == sp and parse_spec(s) is parse_spec(s)   # parsed once


def test_schedule_strings_round_trip_every_field():
    odd = Schedule(split_k=3, reduce="pairwise", workspace="fp64", alpha=0.1, beta=-2.5e-300,
                   epilogue="mul_add", c_mode="epilogue")
    for s in [odd, Schedule.from_tree("[(0+1)+2+3]", alpha=3.0), *(p.schedule for p in
                                                                   PRESETS.values())]:
        assert Schedule.from_string(s.to_string()) == s
        assert Schedule.from_string(s.to_string()).alpha.hex() == s.alpha.hex()
    assert odd.to_string().count("0x") == 2     # alpha, beta as exact hex floats


@pytest.mark.parametrize("text,msg", [
    ("schedule:split_k=2,split_k=4", "schedule field split_k is given twice"),
    ("schedule:alpha=0x1p99999,c_mode=epilogue", "alpha must be a finite number"),
    ("schedule:alpha=1e999,c_mode=epilogue", "alpha must be a finite number"),
    ("schedule:beta=nan,c_mode=epilogue", "beta must be a finite number"),
    ("schedule:split_k=two", "split_k must be an integer, got 'two'"),
    ("schedule:split_k", "split_k has no value"),
    ("schedule:splitk=2", "unknown schedule field 'splitk' (fields: split_k, reduce"),
    ("schedule:reduce=%zz", "bad escape %zz"),
    ("schedule:tree=%ff", "not UTF-8"),
    ("split_k=2", "not a serialised schedule"),
])
def test_bad_schedule_strings(text, msg):
    with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        Schedule.from_string(text)


GOOD = tme.spec("sm90", "fp16").to_string()


@pytest.mark.parametrize("text,msg", [
    (GOOD + ",F=20", "spec field F is given twice"),
    (GOOD.replace("L=16", "L=sixteen"), "spec field L must be an integer"),
    (GOOD.replace("flush_inputs=0", "flush_inputs=2"), "flush_inputs must be 0 or 1"),
    (GOOD + ",bogus=1", "unknown spec field 'bogus'"),
    ("spec:op=t_fdpa", "lacks the field(s) in_format, out_format"),
    (GOOD.replace("nan_bits=2147483647", "nan_bits=8589934591"), "nan_bits must be a fp32 bit"),
    (GOOD.replace("nan_bits=2147483647", "nan_bits=0x7FFFFFFF"), "nan_bits must be an integer"),
    (GOOD.replace("L=16", "L=\uff11\uff16"), "L must be an integer, got '１６' (ASCII decimal digits"),
    (GOOD.replace("L=16", "L=\u0661\u0666"), "L must be an integer"),
    (GOOD.replace("L=16", "L=1_6"), "L must be an integer"),
    (GOOD.replace("L=16", "L=+16"), "L must be an integer"),
    (GOOD.replace("L=16", "L=%2016"), "L must be an integer"),
    (GOOD.replace("L=16", "L=" + "1" * 65), "L must be an integer"),
    (GOOD + ",emax_floor=99999999999999999999", "emax_floor must be in"),
    (GOOD.replace("P=0", "P=-3"), "P must be in 0..65535"),
])
def test_bad_spec_strings(text, msg):
    with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        Spec.from_string(text)


def test_spec_field_kinds_are_checked():
    sp = tme.spec("sm90", "fp16")
    with pytest.raises(ValueError, match="L must be an int, got '16'"):
        sp.replace(L="16")
    with pytest.raises(ValueError, match="flush_inputs must be True or False"):
        sp.replace(flush_inputs="yes")
    with pytest.raises(ValueError, match="rho must be a str"):
        sp.replace(rho=3)
    import numpy as np
    assert sp.replace(F=np.int64(20)).F == 20 and type(sp.replace(F=np.int64(20)).F) is int
    with pytest.raises(TypeError, match="a serialised Spec is a str"):
        Spec.from_string(["spec:op=fma"])


def test_field_kinds_read_off_the_dataclasses():
    assert FIELD_KINDS["emax_floor"] == "int" and FIELD_KINDS["flush_inputs"] == "bool"
    assert "notes" not in FIELD_KINDS
    assert list(FIELD_KINDS) == [f.name for f in dataclasses.fields(Spec) if f.compare]
    assert codec.field_kinds(Schedule)["alpha"] == "float"
    assert codec.escape("a,b=c%", escape_all=False) == "a%2Cb%3Dc%25"
    assert codec.unescape(codec.escape("é ☃,=", escape_all=True)) == "é ☃,="
