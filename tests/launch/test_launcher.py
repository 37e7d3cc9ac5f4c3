"""The launcher: fresh processes, throttling, failures, lost processes, resume, drift."""

from __future__ import annotations

import itertools
import json
import os

import pytest

from stateaware.cli import run


def _clock(compose, out, *extra, **params):
    body = ",".join(f"{k}:{v}" for k, v in {"sleep_s": 0.0, "rows": 3, **params}.items())
    return compose("cohort=demo", "cohort.kind=tests.kinds.clock", f"++cohort.params={{{body}}}", f"out={out}", *extra)


def test_inline_runs_every_process_in_this_process(compose, tmp_path, sql):
    cfg = _clock(compose, tmp_path, "launcher=inline", "processes=3")
    assert run(cfg, progress=False) == 0
    rows = sql(tmp_path, "SELECT process_index, status, pid, attempt FROM processes ORDER BY 1")
    assert rows == [(i, "completed", os.getpid(), 1) for i in range(3)]
    assert sql(tmp_path, "SELECT count(*) FROM timings")[0][0] == 9


def test_local_runs_each_process_in_a_fresh_interpreter(compose, tmp_path, sql):
    cfg = _clock(compose, tmp_path, "processes=4", "launcher.max_parallel=2")
    assert run(cfg, progress=False) == 0
    pids = [p for (p,) in sql(tmp_path, "SELECT pid FROM processes")]
    assert len(pids) == 4 and len(set(pids)) == 4 and os.getpid() not in pids
    # The detail column carries the pid the kind itself saw.
    seen = {json.loads(d)["pid"] for (d,) in sql(tmp_path, "SELECT detail FROM records")}
    assert seen == set(pids)


def test_timing_cohorts_run_one_process_at_a_time(compose, tmp_path, sql):
    cfg = _clock(compose, tmp_path, "processes=3", "cohort.timing=true", sleep_s=0.4)
    assert run(cfg, progress=False) == 0
    spans = sorted(
        (json.loads(d)["started"], json.loads(d)["ended"]) for (d,) in sql(tmp_path, "SELECT detail FROM records")
    )
    assert len(spans) == 3
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end, f"timed processes overlapped: {spans}"


def test_a_failed_process_does_not_stop_the_others(compose, tmp_path, sql, capsys):
    cfg = _clock(compose, tmp_path, "processes=3", fail_index=1)
    assert run(cfg, progress=False) == 1
    rows = sql(
        tmp_path, "SELECT process_index, status, exception_type, exception_message, traceback FROM processes ORDER BY 1"
    )
    assert [(r[0], r[1]) for r in rows] == [(0, "completed"), (1, "failed"), (2, "completed")]
    assert rows[1][2] == "ValueError" and rows[1][3] == "deliberate failure in process 1"
    assert "clock.py" in rows[1][4] and "raise ValueError" in rows[1][4]
    out = capsys.readouterr().out
    assert "process 1 failed (attempt 1): deliberate failure in process 1" in out


@pytest.mark.slow
def test_resume_after_a_killed_process_reruns_only_it_and_duplicates_nothing(compose, tmp_path, sql):
    out, markers = tmp_path / "out", tmp_path / "markers"
    markers.mkdir()
    cfg = _clock(compose, out, "processes=3", die_index=1, marker_dir=str(markers))
    assert run(cfg, progress=False) == 1
    first = sql(out, "SELECT process_index, status, attempt FROM processes ORDER BY 1")
    assert first == [(0, "completed", 1), (1, "lost", 1), (2, "completed", 1)]
    kept = {p: p.stat().st_mtime_ns for p in (out / "timings").rglob("p00000[02]-*.parquet")}
    assert len(kept) == 2

    assert run(cfg, progress=False) == 0
    assert sql(out, "SELECT process_index, status, attempt FROM processes ORDER BY 1") == [
        (0, "completed", 1),
        (1, "completed", 2),
        (2, "completed", 1),
    ]
    assert sql(out, "SELECT count(*) FROM attempts") == [(4,)]
    assert {p: p.stat().st_mtime_ns for p in kept} == kept  # the others did not run again
    # Process 1 wrote its timings before dying and again on retry: still 3 rows, not 6.
    assert sql(out, "SELECT process_index, count(*) FROM timings GROUP BY 1 ORDER BY 1") == [(0, 3), (1, 3), (2, 3)]
    assert sql(out, "SELECT count(*) FROM records") == [(3,)]
    assert sql(out, "SELECT launches FROM runs") == [(2,)]


def test_a_fresh_run_id_is_one_override_away(compose, tmp_path, sql):
    assert run(_clock(compose, tmp_path, "processes=2"), progress=False) == 0
    assert run(_clock(compose, tmp_path, "processes=2", "run_id=second"), progress=False) == 0
    runs = sql(tmp_path, "SELECT DISTINCT run_id FROM processes ORDER BY 1")
    assert len(runs) == 2 and ("second",) in runs


def test_source_drift_is_refused(tmp_path, sql):
    from stateaware.launch.spec import ProcessSpec
    from stateaware.launch.worker import run_one_process

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
        hardware={"name": "cpu", "scale": 1.0},
    )
    result = run_one_process(spec)
    assert result.status == "source_drift"
    assert sql(tmp_path, "SELECT status, exception_message LIKE 'source drift:%' FROM processes") == [
        ("source_drift", True)
    ]
    assert sql(tmp_path, "SELECT count(*) FROM timings") == [(0,)]  # the kind never ran


def test_dry_run_launches_nothing(compose, tmp_path, capsys):
    cfg = _clock(compose, tmp_path, "processes=2", "dry_run=true")
    assert run(cfg, progress=False) == 0
    printed = capsys.readouterr().out
    assert "2 of 2 processes would launch" in printed
    assert not (tmp_path / "processes").exists()


@pytest.mark.parametrize(
    "override, field, allowed",
    [
        ("processes=0", "processes=0", "an integer in [1, 100,000]"),
        ("+cohort.params.budget_gib=-1", "cohort.params.budget_gib=-1", "non-negative size:"),
        ("+cohort.params.budget='-3GiB'", "cohort.params.budget='-3GiB'", "budgets are non-negative"),
        ("launcher.max_parallel=0", "launcher.max_parallel=0", "an integer in [1, 100,000] (or null)"),
        ("wait=false", "wait=False", "unless launcher=slurm"),
        ("cohort.kind=no_such_kind", "cohort.kind='no_such_kind'", "no module"),
    ],
)
def test_bad_input_fails_before_launch_naming_the_field(compose, tmp_path, capsys, override, field, allowed):
    cfg = compose("cohort=demo", f"out={tmp_path / 'out'}", override)
    assert run(cfg, progress=False) == 2
    err = capsys.readouterr().err
    assert field in err and allowed in err
    assert not (tmp_path / "out" / "processes").exists()


def test_unwritable_out_is_refused(compose, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert run(compose("cohort=demo", f"out={blocker / 'sub'}"), progress=False) == 2
    assert f"invalid out='{blocker / 'sub'}'" in capsys.readouterr().err
