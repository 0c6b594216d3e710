#!/usr/bin/env python
"""CUDA torch.sum, softmax and layer_norm recorded on seeded inputs for offline tree fitting
(torch_mma_emu.hw.reductions; --help)."""
import sys

from torch_mma_emu.hw.reductions import main

if __name__ == "__main__":
    sys.exit(main())
