"""The progress display counts right: a running process shows as running, locally and on Slurm.

The launcher drives fake submitit jobs that end when the test says; each job, while it is
polled, reads the line the real tqdm bar has drawn so far — the display's state, never a time.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from types import SimpleNamespace

from tqdm import tqdm

import stateaware.launch.launcher as launcher
from stateaware.launch.slurm import DEFAULT_LIMITS
from stateaware.launch.worker import ProcessResult
from stateaware.run_spec import RunSpec

COUNTS = re.compile(r"(\d+)/(\d+) .*done=(\d+) failed=(\d+) running=(\d+)")


class _Display:
    """A real tqdm bar drawing every change into a string; ``now`` is the line shown."""

    def __init__(self) -> None:
        self.stream = io.StringIO()

    def bar(self, total: int, cohort: str, *, enabled: bool) -> tqdm:
        return tqdm(total=total, desc=cohort, file=self.stream, mininterval=0, ncols=200)

    def now(self) -> tuple[int, ...] | None:
        found = COUNTS.search(self.stream.getvalue().split("\r")[-1])
        return tuple(int(n) for n in found.groups()) if found else None


class _Job:
    """A submitit job that ends after ``polls`` polls, noting the display at each poll before it ends."""

    def __init__(self, spec, polls: int, display: _Display, seen: list) -> None:
        self.spec, self.polls, self.display, self.seen = spec, polls, display, seen
        self.job_id = f"41_{spec.process_index}"
        self.paths = SimpleNamespace(result_pickle=SimpleNamespace(exists=self.done))

    def done(self) -> bool:
        self.polls -= 1
        if self.polls >= 0:
            self.seen.append((self.spec.process_index, self.display.now()))
        return self.polls < 0

    def result(self) -> ProcessResult:
        status = "failed" if self.spec.process_index == 1 else "completed"
        return ProcessResult(self.spec.process_index, status, 1, 1)


class _Executor:
    def __init__(self, display: _Display, seen: list, folder: Path) -> None:
        self.display, self.seen, self.folder, self.parameters = display, seen, folder, {}

    def submit(self, task, spec) -> _Job:  # local: one poll or two before it ends
        return _Job(spec, 1 + spec.process_index % 2, self.display, self.seen)

    def map_array(self, task, specs) -> list[_Job]:  # Slurm: all queued, ending in index order
        return [_Job(spec, spec.process_index + 1, self.display, self.seen) for spec in specs]


def _launch(compose, tmp_path, monkeypatch, name: str) -> tuple[list, _Display]:
    spec = RunSpec.from_config(
        compose(
            "cohort=demo",
            "cohort.timing=true",  # one process at a time on one machine
            f"launcher={name}",
            "launcher.snapshot=false",
            "processes=3",
            f"out={tmp_path}",
        )
    )
    plan = launcher.plan_run(spec, "0" * 64)
    display, seen = _Display(), []
    monkeypatch.setattr(launcher, "_progress", display.bar)
    monkeypatch.setattr(launcher, "_executor", lambda run, folder, *a: _Executor(display, seen, folder))
    # No cluster is asked: its limits are Slurm's defaults, and every job in flight is running.
    monkeypatch.setattr("stateaware.launch.slurm.array_limits", lambda: DEFAULT_LIMITS)
    monkeypatch.setattr("stateaware.launch.slurm.slurm_states", lambda ids: dict.fromkeys(ids, "RUNNING"))
    summary = launcher.launch(spec, plan)
    assert [r.status for r in summary.results] == ["completed", "failed", "completed"]
    return seen, display


def test_a_timing_cohort_shows_its_one_process_running(compose, tmp_path, monkeypatch):
    seen, display = _launch(compose, tmp_path, monkeypatch, "local")
    # (index polled, (finished, total, done, failed, running) on screen while it ran)
    assert seen == [
        (0, (0, 3, 0, 0, 1)),
        (1, (1, 3, 1, 0, 1)),
        (1, (1, 3, 1, 0, 1)),
        (2, (2, 3, 1, 1, 1)),
    ]
    assert display.now() == (3, 3, 2, 1, 0)


def test_a_slurm_launch_keeps_its_counts_queued_and_finished(compose, tmp_path, monkeypatch):
    monkeypatch.setattr("stateaware.launch.slurm.time.sleep", lambda s: None)
    seen, display = _launch(compose, tmp_path, monkeypatch, "slurm")
    # Polled in rounds, every job in flight each round; a round's results are counted after it.
    assert seen == [
        (0, (0, 3, 0, 0, 3)),
        (1, (0, 3, 0, 0, 3)),
        (2, (0, 3, 0, 0, 3)),
        (1, (0, 3, 0, 0, 3)),
        (2, (0, 3, 0, 0, 3)),
        (2, (1, 3, 1, 0, 2)),
    ]
    assert display.now() == (3, 3, 2, 1, 0)
