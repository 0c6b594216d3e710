#!/usr/bin/env python
"""Probe this GPU's tensor-core instructions, infer and verify a spec per format (torch_mma_emu.hw.probe; --help)."""
import sys

from torch_mma_emu.hw.probe import main

if __name__ == "__main__":
    sys.exit(main())
