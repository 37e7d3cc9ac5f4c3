"""The two commands a user types, as a user types them (fresh interpreters)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(*args, cwd):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_launch_then_query(tmp_path):
    out = tmp_path / "results"
    launched = _run("-m", "stateaware", "cohort=demo", "processes=2", f"out={out}", cwd=tmp_path)
    assert launched.returncode == 0, launched.stderr
    assert "2/2 processes completed" in launched.stdout
    assert not (tmp_path / "outputs").exists()  # Hydra leaves no output folders behind

    answer = _run(
        "-m",
        "stateaware.analysis",
        "sql",
        "--results",
        str(out),
        "SELECT cohort, status, count(*) AS n FROM processes GROUP BY ALL",
        cwd=tmp_path,
    )
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.splitlines() == [
        "cohort  status     n",
        "------  ---------  -",
        "demo    completed  2",
        "(1 row)",
    ]

    csv = subprocess.run(
        [sys.executable, "-m", "stateaware.analysis", "sql", "--format", "csv", "-"],
        input="SELECT count(*) AS n FROM timings WHERE NOT warmup",
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "STATEAWARE_RESULTS": str(out)},
        timeout=60,
    )
    assert csv.stdout == "n\n10\n"


def test_unknown_cohort_and_launcher_list_the_choices(tmp_path):
    bad = _run("-m", "stateaware", "cohort=nope", f"out={tmp_path / 'o'}", cwd=tmp_path)
    assert bad.returncode == 2 and "Could not find 'cohort/nope'" in bad.stderr and "demo" in bad.stderr
    bad = _run("-m", "stateaware", "cohort=demo", "launcher=foo", f"out={tmp_path / 'o'}", cwd=tmp_path)
    assert bad.returncode == 2 and "Could not find 'launcher/foo'" in bad.stderr
    for option in ("inline", "local", "slurm"):
        assert option in bad.stderr
    assert not (tmp_path / "o").exists()


def test_cfg_job_prints_the_composed_config(tmp_path):
    shown = _run("-m", "stateaware", "cohort=demo", "processes=5", "--cfg", "job", cwd=tmp_path)
    assert shown.returncode == 0
    assert "processes: 5" in shown.stdout and "name: demo" in shown.stdout and "launcher:" in shown.stdout


def test_refused_sql_exits_2_with_the_reason(tmp_path):
    (tmp_path / "runs").mkdir()
    refused = _run("-m", "stateaware.analysis", "sql", "--results", str(tmp_path), "DELETE FROM runs", cwd=tmp_path)
    assert refused.returncode == 2 and "refused: DELETE statement" in refused.stderr


def test_analysis_never_imports_torch_or_jax(tmp_path):
    (tmp_path / "runs").mkdir()
    probe = (
        "import sys, runpy; sys.argv=['x','sql','--results','.','SELECT 1']; \n"
        "from stateaware.analysis.__main__ import main; main(sys.argv[1:]); \n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch','jax','jaxlib','torchvision')))"
    )
    done = _run("-c", probe, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_help_lists_the_groups_and_no_cohort_names_the_choices(tmp_path):
    shown = _run("-m", "stateaware", "--help", cwd=tmp_path)
    assert shown.returncode == 0
    assert "launcher: inline, local, slurm" in shown.stdout and "hardware: auto, cpu, h100" in shown.stdout
    bare = _run("-m", "stateaware", cwd=tmp_path)
    assert (
        bare.returncode == 2 and "no cohort chosen: pass cohort=NAME, one of" in bare.stderr and "demo" in bare.stderr
    )


@pytest.mark.slow
def test_a_timing_cohort_prints_its_per_method_summary(tmp_path):
    done = _run(
        "-m",
        "stateaware",
        "cohort=fair44",
        "hardware=cpu",
        "cohort.params.steps=2",
        "cohort.params.warmup=1",
        "launcher=inline",
        f"out={tmp_path}",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "fair44: run fair44-" in done.stdout and "1/1 processes completed" in done.stdout
    header = next(line for line in lines if line.startswith("| method | policy |"))
    assert "ours step ms" in header and "ours peak MiB (measured)" in header and "predicted MiB" in header
    methods = [line.split("|")[1].strip() for line in lines if line.startswith("| ") and "| yes |" in line]
    assert methods == ["eager", "whole", "regions", "functional", "agnostic", "eager_whole", "joint"]
