"""Preview another GPU inside real models (docs/preview.md).

* :func:`emulate` - a ``TorchDispatchMode``: every matrix product inside the ``with`` block
  (mm, addmm, bmm, baddbmm, convolution, scaled-dot-product attention, ``_scaled_mm``,
  forward and backward) runs as the chosen arch's matrix units compute it;
* :func:`convert` / :func:`revert` - swap ``nn.Linear`` / ``nn.Conv*d`` /
  ``nn.ConvTranspose*d`` for emulated subclasses sharing their parameters
  (``torch.compile(fullgraph=True)`` friendly);
* ``em.report(reference)`` - per-layer divergence of a recorded block from fp64 or another
  arch; :func:`preview_model` (``mma-emu preview``) - one model under many archs and formats.
"""
from .attribution import LayerRow, Report
from .batch_invariance import InvarianceReport, batch_invariance
from .mode import ROUTED_OPS, EmulateMode, emulate
from .model_preview import PreviewResult, preview_model
from .modules import (EmulatedConv, EmulatedConv1d, EmulatedConv2d, EmulatedConv3d,
                      EmulatedConvTranspose1d, EmulatedConvTranspose2d,
                      EmulatedConvTranspose3d, EmulatedLinear, convert, revert)
from .policy import FORMAT_CHOICES, OP_KINDS, Plan, Policy
from .records import Record
from .torchao_checks import gpu_checks_pass

__all__ = ["emulate", "convert", "revert", "batch_invariance", "InvarianceReport", "EmulateMode", "EmulatedLinear", "EmulatedConv",
           "EmulatedConv1d", "EmulatedConv2d", "EmulatedConv3d", "EmulatedConvTranspose1d",
           "EmulatedConvTranspose2d", "EmulatedConvTranspose3d", "preview_model",
           "PreviewResult", "Report", "LayerRow",
           "Policy", "Plan", "Record", "gpu_checks_pass", "OP_KINDS", "FORMAT_CHOICES", "ROUTED_OPS"]
