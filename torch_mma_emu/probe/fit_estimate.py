"""How many more samples would decide between the models that reproduce a samples file.

``fit`` leaves several models when the samples cannot tell them apart.  To say how many more
samples are needed, the models are run on fresh random inputs of probe's input families
(``samples.random_batches``: the file's interface and lengths K), and for each model taken
as the truth we count how many of those inputs it takes until no other model agrees with it
on all of them.  The estimate is the worst case over the models (the truth is unknown); the
models that still agree with another one on every random input are counted apart (such
inputs may never separate them: rarer cases, or an arithmetic identity on this domain).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .targets import output_codes
from .samples import Samples, random_batches, stand_in_spec

__all__ = ["Estimate", "samples_needed", "ESTIMATE_MODELS", "ESTIMATE_INPUTS"]

ESTIMATE_MODELS = 64    # the best-ranked models the estimate runs (a few seconds at most)
ESTIMATE_INPUTS = 256   # random inputs each of them runs


@dataclass(frozen=True)
class Estimate:
    needed: int | None   # random samples after which each model alone agrees (worst case);
    #                      None when some never separate within ``inputs``
    inputs: int          # random inputs tried
    models: int          # models compared
    together: int        # models still agreeing with another on all ``inputs``

    def describe(self) -> str:
        of = f"{self.models} best-ranked models" if self.models >= ESTIMATE_MODELS else \
            f"{self.models} models"
        if self.needed is not None:
            return (f"about {self.needed} more sample{'s' if self.needed != 1 else ''} would "
                    f"tell the {of} apart (the worst case over which of them is true, on "
                    f"random inputs of probe's families, K as in the file)")
        return (f"{self.inputs} more random samples (probe's families, K as in the file) would "
                f"not be enough: {self.together} of the {of} still agree with another on all "
                "of them (they may differ only on rarer inputs, or not at all)")


def agreement_prefix(outputs: torch.Tensor) -> tuple[int | None, int]:
    """``outputs`` (models, inputs) output codes: the worst case over the models of the
    shortest prefix of inputs after which that model alone agrees with itself, and how many
    models agree with another on every input (the worst case is then None)."""
    m, n = outputs.shape
    worst, together = 0, 0
    for t in range(m):
        alive = (outputs == outputs[t]).cumprod(dim=1)     # still agreeing after i inputs
        alone = (alive.sum(dim=0) == 1).nonzero()
        if alone.numel() == 0:
            together += 1
        else:
            worst = max(worst, int(alone[0]) + 1)
    return (None if together else worst), together


def samples_needed(specs, samples: Samples, inputs: int = ESTIMATE_INPUTS, seed: int = 0,
                   models: int = ESTIMATE_MODELS) -> Estimate:
    """The :class:`Estimate` for the models ``specs`` (best first; the first ``models`` run)
    that reproduce ``samples``."""
    from ..ops import emulated_mm
    specs = list(specs)[:models]
    iface = samples.iface
    if len(specs) < 2:
        return Estimate(0, 0, len(specs), 0)
    g = torch.Generator().manual_seed(seed)
    batches = [kw for _, _, kw in random_batches(stand_in_spec(iface), inputs, samples.ks, None,
                                                  g, inputs)]
    rows = []
    for sp in specs:
        codes = []
        for kw in batches:
            S = kw["A"].shape[0]
            C = kw["C"] if kw["C"] is not None else torch.zeros(S, 1, 1, dtype=iface.out_dtype)
            D = emulated_mm(kw["A"], kw["B"], C, arch=sp, in_format=iface.in_format_arg,
                            out_dtype=iface.out_dtype, scale_a=kw.get("scale_a"),
                            scale_b=kw.get("scale_b"))
            codes.append(output_codes(D.reshape(-1)))
        rows.append(torch.cat(codes))
    needed, together = agreement_prefix(torch.stack(rows))
    return Estimate(needed, inputs, len(specs), together)
