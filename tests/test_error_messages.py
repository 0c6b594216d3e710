"""Errors that name what is wrong and what is allowed (issue 15): emulated_mm with a Spec
whose formats the operands do not have, scales whose batch dims do not broadcast,
native_mm's backend checked before the device, FPRev functions returning non-scalars,
collective backends this machine cannot run; the op's docstring and py.typed."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import fprev


def test_spec_dtype_mismatch_names_the_spec_and_operand():
    sp = tme.spec("sm90", "fp16")
    with pytest.raises(TypeError) as e:
        tme.emulated_mm(torch.randn(4, 8).bfloat16(), torch.randn(8, 4).bfloat16(), arch=sp)
    msg = str(e.value)
    assert "Spec given as arch takes fp16 for A" in msg and "torch.bfloat16" in msg
    assert "torch.float16" in msg and "in_format" not in msg
    with pytest.raises(TypeError, match="takes fp16 for B, but B has dtype torch.float32"):
        tme.emulated_mm(torch.randn(4, 8).half(), torch.randn(8, 4), arch=sp)


def test_spec_formats_fill_ambiguous_dtypes():
    A, B = torch.randn(4, 8), torch.randn(8, 4)
    tf = tme.spec("sm90", "tf32")
    assert torch.equal(tme.emulated_mm(A, B, arch=tf),
                       tme.emulated_mm(A, B, arch="sm90", in_format="tf32"))
    h = tme.spec("sm90", "fp16")
    assert torch.equal(tme.emulated_mm(A.half(), B.half(), arch=h),
                       tme.emulated_mm(A.half(), B.half(), arch="sm90"))


def test_scale_batch_dims_that_do_not_broadcast():
    A = torch.randint(0, 16, (2, 8, 64), dtype=torch.uint8)
    B = torch.randint(0, 16, (2, 64, 4), dtype=torch.uint8)
    one = lambda *s: torch.full(s, 127, dtype=torch.uint8).view(torch.float8_e8m0fnu)  # noqa: E731
    kw = dict(arch="B200", in_format="fp4_e2m1")
    with pytest.raises(ValueError, match=r"scale_a has batch dimensions \(3,\) that do not "
                                         r"broadcast to the product's batch \(2,\)"):
        tme.emulated_mm(A, B, scale_a=one(3, 8, 2), scale_b=one(2, 2, 4), **kw)
    with pytest.raises(ValueError, match="scale_b has batch dimensions"):
        tme.emulated_mm(A, B, scale_a=one(8, 2), scale_b=one(5, 2, 4), **kw)
    # broadcasting scales are fine: one scale set for the whole batch
    D = tme.emulated_mm(A, B, scale_a=one(8, 2), scale_b=one(1, 2, 4), **kw)
    assert D.shape == (2, 8, 4)


def test_native_mm_reports_the_backend_first():
    with pytest.raises(ValueError, match="backend must be one of cublas, triton, mma, got 'foo'"):
        tme.native_mm(torch.randn(4, 8), torch.randn(8, 4), backend="foo")


@pytest.mark.parametrize("ret,what", [("abc", "str 'abc'"), ([1, 2], "list"), (None, "NoneType"),
                                      (torch.ones(3), "shape (3,)")])
def test_reveal_fn_must_return_a_scalar(ret, what):
    with pytest.raises(TypeError, match="fn must return a scalar") as e:
        fprev.reveal(lambda x: ret, 8)
    assert what in str(e.value)


def test_reveal_accepts_numbers_and_one_element_tensors():
    assert fprev.reveal(lambda x: float(x.sum()), 8).describe() == \
        fprev.reveal(lambda x: x.sum().reshape(1), 8).describe() == \
        fprev.reveal(torch.sum, 8).describe()


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="GPUs present")
def test_nccl_refused_up_front():
    with pytest.raises(ValueError, match="needs one CUDA device per rank .*use backend='gloo'"):
        fprev.reveal_allreduce(2, backend="nccl")
    with pytest.raises(ValueError, match="mpi' is not supported"):
        fprev.reveal_allreduce(2, backend="mpi")
    with pytest.raises(ValueError, match="backend must be one of gloo, nccl"):
        fprev.reveal_allreduce(2, backend="foo")


def test_collective_from_a_script_without_main_guard(tmp_path):
    # the README's snippet pasted into a file: workers must not re-import this __main__
    script = tmp_path / "snippet.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch_mma_emu import fprev
        print("top-level code ran")
        print(fprev.reveal_allreduce(2, numel=4).describe())
    """))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("top-level code ran") == 1
    assert "all_reduce over 2 ranks (gloo)" in p.stdout


def test_op_docstring_and_py_typed():
    doc = torch.ops.mma_emu.emulated_mm.__doc__
    assert doc and "bit for bit" in doc and "arch" in doc and "c_mode" in doc
    assert torch.ops.mma_emu.emulated_mm.default.__doc__ == doc
    assert os.path.isfile(os.path.join(os.path.dirname(tme.__file__), "py.typed"))
