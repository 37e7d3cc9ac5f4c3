"""Text fields keep the text typed: run ids that YAML would read as numbers, git revision syntax."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stateaware.cli import literal_text
from tests.cli_inprocess import run_stateaware_in

WORKER = ("stateaware/kinds/process_spec.py", "stateaware/launch/worker.py")


@pytest.mark.parametrize("typed", ["1e3", "true", "1.50", "1_0"])
def test_a_run_id_that_yaml_reads_as_a_number_or_boolean_is_kept_as_typed(tmp_path, typed):
    outcome = run_stateaware_in(tmp_path, [f"run_id={typed}", "dry_run=true", "processes=1"])
    assert outcome.status == 0, outcome.stderr
    assert outcome.stdout.splitlines()[0].startswith(f"run {typed} (cohort demo,")


def test_only_what_hydra_would_not_read_as_the_text_is_quoted():
    argv = ["cohort=demo", "run_id=1e3", "+run_id=x", "run_id=null", "run_id=a,b", "processes=3", "--cfg", "job"]
    assert literal_text(argv) == [
        "cohort=demo",
        "run_id='1e3'",
        "+run_id=x",
        "run_id=null",  # null still means the default run id
        "run_id=a,b",  # a sweep stays a sweep
        "processes=3",  # not a text field
        "--cfg",
        "job",
    ]
    assert literal_text(["compare_to=HEAD~3", "out=it's^"]) == ["compare_to='HEAD~3'", 'out="it\'s^"']


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def repository(tmp_path, monkeypatch) -> Path:
    """A git repository of three commits whose trees a ``compare_to`` accepts; the code's repository."""
    import stateaware.launch.pair as pair

    root = Path(pair.__file__).resolve().parents[2]
    repo = tmp_path / "repo"
    for name in (*(f"{p}/__init__.py" for p in ("stateaware", "cohorts", "analysis")), *WORKER):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes((root / name).read_bytes())
    (repo / "conf" / "cohort").mkdir(parents=True)
    (repo / "conf" / "cohort" / "demo.yaml").write_bytes((root / "conf" / "cohort" / "demo.yaml").read_bytes())
    _git(repo, "init", "-q")
    for i in range(3):
        (repo / "stateaware" / "version.py").write_text(f"VERSION = {i}\n")
        _git(repo, "add", ".")
        _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", f"version {i}")
    monkeypatch.setattr(pair, "_repository", lambda: repo)
    return repo


@pytest.mark.parametrize(("revision", "version"), [("HEAD~1", 1), ("HEAD^", 1), ("HEAD~2", 0), ("main^", 1)])
def test_compare_to_takes_git_revision_syntax(tmp_path, repository, revision, version):
    _git(repository, "branch", "-M", "main")
    outcome = run_stateaware_in(
        tmp_path, [f"compare_to={revision}", "launcher=local", "dry_run=true", "processes=1", "run_id=r"]
    )
    assert outcome.status == 0, outcome.stderr
    commit = _git(repository, "rev-parse", revision)
    exported = tmp_path / "parent" / "out" / ".compare" / commit[:16]
    assert (exported / "stateaware" / "version.py").read_text() == f"VERSION = {version}\n"
    assert [line.split(" (")[0] for line in outcome.stdout.splitlines() if line.startswith("run ")] == [
        "run r-a",
        "run r-b",
    ]
