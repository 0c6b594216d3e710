"""Probe and fit: feature-targeted tests and closed-loop model inference for any matrix unit.

    from torch_mma_emu import probe
    rep = probe.features("sm80", "fp16")          # seed 000 / 004 / 002 feature tests
    print(rep.table())
    sp = probe.infer_spec("sm80", "fp16")         # a Spec built from the features
    probe.verify(sp, "sm80", 100_000)             # seed 003 Step 4, with shrinking
    probe.fit(samples, "fp16", "fp32")            # specs reproducing recorded data

See docs/probe.md.
"""
from .features import ProbeError, features, probe
from .fit import FitResult, fit
from .infer import Inference, InferenceError, infer, infer_spec
from .report import Feature, FeatureReport, Interval
from .samples import Samples
from .targets import (CallableTarget, EmulatedTarget, Interface, NativeTarget, Target,
                      make_target)
from .verify import Counterexample, VerifyResult, verify

__all__ = ["features", "probe", "ProbeError", "infer_spec", "infer", "Inference",
           "InferenceError", "verify", "VerifyResult", "Counterexample", "fit", "FitResult",
           "Samples", "Feature", "FeatureReport", "Interval",
           "Target", "EmulatedTarget", "NativeTarget", "CallableTarget", "Interface",
           "make_target"]
