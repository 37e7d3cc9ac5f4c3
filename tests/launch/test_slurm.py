"""launcher=slurm against the real single-node cluster of slurm/start_cluster.sh.

Skipped, with the reason shown, where no Slurm node is up (start one with
`slurm/start_cluster.sh`; `.ci/run` does). Every launch here is the real command in a
fresh interpreter, as a user types it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.launch.slurm_cluster import cluster_down_reason

# One small cluster: under pytest-xdist every Slurm test runs on one worker, in order.
pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm")]

# Upper bound of every wait here: each polls for its event and returns as soon as it
# happens, so the bound costs nothing on a free node; it is generous because CI machines
# are shared and a loaded node can take minutes to schedule and start a worker.
_WAIT_S = 300.0

REPO = Path(__file__).resolve().parents[2]


if cluster_down_reason():
    pytest.skip(cluster_down_reason(), allow_module_level=True)


@pytest.fixture(autouse=True)
def _cancel_what_the_test_submitted(tmp_path):
    """Cancel, by job id, whatever a test left queued (a failed assertion mid-run): not by the
    job name ``stateaware-demo``, which another run on the same cluster may share."""
    yield
    jobs = {job for path in tmp_path.rglob("submissions.json") for job in json.loads(path.read_text()).values()}
    if jobs:
        subprocess.run(["scancel", *sorted(jobs)], capture_output=True, timeout=30)


def _launch(out: Path, *overrides: str, python: str = sys.executable, wait: bool = True, cwd: Path = REPO):
    # A fixed run id: the same command resumes the same run even if the checkout is being
    # edited meanwhile (the default run id follows the source hash).
    params = "++cohort.params={" + ",".join(o.split(":", 1)[1] for o in overrides if o.startswith("param:")) + "}"
    args = [
        python,
        "-m",
        "stateaware",
        "cohort=demo",
        "cohort.kind=tests.kinds.clock",
        "launcher=slurm",
        f"out={out}",
        "run_id=slurm-test",
        "launcher.poll_s=1",
        "launcher.mem_gb=0.25",
        "launcher.cpus_per_task=1",
        params,
        *(o for o in overrides if not o.startswith("param:")),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if wait:
        return subprocess.run(args, capture_output=True, text=True, timeout=2 * _WAIT_S, env=env, cwd=cwd)
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)


def _wait_for(predicate, what: str, timeout: float = _WAIT_S):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _submissions(out: Path) -> dict[str, str]:
    files = list((out / ".submitit").glob("*/submissions.json"))
    return json.loads(files[0].read_text()) if files else {}


def _slurm_state(job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-o", "%T", "-j", job], capture_output=True, text=True).stdout.strip()
    return out


def test_a_cohort_runs_as_a_job_array_and_records_its_slurm_identity(tmp_path, sql):
    done = _launch(tmp_path, "processes=3", "param:rows:2")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = sql(
        tmp_path, "SELECT process_index, status, launcher, slurm_job_id, slurm_array_task_id FROM processes ORDER BY 1"
    )
    arrays = {r[3].split("_")[0] for r in rows}
    assert len(arrays) == 1  # one array
    assert [(r[0], r[1], r[2], r[3].split("_")[1], r[4]) for r in rows] == [
        (i, "completed", "slurm", str(i), i) for i in range(3)
    ]
    assert sql(tmp_path, "SELECT count(*) FROM timings") == [(6,)]


def _sacct(job: str, fields: str, tasks: int) -> list[list[str]]:
    """``sacct -X`` rows of array ``job``, polled until all its ``tasks`` are listed and ended (sacct lags)."""

    def ended():
        out = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-j", job, "-o", f"JobID,State,{fields}"], capture_output=True, text=True
        ).stdout
        rows = [line.split("|") for line in out.splitlines()]
        return rows if len(rows) == tasks and all(r[1] in ("COMPLETED", "FAILED") for r in rows) else None

    return sorted(_wait_for(ended, f"sacct to show every task of {job} ended"))


def test_a_failing_process_is_reported_with_its_traceback_and_the_others_complete(tmp_path, sql):
    done = _launch(tmp_path, "processes=3", "param:fail_index:1")
    assert done.returncode == 1
    assert "process 1 failed (attempt 1): deliberate failure in process 1" in done.stdout
    rows = sql(tmp_path, "SELECT process_index, status, traceback LIKE '%raise ValueError%' FROM processes ORDER BY 1")
    assert rows == [(0, "completed", None), (1, "failed", True), (2, "completed", None)]
    assert sql(tmp_path, "SELECT count(*) FROM attempts") == [(3,)]  # the failed task was not requeued
    # What a cluster user sees: the failed task FAILED with exit code 1, named after its
    # cohort and commented with its run id, and the traceback in its .err log.
    array = _submissions(tmp_path)["0"].split("_")[0]
    assert _sacct(array, "ExitCode,JobName,Comment", 3) == [
        [f"{array}_0", "COMPLETED", "0:0", "stateaware-demo", "slurm-test"],
        [f"{array}_1", "FAILED", "1:0", "stateaware-demo", "slurm-test"],
        [f"{array}_2", "COMPLETED", "0:0", "stateaware-demo", "slurm-test"],
    ]
    ((err,),) = sql(tmp_path, "SELECT stderr_path FROM processes WHERE process_index = 1")
    assert err == str(tmp_path / ".submitit" / "slurm-test" / f"{array}_1_0_log.err")
    log = Path(err).read_text()
    assert "ProcessFailed: process 1 failed (attempt 1): deliberate failure in process 1" in log
    assert "ValueError: deliberate failure in process 1" in log  # the kind's own traceback
    assert 'in run\n    raise ValueError(f"deliberate failure' in log
    assert "Traceback" not in Path(err.replace("_1_0_", "_0_0_")).read_text()


def test_status_names_each_processs_job_node_and_log_files(tmp_path):
    done = _launch(tmp_path, "processes=2", "param:fail_index:1")
    assert done.returncode == 1
    _sacct(_submissions(tmp_path)["0"].split("_")[0], "ExitCode", 2)  # sacct lags the controller: wait for it
    status = subprocess.run(
        [sys.executable, "-m", "stateaware.analysis", "status", "--results", str(tmp_path), "--format", "csv"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert status.returncode == 1, status.stderr  # not every process completed
    header, *rows = [line.split(",") for line in status.stdout.splitlines()]
    assert header[3:] == ["status", "attempt", "slurm_job_id", "slurm_state", "node", "stdout_path", "stderr_path"]
    jobs = _submissions(tmp_path)
    node = subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
    assert [r[2:6] + [r[7]] for r in rows] == [
        ["0", "completed", "1", jobs["0"], node],
        ["1", "failed", "1", jobs["1"], node],
    ]
    assert [r[6] for r in rows] == ["COMPLETED", "FAILED"]
    for row in rows:
        assert row[8].endswith(f"{row[5]}_0_log.out") and Path(row[8]).is_file()
        assert row[9].endswith(f"{row[5]}_0_log.err") and Path(row[9]).is_file()
    assert "deliberate failure in process 1" in Path(rows[1][9]).read_text()


def test_scancel_is_recorded_as_cancelled_and_a_rerun_resubmits_only_that_process(tmp_path, sql):
    out, markers = tmp_path / "out", tmp_path / "markers"
    markers.mkdir()
    command = ("processes=3", "param:sleep_s:120", "param:sleep_index:1", f"param:sleep_once_dir:'{markers}'")
    running = _launch(out, *command, wait=False)
    job = _wait_for(lambda: _submissions(out).get("1"), "the submission of process 1")
    _wait_for(lambda: (markers / "slept-1").exists(), f"job {job} to start sleeping")
    subprocess.run(["scancel", job], check=True)
    stdout, stderr = running.communicate(timeout=2 * _WAIT_S)
    assert running.returncode == 1, stdout + stderr
    assert "process 1 cancelled (attempt 1)" in stdout
    assert sql(out, "SELECT process_index, status, slurm_job_id FROM processes ORDER BY 1")[1] == (1, "cancelled", job)
    others = {p: p.stat().st_mtime_ns for p in (out / "records").rglob("*.parquet")}
    assert len(others) == 2

    again = _launch(out, *command)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2 from earlier launches" in again.stdout
    rows = sql(out, "SELECT process_index, status, attempt, slurm_job_id FROM processes ORDER BY 1")
    assert [r[:3] for r in rows] == [(0, "completed", 1), (1, "completed", 2), (2, "completed", 1)]
    assert rows[1][3] != job  # a new submission
    assert {p: p.stat().st_mtime_ns for p in others} == others  # 0 and 2 did not run again


def test_a_requeued_task_completes_without_duplicated_rows(tmp_path, sql):
    out, markers = tmp_path / "out", tmp_path / "markers"
    markers.mkdir()
    running = _launch(
        out, "processes=2", "param:sleep_s:120", "param:sleep_index:1", f"param:sleep_once_dir:'{markers}'", wait=False
    )
    job = _wait_for(lambda: _submissions(out).get("1"), "the submission of process 1")
    _wait_for(lambda: (markers / "slept-1").exists(), f"job {job} to start sleeping")  # its timings are written
    subprocess.run(["scontrol", "requeue", job], check=True)
    # Slurm holds a requeued job for 120 s (BeginTime); once it is pending again, release it now.
    _wait_for(lambda: _slurm_state(job) == "PENDING", f"job {job} to be pending again")
    subprocess.run(["scontrol", "update", f"jobid={job}", "starttime=now"], check=True)
    stdout, stderr = running.communicate(timeout=2 * _WAIT_S)
    assert running.returncode == 0, stdout + stderr
    assert sql(out, "SELECT process_index, status, attempt FROM processes ORDER BY 1") == [
        (0, "completed", 1),
        (1, "completed", 2),
    ]
    # The killed attempt is on record too: the next attempt of the same job wrote it, from sacct -D.
    attempts = sql(
        out, "SELECT status, attempt, slurm_job_id, exception_message FROM attempts WHERE process_index = 1 ORDER BY 2"
    )
    assert [a[:3] for a in attempts] == [("requeued", 1, job), ("completed", 2, job)]
    assert attempts[0][3].startswith("Slurm requeued this attempt (sacct: REQUEUED")
    assert sql(out, "SELECT process_index, count(*) FROM timings GROUP BY 1 ORDER BY 1") == [(0, 3), (1, 3)]
    restart = json.loads(sql(out, "SELECT detail FROM records WHERE process_index = 1")[0][0])["env"][
        "SLURM_RESTART_COUNT"
    ]
    assert restart == "1"


@pytest.mark.parametrize(("asked", "flag"), [("gpus_per_node=1", "--gpus-per-node=1"), ("gres=gpu:1", "--gres=gpu:1")])
def test_a_gpu_request_is_scheduled_through_gres(tmp_path, sql, asked, flag):
    done = _launch(tmp_path, "processes=1", f"launcher.{asked}")
    assert done.returncode == 0, done.stdout + done.stderr
    env = json.loads(sql(tmp_path, "SELECT detail FROM records")[0][0])["env"]
    assert env["SLURM_JOB_GPUS"] == "0" or env["CUDA_VISIBLE_DEVICES"] == "0", env
    (script,) = (tmp_path / ".submitit" / "slurm-test").glob("*_submission.sh")
    assert f"#SBATCH {flag}" in script.read_text().splitlines()


def _nested_venv(venv: Path) -> Path:
    """A venv that sees exactly the packages this test's interpreter sees, and nothing else.

    Not ``--system-site-packages``: from a venv's interpreter that adds the *base*
    interpreter's site-packages, not this venv's, so on a machine whose base Python has
    nothing installed the jobs could not import hydra, submitit or torch. Instead a
    ``.pth`` file lists this interpreter's own site directories. Without pip: the
    editable install below runs this interpreter's pip against it, offline
    (``--no-build-isolation`` builds with the setuptools this environment already has).
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    sites = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    (Path(purelib) / "_outer_environment.pth").write_text("\n".join(sites) + "\n")
    return venv


def test_code_edited_after_submission_does_not_change_what_queued_jobs_run(tmp_path, sql):
    # A private editable install of a copy of the project, so editing it cannot disturb
    # the other tests: the user's checkout, a venv, a queued cohort, then an edit.
    copy = tmp_path / "checkout"
    shutil.copytree(
        REPO,
        copy,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "results", "__pycache__", "*.egg-info", ".hypothesis", ".pytest_cache"
        ),
    )
    venv = _nested_venv(tmp_path / "venv")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-e",
            str(copy),
        ],
        check=True,
        capture_output=True,
    )
    out, markers = tmp_path / "out", tmp_path / "markers"
    markers.mkdir()
    # Process 0 holds the single slot (array_parallelism=1) while the edit happens.
    running = _launch(
        out,
        "processes=2",
        "launcher.array_parallelism=1",
        "param:sleep_s:8",
        "param:sleep_index:0",
        f"param:sleep_once_dir:'{markers}'",
        python=str(venv / "bin" / "python"),
        wait=False,
        cwd=copy,
    )
    _wait_for(lambda: (markers / "slept-0").exists(), "process 0 to start")
    worker = copy / "stateaware" / "launch" / "worker.py"  # what every queued process runs first
    worker.write_text(worker.read_text() + "\nraise RuntimeError('edited after submission')\n")
    stdout, stderr = running.communicate(timeout=2 * _WAIT_S)
    assert running.returncode == 0, stdout + stderr
    hashes = sql(out, "SELECT DISTINCT source_hash FROM processes")
    assert len(hashes) == 1
    assert sql(out, "SELECT count(*) FROM processes WHERE status = 'completed'") == [(2,)]


def test_a_users_own_kind_runs_under_slurm_from_its_folder(tmp_path, sql):
    # examples/custom_cohort copied outside the repository: the kind module lives only in
    # the user's folder, so the Slurm workers can import it only from the run's snapshot.
    from tests.cohorts.test_custom_cohort import EXAMPLE, _outside_env

    folder = tmp_path / "custom_cohort"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__", "results"))
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "stateaware",
            "--config-dir",
            "conf",
            "cohort=prefix_sums",
            "launcher=slurm",
            f"out={out}",
            "processes=2",
            "hardware=cpu",
            "launcher.poll_s=1",
            "launcher.mem_gb=0.25",
            "launcher.cpus_per_task=1",
            "cohort.params.length=500",
            "cohort.params.warmup=1",
            "cohort.params.steps=2",
        ],
        cwd=folder,
        env=_outside_env(),
        capture_output=True,
        text=True,
        timeout=2 * _WAIT_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = sql(out, "SELECT process_index, status, launcher FROM processes ORDER BY 1")
    assert rows == [(0, "completed", "slurm"), (1, "completed", "slurm")]
    assert sql(out, "SELECT method, count(*) FROM timings WHERE NOT warmup GROUP BY 1 ORDER BY 1") == [
        ("numpy", 4),
        ("python", 4),
    ]
    (code,) = {h for (h,) in sql(out, "SELECT DISTINCT source_hash FROM processes")}
    assert (out / ".snapshots" / code[:16] / "prefix_sums.py").read_bytes() == (folder / "prefix_sums.py").read_bytes()
