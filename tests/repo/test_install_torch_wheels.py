"""`make install` sizes torch to the machine: CPU wheels on Linux without an NVIDIA device.

install/torch_wheels.py runs with ``--dry-run`` under ``python -S`` (no site-packages, so torch
is not importable, as on a fresh machine), a fake ``nvidia-smi`` on PATH or none, and a CPU index
served on the loopback, or a closed port standing for an unreachable one.
"""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "install" / "torch_wheels.py"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the CPU-wheel choice is Linux's")


@pytest.fixture(scope="module")
def cpu_index(tmp_path_factory):
    """A loopback HTTP server standing for PyTorch's CPU index (it has a torch/ page)."""
    root = tmp_path_factory.mktemp("index")
    (root / "torch").mkdir()
    (root / "torch" / "index.html").write_text("<html></html>")
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(root), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def closed_port_index():
    """An index URL on a loopback port nobody listens on: refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _bin_with(tmp_path: Path, smi: str | None) -> Path:
    """A PATH folder holding a fake nvidia-smi script (or nothing)."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    if smi is not None:
        fake = folder / "nvidia-smi"
        fake.write_text("#!/bin/sh\n" + smi + "\n")
        fake.chmod(0o755)
    return folder


def _decide(tmp_path, *, smi, index, gpu="auto", site=False) -> list[str]:
    """The script's printed lines, run as ``make install`` would, with only ``smi`` on PATH."""
    env = {**os.environ, "PATH": str(_bin_with(tmp_path, smi))}
    python = [sys.executable] + ([] if site else ["-S"])
    done = subprocess.run(
        [*python, str(SCRIPT), "--gpu", gpu, "--index", index, "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _declared() -> list[str]:
    with open(REPO / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    declared = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return [next(r for r in declared if r.startswith(name + ">")) for name in ("torch", "torchvision")]


GPU_LISTED = "echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'"


def test_no_device_takes_the_cpu_index_within_pyprojects_ranges(tmp_path, cpu_index):
    why, command = _decide(tmp_path, smi=None, index=cpu_index)
    assert why == f"make install: no NVIDIA device: torch's CPU wheels from {cpu_index}"
    assert command.split()[1:] == ["-S", "-m", "pip", "install", "--quiet", "--index-url", cpu_index, *_declared()][1:]


def test_a_listed_device_keeps_the_default_index(tmp_path, cpu_index):
    assert _decide(tmp_path, smi=GPU_LISTED, index=cpu_index) == [
        "make install: an NVIDIA device is present (nvidia-smi -L): torch with CUDA from the default index"
    ]


def test_an_nvidia_smi_that_fails_means_no_device(tmp_path, cpu_index):
    """A driver that is installed but not loaded: nvidia-smi exits non-zero, the CPU wheels fit."""
    lines = _decide(tmp_path, smi="echo 'NVIDIA-SMI has failed' >&2; exit 9", index=cpu_index)
    assert lines[0].startswith("make install: no NVIDIA device:") and len(lines) == 2


def test_gpu_overrides_the_check_both_ways(tmp_path, cpu_index):
    assert _decide(tmp_path, smi=None, index=cpu_index, gpu="1") == [
        "make install: GPU=1: torch with CUDA from the default index"
    ]
    why, command = _decide(tmp_path, smi=GPU_LISTED, index=cpu_index, gpu="0")
    assert why == f"make install: GPU=0: torch's CPU wheels from {cpu_index}" and cpu_index in command


def test_an_unreachable_index_installs_as_before_with_a_notice(tmp_path, closed_port_index):
    assert _decide(tmp_path, smi=None, index=closed_port_index) == [
        f"make install: the CPU index {closed_port_index} cannot be reached: torch from the default index, "
        "as before (CUDA wheels, gigabytes)"
    ]


def test_an_importable_torch_is_kept(tmp_path, cpu_index):
    """The venv sees the system's packages: a torch already there is not replaced."""
    pytest.importorskip("torch")
    assert _decide(tmp_path, smi=None, index=cpu_index, site=True) == [
        "make install: torch is already importable by this interpreter: keeping it"
    ]


def test_a_bad_gpu_value_is_refused_naming_the_choices(tmp_path, cpu_index):
    done = subprocess.run(
        [sys.executable, "-S", str(SCRIPT), "--gpu", "yes", "--index", cpu_index], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "argument --gpu: invalid choice: 'yes' (choose from 'auto', '0', '1')" in done.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_only_the_test_targets_fill_the_wheel_caches():
    def dry(target: str, *args: str) -> str:
        command = ["make", "-n", "-C", str(REPO), target, "VENV=.venv-none", *args]
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout

    install = dry("install", "GPU=0", "TORCH_INDEX=http://mirror.example/cpu")
    assert "install/torch_wheels.py --gpu 0 --index http://mirror.example/cpu" in install
    assert "wheel_cache" not in install and "gpu_wheels" not in install
    for target in ("test", "test-quick"):
        tested = dry(target)
        assert "tests/wheel_cache.py" in tested and "bench/gpu_wheels.py fill-cache" in tested
