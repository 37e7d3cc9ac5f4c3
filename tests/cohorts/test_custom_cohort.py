"""Users' own cohort kinds: examples/custom_cohort from a copy outside the repository, dotted
kinds in the working directory, missing kinds, and drift of a user's kind refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stateaware.cli import run

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "custom_cohort"


def _outside_env() -> dict[str, str]:
    """The environment of a user's shell: the installed package, no path into this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH", "HYDRA_FULL_ERROR")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _stateaware(cwd: Path, *args: str, module: str = "stateaware", script: bool = False) -> subprocess.CompletedProcess:
    """``python -m <module> ARGS`` run in ``cwd``, or with ``script`` the installed ``stateaware`` command."""
    command = [str(Path(sys.executable).with_name("stateaware"))] if script else [sys.executable, "-m", module]
    return subprocess.run([*command, *args], cwd=cwd, env=_outside_env(), capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_example_runs_from_a_copy_outside_the_repository_in_fresh_workers(tmp_path, sql):
    folder = tmp_path / "custom_cohort"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__", "results"))
    out = tmp_path / "out"
    done = _stateaware(
        folder,
        "--config-dir",
        "conf",
        "cohort=prefix_sums",
        f"out={out}",
        "processes=3",
        "hardware=cpu",
        "cohort.params.length=2000",
        "cohort.params.warmup=2",
        "cohort.params.steps=5",
    )
    assert done.returncode == 0, done.stderr
    assert "3/3 processes completed" in done.stdout

    assert sql(out, "SELECT process_index, status, attempt FROM processes ORDER BY 1") == [
        (i, "completed", 1) for i in range(3)
    ]
    pids = {p for (p,) in sql(out, "SELECT pid FROM processes")}
    assert len(pids) == 3 and os.getpid() not in pids  # three fresh interpreters
    # 3 processes x 2 methods x (2 warm-ups + 5 measured steps), both clocks on every row.
    assert sql(
        out,
        "SELECT method, warmup, count(*), count(step_ms), count(cpu_ms), count(peak_allocated_bytes) "
        "FROM timings GROUP BY 1, 2 ORDER BY 1, 2",
    ) == [
        ("numpy", False, 15, 15, 15, 15),
        ("numpy", True, 6, 6, 6, 6),
        ("python", False, 15, 15, 15, 15),
        ("python", True, 6, 6, 6, 6),
    ]
    assert sql(out, "SELECT method, outcome, max_error, count(*) FROM records GROUP BY ALL ORDER BY 1") == [
        ("numpy", "match", 0.0, 3),
        ("python", "match", 0.0, 3),
    ]
    # The workers ran the snapshot's copy of the user's kind, and its bytes are in the hash.
    (code,) = {h for (h,) in sql(out, "SELECT DISTINCT source_hash FROM processes")}
    snapshot = out / ".snapshots" / code[:16]
    assert (snapshot / "prefix_sums.py").read_bytes() == (folder / "prefix_sums.py").read_bytes()

    report = _stateaware(folder, "report", "--results", str(out), module="stateaware.analysis")
    assert report.returncode == 0, report.stderr
    assert sql(out, "SELECT cohort, comparison, numerator, denominator, metric, clock, processes FROM comparisons") == [
        ("prefix_sums", "numpy/python step time", "numpy", "python", "cpu_ms", "cpu", 3)
    ]
    text = (out / "report" / "report.md").read_text()
    assert "| prefix_sums |" in text and "complete (3 of 3 processes)" in text
    # Its section, found by the recorded kind (the generic one: the kind declares no REPORT).
    section = text.split("## prefix_sums (cohort kind `prefix_sums`)\n", 1)[1].split("\n## ", 1)[0]
    assert "| numpy | 3 | 15 |" in section and "| python | 3 | 15 |" in section  # processes, measured steps
    assert "| numpy/python step time | cpu |" in section


def _write_kind(root: Path, module: str, body: str, *, packages: bool = True) -> Path:
    """Write ``module`` (dotted) under ``root``; ``packages``: with ``__init__.py`` files."""
    parts = module.split(".")
    folder = root.joinpath(*parts[:-1])
    folder.mkdir(parents=True, exist_ok=True)
    if packages:
        for i in range(1, len(parts)):
            (root.joinpath(*parts[:i]) / "__init__.py").touch()
    path = folder / f"{parts[-1]}.py"
    path.write_text(textwrap.dedent(body))
    return path


_WHERE_KIND = """\
    import json, os, sys

    def run(spec, writer):
        writer.write("records", [{"method": "where", "outcome": "match", "seed": spec.seed,
                                  "detail": json.dumps({"file": __file__, "pid": os.getpid()})}], part="main")
"""


def _cohort(conf: Path, name: str, kind: str, **extra: object) -> None:
    (conf / "cohort").mkdir(parents=True, exist_ok=True)
    lines = [
        f"name: {name}",
        f"kind: {kind}",
        "timing: false",
        "processes: 2",
        "seed: 0",
        "params: {}",
        *(f"{k}: {v}" for k, v in extra.items()),
    ]
    (conf / "cohort" / f"{name}.yaml").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    "packages, script", [(True, False), (False, False), (True, True)], ids=["package", "namespace", "package-script"]
)
def test_a_kind_under_a_dotted_path_in_the_working_directory_runs_in_fresh_workers(tmp_path, sql, packages, script):
    import json

    live = _write_kind(tmp_path, "mylab.kinds.where", _WHERE_KIND, packages=packages)
    _cohort(tmp_path / "conf", "dotted", "mylab.kinds.where")
    out = tmp_path / "out"
    done = _stateaware(tmp_path, "--config-dir", "conf", "cohort=dotted", f"out={out}", "hardware=cpu", script=script)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(d) for (d,) in sql(out, "SELECT detail FROM records ORDER BY process_index")]
    assert len(rows) == 2 and len({r["pid"] for r in rows}) == 2
    (code,) = {h for (h,) in sql(out, "SELECT DISTINCT source_hash FROM processes")}
    copy = out / ".snapshots" / code[:16] / "mylab" / "kinds" / "where.py"
    assert [r["file"] for r in rows] == [str(copy)] * 2  # the snapshot's copy, never the live file
    assert copy.read_bytes() == live.read_bytes()


def test_a_missing_kind_fails_at_submission_with_one_line(tmp_path):
    _write_kind(tmp_path, "mylab.kinds.where", _WHERE_KIND)
    _cohort(tmp_path / "conf", "dotted", "mylab.kinds.nowhere")
    out = tmp_path / "out"
    done = _stateaware(tmp_path, "--config-dir", "conf", "cohort=dotted", f"out={out}", "hardware=cpu")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(
        "error: cohort.kind='mylab.kinds.nowhere' (cohort 'dotted'): cohort kind 'mylab.kinds.nowhere': "
        "no module 'mylab.kinds.nowhere' (a module of stateaware.cohorts, or one importable from the current "
        f"directory {tmp_path} or PYTHONPATH)"
    ), done.stderr
    assert not (out / "processes").exists()  # nothing launched


_EDITING_KIND = """\
    # process 0 edits a file before process 1 starts: the user's live module, or the copy it runs from
    from pathlib import Path

    def run(spec, writer):
        if spec.process_index == 0:
            target = Path(__file__) if spec.params["edit"] == "running copy" else Path(spec.params["live"])
            target.write_text(target.read_text() + "# edited while the run was queued\\n")
        writer.write("records", [{"method": "edit", "outcome": "match", "seed": spec.seed}], part="main")
"""


@pytest.mark.parametrize(
    "snapshot, edit, second",
    [
        ("false", "live file", "source_drift"),  # workers import the live file: the edit is drift
        ("true", "live file", "completed"),  # workers import the snapshot: the live edit cannot reach them
        ("true", "running copy", "source_drift"),  # the snapshot's copy itself was edited: drift
    ],
)
def test_a_user_kind_edited_before_a_worker_starts_is_refused(
    compose, tmp_path, sql, monkeypatch, snapshot, edit, second
):
    name = f"userkind_{tmp_path.name.replace('-', '_')}"  # one module name per test: the launcher imports it
    live = _write_kind(tmp_path, name, _EDITING_KIND)
    monkeypatch.chdir(tmp_path)  # local workers start here, and -m puts it on their path
    monkeypatch.syspath_prepend(str(tmp_path))  # as `python -m stateaware` run from here would
    monkeypatch.delitem(sys.modules, name, raising=False)
    out = tmp_path / "out"
    cfg = compose(
        "cohort=demo",
        f"cohort.kind={name}",
        f"++cohort.params={{edit:'{edit}',live:'{live}'}}",
        f"out={out}",
        "processes=2",
        "launcher.max_parallel=1",
        f"launcher.snapshot={snapshot}",
    )
    assert run(cfg, progress=False) == (0 if second == "completed" else 1)
    rows = sql(out, "SELECT process_index, status, exception_message FROM processes ORDER BY 1")
    assert [(i, s) for i, s, _ in rows] == [(0, "completed"), (1, second)]
    if second == "source_drift":
        assert rows[1][2].count("\n") == 0 and rows[1][2].startswith(
            # checked against the snapshot before anything of it runs, or (no snapshot) by the worker
            ("source drift: the code snapshot ", "source drift: the launcher hashed the code as ")
        )
        assert sql(out, "SELECT process_index FROM records") == [(0,)]  # the drifted process ran nothing


def test_without_a_cohort_the_error_lists_the_config_dirs_cohorts_too(tmp_path):
    _cohort(tmp_path / "conf", "mine", "mylab.kinds.where")
    done = _stateaware(tmp_path, "--config-dir", "conf", f"out={tmp_path / 'out'}")
    assert done.returncode == 2
    assert done.stderr.startswith("error: no cohort chosen: pass cohort=NAME, one of ") and done.stderr.count("\n") == 1
    listed = done.stderr.strip().rpartition("one of ")[2].split(", ")
    assert "mine" in listed and "demo" in listed and listed == sorted(listed)
