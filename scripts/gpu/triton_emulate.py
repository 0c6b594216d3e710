#!/usr/bin/env python
"""Whole Triton programs natively against torch_mma_emu.triton.emulate(this GPU's arch), bit for
bit (torch_mma_emu.hw.triton_programs; --help)."""
import sys

from torch_mma_emu.hw.triton_programs import main

if __name__ == "__main__":
    sys.exit(main())
