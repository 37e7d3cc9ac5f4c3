"""Hardware profiles: which shapes and budgets a run uses, chosen by the device at hand.

``hardware=auto`` (the default) resolves to ``h100`` only on a CUDA device with at least
``min_gpu_gib`` of memory (80 GiB: the paper's shapes need it), else to ``cpu``. The
probe asks ``nvidia-smi`` rather than importing torch, so the launcher starts fast and a
machine without a GPU stack resolves to ``cpu`` at once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

__all__ = ["GPU", "visible_gpus", "choose_profile"]


@dataclass(frozen=True)
class GPU:
    index: int
    name: str
    memory_bytes: int
    driver: str


def visible_gpus() -> list[GPU]:
    """The GPUs ``nvidia-smi`` reports, restricted to ``CUDA_VISIBLE_DEVICES`` if set."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        index, name, mib, driver = (field.strip() for field in line.split(","))
        gpus.append(GPU(int(index), name, int(float(mib)) * 2**20, driver))
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    if mask is not None:
        allowed = {m.strip() for m in mask.split(",") if m.strip()}
        gpus = [g for g in gpus if str(g.index) in allowed]
    return gpus


def choose_profile(min_gpu_gib: float) -> str:
    """``"h100"`` if a visible GPU has at least ``min_gpu_gib`` GiB, else ``"cpu"``."""
    if any(g.memory_bytes >= min_gpu_gib * 2**30 for g in visible_gpus()):
        return "h100"
    return "cpu"
