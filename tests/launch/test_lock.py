"""One launcher per run: a second launch of a live run is refused, a dead one's lock taken over;
a worker never removes another live writer's temporary file; attempt numbers are never reused."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from datetime import UTC

import pytest

from tests.conftest import REPO


def _launch(out, *extra, sleep_s=0.0, processes=2):
    """A real `python -m stateaware` launch of the clock kind, as a subprocess."""
    args = [
        sys.executable,
        "-m",
        "stateaware",
        "cohort=demo",
        "cohort.kind=tests.kinds.clock",
        f"++cohort.params={{sleep_s:{sleep_s},rows:3}}",
        f"processes={processes}",
        f"out={out}",
        "run_id=shared",
        "launcher.max_parallel=1",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)


def _writing(out) -> bool:
    """Whether the launch has begun writing parts. os.walk, not Path.rglob: the launcher renames
    its code snapshot's temporary folder while we look, and rglob raises on a folder gone
    mid-walk where os.walk skips it."""
    return (out / "records").exists() or any(
        name.startswith("p") and name.endswith("-m.parquet") for _, _, names in os.walk(out) for name in names
    )


def _lock(out):
    return out / "runs" / "cohort=demo" / "run_id=shared" / ".launcher.lock"


@pytest.mark.slow
def test_a_second_launch_of_a_live_run_exits_2_naming_the_holder(tmp_path, sql):
    out = tmp_path / "out"
    first = _launch(out, sleep_s=3.0)
    deadline = time.time() + 120
    while time.time() < deadline and not _writing(out):
        assert first.poll() is None, first.communicate()
        time.sleep(0.05)
    holder = json.loads(_lock(out).read_text())
    assert holder["pid"] == first.pid and holder["host"] == socket.gethostname()

    second = _launch(out, sleep_s=3.0)
    stdout, stderr = second.communicate(timeout=300)
    assert second.returncode == 2, (stdout, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr
    assert lines[0].startswith("error: run shared (cohort demo) is being launched by ")
    assert f"pid {first.pid} on host {socket.gethostname()} since {holder['since']}" in lines[0]
    assert "run_id=NAME" in lines[0] and "re-run this command to resume" in lines[0]

    stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, (stdout, stderr)
    # Nothing ran twice, nothing was overwritten: one attempt per process, numbered 1.
    assert sql(out, "SELECT process_index, attempt, status FROM attempts ORDER BY 1") == [
        (0, 1, "completed"),
        (1, 1, "completed"),
    ]
    assert sql(out, "SELECT process_index, count(*) FROM timings GROUP BY 1 ORDER BY 1") == [(0, 3), (1, 3)]
    assert _lock(out).read_text() == ""  # released: it names no holder

    again = _launch(out)
    stdout, stderr = again.communicate(timeout=300)
    assert again.returncode == 0, (stdout, stderr)
    assert "2/2 processes completed (2 from earlier launches)" in stdout


def test_the_lock_of_a_launcher_that_died_is_taken_over(tmp_path, sql):
    out = tmp_path / "out"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _lock(out).parent.mkdir(parents=True)
    _lock(out).write_text(json.dumps({"host": "gone-host", "pid": dead.pid, "since": "2026-01-01T00:00:00+00:00"}))
    proc = _launch(out)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, (stdout, stderr)
    assert (
        f"run shared: taking over the lock of pid {dead.pid} on host gone-host "
        "since 2026-01-01T00:00:00+00:00, which is gone" in stderr
    )
    assert sql(out, "SELECT count(*) FROM processes WHERE status = 'completed'") == [(2,)]


def test_cleanup_removes_only_temporaries_of_dead_writers(tmp_path):
    from stateaware.launch.spec import ProcessSpec
    from stateaware.launch.worker import run_one_process
    from stateaware.records.writer import temporary_path

    folder = tmp_path / "timings" / "cohort=c" / "run_id=r"
    folder.mkdir(parents=True)
    live = temporary_path(folder / "p000000-x.parquet")  # this test process: a live writer
    dead_proc = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_proc.wait()
    dead = folder / live.name.replace(f"-{os.getpid()}", f"-{dead_proc.pid}")
    legacy = folder / f".p000000-y.parquet.tmp-{dead_proc.pid}"  # the name older versions wrote
    other_host = folder / f".p000000-z.parquet.tmp-elsewhere-{dead_proc.pid}"
    for path in (live, dead, legacy, other_host):
        path.write_bytes(b"partial")
    spec = ProcessSpec(
        run_id="r",
        cohort="c",
        kind="tests.kinds.clock",
        process_index=0,
        processes=1,
        seed=0,
        source_hash="0" * 64,
        out=str(tmp_path),
        launcher="inline",
        timing=False,
    )
    run_one_process(spec)
    assert live.exists() and other_host.exists()
    assert not dead.exists() and not legacy.exists()


def test_a_status_row_never_overwrites_another_attempts_row(tmp_path, sql):
    from datetime import datetime

    from stateaware.launch.spec import ProcessSpec
    from stateaware.launch.worker import attempts_so_far, record_status, status_row

    spec = ProcessSpec(
        run_id="r",
        cohort="c",
        kind="tests.kinds.clock",
        process_index=4,
        processes=5,
        seed=0,
        source_hash="h",
        out=str(tmp_path),
        launcher="local",
        timing=False,
    )
    now = datetime.now(UTC)
    # Two writers that both counted no earlier attempts (the race of two launches).
    first = status_row(spec, "failed", 1, now, message="first")
    second = status_row(spec, "completed", 1, now, message="second")
    assert record_status(spec, first) == 1
    assert record_status(spec, second) == 2
    assert sql(tmp_path, "SELECT attempt, status, exception_message FROM attempts ORDER BY 1") == [
        (1, "failed", "first"),
        (2, "completed", "second"),
    ]
    assert attempts_so_far(spec) == 2
    # Numbers come from what is recorded, not a count: a gap (a row moved aside) is never refilled.
    (tmp_path / "processes" / "cohort=c" / "run_id=r" / "p000004-a001.parquet").unlink()
    assert attempts_so_far(spec) == 2
