"""The repository layout in a checkout that is not installed (``.venv`` puts the repository
root on ``sys.path``): the Triton GEMMs live in the top-level ``triton_kernels/`` folder
(the product card's layout), and installs map that folder to ``torch_mma_emu.triton_kernels``
(``package_dir`` in setup.py).  This finder gives the checkout the same import name; it is
installed only when the package has no ``triton_kernels`` subfolder of its own, i.e. never in
a wheel install."""
from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

NAME = "torch_mma_emu.triton_kernels"


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, folder: str):
        self.folder = folder

    def find_spec(self, fullname, path=None, target=None):
        if fullname != NAME:
            return None   # submodules are found through the package's __path__
        return importlib.util.spec_from_file_location(
            fullname, os.path.join(self.folder, "__init__.py"),
            submodule_search_locations=[self.folder])


def install(package_dir: str) -> None:
    """Map ``torch_mma_emu.triton_kernels`` to ``<root>/triton_kernels`` in a checkout."""
    if os.path.isdir(os.path.join(package_dir, "triton_kernels")):
        return                                   # installed: the real subpackage is there
    folder = os.path.join(os.path.dirname(package_dir), "triton_kernels")
    if not os.path.isfile(os.path.join(folder, "__init__.py")):
        return
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder(folder))
