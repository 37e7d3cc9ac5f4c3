"""How a fresh process ends, as its scheduler sees it — without a Slurm cluster.

A process that did not complete records its row, then raises (``run_or_raise``): its
interpreter exits 1 with the traceback on stderr, which is what makes a Slurm task
``FAILED`` in ``sacct`` (tests/launch/test_slurm.py checks that on the real cluster) and a
local worker's exit code non-zero. The launcher reads such a job as the process it
recorded, never as ``lost``. And the state poll works on a cluster without slurmdbd, where
``sacct`` refuses and only ``squeue`` answers.
"""

from __future__ import annotations

import os
import pickle
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import submitit
from stateaware.cohorts import user_code

from stateaware.launch.collect import collect
from stateaware.launch.slurm import slurm_states
from stateaware.launch.spec import ProcessSpec
from stateaware.launch.worker import ProcessFailed, run_or_raise
from stateaware.source import source_hash

KIND = "tests.kinds.clock"


def _spec(out: Path, index: int, **params) -> ProcessSpec:
    code = source_hash(user_code(KIND))
    return ProcessSpec("r1", "demo", KIND, index, 2, index, code, str(out), "local", False, params=params)


@pytest.mark.parametrize(("index", "exit_code"), [(0, 0), (1, 1)])
def test_a_fresh_worker_exits_non_zero_exactly_when_its_process_failed(tmp_path, index, exit_code):
    spec = _spec(tmp_path / "out", index, fail_index=1, rows=1)
    (tmp_path / "spec.pkl").write_bytes(pickle.dumps(spec))
    worker = (
        "import pickle, sys; from stateaware.launch.worker import run_or_raise; "
        "run_or_raise(pickle.load(open(sys.argv[1], 'rb')))"
    )
    done = subprocess.run([sys.executable, "-c", worker, str(tmp_path / "spec.pkl")], capture_output=True, text=True)
    assert done.returncode == exit_code
    assert ("ValueError: deliberate failure in process 1" in done.stderr) == (exit_code == 1)


@pytest.mark.parametrize(("index", "status"), [(0, "completed"), (1, "failed")])
def test_the_launcher_reads_a_local_job_that_raised_as_the_process_it_recorded(tmp_path, index, status):
    out = tmp_path / "out"
    executor = submitit.LocalExecutor(tmp_path / "submitit")
    executor.update_parameters(timeout_min=5)
    spec = _spec(out, index, fail_index=1, rows=1)
    job = executor.submit(run_or_raise, spec)
    job._process.wait(timeout=120)  # submitit's local controller; it exits 0 whatever its task did

    result = collect(job, spec)
    assert (result.process_index, result.status, result.attempt) == (index, status, 1)
    err = job.paths.stderr.read_text()
    if status == "failed":
        assert result.message == "deliberate failure in process 1"  # the row's message, not a "lost" one
        assert "ProcessFailed: process 1 failed (attempt 1): deliberate failure in process 1" in err
        assert "ValueError: deliberate failure in process 1" in err  # the kind's own traceback
    else:
        assert "Traceback" not in err
    statuses = sorted(p.name for p in (out / "processes").rglob("*.parquet"))
    assert statuses == [f"p{index:06d}-a001.parquet"]  # one row: the worker's, none from the launcher


def test_run_or_raise_raises_only_after_the_row_is_written(tmp_path):
    spec = _spec(tmp_path, 1, fail_index=1, rows=1)
    with pytest.raises(ProcessFailed) as raised:
        run_or_raise(spec)
    assert raised.value.result.status == "failed"
    assert "raise ValueError" in str(raised.value)  # the recorded traceback, in the message stderr shows
    assert [p.name for p in (tmp_path / "processes").rglob("*.parquet")] == ["p000001-a001.parquet"]


def _fake(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_states_come_from_squeue_on_a_cluster_without_accounting(tmp_path, monkeypatch):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    _fake(bin_, "sacct", 'echo "sacct: error: Slurm accounting storage is disabled" >&2\nexit 1\n')
    # squeue -r lists one line per array task; it is asked once, for both arrays.
    _fake(bin_, "squeue", f'echo "$*" >> "{tmp_path}/squeue.log"\nprintf "41_0|RUNNING\\n41_1|PENDING\\n"\n')
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")

    assert slurm_states(["41_0", "41_1", "42_0"]) == {"41_0": "RUNNING", "41_1": "PENDING"}
    assert (tmp_path / "squeue.log").read_text() == "-h -r -o %i|%T -j 41,42\n"


def test_a_job_gone_from_a_cluster_without_accounting_is_recorded_lost(tmp_path, monkeypatch):
    from stateaware.launch.slurm import ArrayLimits, run_array

    bin_ = tmp_path / "bin"
    bin_.mkdir()
    _fake(bin_, "sbatch", 'echo "Submitted batch job 41"\n')
    _fake(bin_, "sacct", "exit 1\n")  # no slurmdbd
    _fake(bin_, "squeue", f'echo squeue >> "{tmp_path}/calls.log"\n')  # the job has left the queue
    _fake(bin_, "srun", "exit 1\n")  # never run: submitit's executor looks for it on PATH
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "out"
    spec = ProcessSpec("r1", "demo", KIND, 0, 1, 0, "h" * 64, str(out), "slurm", False)
    results = []

    run_array(
        submitit.SlurmExecutor(folder=out / ".submitit" / "r1"),
        [spec],
        lambda result, in_flight: results.append(result),
        poll_s=0.5,
        out=out,
        run_id="r1",
        limits=ArrayLimits(20, 10000),
    )

    assert [(r.status, r.attempt, r.message) for r in results] == [
        ("lost", 1, "died without recording a status (Slurm no longer lists the job)")
    ]
    assert (tmp_path / "calls.log").read_text() == "squeue\nsqueue\n"  # two polls that did not list it


def test_status_names_the_log_files_as_submitit_does():
    """analysis.status spells submitit's log names itself (the analysis extra has no submitit)."""
    from pathlib import Path

    from stateaware.analysis.store.status import _logs
    from submitit.core.utils import JobPaths

    for job in ("12", "12_3"):
        paths = JobPaths(Path("/r/.submitit/run"), job_id=job, task_id=0)
        assert _logs(Path("/r"), "run", job) == (str(paths.stdout), str(paths.stderr))
