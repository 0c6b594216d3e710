"""``fit`` says how many more samples would decide between the models that reproduce a file
(probe/fit_estimate.py), and ``mma-emu fit`` names a missing file once.  Sample files are
synthetic (random fp16 inputs answered by the sm90 model), as in test_probe_fit_bounds."""
import warnings

import pytest
import torch

from torch_mma_emu.cli import main
from torch_mma_emu.probe import fit_estimate as fe
from torch_mma_emu.probe.fit import FitUndecidedWarning, fit
from torch_mma_emu.probe.samples import Batch, random_batches, stand_in_spec
from torch_mma_emu.probe.targets import output_codes
from torch_mma_emu.ops import emulated_mm

from test_probe_fit_bounds import SPEC, _samples, _save


def test_agreement_prefix_by_hand():
    # model 0 is told from model 1 by input 1 and from model 2 by input 2
    o = torch.tensor([[0, 0, 1], [0, 1, 1], [0, 0, 0]])
    assert fe.agreement_prefix(o) == (3, 0)
    # the first input separates everything
    assert fe.agreement_prefix(torch.tensor([[1, 5], [2, 5], [3, 5]])) == (1, 0)
    # two models agreeing on every input: no estimate, both counted
    o = torch.tensor([[0, 1, 2], [0, 1, 2], [0, 1, 3]])
    assert fe.agreement_prefix(o) == (None, 2)
    e = fe.Estimate(None, 3, 3, 2)
    assert "would not be enough: 2 of the 3 models" in e.describe()
    assert "about 7 more samples would tell the 5 models apart" in \
        fe.Estimate(7, 256, 5, 0).describe()


def _random_inputs(iface, ks, n):
    """The estimate's own random inputs, in its order (seed 0)."""
    g = torch.Generator().manual_seed(0)
    kws = [kw for _, _, kw in random_batches(stand_in_spec(iface), n, ks, None, g, n)]
    A = torch.cat([kw["A"] for kw in kws])
    B = torch.cat([kw["B"] for kw in kws])
    C = torch.cat([kw["C"] if kw["C"] is not None else
                   torch.zeros(kw["A"].shape[0], 1, 1, dtype=iface.out_dtype) for kw in kws])
    return A, B, C


def test_the_estimate_is_enough():
    """Two samples leave several models; the estimate says N more decide.  Adding the
    estimate's first N random inputs, answered by the true model, to the file leaves exactly
    one model: the estimate is neither missing nor too small."""
    arrays = _samples(2, 8, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FitUndecidedWarning)
        res = fit(tuple(arrays[k] for k in "abcd"), "fp16", "fp32", ops=["t_fdpa"],
                  passes=False, max_consistent=None)
    assert res.undecided and res.consistent <= fe.ESTIMATE_MODELS
    est = res.estimate
    assert est is not None and est.models == res.consistent and est.together == 0
    n = est.needed
    assert 1 <= n <= fe.ESTIMATE_INPUTS
    assert f"about {n} more sample" in res.describe() and f"about {n} more" in res.verdict()
    # the file plus the estimate's n inputs answered by the truth: decided
    from torch_mma_emu.probe.fit import _as_samples
    s = _as_samples(tuple(arrays[k] for k in "abcd"), "fp16", "fp32")
    A, B, C = _random_inputs(s.iface, s.ks, fe.ESTIMATE_INPUTS)
    A, B, C = A[:n], B[:n], C[:n]
    D = emulated_mm(A, B, C, arch=SPEC, out_dtype=s.iface.out_dtype)
    s.add(Batch(A, B, C, output_codes(D.reshape(-1)), label="estimate's inputs"))
    res2 = fit(s, ops=["t_fdpa"], passes=False, max_consistent=None)
    assert res2.consistent == 1 and res2.estimate is None, res2.describe()
    assert "undecided" not in res2.describe()
    if n > 1:   # one input fewer leaves more than one (n is the worst case over the models)
        s3 = _as_samples(tuple(arrays[k] for k in "abcd"), "fp16", "fp32")
        s3.add(Batch(A[:n - 1], B[:n - 1], C[:n - 1], output_codes(D.reshape(-1))[:n - 1]))
        # the truth may need fewer than the worst case: only check nothing breaks
        assert fit(s3, ops=["t_fdpa"], passes=False, max_consistent=None).consistent >= 1


def test_decided_files_have_no_estimate():
    arrays = _samples(300, 16, seed=2)
    res = fit(tuple(arrays[k] for k in "abcd"), "fp16", "fp32", ops=["t_fdpa"], passes=False,
              estimate=True)
    if res.consistent == 1:
        assert res.estimate is None and "more sample" not in res.describe()
    else:      # a few remain: the estimate is given for them
        assert res.estimate is not None


def test_estimate_can_be_switched_off():
    arrays = _samples(2, 8, seed=1)
    res = fit(tuple(arrays[k] for k in "abcd"), "fp16", "fp32", ops=["t_fdpa"], passes=False,
              max_consistent=None, estimate=False)
    assert res.undecided and res.estimate is None
    assert "more samples (that make them differ) are needed" in res.describe()


def test_cli_prints_the_estimate(tmp_path, capsys):
    path = _save(tmp_path, "two.npz", _samples(2, 8, seed=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FitUndecidedWarning)
        assert main(["fit", str(path), "--format", "fp16", "--out", "fp32",
                     "--single-pass"]) == 0
    out = capsys.readouterr().out
    assert "undecided:" in out and ("more sample" in out and ("about" in out or
                                                             "not be enough" in out)), out


def test_cli_missing_file_names_it_once(tmp_path, capsys):
    missing = str(tmp_path / "nope.npz")
    assert main(["fit", missing, "--format", "fp16", "--out", "fp32"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.count(missing) == 1, err
