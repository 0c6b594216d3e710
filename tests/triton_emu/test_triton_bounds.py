"""Hostile inputs (issue 42 High 3): an unmasked tl.load / tl.store outside a tensor under
the Triton block read heap garbage, wrote into the neighbouring view or crashed the process.
Each is now an error naming the kernel, the argument and the offending offsets, and nothing
outside is read or written (torch_mma_emu/triton/bounds.py)."""
import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import torch_mma_emu.triton as tmt  # noqa: E402

BLOCKS = [("emulate", lambda: tmt.emulate("H100")), ("interpret", tmt.interpret)]


@triton.jit
def copy_unmasked(X, Y, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + o, tl.load(X + o))


@triton.jit
def fill_unmasked(Y, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.store(Y + o, tl.full((BLOCK,), 7.0, tl.float32))


@triton.jit
def copy_masked(X, Y, N, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < N
    tl.store(Y + o, tl.load(X + o, mask=m, other=0.0), mask=m)


@triton.jit
def copy_2d(X, Y, sx, sy, BM: tl.constexpr, BN: tl.constexpr):
    r, c = tl.arange(0, BM)[:, None], tl.arange(0, BN)[None, :]
    tl.store(Y + r * sy + c, tl.load(X + r * sx + c))


def _err(excinfo) -> str:
    """The text of the bounds error (the interpreter wraps a kernel's exception)."""
    e = excinfo.value
    return f"{e} {e.__cause__}"


@pytest.mark.parametrize("name,block", BLOCKS)
def test_load_past_the_end_names_kernel_argument_offsets(name, block):
    x, y = torch.arange(16.), torch.zeros(64)
    with block(), pytest.raises(Exception) as ei:
        copy_unmasked[(1,)](x, y, BLOCK=64)
    msg = _err(ei)
    assert "OutOfBoundsError" in type(ei.value.__cause__ or ei.value).__name__ or \
        "OutOfBoundsError" in msg
    assert "kernel copy_unmasked: tl.load outside argument 'X' (16 elements of 4 bytes)" in msg
    assert "48 of 64 lanes at element offsets 16, 17, 18" in msg and "to 63" in msg
    assert torch.equal(y, torch.zeros(64))          # the load failed before any store


@pytest.mark.parametrize("name,block", BLOCKS)
def test_store_into_the_neighbouring_view_writes_nothing(name, block):
    big = torch.zeros(65536)
    with block(), pytest.raises(Exception) as ei:
        fill_unmasked[(1,)](big[:16], BLOCK=32)
    assert "tl.store outside argument 'Y' (16 elements" in _err(ei)
    assert "element offsets 16, 17" in _err(ei) and "nothing was written" in _err(ei)
    assert not big.any()                            # not even big[:16]: the store is refused


def test_a_huge_store_raises_instead_of_crashing():
    y = torch.zeros(16)
    with tmt.emulate("H100"), pytest.raises(Exception) as ei:
        fill_unmasked[(1,)](y, BLOCK=4096)
    assert "4080 of 4096 lanes" in _err(ei) and not y.any()


def test_a_store_into_an_expanded_tensor_is_refused():
    """torch.zeros(1).expand(16) spans one element: the masked copy's lanes 1..15 address
    memory past it (malloc() aborted the process before)."""
    x, y = torch.arange(16.), torch.zeros(1).expand(16)
    with tmt.emulate("H100"), pytest.raises(Exception) as ei:
        copy_masked[(1,)](x, y, 16, BLOCK=16)
    assert "tl.store outside argument 'Y' (16 elements" in _err(ei)
    assert "15 of 16 lanes at element offsets 1, 2" in _err(ei)


@pytest.mark.parametrize("name,block", BLOCKS)
def test_kernels_inside_their_tensors_still_run(name, block):
    """The mask keeps the out-of-range lanes: fine; a strided 2-D view (its rows are apart
    in a bigger storage) is read and written inside its span; overlapping views of one
    storage both count."""
    x, y = torch.arange(20.), torch.zeros(20)
    with block():
        copy_masked[(2,)](x, y, 20, BLOCK=16)
        base = torch.arange(64.).reshape(8, 8)
        out = torch.zeros(4, 6)
        copy_2d[(1,)](base[2:6, 1:5], out, 8, 6, BM=4, BN=4)
        s = torch.zeros(32)
        copy_unmasked[(1,)](s[:16], s[8:24], BLOCK=16)
    assert torch.equal(y, x)
    assert torch.equal(out[:, :4], base[2:6, 1:5]) and not out[:, 4:].any()


def test_libdevice_calls_leave_no_temporary_folder(tmp_path):
    """Every process that used tl.log / tl.erf left a tme_libdevice_* folder in the temp
    folder (the compiled helper kernels' sources)."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("from torch_mma_emu.triton import libdevice_calls as lc\n"
            "lc._kernel('erff'); import glob, tempfile\n"
            "assert glob.glob(tempfile.gettempdir() + '/tme_libdevice_*')\n")
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=root)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not list(tmp_path.glob("tme_libdevice_*"))


# ---------------------------------------------------------------------------------------
# Low: the block's own arguments

@pytest.mark.parametrize("instruction", ["", "nonsense", "mfma.32x32x8f16"])
def test_a_bad_instruction_is_refused_when_the_block_is_made(instruction):
    """emulate("H100", "") was accepted; an unknown or another arch's instruction failed
    only at the first tl.dot."""
    with pytest.raises(ValueError, match="is not a path .* nor an instruction of sm90"):
        tmt.emulate("H100", instruction)


def test_exit_without_enter_and_bad_grids():
    with pytest.raises(RuntimeError, match="not open"):      # was AttributeError
        tmt.emulate("H100").__exit__(None, None, None)
    y = torch.zeros(16)
    with tmt.emulate("H100"):
        with pytest.raises(ValueError, match="a grid is 1 to 3 non-negative ints"):
            fill_unmasked[(-1,)](y, BLOCK=16)                # ran nothing silently
        with pytest.raises(ValueError, match="MMA_EMU_MAX_TRITON_PROGRAMS"):
            fill_unmasked[(2 ** 31,)](y, BLOCK=16)           # had no bound
        fill_unmasked[(1,)](y, BLOCK=16)
    assert (y == 7).all()
