#!/usr/bin/env python
"""Smoke test of one kind of GPU work, each in its own process (torch_mma_emu.hw.smoke; --help)."""
import sys

from torch_mma_emu.hw.smoke import main

if __name__ == "__main__":
    sys.exit(main())
