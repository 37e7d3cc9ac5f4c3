"""Every attempt on record, without a cluster: the rows a requeued Slurm task's next attempt writes.

``SLURM_RESTART_COUNT`` and the task ids are set as Slurm sets them; ``sacct`` is a fake on
``PATH`` printing what ``sacct -D`` prints for a task requeued twice (the real one is
exercised by tests/launch/test_slurm.py's ``scontrol requeue`` test).
"""

from __future__ import annotations

import os
import socket
import stat
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stateaware.launch.attempts import record_requeued_attempts
from stateaware.launch.spec import ProcessSpec
from stateaware.launch.worker import attempts_so_far, record_status, status_row

# sacct -D -X -n -P -o JobID,State,Reason,NodeList,Start,End,ExitCode: oldest record first,
# the attempt running now last.
SACCT = """41_3|NODE_FAIL|None|node7|2026-12-02T10:00:00|2026-12-02T10:01:30|0:0
41_3|REQUEUED|None|node8|2026-12-02T10:03:00|2026-12-02T10:04:00|0:0
41_3|RUNNING|None|node9|2026-12-02T10:06:00|Unknown|0:0
"""


@pytest.fixture
def spec(tmp_path, monkeypatch) -> ProcessSpec:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    fake = bin_ / "sacct"
    (tmp_path / "sacct.txt").write_text(SACCT)
    fake.write_text(f'#!/bin/sh\necho "$*" >> "{tmp_path}/sacct.log"\ncat "{tmp_path}/sacct.txt"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    for key in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT", "SLURM_JOB_ID"):
        monkeypatch.delenv(key, raising=False)
    return ProcessSpec("r1", "demo", "noop", 3, 4, 3, "h" * 64, str(tmp_path / "out"), "slurm", False)


def _attempts(spec: ProcessSpec) -> list[tuple]:
    rows = [
        row
        for path in sorted(Path(spec.out, "processes").rglob("*.parquet"))
        for row in pq.read_table(path).to_pylist()
    ]
    return [(r["attempt"], r["status"], r["slurm_job_id"], r["node"]) for r in rows]


def test_each_attempt_slurm_restarted_gets_the_row_it_could_not_write(spec, monkeypatch, tmp_path):
    # Attempt 1 ran in an earlier submission (job 40_3) and was recorded lost by the launcher.
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "40")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    record_status(spec, status_row(spec, "lost", 1, datetime.now(UTC), message="died"))
    # Resubmitted as 41_3, which Slurm restarted twice: this is its third attempt.
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "41")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")

    assert record_requeued_attempts(spec) == [2, 3]

    assert _attempts(spec) == [
        (1, "lost", "40_3", socket.gethostname()),
        (2, "lost", "41_3", "node7"),  # NODE_FAIL: it did not end by a requeue
        (3, "requeued", "41_3", "node8"),
    ]
    assert attempts_so_far(spec) + 1 == 4  # the attempt running now takes the next number
    assert (
        tmp_path / "sacct.log"
    ).read_text() == "-D -X -n -P -j 41_3 -o JobID,State,Reason,NodeList,Start,End,ExitCode\n"
    rows = pq.read_table(next(Path(spec.out).rglob("p000003-a003.parquet"))).to_pylist()
    assert rows[0]["exception_message"] == (
        "Slurm requeued this attempt (sacct: REQUEUED, exit code 0:0) before it recorded a status; "
        "Slurm job 41_3 ran again (restart 2)"
    )
    assert rows[0]["wall_s"] == 60.0  # from sacct's Start and End

    assert record_requeued_attempts(spec) == []  # already recorded: a second call writes nothing


def test_a_first_attempt_and_a_process_off_slurm_record_nothing(spec, monkeypatch, tmp_path):
    assert record_requeued_attempts(spec) == []  # off Slurm
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "41")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert record_requeued_attempts(spec) == []  # the job's first attempt
    assert not (tmp_path / "sacct.log").exists()
    assert not Path(spec.out).exists()


def test_without_accounting_a_restarted_attempt_is_recorded_requeued(spec, monkeypatch, tmp_path):
    (tmp_path / "sacct.txt").write_text("")  # a cluster without slurmdbd: sacct knows nothing
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "41")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert record_requeued_attempts(spec) == [1]
    (row,) = pq.read_table(next(Path(spec.out).rglob("p000003-a001.parquet"))).to_pylist()
    assert (row["status"], row["exception_message"]) == (
        "requeued",
        "Slurm requeued this attempt (sacct gave no record) before it recorded a status; "
        "Slurm job 41_3 ran again (restart 1)",
    )
