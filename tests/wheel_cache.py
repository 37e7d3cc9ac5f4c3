"""The local wheel cache from which a test installs the analysis extra with no network.

    python tests/wheel_cache.py          # fill it: online once, then seconds and offline

``tests/repo/test_analysis_extra.py`` installs ``[analysis]`` into a fresh venv with
``pip install --no-index --find-links CACHE``, so CI downloads those wheels once, not every
run. The cache lives outside the clone, in ``$STATEAWARE_WHEELS`` or else
``~/.cache/stateaware/wheels``; one folder serves every interpreter (wheel names carry their
Python and platform tags), but it is filled for the interpreter that runs this script —
run it with the one the tests use (``make install`` does).

Filling is idempotent: when pip can already resolve the extra from the cache alone, nothing
is downloaded. The requirements are read from ``pyproject.toml``'s ``analysis`` extra, so
the cache follows the extra as it changes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

__all__ = ["CACHE_ENV", "cache_dir", "analysis_requirements", "missing", "fill", "FILL_COMMAND", "project_wheel"]

REPO = Path(__file__).resolve().parent.parent

#: Environment variable naming the cache folder (default ``~/.cache/stateaware/wheels``).
CACHE_ENV = "STATEAWARE_WHEELS"

#: What to run to fill the cache, as error messages say it.
FILL_COMMAND = "python tests/wheel_cache.py (make install runs it)"


def cache_dir() -> Path:
    """The cache folder: ``$STATEAWARE_WHEELS`` or ``~/.cache/stateaware/wheels`` (may not exist)."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "stateaware" / "wheels").expanduser()


def analysis_requirements() -> list[str]:
    """The ``analysis`` extra's requirements, as pyproject declares them."""
    with open(REPO / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["project"]["optional-dependencies"]["analysis"])


def missing(cache: Path, python: str = sys.executable) -> str | None:
    """``None`` when ``python``'s pip resolves the analysis extra from ``cache`` alone, else
    pip's last line saying what it could not find. Offline: reads the cache only."""
    if not cache.is_dir():
        return f"{cache} does not exist"
    with tempfile.TemporaryDirectory() as scratch:
        # `pip download` from the cache into a scratch folder: a full resolution, offline.
        done = subprocess.run(
            [python, "-m", "pip", "download", "-q", "--no-index", "--find-links", str(cache), "-d", scratch]
            + analysis_requirements(),
            capture_output=True,
            text=True,
        )
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"pip exited {done.returncode}"


def fill(cache: Path, python: str = sys.executable) -> bool:
    """Make ``cache`` hold wheels for the analysis extra for ``python``; ``True`` if it
    downloaded anything. Online only when the cache cannot already serve the extra; a
    requirement published only as a source archive is built into a wheel here."""
    if missing(cache, python) is None:
        return False
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [python, "-m", "pip", "wheel", "-q", "--find-links", str(cache), "-w", str(cache)] + analysis_requirements(),
        check=True,
    )
    problem = missing(cache, python)
    if problem is not None:
        raise RuntimeError(f"the wheel cache {cache} still cannot serve the analysis extra: {problem}")
    return True


def project_wheel(folder: Path) -> Path:
    """Build this checkout's wheel into ``folder`` (no dependencies, no network) and return its path.

    Built from a copy of the sources alone: an in-tree build would reuse ``./build``, whose
    leftovers can carry files the package data no longer declares. No build isolation: the
    build uses the running environment's setuptools instead of fetching one.
    """
    source = folder / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, source / name)
    for name in ("stateaware", "cohorts", "analysis", "conf"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(folder)]
    subprocess.run([*command, str(source)], check=True, capture_output=True, text=True)
    (built,) = folder.glob("stateaware-*.whl")
    return built


def main() -> int:
    cache = cache_dir()
    start = time.monotonic()
    fetched = fill(cache)
    size = sum(p.stat().st_size for p in cache.glob("*.whl"))
    state = "filled" if fetched else "already full"
    print(f"wheel cache {cache}: {state} ({size / 2**20:.0f} MiB, {time.monotonic() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
