"""The live validation against a GPU's own matrix units (scripts/validate_hw.py runs
``validate.main``): part 1 the CUDA kernel against the CPU kernel (``identity``), part 2 the
native paths against the emulator (``paths``, with ``diagnose`` for a mismatch), part 3 the
speed (``bench``); results that survive a cut-off command (``results``), the archive of
mismatching inputs (``archive``) and the report (``report``).  Importing it needs no GPU."""
