"""User Triton kernels inside ``torch.compile`` with Inductor on a GPU: Dynamo turns the
launch into a ``triton_kernel_wrapper`` op, and Inductor compiles the kernel itself and
launches it through its ``CachingAutotuner`` (heuristic type USER_AUTOTUNE), never through
``JITFunction.run``.  Inside a block such a launch would run natively, silently; while a block
is open in the calling thread, a kernel that calls ``tl.dot`` / ``tl.dot_scaled`` (itself or
through its ``@triton.jit`` helpers) raises instead.  Kernels without a dot, and Inductor's
own generated kernels, run as before (their elementwise arithmetic is not emulated either
way; docs/triton.md).  Not reached: Inductor's C++ wrapper (``cpp_wrapper=True``)."""
from __future__ import annotations

DOT_NAMES = ("dot", "dot_scaled")


def calls_dot(fn, _seen=None) -> bool:
    """Whether a ``@triton.jit`` function names ``dot`` / ``dot_scaled`` (``tl.dot`` is an
    attribute load of that name), itself or in a ``@triton.jit`` function it names."""
    from triton.runtime.jit import JITFunction
    _seen = set() if _seen is None else _seen
    py = getattr(fn, "fn", fn)
    code = getattr(py, "__code__", None)
    if code is None or py in _seen:
        return False
    _seen.add(py)
    names = set(code.co_names)
    if names & set(DOT_NAMES):
        return True
    glb = getattr(py, "__globals__", {})
    return any(isinstance(glb.get(n), JITFunction) and calls_dot(glb[n], _seen) for n in names)


class NativeLaunchRefused(RuntimeError):
    """A compiled graph would launch a dot kernel natively inside a block."""


def guard(orig, current):
    """``CachingAutotuner.run`` refusing a dot-carrying user kernel inside a block."""
    def run(self, *args, **kwargs):
        if current() is not None and _is_user_kernel(self) and calls_dot(self.fn):
            name = (getattr(self, "inductor_meta", None) or {}).get("kernel_name") \
                or getattr(getattr(self.fn, "fn", self.fn), "__name__", "kernel")
            raise NativeLaunchRefused(
                f"torch_mma_emu.triton: torch.compile (Inductor) compiled the Triton kernel "
                f"{name} and launches it natively, so its tl.dot would NOT be emulated "
                "inside this block.  Launch it outside the compiled graph (wrap the launch "
                "in torch.compiler.disable) or compile with backend='aot_eager'")
        return orig(self, *args, **kwargs)
    return run


def _is_user_kernel(autotuner) -> bool:
    from torch._inductor.runtime.hints import HeuristicType
    return getattr(autotuner, "heuristic_type", None) == HeuristicType.USER_AUTOTUNE
