"""The layout of the product card and the install a user does.

triton_kernels/ is a top-level folder installed as torch_mma_emu.triton_kernels; a checkout
used in place (.venv puts the repository root on sys.path) imports it by the same name.
The slow test runs the README's install line in a fresh venv holding only torch (a copy of
the checkout, torch from local files): scripts/check_wheel.sh does the same for a wheel in
every scripts/test.sh run."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_mma_emu

ROOT = Path(__file__).resolve().parents[1]


def test_triton_kernels_live_at_the_top_level():
    assert (ROOT / "triton_kernels" / "__init__.py").is_file()
    assert not (ROOT / "torch_mma_emu" / "triton_kernels").exists()
    setup = (ROOT / "setup.py").read_text()
    assert '"torch_mma_emu.triton_kernels": "triton_kernels"' in setup


def test_checkout_imports_triton_kernels_by_the_package_name():
    if Path(torch_mma_emu.__file__).resolve().parent != ROOT / "torch_mma_emu":
        pytest.skip("the package is installed, not the checkout")
    spec = importlib.util.find_spec("torch_mma_emu.triton_kernels")
    assert spec is not None
    assert Path(spec.origin).resolve() == ROOT / "triton_kernels" / "__init__.py"
    assert [Path(p).resolve() for p in spec.submodule_search_locations] == [ROOT / "triton_kernels"]
    # only that one name is mapped: other missing submodules stay missing
    assert importlib.util.find_spec("torch_mma_emu.no_such_module") is None


def test_pyproject_never_pulls_torch_into_the_build():
    text = (ROOT / "pyproject.toml").read_text()
    requires = re.search(r"requires\s*=\s*\[(.*?)\]", text, re.S).group(1)
    assert "torch" not in requires


def test_readme_install_line():
    text = (ROOT / "README.md").read_text()
    install = text[text.index("## Install"):]
    first = next(line for line in install.splitlines() if line.startswith("pip install"))
    assert first.split("#")[0].split() == ["pip", "install", "."]


@pytest.mark.slow
def test_readme_install_line_in_a_fresh_venv(tmp_path):
    """`pip install .` in a venv holding only this torch: installs, keeps torch, and the
    package, one emulated_mm and mma-emu work from another folder."""
    ver = torch.__version__
    if "+" not in ver:
        pytest.skip("torch without a local version label: installing it could download")
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    env = dict(os.environ, MAX_JOBS="1", PIP_RETRIES="0")
    env.pop("PYTHONPATH", None)
    subprocess.run([py, "-m", "pip", "install", "-q", f"torch=={ver}"], check=True, env=env)
    p = subprocess.run([py, "-m", "pip", "install", "-q", "."], cwd=src, env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    check = ("import torch, torch_mma_emu as tme; "
             "A = torch.tensor([[-2.0**13, -0.5, -0.25, -0.125]]).half(); "
             "B = torch.tensor([[2.0**10], [1.0], [1.0], [1.0]]).half(); "
             "print(torch.__version__, tme.__file__, "
             "tme.emulated_mm(A, B, torch.tensor([[2.0**23]]), arch='sm90').item())")
    out = subprocess.run([py, "-c", check], cwd=tmp_path, env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[0] == ver and "site-packages" in out[1] and float(out[2]) == -0.75
    cli = subprocess.run([venv / "bin" / "mma-emu", "compare", "--arch", "sm90"],
                         cwd=tmp_path, env=env, capture_output=True, text=True)
    assert cli.returncode == 0 and "-0.75" in cli.stdout


def _setup_module():
    spec = importlib.util.spec_from_file_location("mma_emu_setup", ROOT / "setup.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)    # defines the helpers; setup() runs only as __main__
    return mod


@pytest.mark.parametrize("case,cuda,home,gpus,env,want", [
    ("cpu torch", None, "/usr/local/cuda", [], {}, None),
    ("no nvcc", "12.8", None, [(9, 0)], {}, None),
    ("nvcc, no GPU, no arch list", "12.8", "/usr/local/cuda", [], {}, None),
    ("arch list", "12.8", "/usr/local/cuda", [], {"TORCH_CUDA_ARCH_LIST": "8.0;9.0a"}, "8.0;9.0a"),
    ("visible GPUs", "12.8", "/usr/local/cuda", [(8, 0), (9, 0), (8, 0)], {}, "8.0;9.0a"),
    ("forced off", "12.8", "/usr/local/cuda", [(9, 0)], {"MMA_EMU_NO_CUDA": "1"}, None),
    ("distribution", "12.8", "/usr/local/cuda", [(9, 0)], {"MMA_EMU_CUDA_DIST": "1"},
     "8.0;9.0a;10.0a;12.0a"),
    ("list over dist", "12.8", "/usr/local/cuda", [],
     {"MMA_EMU_CUDA_DIST": "1", "TORCH_CUDA_ARCH_LIST": "9.0a"}, "9.0a"),
])
def test_cuda_targets(monkeypatch, case, cuda, home, gpus, env, want):
    """The build's CUDA decision: never a crash, CPU only without a target."""
    mod = _setup_module()
    for k in ("TORCH_CUDA_ARCH_LIST", "MMA_EMU_NO_CUDA", "MMA_EMU_CUDA_DIST"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(mod.torch.version, "cuda", cuda)
    monkeypatch.setattr(mod, "CUDA_HOME", home)
    monkeypatch.setattr(mod.torch.cuda, "is_available", lambda: bool(gpus))
    monkeypatch.setattr(mod.torch.cuda, "device_count", lambda: len(gpus))
    monkeypatch.setattr(mod.torch.cuda, "get_device_capability", lambda i: gpus[i])
    archs, why = mod._cuda_targets()
    assert archs == want, (case, why)
    assert why


def _toolkit(root: Path, lib: str) -> Path:
    """A fake CUDA toolkit: include/cuda_runtime.h and libcudart.so in `lib`."""
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "include" / "cuda_runtime.h").write_text("")
    (root / lib).mkdir()
    (root / lib / "libcudart.so").write_text("")
    return root


def test_cuda_home_found_behind_an_nvcc_wrapper(tmp_path, monkeypatch):
    """/usr/local/bin/nvcc as a wrapper script (this machine's layout): torch would take
    /usr/local as CUDA_HOME and fail to link libcudart; setup.py asks nvcc where it runs from."""
    home = _toolkit(tmp_path / "cuda-13.0", "lib")
    wrap = tmp_path / "wrapper" / "bin"
    wrap.mkdir(parents=True)
    (wrap / "nvcc").write_text(f"#!/bin/sh\necho '#$ _HERE_={home}/bin' >&2\n")
    (wrap / "nvcc").chmod(0o755)
    mod = _setup_module()
    for k in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("PATH", f"{wrap}:{os.environ['PATH']}")
    monkeypatch.setattr(mod.torch.version, "cuda", "13.0")
    mod._cuda_home_behind_nvcc_wrapper()
    assert os.environ.get("CUDA_HOME") == str(home)
    # an explicit choice is kept, and a CPU torch never asks nvcc
    monkeypatch.setenv("CUDA_HOME", "/elsewhere")
    mod._cuda_home_behind_nvcc_wrapper()
    assert os.environ["CUDA_HOME"] == "/elsewhere"
    monkeypatch.delenv("CUDA_HOME")
    monkeypatch.setattr(mod.torch.version, "cuda", None)
    mod._cuda_home_behind_nvcc_wrapper()
    assert "CUDA_HOME" not in os.environ


@pytest.mark.parametrize("lib,want", [("lib64", False), ("lib", True)])
def test_cudart_found_in_lib_or_lib64(tmp_path, monkeypatch, lib, want):
    home = _toolkit(tmp_path / "cuda", lib)
    mod = _setup_module()
    monkeypatch.setattr(mod, "CUDA_HOME", str(home))
    assert mod._cudart_dirs() == ([str(home / "lib")] if want else [])


def test_setup_declares_the_layout_and_the_torch_pin():
    mod = _setup_module()
    assert "torch_mma_emu.triton_kernels" in mod.SETUP["packages"]
    assert mod.SETUP["package_dir"] == {"torch_mma_emu.triton_kernels": "triton_kernels"}
    # torch's stable ABI from 2.11 on: one wheel for every later torch, no upper pin
    assert "torch>=2.11" in mod.SETUP["install_requires"]
    assert mod.SETUP["options"]["bdist_wheel"]["py_limited_api"] == "cp310"
    if torch.version.cuda is None:    # a CPU torch: the CPU kernel only, whatever nvcc says
        (ext,) = mod.get_extensions()
        assert ext.sources and not [s for s in ext.sources if s.endswith(".cu")]
        assert ext.py_limited_api
        assert ("TORCH_TARGET_VERSION", "0x020b000000000000") in ext.define_macros
        assert ("Py_LIMITED_API", "0x030A0000") in ext.define_macros


def test_the_arch_list_travels_as_one_token(monkeypatch):
    """setup.py passes TORCH_CUDA_ARCH_LIST to the compiler as one token (';' and spaces
    would split the command line); cuda_archs.built() reads it back as the list."""
    mod = _setup_module()
    token = mod.arch_token("8.0;9.0a 10.0a;;12.0a+PTX")
    assert token == "8.0_9.0a_10.0a_12.0a+PTX"
    assert mod.arch_token(mod.DIST_ARCHS) == "8.0_9.0a_10.0a_12.0a"
    from torch_mma_emu import _C, cuda_archs
    monkeypatch.setattr(_C, "_cuda_archs", lambda: token)
    assert cuda_archs.built() == ("8.0", "9.0a", "10.0a", "12.0a+PTX")


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None,
                    reason="no torchvision in this venv")
def test_the_venv_imports_torchvision_and_transformers_as_a_user_would():
    """A user's ``import torchvision`` (and transformers' imports that pull it) works in the
    venv scripts/test.sh made, without the tests' own guard (issue 42: PyPI's CUDA
    torchvision beside a CPU torch; scripts/torchvision_guard.py)."""
    code = "import torchvision\nimport importlib.util, sys\n" \
           "if importlib.util.find_spec('transformers'):\n" \
           "    from transformers import LlamaConfig\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=str(ROOT), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_the_torchvision_guard_serves_only_when_the_c_ops_are_missing():
    spec = importlib.util.spec_from_file_location("tv_guard", ROOT / "scripts" /
                                                  "torchvision_guard.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    finder = mod._Finder()
    assert finder.find_spec("torchvision.ops", None) is None          # other names: untouched
    has_ops = hasattr(torch.ops.torchvision, "nms")      # the C ops registered
    got = finder.find_spec("torchvision._meta_registrations", None)
    assert (got is None) == has_ops                       # serves only while they are missing
    if got is not None:
        assert finder.create_module(got).__name__ == "torchvision._meta_registrations"
