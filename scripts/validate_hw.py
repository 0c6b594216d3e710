#!/usr/bin/env python
"""Live validation on a CUDA GPU: the emulator against this GPU's own matrix units
(torch_mma_emu.hw.validate; `python scripts/validate_hw.py --help`)."""
import sys

from torch_mma_emu.hw.validate import main

if __name__ == "__main__":
    sys.exit(main())
