"""Models of PyTorch's own CUDA kernels (torch 2.13.0, issue 39), bit for bit, on the CPU:
the reductions' launch configuration and summation order (config.py, reduce.py) with
``sum`` / ``mean`` on top (sums.py), ``var`` / ``std`` over WelfordOps in the same order
(moments.py), softmax: the persistent warp kernel (softmax.py) and host_softmax's block and
spatial kernels (host_softmax.py) and their backward (softmax_backward.py), and
``elementwise``: exp, log, tanh, erf, rsqrt, sigmoid, SiLU and GELU (both forms) as the
CUDA build computes them, with the activations' backward kernels (backward.py;
docs/preview.md), and ``embedding_dense_backward``'s summation order (embedding.py).  What was read from the binaries: facts.py."""
from .config import Layout, ReduceConfig, set_reduce_config
from .facts import CUDA_VERSION, TORCH_VERSION, kernel_params, version_mismatch
from .reduce import evaluate, mean_factor, tree
from .sums import config_for, describe, layout, reduce

__all__ = ["Layout", "ReduceConfig", "set_reduce_config", "TORCH_VERSION", "CUDA_VERSION",
           "kernel_params", "version_mismatch", "evaluate", "mean_factor", "tree",
           "config_for", "describe", "layout", "reduce"]
