"""The local Slurm test cluster: whether it is up, for the tests that need it to skip with the reason."""

from __future__ import annotations

import shutil
import subprocess


def cluster_down_reason() -> str | None:
    """Why no Slurm test can run here (one line), or ``None`` when a node is up."""
    if shutil.which("sinfo") is None:
        return "sinfo not found: Slurm is not installed (slurm/start_cluster.sh installs and starts it)"
    try:
        states = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10).stdout.split()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"sinfo failed: {exc}"
    if not any(s.startswith(("idle", "mix", "alloc")) for s in states):
        return f"no Slurm node is up (sinfo: {states or 'nothing'}); run slurm/start_cluster.sh"
    return None
