"""Triton GEMMs that run on the real tensor cores, in the canonical chain of the model.

``acc = C`` (or 0); for each K block, ascending: ``acc = tl.dot(a, b, acc)``; no split-K, so
every output's accumulator passes through the matrix-unit instructions in K order, exactly
the chain ``emulated_mm`` models (GUIDE section 1).  See :func:`matmul` and docs/gpu.md.

Importing this package needs ``triton``; running a kernel needs a CUDA device (or
``TRITON_INTERPRET=1``, whose arithmetic is NumPy's, not the tensor cores').
"""
from .gemm import FORMATS, block_k_for, matmul, run_k

__all__ = ["matmul", "FORMATS", "block_k_for", "run_k"]
