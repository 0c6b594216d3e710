#!/usr/bin/env python
"""Confirm or correct the schedule presets on a GPU (torch_mma_emu.hw.schedules; --help)."""
import sys

from torch_mma_emu.hw.schedules import main

if __name__ == "__main__":
    sys.exit(main())
