"""Hostile inputs, round 3 (issue 42), through the Python API: blocks closed out of order,
algorithms past their bound, models asked to be huge, arguments of the wrong type.  Each
case failed before the fix it names."""
import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import limits


def test_closing_an_outer_emulate_block_first_raises_and_keeps_the_inner_target():
    """Medium 5: enter emulate("sm90"), then emulate("gfx942"), exit the first: X @ W in the
    still-open gfx942 block gave sm90's bits (torch popped the inner mode).  Now closing
    the outer block first raises and closes nothing; the inner block keeps its target
    (here sm70 inside sm90: fp16 products whose bits differ between the two)."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(16, 256, generator=g).half()
    W = torch.randn(256, 16, generator=g).half()
    with tme.emulate("sm70"):
        want = X @ W
    with tme.emulate("sm90"):
        other = X @ W
    assert not torch.equal(want, other)      # the two targets differ on these inputs
    outer, inner = tme.emulate("sm90"), tme.emulate("sm70")
    outer.__enter__()
    inner.__enter__()
    try:
        with pytest.raises(RuntimeError, match="close the inner block first"):
            outer.__exit__(None, None, None)
        assert torch.equal(X @ W, want)
    finally:
        inner.__exit__(None, None, None)
        outer.__exit__(None, None, None)
    assert torch.equal(X @ W, torch.mm(X, W))       # both closed: native again


def test_reveal_basic_has_its_own_bound(monkeypatch):
    """Medium 6: --algorithm basic probes every pair (n = 4096: 112 s and 2.3 GB, 16384
    passed 9 GB) under MMA_EMU_MAX_REVEAL_N's 65,536: it has its own bound, checked first."""
    from torch_mma_emu.fprev import reveal
    with pytest.raises(limits.LimitError, match="n of algorithm='basic' = 4096 is above the "
                       "bound of 1024 .*MMA_EMU_MAX_REVEAL_BASIC_N"):
        reveal(torch.sum, 4096, algorithm="basic")
    monkeypatch.setenv("MMA_EMU_MAX_REVEAL_BASIC_N", "8")
    with pytest.raises(limits.LimitError, match="= 9 is above the bound of 8"):
        reveal(torch.sum, 9, algorithm="basic")
    assert reveal(torch.sum, 8, algorithm="basic").n == 8


def test_reveal_basic_bound_on_the_command_line(capsys):
    from torch_mma_emu.cli import main
    assert main(["reveal", "sum", "--n", "4096", "--algorithm", "basic"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "MMA_EMU_MAX_REVEAL_BASIC_N" in err[0], err


def test_preview_model_kwargs_cannot_build_a_huge_model(monkeypatch, capsys):
    """Medium 8: --model-kwargs '{"n_layer": 100000}' ran out of memory building TinyGPT;
    the build stops when its tensors pass MMA_EMU_MAX_MODEL_MIB (one line, exit 2)."""
    from torch_mma_emu.cli import main
    monkeypatch.setenv("MMA_EMU_MAX_MODEL_MIB", "16")
    assert main(["preview", "--model-kwargs", '{"n_layer": 100000}', "--arch", "sm90",
                 "--no-plot", "--out", "/nonexistent-never-written/x.png"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "its tensors pass the bound of 16 MiB of tensors a preview " \
        "model's factory makes; set MMA_EMU_MAX_MODEL_MIB" in err[0], err
    from torch_mma_emu.preview.cli import load_model
    model, _ = load_model("torch_mma_emu.preview.tiny_gpt:tiny_gpt", {"n_layer": 3})
    assert len(model.blocks) == 3                  # a model within the bound builds


# ---------------------------------------------------------------------------------------
# Low: environment variables, one parser and one table (limits.py)

def _mm():
    return tme.emulated_mm(torch.ones(2, 8).half(), torch.ones(8, 2).half(), arch="sm90")


@pytest.mark.parametrize("var,bad", [
    ("MMA_EMU_SCALAR", "false"), ("MMA_EMU_SCALAR", "no"), ("MMA_EMU_SCALAR", "off"),
    ("MMA_EMU_SCALAR", " "), ("MMA_EMU_CPU_ISA", "AVX2"), ("MMA_EMU_CPU_ISA", "garbage"),
    ("MMA_EMU_CPU_GENERIC", "yes"), ("MMA_EMU_CPU_GENERIC", "true"),
    ("MMA_EMU_CPU_BLOCK_BYTES", "abc"), ("MMA_EMU_CPU_BLOCK_BYTES", "-1"),
    ("MMA_EMU_CPU_BLOCK_BYTES", "1e3"), ("MMA_EMU_CPU_BLOCK_BYTES", "12abc"),
    ("MMA_EMU_CPU_BLOCK_BYTES", str(1 << 40)),
])
def test_cpu_kernel_settings_are_parsed_once_with_clear_errors(monkeypatch, var, bad):
    """MMA_EMU_SCALAR=false / no / off forced the scalar path; MMA_EMU_CPU_ISA=AVX2 or
    garbage was ignored; MMA_EMU_CPU_BLOCK_BYTES was read differently by Python and C++
    (atoll: 1e3 -> 1, 12abc -> 12) and a huge value turned K blocking off.  Python parses
    them before every CPU kernel call, so the C++ side only sees values both read alike."""
    monkeypatch.setenv(var, bad)
    with pytest.raises(ValueError, match=var):
        _mm()


@pytest.mark.parametrize("var,good", [("MMA_EMU_SCALAR", "1"), ("MMA_EMU_SCALAR", "0"),
                                      ("MMA_EMU_CPU_ISA", "avx2"),
                                      ("MMA_EMU_CPU_GENERIC", "1"), ("MMA_EMU_CPU_GENERIC", "0"),
                                      ("MMA_EMU_CPU_ISA", "scalar"),
                                      ("MMA_EMU_CPU_BLOCK_BYTES", "4096")])
def test_cpu_kernel_settings_accept_their_values(monkeypatch, var, good):
    monkeypatch.setenv(var, good)
    assert _mm()[0, 0].item() == 8


def test_hwdata_pointing_nowhere_is_an_error(monkeypatch, tmp_path):
    """MMA_EMU_HWDATA=/nonexistent fell back to the repository's data silently."""
    from torch_mma_emu.reference.hwdata import hwdata_dir
    monkeypatch.setenv("MMA_EMU_HWDATA", str(tmp_path / "nonexistent"))
    with pytest.raises(ValueError, match="MMA_EMU_HWDATA=.*not a folder holding index.json"):
        hwdata_dir()
    (tmp_path / "index.json").write_text("[]")
    monkeypatch.setenv("MMA_EMU_HWDATA", str(tmp_path))
    assert hwdata_dir() == tmp_path


def test_readme_names_every_environment_variable():
    """Every MMA_EMU_* variable the package, the extension, setup.py and the scripts read is
    named in README.md's "Bounds and limits" (C macros set by setup.py are not variables)."""
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    text = (root / "README.md").read_text()
    section = text[text.index("## Bounds and limits"):]
    section = section[:section.index("\n## ", 3)]
    macros = {"MMA_EMU_WITH_CUDA", "MMA_EMU_CUDA_ARCHS", "MMA_EMU_NO_SIMD", "MMA_EMU_MAX_"}
    found = set()
    for pattern in ("torch_mma_emu/**/*.py", "csrc/**/*.cpp", "scripts/**/*.py",
                    "scripts/**/*.sh", "setup.py"):
        for f in root.glob(pattern):
            found |= set(re.findall(r"MMA_EMU_[A-Z0-9_]+", f.read_text(errors="replace")))
    missing = sorted(found - macros - set(re.findall(r"MMA_EMU_[A-Z0-9_]+", section)))
    assert not missing, f"README's Bounds and limits does not name {missing}"


# ---------------------------------------------------------------------------------------
# Low: batch_invariance's arguments, and the assumption its answer rests on

def _bi(**kw):
    x, W = torch.ones(4, 8).half(), torch.ones(8, 2).half()
    kw.setdefault("batch_sizes", [1, 4])
    return tme.batch_invariance(kw.pop("fn", lambda x, W: x @ W), (x, W), arch="H100", **kw)


@pytest.mark.parametrize("sizes", [[1.5, 4], ["1", "4"], [True, 4]])
def test_batch_invariance_refuses_sizes_that_are_not_ints(sizes):
    """[1.5, 8] was truncated silently; ["1", "8"] and [True, 8] accepted."""
    with pytest.raises(TypeError, match="batch_sizes must be ints"):
        _bi(batch_sizes=sizes)


def test_batch_invariance_refuses_bad_tree_rows_and_empty_results():
    with pytest.raises(ValueError, match="tree_rows must be an int >= 1, got -1"):
        _bi(tree_rows=-1)
    with pytest.raises(ValueError, match="fn returned an empty tuple"):    # was IndexError
        _bi(fn=lambda x, W: ())


def test_the_report_names_its_schedule_assumption():
    """A confident 'every row has the same bits' rested on every mm in a block running one
    schedule whatever its shape, which cuBLAS does not promise (it picks a kernel and split-K
    per shape): the report and em.summary() say so."""
    text = str(_bi())
    assert "every row has the same bits" in text
    assert "every mm in a block runs one schedule" in text and "per shape" in text
    with tme.emulate("H100") as em:
        torch.ones(4, 8).half() @ torch.ones(8, 2).half()
    assert "a library (cuBLAS, hipBLASLt) may choose its kernel and split-K per shape" in \
        em.summary()


def test_signalling_nans_are_values_under_w_error():
    """A signalling NaN into gpu_math raised under ``-W error`` ("invalid value encountered
    in cast"): NaN and inf operands are values of the model, never warnings."""
    import warnings

    import numpy as np

    from torch_mma_emu import gpu_math
    snan = np.array([0x7F800001, 0xFF800001, 0x7FA00000], dtype=np.uint32).view(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name, rec in gpu_math.FUNCTIONS.items():
            out = gpu_math.evaluate(name, *[snan] * rec.arity)
            assert out.shape == snan.shape, name
            if name.startswith(("ex2", "rcp", "rsqrt", "div", "lg2", "sqrt", "sin", "cos",
                                "fma", "mul", "add", "sub")):
                assert np.isnan(out).all(), (name, out)
