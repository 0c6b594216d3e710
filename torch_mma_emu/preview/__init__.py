"""Preview another GPU inside real models (docs/preview.md).

* :func:`emulate` - a ``TorchDispatchMode``: every matrix product inside the ``with`` block
  (mm, addmm, bmm, baddbmm, convolution, scaled-dot-product attention, ``_scaled_mm``,
  forward and backward) runs as the chosen arch's matrix units compute it;
* :func:`convert` / :func:`revert` - swap ``nn.Linear`` / ``nn.Conv*d`` for emulated
  modules sharing their parameters (``torch.compile(fullgraph=True)`` friendly).
"""
from .mode import ROUTED_OPS, EmulateMode, emulate
from .modules import (EmulatedConv, EmulatedConv1d, EmulatedConv2d, EmulatedConv3d,
                      EmulatedConvTranspose1d, EmulatedConvTranspose2d,
                      EmulatedConvTranspose3d, EmulatedLinear, convert, revert)
from .policy import FORMAT_CHOICES, OP_KINDS, Plan, Policy
from .records import Record

__all__ = ["emulate", "convert", "revert", "EmulateMode", "EmulatedLinear", "EmulatedConv",
           "EmulatedConv1d", "EmulatedConv2d", "EmulatedConv3d", "EmulatedConvTranspose1d",
           "EmulatedConvTranspose2d", "EmulatedConvTranspose3d",
           "Policy", "Plan", "Record", "OP_KINDS", "FORMAT_CHOICES", "ROUTED_OPS"]
