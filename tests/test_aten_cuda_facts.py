"""The models of torch 2.13's CUDA kernels (torch_mma_emu.aten_cuda) against the fact table
read from the pinned torch CUDA wheel's sm_90 SASS (aten_cuda/sass_facts.json, written by
scripts/regen_aten_cuda_facts.py): a changed fact fails here.  The parsers of the script are
checked on kernel names and SASS lines; with TORCH_CUDA_WHEEL set to the wheel, a slow test
regenerates the table and compares it to the committed one."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

from torch_mma_emu import aten_cuda
from torch_mma_emu.aten_cuda import config, facts, host_softmax, norms, softmax

ROOT = Path(__file__).resolve().parent.parent
TABLE = json.loads((Path(aten_cuda.__file__).parent / "sass_facts.json").read_text())
_spec = importlib.util.spec_from_file_location("regen_aten_cuda_facts",
                                               ROOT / "scripts" / "regen_aten_cuda_facts.py")
regen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regen)

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def test_provenance():
    assert TABLE["torch"].split("+")[0] == facts.TORCH_VERSION
    assert TABLE["cuda"] == facts.CUDA_VERSION
    assert TABLE["wheel"].startswith(f"torch-{facts.TORCH_VERSION}-")
    assert re.fullmatch(r"[0-9a-f]{64}", TABLE["sha256"])
    assert TABLE["arch"] == "sm_90"


@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize("dt", list(DTYPES))
def test_reduce_template_arguments(op, dt):
    row = TABLE["reduce"][f"{op}/{dt}"]
    assert f"{op}" in row["kernel"].lower() or "MeanOps" in row["kernel"]
    seen = {tuple(p) for p in row["vt0_input_vec_size"]}
    model = {tuple(facts.kernel_params(op, DTYPES[dt], n).values())
             for n in (1000, 1024, 4096, 3 * 1024, 7)}
    assert model == seen, (op, dt, seen, model)


@pytest.mark.parametrize("dt", list(DTYPES))
def test_var_template_arguments(dt):
    """var / std: gpu_reduce_kernel<scalar_t, out_t, 2> (ReduceMomentKernel.cu), vt0 =
    input_vec_size = 2 in the model (aten_cuda/moments.py).  The committed table predates the
    WelfordOps rows of the regeneration script; once regenerated from the wheel, they must
    agree."""
    from torch_mma_emu.aten_cuda import moments
    row = TABLE["reduce"].get(f"var/{dt}")
    if row is None:
        pytest.skip("sass_facts.json has no WelfordOps reduce_kernel rows yet (regenerate "
                    "with scripts/regen_aten_cuda_facts.py WHEEL)")
    assert {tuple(p) for p in row["vt0_input_vec_size"]} == {(moments.VT0, moments.VT0)}


@pytest.mark.parametrize("dt", list(DTYPES))
def test_softmax_backward_template_arguments(dt):
    """softmax_warp_backward exists for rows up to 2^10 (the model's 1024-element threshold,
    half the forward's) and cunn_SoftMaxBackward[Smem] has ILP = 16 bytes / element."""
    from torch_mma_emu.aten_cuda import softmax_backward as sb
    if "softmax_backward_persistent" not in TABLE:
        pytest.skip("sass_facts.json predates the softmax backward rows (regenerate)")
    row = TABLE["softmax_backward_persistent"][dt]
    assert (row["min_log2_elements"], 1 << row["max_log2_elements"]) == \
        (0, sb.PERSISTENT_ELEMENTS)
    item = torch.empty((), dtype=DTYPES[dt]).element_size()
    assert TABLE["softmax_backward_block_ilp"][dt]["ilp"] == [16 // item]
    assert sb.launch((2, 5000), 1, DTYPES[dt], DTYPES[dt]).ilp == 16 // item


def test_fp32_vt0_8_switch_follows_the_binary():
    fp32 = {tuple(p) for k in ("sum/float32", "mean/float32")
            for p in TABLE["reduce"][k]["vt0_input_vec_size"]}
    assert facts.FP32_VT0_8_AT_1024 == ((8, 8) in fp32)


def test_reduce_launch_bounds():
    """reduce_kernel<max_threads, min_blocks>: the largest block is config.MAX_THREADS."""
    for row in TABLE["reduce"].values():
        assert max(t for t, _ in row["launch_bounds"]) == config.MAX_THREADS


@pytest.mark.parametrize("dt", list(DTYPES))
def test_softmax_template_arguments(dt):
    row = TABLE["softmax_persistent"][dt]
    assert 2 ** row["max_log2_elements"] == softmax.MAX_ELEMENTS
    assert row["min_log2_elements"] == 0
    item = torch.empty((), dtype=DTYPES[dt]).element_size()
    assert TABLE["softmax_block_ilp"][dt]["ilp"] == [host_softmax.ALIGN_BYTES // item]


@pytest.mark.parametrize("dt", list(DTYPES))
def test_layer_norm_vec_size(dt):
    row = TABLE["sass"]["layer_norm"][dt]
    assert row["vec_size"] == norms.VEC
    assert set(row["shfl"]) - {"IDX"} == {facts.SHUFFLES["vectorized_layer_norm_kernel"]}
    assert row["shfl"]["DOWN"] == 3 * 5          # mean, m2, count over 16, 8, 4, 2, 1


def test_shuffle_directions_and_mean_multiply():
    s = TABLE["sass"]
    assert set(s["reduce_shuffles"]["shfl"]) - {"IDX"} == {facts.SHUFFLES["reduce_kernel"]}
    warp = s["softmax_warp_shuffles"]["shfl"]
    assert set(warp) == {facts.SHUFFLES["softmax_warp_forward"]}
    assert warp["BFLY"] == 2 * 5                 # max and sum, XOR 16..1
    assert s["mean_fmul"]["fmul"]                # mean = sum * (1/N), one multiply
    assert aten_cuda.mean_factor is not None


def test_parsers_on_kernel_names():
    name = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::"
            "func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()("
            "at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 8, 8> >("
            "at::native::ReduceOp<float>)")
    r = regen.reduce_op(name)
    assert (r["op"], r["scalar"], r["vt0"], r["input_vec_size"]) == ("sum", "float", 8, 8)
    assert r["launch_bounds"] == [512, 1]
    mean = ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::Half, at::native::"
            "MeanOps<c10::Half, float, float, float>, unsigned int, float, 4, 8> >(x)")
    assert regen.reduce_op(mean)["op"] == "mean"
    var = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::Half, at::native::"
           "WelfordOps<c10::Half, float, int, thrust::pair<c10::Half, c10::Half> >, unsigned "
           "int, c10::Half, 2, 2> >(x)")
    r = regen.reduce_op(var)
    assert (r["op"], r["scalar"], r["vt0"], r["input_vec_size"]) == ("var", "c10::Half", 2, 2)
    bw = regen.softmax_warp_backward("void (anonymous namespace)::softmax_warp_backward<float, "
                                     "float, float, 10, false, false, 32>(float*)")
    assert (bw["log2_elements"], bw["is_log_softmax"]) == (10, False)
    bb = regen.softmax_block_backward("void at::native::(anonymous namespace)::cunn_SoftMax"
                                      "Backward<8, c10::Half, float, c10::Half, Epi>(x)")
    assert (bb["kernel"], bb["ilp"], bb["grad_input"]) == ("cunn_SoftMaxBackward", 8,
                                                           "c10::Half")
    xor = name.replace("sum_functor", "xor_sum_functor")
    assert regen.reduce_op(xor) is None
    sw = regen.softmax_warp("void (anonymous namespace)::softmax_warp_forward<c10::Half, "
                            "c10::Half, float, 11, true, false, 32>(c10::Half*)")
    assert (sw["log2_elements"], sw["is_log_softmax"], sw["is_masked"]) == (11, True, False)
    b = regen.softmax_block("void at::native::(anonymous namespace)::cunn_SoftMaxForwardSmem<8, "
                            "c10::BFloat16, float, c10::BFloat16, at::native::Epi>(x)")
    assert (b["kernel"], b["ilp"], b["input"]) == ("cunn_SoftMaxForwardSmem", 8, "c10::BFloat16")
    sass = ("        /*0400*/  SHFL.DOWN PT, R7, R16, R5, 0x1f ;\n"
            "        /*0410*/  SHFL.BFLY PT, R2, R3, 0x10, 0x1f ;\n"
            "        /*0420*/  LDG.E.128.CONSTANT R4, desc[UR6][R2.64] ;\n"
            "        /*0430*/  FMUL R0, R0, R1 ;\n")
    assert regen.sass_ops(sass) == {"SHFL.DOWN": 1, "SHFL.BFLY": 1, "LDG.E.128.CONSTANT": 1,
                                    "FMUL": 1}


def test_embedding_backward_facts():
    """aten_cuda/embedding.py's arithmetic against the wheel: float accumulators for every
    dtype, no per-index warp kernel (only the feature and segment paths), ``grad * scale``
    never rounded on its own (no FMUL: contracted into the FFMA the model takes, with
    ``1/count`` from MUFU.RCP refined to a correctly rounded reciprocal), and the Half
    feature kernel's two roundings (the chunk sum, then the row after a float32 add)."""
    from torch_mma_emu.aten_cuda import embedding as emb
    e = TABLE["embedding"]
    assert {dt: e["feature_accumulator"][dt]["accumulator"] for dt in emb.DTYPES} == \
        {dt: "float" for dt in emb.DTYPES}
    assert e["legacy_embedding_backward_kernel"] is False
    cg = e["compute_grad_weight_float"]["ops"]
    assert "FMUL" not in cg and cg["FFMA"] > 0 and cg["FADD"] > 0 and cg["MUFU.RCP"] > 0
    assert e["feature_kernel_half"]["ops"] == {"F2FP.F16.F32.PACK_AB": 2, "FADD": 2,
                                               "HADD2.F32": 3}
    sass = ("/*0650*/ FADD R7, R20, R7 ;\n/*06b0*/ FADD.FTZ R5, -R4, -RZ ;\n"
            "/*07f0*/ FFMA R19, R6, R20, R19 ;\n/*0740*/ F2FP.F16.F32.PACK_AB R6, RZ, R6 ;")
    assert regen.arith_ops(sass) == {"FADD": 1, "FADD.FTZ": 1, "FFMA": 1,
                                     "F2FP.F16.F32.PACK_AB": 1}


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("TORCH_CUDA_WHEEL") or not shutil.which("nm"),
                    reason="set TORCH_CUDA_WHEEL to the torch CUDA wheel (pip download)")
def test_regenerated_table_equals_the_committed_one(tmp_path):
    out = tmp_path / "facts.json"
    assert regen.main([os.environ["TORCH_CUDA_WHEEL"], "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == TABLE
