"""Smoke tests of an installed torch-mma-emu wheel (scripts/check_wheels.sh runs this in each
fresh venv, from a folder outside the checkout): the installed package, not the checkout;
emulated_mm against a known answer; a schedule (the _sched op); the mma-emu command; argument
errors as ValueError from Python and from the C++ op; torch.compile of emulated_mm.  Prints
one line per check and "ok" last; any failure raises."""
import os
import subprocess
import sys
import time

import torch

import torch_mma_emu as tme
from torch_mma_emu import _C, cpp

t0 = time.time()
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), python {sys.version.split()[0]}, "
      f"torch_mma_emu from {os.path.dirname(tme.__file__)}, library {os.path.basename(_C.__file__)}, "
      f"CUDA archs {_C._cuda_archs() or 'none'}")
assert "site-packages" in tme.__file__, tme.__file__

# seed 003 Table 8: sm90's fp16 chain loses the small addends against 2^23 + 2^23 * 2^-10 ...
A = torch.tensor([[-2.0 ** 13, -0.5, -0.25, -0.125]], dtype=torch.float16)
B = torch.tensor([[2.0 ** 10], [1.0], [1.0], [1.0]], dtype=torch.float16)
C = torch.tensor([[2.0 ** 23]])
d = tme.emulated_mm(A, B, C, arch="sm90").item()
assert d == -0.75, d
print("emulated_mm: seed 003 Table 8 gives -0.75")

g = torch.Generator().manual_seed(0)
X = torch.randn(16, 256, generator=g).half()
Y = torch.randn(256, 8, generator=g).half()
plain = tme.emulated_mm(X, Y, arch="sm90")
split = tme.emulated_mm(X, Y, arch="sm90", schedule="schedule:split_k=2")
assert plain.shape == split.shape == (16, 8) and torch.isfinite(split).all()
print(f"schedule split_k=2 (_sched op): max |split - plain| = {(split - plain).abs().max():.3g}")

out = subprocess.run(["mma-emu", "compare", "--arch", "sm90"], capture_output=True, text=True)
assert out.returncode == 0 and "-0.75" in out.stdout, out
bad = subprocess.run(["mma-emu", "compare", "--random", "--size", "0"], capture_output=True,
                     text=True)
assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad
print(f"mma-emu compare runs; --size 0 exits 2: {bad.stderr.strip()}")

try:
    tme.emulated_mm(A, B, arch="no_such_arch")
    raise AssertionError("an unknown arch was accepted")
except ValueError as e:
    print(f"bad arch: ValueError: {str(e)[:70]}...")
try:
    torch.ops.mma_emu._cpu_fast_path([1, 2, 3])
    raise AssertionError("a short parameter vector was accepted")
except ValueError as e:      # the kernel's std::invalid_argument, through this torch's binding
    assert str(e).startswith("_cpu_fast_path: expected"), e
    print(f"C++ op argument error: ValueError: {e}")
try:
    cpp.gemm(tme.spec("sm90", "fp16"), torch.zeros(1, 2, 4, dtype=torch.int16),
             torch.zeros(1, 5, 3, dtype=torch.int16), torch.zeros(1, 2, 3))
    raise AssertionError("mismatched shapes were accepted")
except ValueError as e:
    assert "inner dimensions differ: [1, 2, 4] @ [1, 5, 3]" in str(e), e

t1 = time.time()
f = torch.compile(lambda a, b: tme.emulated_mm(a, b, arch="sm90") * 2, backend="aot_eager",
                  fullgraph=True)
assert torch.equal(f(X, Y), plain * 2)
print(f"torch.compile(emulated_mm, backend='aot_eager', fullgraph=True): equal, "
      f"{time.time() - t1:.1f} s")
print(f"ok ({time.time() - t0:.1f} s)")
