"""Nothing of a code snapshot runs before the worker has verified it.

Files planted in a running run's snapshot — modules Python runs at start-up, files that
shadow a standard or installed module, and the snapshot's own copy of the modules the
launcher's pickled callable names — never execute: every later worker starts with nothing
of the snapshot importable, checks it, and refuses with ``source_drift``.
"""

from __future__ import annotations

from pathlib import Path

import stateaware.launch.launcher as launcher

# Each plant writes a marker file named after itself when it runs.
_STARTUP = ["sitecustomize.py", "usercustomize.py", "json.py", "submitit/__init__.py", "pyarrow/__init__.py"]
# The snapshot's copies of what unpickling a job imports: code appended to them runs on import.
_OURS = ["stateaware/__init__.py", "stateaware/launch/__init__.py", "stateaware/launch/worker.py"]


def _marker(folder: Path, name: str) -> str:
    path = folder / (name.replace("/", "_") + ".ran")
    return f"\nopen({str(path)!r}, 'w').write('ran')\n"


def _plant(snapshot: Path, markers: Path) -> None:
    for name in _STARTUP:
        (snapshot / name).parent.mkdir(exist_ok=True)
        (snapshot / name).write_text(_marker(markers, name))
    for name in _OURS:
        with (snapshot / name).open("a") as file:
            file.write(_marker(markers, name))


def _compose_demo(compose, out: Path, processes: int):
    return compose(
        "cohort=demo",
        "cohort.kind=tests.kinds.clock",
        "++cohort.params={rows:1}",
        f"out={out}",
        f"processes={processes}",
    )


def test_code_planted_in_a_running_snapshot_never_runs_and_later_workers_refuse(compose, tmp_path, monkeypatch, sql):
    from stateaware.cli import run

    out, markers = tmp_path / "out", tmp_path / "markers"
    markers.mkdir()
    taken = launcher.take_snapshot

    def then_planted(*args, **kwargs):  # planted after the launcher checked it, before any worker starts
        folder = taken(*args, **kwargs)
        _plant(folder, markers)
        return folder

    monkeypatch.setattr(launcher, "take_snapshot", then_planted)
    assert run(_compose_demo(compose, out, 2), progress=False) == 1

    assert sorted(p.name for p in markers.iterdir()) == []
    rows = sql(out, "SELECT process_index, status, exception_message FROM processes ORDER BY 1")
    assert [(index, status) for index, status, _ in rows] == [(0, "source_drift"), (1, "source_drift")]
    folder = next((out / ".snapshots").iterdir())
    for _, _, message in rows:
        assert message.startswith(f"source drift: the code snapshot {folder} is not the one the launcher made: ")
    assert not (out / "timings").exists()  # the kind never ran

    monkeypatch.setattr(launcher, "take_snapshot", taken)
    assert run(_compose_demo(compose, out, 2), progress=False) == 0  # the launcher rebuilds it; the run completes
    assert sorted(p.name for p in markers.iterdir()) == []


def test_a_verified_snapshot_is_what_the_worker_imports_after_the_installed_check(compose, tmp_path, sql):
    import stateaware.launch.bootstrap as bootstrap
    from stateaware.cli import run

    out = tmp_path / "out"
    cfg = compose(
        "cohort=demo",
        "cohort.kind=tests.kinds.clock",
        "++cohort.params={rows:1,fail_index:0}",
        f"out={out}",
        "processes=1",
    )
    assert run(cfg, progress=False) == 1
    folder = next((out / ".snapshots").iterdir())
    ((status, traceback),) = sql(out, "SELECT status, traceback FROM processes")
    # The worker's code and the kind ran from the snapshot, not from the test's checkout ...
    assert status == "failed"
    assert f'File "{folder}/stateaware/launch/worker.py"' in traceback
    assert f'File "{folder}/tests/kinds/clock.py"' in traceback
    # ... called by the installed package's check, never by the snapshot's copy of it.
    (err,) = (out / ".submitit").rglob("*_log.err")
    assert f'File "{bootstrap.__file__}"' in err.read_text()
    assert f'File "{folder}/stateaware/launch/bootstrap.py"' not in err.read_text()


def test_the_worker_environment_puts_nothing_of_a_snapshot_on_the_path(tmp_path, monkeypatch):
    from stateaware.launch.snapshot import worker_environment

    snapshot = tmp_path / ".snapshots" / "0123456789abcdef"
    monkeypatch.setenv("PYTHONPATH", f"{snapshot}:/kept")
    assert worker_environment() == {"PYTHONPATH": "/kept", "PYTHONSAFEPATH": "1", "PYTHONPYCACHEPREFIX": ""}


def test_a_slurm_task_is_requeued_as_the_check_then_never_once_ended_or_refused(tmp_path):
    import pickle

    from stateaware.launch.bootstrap import RequeueableFromSnapshot

    task = RequeueableFromSnapshot(str(tmp_path), "0" * 64)
    again = task.checkpoint("spec")  # mid-run: submitit requeues the check itself, with the same call
    assert again is not None and again.function is task and again.args == ("spec",)
    copy = pickle.loads(pickle.dumps(task))
    assert (copy.folder, copy.source_hash, copy._task) == (str(tmp_path), "0" * 64, None)

    class Ended:
        _ended = True

    task._task = Ended()  # the snapshot's task recorded its end: a failed or drifted task stays so
    assert task.checkpoint("spec") is None
    refused = RequeueableFromSnapshot(str(tmp_path), "0" * 64)
    refused._refused = True
    assert refused.checkpoint("spec") is None
