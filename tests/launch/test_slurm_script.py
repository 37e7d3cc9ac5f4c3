"""What launcher=slurm asks Slurm for, without a cluster: the sbatch scripts, the array split, the limits.

The scripts are the ones submitit writes for our executor, submitted to a fake ``sbatch``
on ``PATH`` (it only prints a job id), and compared — their ``#SBATCH`` lines — with a
golden file, as submitit's own tests compare theirs: job name, comment, array range and
throttle, the dependency that chains the arrays, GRES, CPUs, signal and time.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from stateaware.launch.slurm import (
    ArrayLimits,
    RequeueableProcess,
    _parse_states,
    parse_limits,
    run_array,
    slurm_parameters,
    split_arrays,
)
from stateaware.launch.spec import ProcessSpec
from stateaware.run_spec import RunSpec

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "sbatch_golden.txt"

# `scontrol show config` as Slurm 22.05 prints it (abridged).
SCONTROL = """Configuration data as of 2026-12-02T14:00:00
AccountingStorageBackupHost = (null)
MaxArraySize            = 20
MaxDBDMsgs              = 20008
MaxJobCount             = 45
MaxJobId                = 67043328
MaxMemPerNode           = UNLIMITED
"""


def _specs(out: Path, count: int) -> list[ProcessSpec]:
    return [
        ProcessSpec("demo-0123456789", "demo", "noop", i, count, i, "h" * 64, str(out), "slurm", False)
        for i in range(count)
    ]


def _fake_sbatch(folder: Path) -> Path:
    """A ``sbatch`` that numbers its submissions from 41 and submits nothing, and an ``srun`` never run."""
    folder.mkdir()
    script = folder / "sbatch"
    script.write_text(
        "#!/bin/sh\n"
        f'n=$(cat "{folder}/count" 2>/dev/null || echo 41)\n'
        f'echo $((n + 1)) > "{folder}/count"\n'
        'echo "Submitted batch job $n"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    # submitit's SlurmExecutor refuses to start where no `srun` is on PATH (a machine without
    # Slurm); the scripts only name it, and nothing here runs it.
    srun = folder / "srun"
    srun.write_text('#!/bin/sh\necho "srun: not a cluster (a test fake)" >&2\nexit 1\n')
    srun.chmod(srun.stat().st_mode | stat.S_IXUSR)
    return folder


def test_the_sbatch_scripts_of_a_split_cohort_match_the_golden_file(compose, tmp_path, monkeypatch):
    import submitit

    launcher = RunSpec.from_config(
        compose(
            "cohort=noop",
            "launcher=slurm",
            f"out={tmp_path / 'out'}",
            "launcher.timeout_min=30",
            "launcher.cpus_per_task=2",
            "launcher.gres=gpu:1",
            "launcher.array_parallelism=4",
        )
    ).launcher
    out = tmp_path / "out"
    folder = out / ".submitit" / "demo-0123456789"
    monkeypatch.setenv("PATH", f"{_fake_sbatch(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}")
    executor = submitit.SlurmExecutor(folder=folder)
    executor.update_parameters(**slurm_parameters(launcher, False, cohort="noop", run_id="demo-0123456789"))

    ids = run_array(
        executor,
        _specs(out, 25),
        lambda result, in_flight: None,
        poll_s=1,
        out=out,
        run_id="demo-0123456789",
        wait=False,
        limits=ArrayLimits(max_array_size=20, max_job_count=10000),
    )

    assert ids == [f"41_{i}" for i in range(20)] + [f"42_{i}" for i in range(5)]
    lines = []
    for job in ("41", "42"):
        script = (folder / f"{job}_submission.sh").read_text()
        lines += [f"# array {job}"] + [
            line.replace(str(tmp_path), "TMP") for line in script.splitlines() if line.startswith("#SBATCH")
        ]
    assert "\n".join(lines) + "\n" == GOLDEN.read_text()


def test_the_job_name_follows_the_config_and_the_comment_is_the_run_id(compose, tmp_path):
    spec = RunSpec.from_config(compose("cohort=noop", "launcher=slurm", f"out={tmp_path}", "launcher.job_name=mylab-1"))
    params = slurm_parameters(spec.launcher, False, cohort="noop", run_id="noop-abc")
    assert (params["job_name"], params["comment"]) == ("mylab-1", "noop-abc")


def test_a_job_name_that_breaks_the_name_rule_is_refused(compose, tmp_path):
    from stateaware.config import ConfigError

    with pytest.raises(ConfigError, match="launcher.job_name"):
        RunSpec.from_config(compose("cohort=noop", "launcher=slurm", f"out={tmp_path}", "launcher.job_name='a b'"))


def test_the_limits_are_read_from_scontrol_show_config():
    assert parse_limits(SCONTROL) == ArrayLimits(max_array_size=20, max_job_count=45)
    assert parse_limits("") == ArrayLimits(max_array_size=1001, max_job_count=10000)  # Slurm's defaults


@pytest.mark.parametrize(
    ("count", "limits", "sizes"),
    [
        (50, ArrayLimits(20, 10000), [20, 20, 10]),
        (40, ArrayLimits(20, 10000), [20, 20]),
        (7, ArrayLimits(20, 10000), [7]),
        (10, ArrayLimits(1001, 4), [4, 4, 2]),  # MaxJobCount smaller than an array
        (0, ArrayLimits(20, 10000), []),
    ],
)
def test_a_cohort_is_split_into_arrays_the_cluster_accepts(tmp_path, count, limits, sizes):
    arrays = split_arrays(_specs(tmp_path, count), limits)
    assert [len(a) for a in arrays] == sizes
    assert [s.process_index for a in arrays for s in a] == list(range(count))  # each once, in order


def test_sacct_lines_of_pending_array_tasks_name_each_task():
    text = "41_0|COMPLETED\n41_1|FAILED\n41_[2-4,7%4]|PENDING\n42|CANCELLED by 0\n"
    assert _parse_states(text) == {
        "41_0": "COMPLETED",
        "41_1": "FAILED",
        "41_2": "PENDING",
        "41_3": "PENDING",
        "41_4": "PENDING",
        "41_7": "PENDING",
        "42": "CANCELLED",
    }


def test_an_attempt_that_recorded_its_end_is_not_requeued():
    process = RequeueableProcess()
    assert process.checkpoint("spec") is not None  # mid-run: submitit requeues it with the same call
    process._ended = True
    assert process.checkpoint("spec") is None


def test_no_more_tasks_than_max_job_count_are_queued_at_once(tmp_path, monkeypatch, capsys):
    import submitit

    out = tmp_path / "out"
    monkeypatch.setenv("PATH", f"{_fake_sbatch(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}")
    executor = submitit.SlurmExecutor(folder=out / ".submitit" / "demo-0123456789")

    ids = run_array(
        executor,
        _specs(out, 50),
        lambda result, in_flight: None,
        poll_s=1,
        out=out,
        run_id="demo-0123456789",
        wait=False,
        limits=ArrayLimits(max_array_size=20, max_job_count=45),
    )

    assert ids == [f"41_{i}" for i in range(20)] + [f"42_{i}" for i in range(20)]  # a third array would pass 45
    assert capsys.readouterr().err == "10 processes wait for room in the queue (MaxJobCount=45)\n"
