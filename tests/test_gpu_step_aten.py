"""The GPU step ``reductions`` records what confirms issue 39's models (hw/aten_checks.py:
softmax paths and backward, affine layer_norm, its dX and dgamma / dbeta, rms_norm, var /
std, elementwise sweeps and their backward); its CPU stand-in ``--compare`` runs the
models against a record.  Here the record is the models' own prediction: it must match,
and one flipped bit must show."""
import numpy as np
import pytest

from torch_mma_emu import registry
from torch_mma_emu.hw import aten_checks, reductions

KINDS = ("softmax_fp32_n4099", "log_softmax_bf16_spatial", "softmax_backward_fp16_n1000",
         "layer_norm_affine_fp16_n1030", "layer_norm_bw_bf16_n1030", "layer_norm_dgdb_fp16_m200",
         "rms_norm_fp32_n1024", "var_cols_fp32",
         "ew_erf_bf16", "bw_tanh_backward_fp16", "embedding_bw_segments_fp16")


def _record(tmp_path, monkeypatch, subset=True):
    if subset:
        full = aten_checks.cases()
        keep = [c for c in full if c[0][len(aten_checks.PREFIX):] in KINDS]
        assert len(keep) == len(KINDS)
        monkeypatch.setattr(aten_checks, "cases", lambda: keep)
    arrays = aten_checks.model_record(registry.gpu("H100"))
    arrays.update({"device": np.array("NVIDIA H100 80GB HBM3"), "sms": np.array(132),
                   "max_threads_per_sm": np.array(2048)})
    return arrays


def _check(tmp_path, arrays, flip_key):
    path = tmp_path / "r.npz"
    np.savez(path, **arrays)
    assert reductions.main(["--compare", str(path)]) == 0
    rows = {k: (b, n) for k, b, n in reductions.compare(str(path))}
    assert set(k for k in arrays if k.startswith(aten_checks.PREFIX) and k in rows)
    flipped = dict(arrays)
    y = flipped[flip_key].copy().reshape(-1)
    y[min(3, y.size - 1)] ^= 1 << 2
    flipped[flip_key] = y.reshape(arrays[flip_key].shape)
    np.savez(path, **flipped)
    assert reductions.main(["--compare", str(path)]) == 1
    rows = {k: b for k, b, _ in reductions.compare(str(path))}
    assert rows[flip_key] == 1 and sum(rows.values()) == 1


def test_compare_matches_the_models_and_finds_a_flipped_bit(tmp_path, monkeypatch):
    arrays = _record(tmp_path, monkeypatch)
    for key in ("k39_softmax_backward_fp16_n1000", "k39_ew_erf_bf16", "k39_var_cols_fp32",
                "k39_embedding_bw_segments_fp16"):
        _check(tmp_path, arrays, key)


def test_a_regenerated_input_must_match_its_head(tmp_path, monkeypatch):
    monkeypatch.setattr(aten_checks, "BIG", 16)
    arrays = _record(tmp_path, monkeypatch)
    key = "head0_k39_softmax_fp32_n4099"
    assert key in arrays
    arrays[key] = arrays[key] ^ 1
    path = tmp_path / "r.npz"
    np.savez(path, **arrays)
    assert reductions.main(["--compare", str(path)]) == 2


@pytest.mark.slow
def test_every_case(tmp_path, monkeypatch):
    arrays = _record(tmp_path, monkeypatch, subset=False)
    assert len([k for k in arrays if k.startswith(aten_checks.PREFIX)]) == 132  # 12: dgamma / dbeta
    _check(tmp_path, arrays, "k39_std_mean_all_bf16")
