"""Exceptions of the fprev module.  All derive from :class:`FPRevError` (a RuntimeError)."""


class FPRevError(RuntimeError):
    """Base class: the target could not be revealed."""


class InconsistentError(FPRevError):
    """The probe answers fit no summation tree: the target is non-deterministic, depends on
    the values it sums (sorting, compensated or adaptive summation), or is not a sum."""


class NondeterministicError(InconsistentError):
    """Running the same probe twice gave different answers."""


class ProbeRangeError(FPRevError):
    """An answer was not a count of surviving units: the big value did not swamp the units
    (dynamic range of the input format too small for the accumulator), the accumulator
    overflowed, or the target is not a plain sum."""
