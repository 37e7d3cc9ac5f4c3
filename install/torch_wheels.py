"""Which PyTorch wheels `make install` takes: CPU wheels on a Linux machine without an NVIDIA device.

    python install/torch_wheels.py [--gpu auto|0|1] [--index URL] [--dry-run]

pip's default index serves Linux torch built for CUDA, with its ``nvidia-*`` wheels: gigabytes
that a machine without an NVIDIA device never uses. So on Linux, before the project itself is
installed, this installs torch and torchvision from PyTorch's CPU index (``--index``), within
the ranges ``pyproject.toml`` declares; ``pip install -e '.[all]'`` then finds them satisfied
and keeps them. Everywhere else nothing changes, and the reason is printed in one line:

- not Linux (macOS wheels are CPU-only already);
- an NVIDIA device is present (``--gpu auto`` asks ``nvidia-smi -L``), or ``--gpu 1``;
- torch is already importable by this interpreter (the venv sees the system's packages);
- the CPU index cannot be reached (an offline mirror, a firewall): the default index as before.

Run it with the interpreter of the venv being made (the Makefile does); it needs only the
standard library. ``--dry-run`` prints the decision and the pip command without running it.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import re
import shutil
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: PyTorch's own index of CPU-only wheels (the Makefile's TORCH_INDEX overrides it).
CPU_INDEX = "https://download.pytorch.org/whl/cpu"

#: Seconds to wait for the index before installing as before: an unreachable host fails
#: at once, a black-holed one would otherwise stall every install.
PROBE_TIMEOUT_S = 10

#: The distributions taken from the CPU index; their ranges come from pyproject.toml.
CPU_DISTRIBUTIONS = ("torch", "torchvision")


def nvidia_device_present() -> bool:
    """Whether ``nvidia-smi -L`` lists a device (false where it is absent or fails)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


def declared_requirements(names: tuple[str, ...] = CPU_DISTRIBUTIONS) -> list[str]:
    """``names``' requirements as pyproject.toml declares them (core first, then the extras)."""
    with open(REPO / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    declared = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        declared += extra
    found: dict[str, str] = {}
    for requirement in declared:
        name = re.match(r"[A-Za-z0-9._-]*", requirement).group().lower()  # PEP 508: the name comes first
        if name in names and name not in found:
            found[name] = requirement
    return [found[name] for name in names if name in found]


def index_reachable(index: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether ``index`` answers an HTTP request for torch's page within ``timeout`` seconds."""
    try:
        with urllib.request.urlopen(f"{index.rstrip('/')}/torch/", timeout=timeout):
            return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def decide(gpu: str, index: str) -> tuple[list[str] | None, str]:
    """The pip command to run (``None``: install as before) and the one line saying why."""
    if platform.system() != "Linux":
        return None, f"{platform.system()}: pip's default torch wheels are the right ones here"
    if gpu == "1" or (gpu == "auto" and nvidia_device_present()):
        why = "GPU=1" if gpu == "1" else "an NVIDIA device is present (nvidia-smi -L)"
        return None, f"{why}: torch with CUDA from the default index"
    if importlib.util.find_spec("torch") is not None:
        return None, "torch is already importable by this interpreter: keeping it"
    if not index_reachable(index):
        unreachable = f"the CPU index {index} cannot be reached"
        return None, f"{unreachable}: torch from the default index, as before (CUDA wheels, gigabytes)"
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--index-url", index, *declared_requirements()]
    why = "GPU=0" if gpu == "0" else "no NVIDIA device"
    return command, f"{why}: torch's CPU wheels from {index}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--gpu", choices=("auto", "0", "1"), default="auto", help="auto: ask nvidia-smi; 0: CPU wheels; 1: CUDA wheels"
    )
    parser.add_argument("--index", default=CPU_INDEX, help=f"the CPU wheels' index (default {CPU_INDEX})")
    parser.add_argument("--dry-run", action="store_true", help="print the decision and the command, run nothing")
    args = parser.parse_args(argv)
    command, why = decide(args.gpu, args.index)
    print(f"make install: {why}", flush=True)
    if command is None:
        return 0
    if args.dry_run:
        print(" ".join(command))
        return 0
    return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main())
