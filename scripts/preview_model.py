#!/usr/bin/env python
"""Preview a model's numerics on every emulated GPU: divergence per layer from an fp64 run
and between archs, as a table and a PNG, plus the emulated / native forward-time ratio.
The same command as ``mma-emu preview`` (torch_mma_emu/preview/cli.py has the options).

    python scripts/preview_model.py                          # the built-in TinyGPT, all archs
    python scripts/preview_model.py --archs sm70,sm90,gfx942 --formats bf16,fp8
    python scripts/preview_model.py --model mypkg.models:make_net --input randn:8,3,32,32
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from torch_mma_emu.preview.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
