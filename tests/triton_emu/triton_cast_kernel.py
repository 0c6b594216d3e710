"""One Triton kernel storing fp32 values as bf16, fp8 e4m3 and fp8 e5m2 (round to nearest
even on the GPU; tests/triton_emu/test_triton_emulate.py)."""
import triton
import triton.language as tl


@triton.jit
def cast_kernel(x_ptr, bf_ptr, e4_ptr, e5_ptr, bz_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(x_ptr + offs, mask=ok)
    tl.store(bf_ptr + offs, x.to(tl.bfloat16), mask=ok)
    tl.store(e4_ptr + offs, x.to(tl.float8e4nv), mask=ok)
    tl.store(e5_ptr + offs, x.to(tl.float8e5), mask=ok)
    tl.store(bz_ptr + offs, x.to(tl.bfloat16, fp_downcast_rounding="rtz"), mask=ok)


@triton.jit
def cast_to(x_ptr, o_ptr, DST: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(o_ptr + offs, tl.load(x_ptr + offs).to(DST))


def amd_llir(arch: str, cases: list) -> dict:
    """{(src, dst): the LLVM IR of ``cast_to`` for ``arch``}, compiled in a subprocess:
    Triton 3.6 fails ("PassManager::run failed") compiling fnuz casts for gfx942 after
    gfx90a (or the other way round) in one process."""
    import json
    import os
    import subprocess
    import sys
    code = (
        "import json, sys, torch, triton.language as tl\n"
        "from triton_cast_kernel import cast_to\n"
        "from torch_mma_emu.triton.layout import amd_target_of, compile_launch\n"
        "D = {'fp8_e4m3': (torch.float8_e4m3fn, tl.float8e4nv), 'fp8_e5m2': (torch.float8_e5m2,"
        " tl.float8e5), 'fp8_e4m3fnuz': (torch.float8_e4m3fnuz, tl.float8e4b8),"
        " 'fp8_e5m2fnuz': (torch.float8_e5m2fnuz, tl.float8e5b16)}\n"
        "S = {'fp32': torch.float32, 'fp16': torch.float16, 'bf16': torch.bfloat16}\n"
        "out = {}\n"
        "for s, d in json.loads(sys.argv[1]):\n"
        "    c = compile_launch(cast_to.fn, (torch.zeros(64, dtype=S[s]), torch.empty(64,"
        " dtype=D[d][0])), {'DST': D[d][1], 'N': 64}, amd_target_of(sys.argv[2]), ptx=True)\n"
        "    out[s + ' ' + d] = c.llir\n"
        "print(json.dumps(out))\n")
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [here, os.path.dirname(os.path.dirname(here))] + sys.path))
    r = subprocess.run([sys.executable, "-c", code, json.dumps(cases), arch], env=env,
                       capture_output=True, text=True, timeout=600, check=True)
    return {tuple(k.split()): v for k, v in json.loads(r.stdout.splitlines()[-1]).items()}
