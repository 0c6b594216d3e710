"""Installed into the venv by scripts/test.sh (as ``_mma_emu_torchvision_guard`` with a
``.pth`` line that imports it) where ``import torchvision`` fails beside a CPU torch.

PyPI's torchvision wheel is a CUDA build: beside a CPU torch its C extension cannot load,
and its import then dies in ``torchvision._meta_registrations`` (fake kernels for the C ops
that did not load: "operator torchvision::nms does not exist"), and with it
``from transformers import LlamaConfig`` and ``import timm``.  This finder serves an empty
module under that name while torchvision's C ops are missing, so the Python part of
torchvision imports; its C ops (nms, roi_align, ...) stay unusable, as they are anyway."""
import importlib.abc
import importlib.machinery
import sys
import types


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name != "torchvision._meta_registrations":
            return None
        import torch
        try:
            torch.ops.torchvision.nms            # the C ops loaded: the real module serves
            return None
        except (AttributeError, RuntimeError):
            return importlib.machinery.ModuleSpec(name, self)

    def create_module(self, spec):
        return types.ModuleType(spec.name)

    def exec_module(self, module):
        pass


if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.insert(0, _Finder())
