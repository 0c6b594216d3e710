"""Named schedules (:data:`PRESETS`: each with its source and who verified it on which GPU)
and the readers that take a schedule as a user names it: a preset, a serialised schedule, a
JSON file, an FPRev SumTree."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .schedule_fields import Schedule
from .schedule_tree import tree_text


def load_schedule(x: str) -> Schedule:
    """A schedule from a JSON file written by ``--schedule-out`` / ``Schedule.to_dict``, a
    preset name or a serialised schedule (the CLI's ``--schedule``)."""
    import json
    import os
    if isinstance(x, str) and os.path.exists(x) and not os.path.isdir(x):   # FIFO: refused
        from .limits import check_file
        check_file(x, "the schedule file")          # before reading it
        try:
            with open(x, encoding="utf-8") as f:
                d = json.load(f)
        except (OSError, ValueError) as e:   # ValueError: not JSON, not UTF-8
            raise ValueError(f"cannot read the schedule file {x}: {e}") from None
        except RecursionError:
            raise ValueError(f"cannot read the schedule file {x}: its JSON nests too "
                             "deeply") from None
        return Schedule.from_dict(d)
    if isinstance(x, str) and (x.startswith("schedule:") or x in PRESETS):
        return as_schedule(x)
    if isinstance(x, str) and (x.endswith(".json") or os.sep in x):
        raise ValueError(f"schedule file not found: {x}")
    raise ValueError(f"--schedule {x!r} is not a schedule file, a preset "
                     f"({', '.join(PRESETS)}) or a serialised schedule")


def as_schedule(x) -> Optional[Schedule]:
    """A Schedule from a Schedule, its string, a preset name, a SumTree or None."""
    if x is None or isinstance(x, Schedule):
        return x
    if isinstance(x, str):
        if x.startswith("schedule:"):
            return Schedule.from_string(x)
        if x in PRESETS:
            return PRESETS[x].schedule
        raise ValueError(f"schedule={x!r} is neither a serialised schedule nor a preset; "
                         f"presets: {', '.join(PRESETS)}")
    text = tree_text(x)
    if text is not None:
        return Schedule.from_tree(text)
    raise TypeError(f"schedule must be a Schedule, a preset name, a serialised schedule or a "
                    f"SumTree, got {type(x).__name__}")



@dataclass(frozen=True)
class Preset:
    schedule: Schedule
    source: str
    verified: str = ""   # who measured these bits on which GPU; "" = nobody yet


_BITEQUIV = ("Meta's bitequiv reconstruction of cuBLAS (facebookexperimental/triton, "
             "bitequiv/cublas_equiv_gemm.py, PRs #2752, #2768, #2769)")
_BY_OTHERS = "measured by others on GB200 (sm_100), not yet by us"


PRESETS: dict[str, Preset] = {
    "plain": Preset(Schedule(), "one accumulator chain per output: CUTLASS / Triton "
                    "`acc = tl.dot(a, b, acc)` loops without split-K; cuBLAS's aligned "
                    f"GEMMs without split-K (SPLITK_NUM = 1) keep one fp32 accumulator over K "
                    f"({_BITEQUIV}; measured by others on GB200)"),
    "triton_fp8_hopper": Preset(
        Schedule(), "Triton tl.dot on fp8 (sm90 wgmma): max_num_imprecise_acc=None means "
        "no upcasting (triton.experimental.gluon warpgroup_mma docs), the wgmma chain runs "
        "in the tensor core's own accumulator"),
    "triton_fp8_hopper_imprecise_acc_32": Preset(
        Schedule(promote_every=32), "Triton tl.dot(..., max_num_imprecise_acc=32) on sm90: "
        "each wgmma (K = 32 for fp8) into a zeroed temporary, then an fp32 llvm.fadd into "
        "acc (Triton test/Conversion/tritongpu_to_llvm_hopper.mlir dot_high_precision_acc); "
        "assumes BLOCK_K is a multiple of 32"),
    "triton_fp8_hopper_imprecise_acc_128": Preset(
        Schedule(promote_every=128), "as above with max_num_imprecise_acc=128 (needs "
        "BLOCK_K >= 128; with BLOCK_K < 128 Triton does not promote at all)"),
    "deepseek_v3_promote_128": Preset(
        Schedule(promote_every=128, c_mode="epilogue"), "DeepSeek-V3 report section 3.3.2: "
        "WGMMA partial sums copied to fp32 CUDA-core registers every 128 elements (N_C = "
        "128, 4 WGMMAs); CUTLASS GmmaFP8Accumulation does the same"),
    "cublas_split_k_4": Preset(
        Schedule(split_k=4, split_grain="cublas"), f"{_BITEQUIV}: cuBLAS split-K (aligned "
        "shapes) cuts K at a grain G of 64 (fp16/bf16) or 128 (fp8) elements, chunk = "
        "ceil(ceil(K/G)/splits)*G, remainder in the last slice (checked by its authors on "
        "131,533 fp8 split-K shapes); one fp32 partial per slice from +0, merged forward in "
        "fp32 starting from partial 0 (splitKreduce<..., float>); the split count is cuBLAS's "
        "heuristic's SPLITK_NUM, 4 here", verified=_BY_OTHERS),
    "cublas_split_k_4_pairwise": Preset(
        Schedule(split_k=4, split_grain="cublas", reduce="pairwise"), "the slices of "
        "cublas_split_k_4 reduced as a tree of pairs: not a measured library order (cuBLAS "
        "merges forward), kept for FPRev and schedule-search comparisons"),
    "cublas_cutlass_residue_32": Preset(
        Schedule(residue_tile=32), f"{_BITEQUIV}: a non-aligned shape runs a CUTLASS kernel "
        "whose fp32 accumulator takes one MMA of 8 (s1688) or 16 (s16816) real k-elements at a "
        "time, the leading residue tile of K % ktile elements first with its short group at "
        "its end; ktile (32, 64 or 128) is cuBLAS's choice, 32 here; the MMA's K is the "
        "instruction's", verified=_BY_OTHERS),
    "cublas_cutlass_split_k_4_fp32": Preset(
        Schedule(split_k=4, split_grain="8", residue_tile=32), f"{_BITEQUIV}: non-aligned "
        "split-K through CUTLASS: slices at CUTLASS's kAlignK grain (8), each slice with its "
        "own leading residue tile (ktile 32), fp32 partials merged forward in fp32 from "
        "partial 0 (REDUCTION_SCHEME COMPUTE_TYPE; 12% of that family)",
        verified=_BY_OTHERS),
    "cublas_cutlass_split_k_4_fp16_partials": Preset(
        Schedule(split_k=4, split_grain="8", residue_tile=32, merge="fp16_partials"),
        f"{_BITEQUIV}: as cublas_cutlass_split_k_4_fp32, the partials rounded to fp16 then "
        "summed forward in fp32 (REDUCTION_SCHEME OUTPUT_TYPE, splitKreduce<..., __half>; "
        "17%)", verified=_BY_OTHERS),
    "cublas_cutlass_split_k_4_fp16_serial": Preset(
        Schedule(split_k=4, split_grain="8", residue_tile=32, merge="fp16_serial"),
        f"{_BITEQUIV}: as cublas_cutlass_split_k_4_fp32, a serial chain whose running sum is "
        "kept in fp16 between slices (REDUCTION_SCHEME NONE, GemmSplitKSerial; 70%)",
        verified=_BY_OTHERS),
    "scaled_mm_fast_accum": Preset(
        Schedule(c_mode="epilogue"), "torch._scaled_mm(use_fast_accum=True): cuBLASLt "
        "CUBLASLT_MATMUL_DESC_FAST_ACCUM=1, the fp8 chain never leaves the tensor core "
        "accumulator; bias added in the epilogue"),
    "scaled_mm_precise": Preset(
        Schedule(promote_every=128, c_mode="epilogue"), "torch._scaled_mm("
        "use_fast_accum=False): cuBLASLt promotes fp8 partial sums into fp32 registers; "
        "the interval (128 here) is not documented by NVIDIA"),
    "triton_tf32x3": Preset(
        Schedule(input_precision="tf32x3"), "Triton 3.6 tl.dot(input_precision='tf32x3'): "
        "F32DotTC pass (lib/Dialect/TritonGPU/Transforms/F32DotTC.cpp, its test "
        "test/TritonGPU/tf32x3-matmul.mlir, and the TTGIR Triton 3.6 emits for sm90): hi = "
        "cvt.rna.tf32, r = dot(lo, hi, 0), r = dot(hi, lo, r), NaN -> 0, r = dot(hi, hi, r), "
        "then acc + r in fp32 per tl.dot"),
    "triton_tf32": Preset(Schedule(input_precision="tf32"),
                          "Triton tl.dot default input_precision='tf32' on fp32 inputs"),
    "triton_ieee": Preset(Schedule(input_precision="ieee"),
                          "Triton tl.dot(input_precision='ieee'): FMA chain on CUDA cores"),
}


def presets() -> dict[str, str]:
    """Preset name -> one line: the schedule, its source and whether a GPU run verified it."""
    return {k: f"{v.schedule.describe()} | {v.verified or 'UNVERIFIED'} | "
               f"{v.source}" for k, v in PRESETS.items()}


def preset(name: str, **changes) -> Schedule:
    """The schedule of a named preset, optionally with fields changed."""
    if name not in PRESETS:
        raise ValueError(f"unknown schedule preset {name!r}; presets: {', '.join(PRESETS)}")
    s = PRESETS[name].schedule
    return s.replace(**changes) if changes else s


# ---------------------------------------------------------------------------------------
# trees -> programs
