#!/usr/bin/env python
"""The GPU's approximate fp32 instructions: recorded, and the models swept against them
(torch_mma_emu.hw.approx; --help)."""
import sys

from torch_mma_emu.hw.approx import main

if __name__ == "__main__":
    sys.exit(main())
