"""A wheel is a complete install: built from this checkout, installed into a fresh target
outside it, it runs a frozen-card cohort in fresh local workers.

An editable install hides missing package data (the files are read from the checkout), so
only a real wheel shows whether ``conf/cards/*.json`` and the SQL files travel with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture
def wheel(stateaware_wheel: Path) -> Path:
    return stateaware_wheel


def test_wheel_carries_every_frozen_card_and_sql_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for card in (REPO / "conf" / "cards").glob("*.json"):
        assert f"stateaware/conf/cards/{card.name}" in names
    queries = sorted((REPO / "analysis" / "sections" / "sql").glob("*.sql"))
    assert queries, "no SQL files where the sections load them from"
    for sql in queries:
        assert f"stateaware/analysis/sections/sql/{sql.name}" in names


def test_wheel_installs_the_console_scripts_pyproject_names(wheel: Path) -> None:
    import configparser
    import tomllib

    names = zipfile.ZipFile(wheel).namelist()
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    parser = configparser.ConfigParser()
    parser.read_string(zipfile.ZipFile(wheel).read(entry_points).decode())
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert dict(parser["console_scripts"]) == scripts
    assert {"stateaware", "stateaware-analysis", "stateaware-plan"} <= set(scripts)


def test_a_frozen_card_cohort_runs_from_the_installed_wheel_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    target, work = tmp_path / "site", tmp_path / "work"
    work.mkdir()
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        text=True,
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    env.pop("STATEAWARE_RESULTS", None)
    run = subprocess.run(
        [sys.executable, "-m", "stateaware", "cohort=fair44", "hardware=cpu", "out=results"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-2000:]

    def sql(query: str) -> list:
        done = subprocess.run(
            [sys.executable, "-m", "stateaware.analysis", "sql", "--results", "results", "--format", "json", query],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(done.stdout)

    # The code that ran is the wheel's, not this checkout's editable install.
    where = subprocess.run(
        [sys.executable, "-c", "import stateaware; print(stateaware.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(target)
    assert sql("SELECT status, count(*) AS n FROM processes GROUP BY ALL") == [{"status": "completed", "n": 1}]
    frozen = {p.stem.rsplit("-", 1)[1] for p in (target / "stateaware" / "conf" / "cards").glob("*.json")}
    digests = {row["card_digest"][:12] for row in sql("SELECT DISTINCT card_digest FROM policies")}
    assert digests and digests <= frozen
