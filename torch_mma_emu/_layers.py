"""The package's layers, lowest first: a module imports from its own layer and the layers
below it, never from one above, except for the few arrows in ``BACK_ARROWS`` (each with its
reason).  tests/test_structure.py measures the imports (module level and inside functions)
against this table and finds no import circles; docs/design.md prints it (:func:`markdown`).

A module belongs to the layer of the longest name in ``LAYERS`` that is it or a package
holding it, so ``torch_mma_emu.fprev.cli`` is in the front layer and the rest of
``torch_mma_emu.fprev`` with the tools.
"""
from __future__ import annotations

P = "torch_mma_emu"

# (layer, what it holds, modules and packages)
LAYERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("data", "format, elementary-operation, instruction and string tables; process-wide "
             "switches, bounds, safe file writes, timing: helpers that import nothing of the layers above",
     ("formats", "elementary", "tf32", "isa", "codec", "limits", "files", "switches", "timing", "text_table", "_dev_layout",
      "_C", "_layers")),
    ("model", "what an instruction computes: Spec, the arch registry, input families, the "
              "pure-Python reference, the GPU's float32 math instructions, accumulation "
              "orders (the tree type, its evaluator and per-format arithmetic)",
     ("spec", "registry", "inputs", "reference", "exact_gemm", "gpu_math", "order")),
    ("engine", "runs products: the C++ ops and their parameters, schedules, packed operands, "
               "the native GPU backends and their Triton kernels; models of PyTorch's own "
               "CUDA kernels (aten_cuda); the SIMT PTX interpreter (ptx)",
     ("cpp", "cuda_archs", "ops", "ops_spec", "ops_kernel", "ops_autograd", "ops_round", "schedule", "schedule_fields", "schedule_presets", "schedule_tree",
      "schedule_run", "schedule_split", "schedule_partials", "schedule_search", "cublaslt",
      "packed_layouts", "sharding", "native",
      "triton_kernels", "aten_cuda", "ptx")),
    ("tools", "built on the engine: FPRev, probing and fitting, hardware checks, Triton "
              "emulation, model preview, the compare tables, the README's tables",
     ("fprev", "probe", "hw", "triton", "preview", "compare", "registry_doc")),
    ("front", "the command line (its plugins included) and the package's public names",
     ("", "__main__", "cli", "cli_args", "archs_cli", "compare_cli", "fprev.cli", "probe.cli",
      "preview.cli")),
)

# (importer, imported, why the arrow runs back up); all are imports inside functions
BACK_ARROWS: tuple[tuple[str, str, str], ...] = (
    ("triton_kernels.gemm", "triton",
     "the native Triton GEMM asks whether an emulation block is open (interpreter launch)"),
)


def full(name: str) -> str:
    """``"fprev.cli"`` -> ``"torch_mma_emu.fprev.cli"``; ``""`` is the package itself."""
    return f"{P}.{name}" if name else P


def layer_of(module: str) -> int | None:
    """The index in ``LAYERS`` of a module's layer (None when no entry holds it)."""
    best, where = -1, None
    for i, (_, _, names) in enumerate(LAYERS):
        for n in names:
            f = full(n)
            if (module == f or (n and module.startswith(f + "."))) and len(f) > best:
                best, where = len(f), i
    return where


def markdown() -> str:
    """The layer table and the allowed back arrows, as docs/design.md shows them."""
    out = ["| layer | holds | modules (`torch_mma_emu.`...) |", "| --- | --- | --- |"]
    for name, what, names in LAYERS:
        mods = ", ".join(f"`{n}`" if n else "the package (`__init__`)" for n in names)
        out.append(f"| {name} | {what} | {mods} |")
    out += ["", "Imports that run back up (each inside a function):", ""]
    out += [f"* `{a}` -> `{b}`: {why}" for a, b, why in BACK_ARROWS]
    return "\n".join(out) + "\n"


if __name__ == "__main__":      # python -m torch_mma_emu._layers: the table for docs/design.md
    print(markdown(), end="")
