"""Models of PyTorch's own CUDA kernels (ATen), bit for bit, on the CPU.

``elementwise``: exp, log, tanh, erf, rsqrt, sigmoid, SiLU and GELU (both forms) as torch
2.13's CUDA build computes them (docs/preview.md, "PyTorch's CUDA math").
"""
