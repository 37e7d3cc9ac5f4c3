"""The run manifest: what was launched, from which code, on what, and when.

Written by the launcher to ``OUT/runs/cohort=<c>/run_id=<r>/manifest.json`` and as the
run's row of the ``runs`` table (``process_index`` is -1 there: the row describes the
run, not a process). A resumed run keeps its first ``started_at`` and counts launches.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import socket
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

import stateaware
from stateaware.bounded_input import read_bounded
from stateaware.hardware import visible_gpus
from stateaware.records.damage import quarantine
from stateaware.records.part_names import run_folder
from stateaware.records.write_paths import writable
from stateaware.records.writer import Identity, RecordWriter, write_bytes_atomic
from stateaware.run_spec import RunSpec

__all__ = ["MAX_MANIFEST_BYTES", "manifest_path", "collect_manifest", "write_manifest", "git_state", "versions"]

RUN_ROW_INDEX = -1
#: The largest manifest file a resume reads (one is a few KiB): a larger one is damaged.
MAX_MANIFEST_BYTES = 16 << 20


def manifest_path(out: Path | str, cohort: str, run_id: str) -> Path:
    """``OUT/runs/cohort=C/run_id=R/manifest.json``, checked to lie inside ``out``."""
    path = run_folder(out, "runs", cohort, run_id) / "manifest.json"
    return writable(out, path, file=True)


def git_state(where: Path) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the git checkout containing ``where``; ``(None, None)`` outside one."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return None, None
        status = subprocess.run(
            ["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return commit.stdout.strip(), bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


def versions() -> dict[str, str | None]:
    """Versions of python, torch, jax, CUDA and the driver, without importing torch or jax."""

    def dist(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    gpus = visible_gpus()
    cuda = None
    if gpus:
        try:
            text = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20).stdout
            cuda = text.split("CUDA Version:")[1].split()[0] if "CUDA Version:" in text else None
        except (OSError, subprocess.SubprocessError):
            cuda = None
    return {
        "python": platform.python_version(),
        "torch": dist("torch"),
        "jax": dist("jax"),
        "cuda": cuda,
        "driver": gpus[0].driver if gpus else None,
        "gpus": ", ".join(g.name for g in gpus) or None,
    }


def collect_manifest(
    run: RunSpec,
    run_id: str,
    source_hash: str,
    processes: int,
    *,
    report_sections: tuple[str, ...] = (),
    pair: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The run's manifest; ``report_sections`` is the kind's declared ``REPORT`` (the plan read it);
    ``pair``: ``(pair_id, side)`` when the run is one side of an interleaved comparison."""
    commit, dirty = git_state(Path(stateaware.__file__).parent)
    return {
        "run_id": run_id,
        "cohort": run.cohort,
        "kind": run.kind,
        "report_sections": list(report_sections),
        "source_hash": source_hash,
        "processes": processes,
        "launcher": run.launcher.name,
        "hardware": run.hardware["name"],
        "scale": run.hardware["scale"],
        "git_commit": commit,
        "git_dirty": dirty,
        "host": socket.gethostname(),
        **versions(),
        "started_at": datetime.now(UTC).isoformat(),
        "launches": 1,
        "config": run.config,
        "pair_id": None if pair is None else pair[0],
        "side": None if pair is None else pair[1],
    }


def write_manifest(
    out: Path | str, manifest: dict[str, Any], *, say: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Write (or, on resume, update) the manifest file and the run's ``runs`` row.

    A manifest file that does not read as one (truncated, not JSON, past
    ``MAX_MANIFEST_BYTES``: it is read to that bound) is moved to
    ``OUT/.quarantine/`` (``say`` gets one line) and written afresh. Both writes are atomic;
    a full disk raises ``DiskFullError`` with nothing half-written.
    """
    path = manifest_path(out, manifest["cohort"], manifest["run_id"])
    if path.exists():
        try:
            previous = json.loads(
                read_bounded(path, what=f"manifest {path}", bound=MAX_MANIFEST_BYTES, regular_only=True)
            )
            manifest = {
                **manifest,
                "started_at": previous["started_at"],
                "launches": int(previous.get("launches", 1)) + 1,
            }
        except (ValueError, KeyError, TypeError) as exc:
            moved = quarantine(out, path)
            if say is not None:
                say(
                    f"quarantined damaged manifest {path}: {type(exc).__name__}: {exc}; "
                    f"moved to {moved}; writing it afresh"
                )
    write_bytes_atomic(json.dumps(manifest, indent=2, sort_keys=True, default=str).encode(), path, out=out)

    identity = Identity(
        manifest["run_id"],
        manifest["cohort"],
        RUN_ROW_INDEX,
        manifest["source_hash"],
        str(manifest["hardware"]),
        float(manifest["scale"]),
    )
    row = {
        key: manifest[key]
        for key in (
            "launcher",
            "processes",
            "git_commit",
            "git_dirty",
            "host",
            "python",
            "torch",
            "jax",
            "cuda",
            "driver",
            "launches",
        )
    }
    row["started_at"] = datetime.fromisoformat(manifest["started_at"])
    row["config_yaml"] = OmegaConf.to_yaml(OmegaConf.create(manifest["config"]))
    # What the report picks sections by; null in a manifest written before they were recorded
    # (the report then derives them from config_yaml's cohort.kind).
    row["kind"] = manifest.get("kind")
    row["report_sections"] = manifest.get("report_sections")
    row["pair_id"], row["side"] = manifest.get("pair_id"), manifest.get("side")
    RecordWriter(out, identity).write("runs", [row], part="manifest")
    return manifest
