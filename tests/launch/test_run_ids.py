"""Default run ids: the same command resumes its run; another launcher gets a run of its own."""

from __future__ import annotations

from stateaware.launch.launcher import plan_run
from stateaware.run_spec import RunSpec


def _run_id(compose, tmp_path, *overrides: str) -> str:
    spec = RunSpec.from_config(compose("cohort=noop", f"out={tmp_path}", "processes=2", *overrides))
    return plan_run(spec, "0" * 64).run_id


def test_the_default_run_id_distinguishes_launchers_and_only_their_names(compose, tmp_path):
    local = _run_id(compose, tmp_path, "launcher=local")
    assert local == _run_id(compose, tmp_path, "launcher=local", "launcher.poll_s=1")  # how, not what: same run
    others = {_run_id(compose, tmp_path, f"launcher={name}") for name in ("inline", "slurm")}
    assert len(others | {local}) == 3
    assert all(run_id.startswith("noop-") for run_id in others | {local})


def test_an_explicit_run_id_is_the_same_run_on_every_launcher(compose, tmp_path):
    ids = {_run_id(compose, tmp_path, f"launcher={name}", "run_id=mine") for name in ("inline", "local", "slurm")}
    assert ids == {"mine"}
