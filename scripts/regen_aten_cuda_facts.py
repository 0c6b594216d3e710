"""The evidence for torch_mma_emu.aten_cuda.facts: the sm_90 kernels of the pinned torch CUDA
wheel, read with cuobjdump (it ships with Triton) into a committed fact table
(torch_mma_emu/aten_cuda/sass_facts.json; tests/test_aten_cuda_facts.py checks the models'
constants against it).

    pip download --isolated --no-deps torch==2.13.0 -d /tmp/torchcuda    # never install it
    python scripts/regen_aten_cuda_facts.py /tmp/torchcuda/torch-2.13.0-*.whl
    python scripts/regen_aten_cuda_facts.py WHEEL --out /tmp/facts.json --cuobjdump PATH

It unzips only torch/lib/libtorch_cuda.so (and torch/version.py) into a temporary folder,
extracts the sm_90 cubins (``cuobjdump -arch sm_90 -xelf all``), lists their kernels
(``nm``, demangled with ``c++filt``) and reads:

* the template arguments of ``reduce_kernel<..., ReduceOp<scalar_t, ops, index_t, out_t,
  vt0, input_vec_size>>`` for sum (``sum_functor``), mean (``MeanOps``) and var / std
  (``WelfordOps``; added after the committed table was made: its ``var/*`` rows appear
  when the table is next regenerated) of fp32 / fp16 / bf16, every (vt0, input_vec_size)
  pair instantiated;
* the persistent softmax's ``log2_elements`` range (``softmax_warp_forward``) and the block
  softmax's ILP (``cunn_SoftMaxForward<ILP, ...>``), and the same of the backward
  (``softmax_warp_backward``, ``cunn_SoftMaxBackward[Smem]<ILP, ...>``);
* from the SASS (``cuobjdump -sass -fun``): the shuffle kinds of one sum ``reduce_kernel``,
  of ``softmax_warp_forward`` and of ``vectorized_layer_norm_kernel``, the latter's global
  load width (its vec_size), and whether the fp32 mean kernel multiplies (FMUL, by 1/N);
  layer_norm's dX kernels (``layer_norm_grad_input_kernel[_vectorized]<T, float, false>``):
  shuffle kinds and the FFMAs with a negated addend (dX's fused ``(fH gamma) dy - a``).
* embedding_dense_backward's kernels (aten_cuda/embedding.py): the feature kernel's
  accumulator per dtype, whether the older per-index warp kernel is built, and the float
  opcodes (FADD / FFMA / FMUL / MUFU.RCP / F2FP) of ``compute_grad_weight<float, long>`` and
  of the Half feature kernel.

Each fact carries the (demangled) kernel it came from.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "torch_mma_emu" / "aten_cuda" / "sass_facts.json"
ARCH = "sm_90"
DTYPES = {"float32": "float", "float16": "c10::Half", "bfloat16": "c10::BFloat16"}
ITEM = {"float32": 4, "float16": 2, "bfloat16": 2}

_REDUCE = re.compile(r"reduce_kernel<(\d+), (\d+), at::native::ReduceOp<(.+), unsigned int, "
                     r"(.+), (\d+), (\d+)> >\(")
_SOFTMAX = re.compile(r"softmax_warp_forward<([^,<>]+), ([^,<>]+), ([^,<>]+), (\d+), "
                      r"(true|false), (true|false), (\d+)>")
_BLOCK = re.compile(r"cunn_SoftMaxForward(Smem)?<(\d+), ([^,<>]+), ([^,<>]+), ([^,<>]+),")
_SOFTMAX_BW = re.compile(r"softmax_warp_backward<([^,<>]+), ([^,<>]+), ([^,<>]+), (\d+), "
                         r"(true|false), (true|false), (\d+)>")
_BLOCK_BW = re.compile(r"cunn_SoftMaxBackward(Smem)?<(\d+), ([^,<>]+), ([^,<>]+), ([^,<>]+),")


def reduce_op(name: str) -> dict | None:
    """``{"op", "scalar", "out", "vt0", "input_vec_size", ...}`` of a demangled sum / mean
    ``reduce_kernel`` name, else None."""
    m = _REDUCE.search(name)
    if not m:
        return None
    threads, blocks, body, out, vt0, ivs = m.groups()
    scalar = body.split(",", 1)[0]
    if re.match(r"[^,]+, at::native::func_wrapper_t<[^,]+, at::native::sum_functor<", body):
        op = "sum"
    elif re.match(r"[^,]+, at::native::MeanOps<", body):
        op = "mean"
    elif re.match(r"[^,]+, at::native::WelfordOps<", body):
        op = "var"                    # var / std / var_mean / std_mean (std_var_kernel_impl)
    else:
        return None
    return {"op": op, "scalar": scalar, "out": out, "vt0": int(vt0),
            "input_vec_size": int(ivs), "launch_bounds": [int(threads), int(blocks)]}


def softmax_warp(name: str) -> dict | None:
    """``{"input", "output", "acc", "log2_elements", "is_log_softmax", "is_masked"}``."""
    m = _SOFTMAX.search(name)
    if not m:
        return None
    i, o, a, l2, log, masked, _warp = m.groups()
    return {"input": i, "output": o, "acc": a, "log2_elements": int(l2),
            "is_log_softmax": log == "true", "is_masked": masked == "true"}


def softmax_warp_backward(name: str) -> dict | None:
    """``softmax_warp_backward<input, output, acc, log2_elements, is_log, is_masked, 32>``."""
    m = _SOFTMAX_BW.search(name)
    if not m:
        return None
    i, o, a, l2, log, masked, _warp = m.groups()
    return {"input": i, "output": o, "acc": a, "log2_elements": int(l2),
            "is_log_softmax": log == "true", "is_masked": masked == "true"}


def softmax_block_backward(name: str) -> dict | None:
    """``{"kernel", "ilp", "grad_input", "acc", "output"}`` of ``cunn_SoftMaxBackward[Smem]``
    (template ``<ILP, scalar_t (gI), accscalar_t, outscalar_t (grad, output)>``)."""
    m = _BLOCK_BW.search(name)
    if not m:
        return None
    smem, ilp, gi, a, o = m.groups()
    return {"kernel": "cunn_SoftMaxBackward" + (smem or ""), "ilp": int(ilp),
            "grad_input": gi, "acc": a, "output": o}


def softmax_block(name: str) -> dict | None:
    """``{"kernel", "ilp", "input", "acc", "output"}`` of ``cunn_SoftMaxForward[Smem]``."""
    m = _BLOCK.search(name)
    if not m:
        return None
    smem, ilp, i, a, o = m.groups()
    return {"kernel": "cunn_SoftMaxForward" + (smem or ""), "ilp": int(ilp), "input": i,
            "acc": a, "output": o}


def sass_ops(sass: str) -> dict:
    """Counts of the SASS opcodes the facts use: SHFL kinds, FMUL, LDG widths."""
    c: dict[str, int] = {}
    for op in re.findall(r"\b(SHFL\.[A-Z]+|FMUL|LDG(?:\.[A-Z0-9]+)*)", sass):
        c[op] = c.get(op, 0) + 1
    return c


def _run(cmd, **kw) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def _cuobjdump(given: str | None) -> str:
    if given:
        return given
    import triton  # noqa: PLC0415 (the tool ships with it)
    p = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if p.exists():
        return str(p)
    found = shutil.which("cuobjdump")
    if not found:
        raise SystemExit("no cuobjdump: pass --cuobjdump PATH")
    return found


class Kernels:
    """The sm_90 kernels of one libtorch_cuda.so: (cubin, mangled, demangled)."""

    def __init__(self, so: Path, tmp: Path, cuobjdump: str):
        self.cu, self.dir = cuobjdump, tmp / "cubins"
        self.dir.mkdir()
        _run([cuobjdump, "-arch", ARCH, "-xelf", "all", str(so)], cwd=self.dir)
        rows = []
        for f in sorted(self.dir.glob("*.cubin")):
            for line in _run(["nm", str(f)]).splitlines():
                p = line.split()
                if len(p) == 3 and p[1] in "Tt":
                    rows.append((f.name, p[2]))
        dem = _run(["c++filt"], input="\n".join(m for _, m in rows) + "\n").splitlines()
        self.rows = [(f, m, d) for (f, m), d in zip(rows, dem)]

    def find(self, text: str):
        for f, m, d in self.rows:
            if text in d:
                return f, m, d
        raise SystemExit(f"no sm_90 kernel named like {text!r}")

    def sass(self, text: str) -> tuple[str, dict]:
        f, m, d = self.find(text)
        return d, sass_ops(_run([self.cu, "-sass", "-fun", m, str(self.dir / f)]))


def _short(name: str) -> str:
    return name.split(">(", 1)[0] + ">" if ">(" in name else name


def collect(k: Kernels) -> dict:
    facts: dict = {"reduce": {}, "softmax_persistent": {}, "softmax_block_ilp": {}}
    for op in ("sum", "mean", "var"):
        for dt, cname in DTYPES.items():
            pairs, bounds, example = set(), set(), None
            for _, _, d in k.rows:
                r = reduce_op(d)
                if r and r["op"] == op and r["scalar"] == cname:
                    pairs.add((r["vt0"], r["input_vec_size"]))
                    bounds.add(tuple(r["launch_bounds"]))
                    example = example or _short(d)
            facts["reduce"][f"{op}/{dt}"] = {
                "vt0_input_vec_size": sorted([list(p) for p in pairs]),
                "launch_bounds": sorted([list(b) for b in bounds]), "kernel": example}
    for dt, cname in DTYPES.items():
        l2, example = [], None
        for _, _, d in k.rows:
            s = softmax_warp(d)
            if s and s["input"] == cname and s["output"] == cname and not s["is_masked"]:
                l2.append(s["log2_elements"])
                example = example or _short(d)
        facts["softmax_persistent"][dt] = {"max_log2_elements": max(l2),
                                           "min_log2_elements": min(l2), "kernel": example}
        ilps, example = set(), None
        for _, _, d in k.rows:
            b = softmax_block(d)
            if b and b["input"] == cname and b["output"] == cname:
                ilps.add(b["ilp"])
                example = example or b["kernel"] + f"<{b['ilp']}, {cname}, ...>"
        facts["softmax_block_ilp"][dt] = {"ilp": sorted(ilps), "kernel": example}
    # the backward (issue 39: aten_cuda/softmax_backward.py)
    facts["softmax_backward_persistent"], facts["softmax_backward_block_ilp"] = {}, {}
    for dt, cname in DTYPES.items():
        l2, example = [], None
        for _, _, d in k.rows:
            s = softmax_warp_backward(d)
            if s and s["input"] == cname and s["output"] == cname and not s["is_masked"]:
                l2.append(s["log2_elements"])
                example = example or _short(d)
        facts["softmax_backward_persistent"][dt] = {
            "max_log2_elements": max(l2), "min_log2_elements": min(l2), "kernel": example}
        ilps, example = set(), None
        for _, _, d in k.rows:
            b = softmax_block_backward(d)
            if b and b["grad_input"] == cname and b["output"] == cname:
                ilps.add(b["ilp"])
                example = example or b["kernel"] + f"<{b['ilp']}, {cname}, ...>"
        facts["softmax_backward_block_ilp"][dt] = {"ilp": sorted(ilps), "kernel": example}

    sass = {}
    name, ops = k.sass("reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::"
                       "func_wrapper_t<float, at::native::sum_functor<float, float, float>")
    sass["reduce_shuffles"] = {"shfl": _shfl(ops), "kernel": _short(name)}
    name, ops = k.sass("reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::"
                       "MeanOps<float, float, float, float>")
    sass["mean_fmul"] = {"fmul": ops.get("FMUL", 0) > 0, "kernel": _short(name)}
    name, ops = k.sass("softmax_warp_forward<float, float, float, 10, false, false, 32>")
    sass["softmax_warp_shuffles"] = {"shfl": _shfl(ops), "kernel": _short(name)}
    lnorm = {}
    for dt, cname in DTYPES.items():
        name, ops = k.sass(f"vectorized_layer_norm_kernel<{cname}, float, false>")
        widths = [int(w) for op in ops for w in re.findall(r"\.(\d+)\b", op)
                  if op.startswith("LDG")]
        lnorm[dt] = {"max_load_bits": max(widths, default=ITEM[dt] * 8),
                     "vec_size": max(widths, default=ITEM[dt] * 8) // (8 * ITEM[dt]),
                     "shfl": _shfl(ops), "kernel": _short(name)}
    sass["layer_norm"] = lnorm
    sass["layer_norm_grad_input"] = layer_norm_grad_input_facts(k)
    facts["sass"] = sass
    facts["embedding"] = embedding(k)
    return facts


_EMB_FEATURE = re.compile(r"embedding_backward_feature_kernel<([^,<>]+), ([^,<>]+), long>")
_ARITH = re.compile(r"\b(FADD(?:\.[A-Z]+)*|FFMA(?:\.[A-Z]+)*|FMUL(?:\.[A-Z]+)*|MUFU\.RCP|"
                    r"F2FP(?:\.[A-Z0-9_]+)*|HADD2\.F32)\b")


def arith_ops(sass: str) -> dict:
    """Counts of the float opcodes the embedding facts use (FADD, FFMA, MUFU.RCP, F2FP)."""
    c: dict[str, int] = {}
    for op in _ARITH.findall(sass):
        c[op] = c.get(op, 0) + 1
    return c


def embedding(k) -> dict:
    """embedding_dense_backward (issue 39, aten_cuda/embedding.py): the feature kernel's
    accumulator per dtype, whether the older per-index warp kernel is still built, and the
    float opcodes of ``compute_grad_weight<float, long>`` (FADD without counts; MUFU.RCP and
    FFMA with ``scale_grad_by_freq``) and of the Half feature kernel (F2FP: the chunk sum's
    and the store's rounding)."""
    acc = {}
    for dt, cname in DTYPES.items():
        for _, _, d in k.rows:
            m = _EMB_FEATURE.search(d)
            if m and m.group(1) == cname:
                acc[dt] = {"accumulator": m.group(2), "kernel": _short(d)}
                break
    out = {"feature_accumulator": acc,
           "legacy_embedding_backward_kernel": any(
               "embedding_backward_kernel<" in d for _, _, d in k.rows)}
    for key, text in (("compute_grad_weight_float", "compute_grad_weight<float, long>"),
                      ("feature_kernel_half",
                       "embedding_backward_feature_kernel<c10::Half, float, long>")):
        f, m, d = k.find(text)
        ops = arith_ops(_run([k.cu, "-sass", "-fun", m, str(k.dir / f)]))
        out[key] = {"ops": dict(sorted(ops.items())), "kernel": _short(d)}


_FFMA_NEG = re.compile(r"\bFFMA\s+R\d+,\s*R\d+,\s*R\d+,\s*-R\d+\s*;")


def grad_input_ops(sass: str) -> dict:
    """What norms_backward.py takes from one ``layer_norm_grad_input_kernel*``: its shuffle
    kinds, how many FFMAs subtract their addend (dX's ``fma(fH * gamma, dy, -a)``) and the
    float opcode counts."""
    ops = sass_ops(sass)
    count = lambda op: len(re.findall(rf"\b{op}\b", sass))          # noqa: E731
    return {"shfl": _shfl(ops), "ffma_negated_addend": len(_FFMA_NEG.findall(sass)),
            "ffma": count("FFMA"), "fadd": count("FADD"), "fmul": count("FMUL"),
            "mufu_rcp": count(r"MUFU\.RCP")}


def layer_norm_grad_input_facts(k: Kernels) -> dict:
    """layer_norm's dX kernels (issue 39, aten_cuda/norms_backward.py), both variants, per
    dtype, ``rms_norm = false`` (key ``kernel/dtype``) and ``true`` (``kernel/dtype/rms``)."""
    out = {}
    for dt, cname in DTYPES.items():
        for kern in ("layer_norm_grad_input_kernel_vectorized", "layer_norm_grad_input_kernel"):
            for rms, tail in (("false", ""), ("true", "/rms")):
                f, m, d = k.find(f"{kern}<{cname}, float, {rms}>")
                ops = grad_input_ops(_run([k.cu, "-sass", "-fun", m, str(k.dir / f)]))
                out[f"{kern}/{dt}{tail}"] = {**ops, "kernel": _short(d)}
    return out


def _shfl(ops: dict) -> dict:
    return {op.split(".")[1]: n for op, n in sorted(ops.items()) if op.startswith("SHFL.")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel", type=Path, help="the torch CUDA wheel (pip download)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--cuobjdump")
    a = ap.parse_args(argv)
    if not a.wheel.is_file():
        print(f"regen_aten_cuda_facts: no such wheel: {a.wheel}", file=sys.stderr)
        return 2
    h = hashlib.sha256()
    with open(a.wheel, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        with zipfile.ZipFile(a.wheel) as z:
            version = z.read("torch/version.py").decode()
            so = tmp / "libtorch_cuda.so"
            with z.open("torch/lib/libtorch_cuda.so") as src, open(so, "wb") as dst:
                shutil.copyfileobj(src, dst)
        cu = _cuobjdump(a.cuobjdump)
        table = {
            "torch": re.search(r"__version__\s*=\s*'([^']+)'", version).group(1),
            "cuda": re.search(r"cuda: Optional\[str\] = '([^']+)'", version).group(1),
            "wheel": a.wheel.name, "sha256": h.hexdigest(), "arch": ARCH,
            "cuobjdump": _run([cu, "--version"]).strip().splitlines()[-1],
            **collect(Kernels(so, tmp, cu)),
        }
    a.out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
