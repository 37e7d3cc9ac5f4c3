"""Plain submitit against the real single-node Slurm cluster of slurm/start_cluster.sh.

These tests pin down what `launcher=slurm` builds on: job arrays, failures, scancel,
scontrol requeue, a GPU request through the fake GRES, and a code snapshot taken at
submission. They use submitit directly (no stateaware launcher), so a failure here is a
cluster or submitit fact, not a launcher bug.

Skipped, with the reason shown, where `sinfo` is missing or no node of the cluster is up;
start the cluster with `sudo slurm/start_cluster.sh`.

Facts these tests rely on (measured on Slurm 22.05.8 from Debian 12, submitit 1.5):
- An array task's SLURM_JOB_ID is its own raw job id; the id submitit reports
  (`job.job_id`, "<array>_<task>") is SLURM_ARRAY_JOB_ID + "_" + SLURM_ARRAY_TASK_ID.
- sacct can lag the controller by a second or so after a job ends (it may still show the
  raw id or an old state), so states are polled until final, never read once.
- `scontrol requeue` puts the task back with BeginTime = now + 120 s (Slurm's fixed
  requeue delay); `scontrol update jobid=... starttime=now` makes it eligible at once.
- A Checkpointable task that gets submitit's SIGUSR2 (preemption, or the time limit
  minus signal_delay_s) requeues itself with `scontrol requeue`: same 120 s BeginTime.
- submitit waits `_results_timeout_s` (15 s) for the result file of a job that ended
  without one (cancelled) before raising UncompletedJobError.
- Keep `slurm_use_srun=True` (submitit's default). Without srun the worker is a child of
  the batch shell: submitit's USR2 (timeout/preemption checkpoint) never reaches it
  (sbatch --signal goes to job steps, and there are none), "B:USR2" kills the shell
  instead, and once the shell dies the worker is orphaned and, under
  proctrack/linuxproc, outlives its job. The price of srun: a cancelled or requeued task
  lingers ~7 s in COMPLETING while the step retries reporting its exit to the dead srun.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

submitit = pytest.importorskip("submitit")

# One small cluster: under pytest-xdist every Slurm test runs on one worker, in order.
pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm")]

# Upper bound for any one wait below. Every wait polls for its event and returns as soon as
# it happens (seconds on a free node), so the bound costs nothing there; it is generous
# because CI nodes are shared, and a loaded node can take minutes to schedule, start a
# Python worker and let sacct catch up — a tight bound there fails for speed, not behaviour.
_WAIT_S = 300.0
# How long a task that must be killed (scancel, requeue) sleeps: past every wait above,
# so it can only end by being killed; the executor's time limit (3 x _WAIT_S) still bounds it.
_BLOCK_S = 2 * _WAIT_S
# Small enough that two tasks fit the 2-core test node side by side (DefMemPerCPU=512M).
_MEM_GB = 0.25


# --------------------------------------------------------------------- functions run as jobs
# Module-level so cloudpickle pickles them by reference; workers import this module through
# PYTHONPATH (set to the repo root by tests/conftest.py, exported by sbatch).


def slurm_env(x: int) -> dict:
    """Return x squared with the Slurm identity the task ran under."""
    keys = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT")
    return {"square": x * x, **{k: os.environ.get(k) for k in keys}}


def fail_on_one(x: int) -> int:
    """Raise for x == 1, return x otherwise."""
    if x == 1:
        raise ValueError(f"task {x} fails on purpose")
    return x


def sleep_then_return(seconds: float) -> float:
    """Sleep, then return the seconds slept (a task long enough to be cancelled)."""
    time.sleep(seconds)
    return seconds


def block_first_attempt(marker: str, block: bool) -> dict:
    """Count attempts in `marker`; if `block`, the first attempt sleeps until killed.

    The marker lives on the shared filesystem, so the test sees when the first attempt
    runs, and a requeued attempt knows it is not the first.
    """
    path = Path(marker)
    attempts = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(attempts))
    if block and attempts == 1:
        time.sleep(_BLOCK_S)
    return {"attempts": attempts, **slurm_env(0)}


class CountAttempts(submitit.helpers.Checkpointable):
    """Checkpointable job: like block_first_attempt, but submitit requeues it itself.

    On SIGUSR2 (preemption or time limit) submitit calls `checkpoint`, which by default
    resubmits the same call, and then runs `scontrol requeue` on its own job.
    """

    def __call__(self, marker: str, block: bool) -> dict:
        return block_first_attempt(marker, block)


def gpu_env() -> dict:
    """What a task granted one (fake) GPU sees."""
    keys = ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE", "SLURM_JOB_ID")
    return {k: os.environ.get(k) for k in keys}


def read_module_value(module: str) -> tuple[str, str]:
    """Import `module` fresh from the job's working directory; return (VALUE, file)."""
    import importlib

    mod = importlib.import_module(module)
    return mod.VALUE, mod.__file__


# --------------------------------------------------------------------- cluster helpers


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=_WAIT_S).stdout


@functools.lru_cache(maxsize=1)
def _probe_cluster() -> tuple[dict | None, str]:
    """({"partition", "node"} of the default partition's up node, "") or (None, why not).

    Cached: with the controller down every `sinfo` waits for its connect to fail, and
    this would otherwise be paid once per test.
    """
    hint = "; run `sudo slurm/start_cluster.sh`"
    if shutil.which("sinfo") is None:
        return None, "Slurm not installed (no `sinfo` on PATH)" + hint
    # `scontrol ping` answers at once; `sinfo` retries a dead controller for ~9 s.
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=15)
    if ping.returncode != 0 or " is UP" not in ping.stdout:
        first = (ping.stdout.strip() or ping.stderr.strip()).splitlines()[:1]
        return None, f"Slurm cluster not up (scontrol ping: {first[0] if first else 'no answer'!r})" + hint
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%P %t %n"], capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        return None, "Slurm cluster not up (`sinfo` timed out)" + hint
    if out.returncode != 0:
        return None, f"Slurm cluster not up ({out.stderr.strip()})" + hint
    for line in out.stdout.splitlines():
        partition, state, node = line.split()
        if partition.endswith("*") and state in ("idle", "mix", "alloc", "comp", "plnd"):
            return {"partition": partition.rstrip("*"), "node": node}, ""
    return None, f"no node of the default partition is up (sinfo: {out.stdout.strip()!r})" + hint


@pytest.fixture(scope="module")
def cluster() -> dict:
    info, why_not = _probe_cluster()
    if info is None:
        pytest.skip(why_not)
    return info


@pytest.fixture
def executor(cluster, tmp_path):
    """A plain submitit Slurm executor; its jobs are cancelled at teardown (by job name)."""
    name = f"stateaware-test-{uuid.uuid4().hex[:12]}"
    ex = submitit.AutoExecutor(folder=tmp_path / "submitit" / "%j", cluster="slurm")
    ex.update_parameters(
        name=name,
        slurm_partition=cluster["partition"],
        timeout_min=int(3 * _WAIT_S / 60),  # past every wait: only a hung task reaches it
        cpus_per_task=1,
        mem_gb=_MEM_GB,
        # srun stays on (submitit's default): see the module docstring.
        slurm_use_srun=True,
    )
    yield ex
    subprocess.run(["scancel", f"--name={name}"], capture_output=True, timeout=30)


def _wait_until(what: str, predicate, timeout: float = _WAIT_S):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def _squeue_state(job_id: str) -> str:
    """State of one job or array task in the controller ('' once it has left the queue)."""
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=_WAIT_S)
    return out.stdout.strip()


def _sacct_states(array_id: str, duplicates: bool = False) -> dict[str, list[str]]:
    """{"<array>_<task>": [state of each attempt, oldest first]} from the accounting DB."""
    cmd = ["sacct", "-X", "-n", "-P", "-j", array_id, "-o", "JobID,State"]
    if duplicates:
        cmd.insert(1, "-D")
    states: dict[str, list[str]] = {}
    for line in _run(*cmd).splitlines():
        job, state = line.split("|", 1)
        states.setdefault(job, []).append(state)
    return states


def _wait_sacct(array_id: str, expected: dict[str, list[str]], duplicates: bool = False):
    """Poll sacct until it reports exactly `expected` (it lags the controller slightly)."""

    def _matches():
        got = _sacct_states(array_id, duplicates)
        _matches.last = got
        return all(got.get(k) == v for k, v in expected.items())

    _matches.last = None
    try:
        _wait_until(f"sacct -j {array_id} to show {expected}", _matches)
    except AssertionError as error:
        raise AssertionError(f"{error}; last seen {_matches.last}") from None


def _wait_done(job, timeout: float = _WAIT_S):
    _wait_until(f"job {job.job_id} to finish", lambda: job.done(force_check=True), timeout)


# --------------------------------------------------------------------- tests


def test_map_array_runs_each_task_under_slurm(executor):
    jobs = executor.map_array(slurm_env, [1, 2, 3])
    results = [job.result() for job in jobs]

    assert [r["square"] for r in results] == [1, 4, 9]
    array_id = jobs[0].job_id.split("_")[0]
    assert [job.job_id for job in jobs] == [f"{array_id}_{i}" for i in range(3)]
    for index, result in enumerate(results):
        assert result["SLURM_ARRAY_JOB_ID"] == array_id
        assert result["SLURM_ARRAY_TASK_ID"] == str(index)
        assert result["SLURM_JOB_ID"] is not None and result["SLURM_JOB_ID"].isdigit()
        assert result["SLURM_RESTART_COUNT"] is None
    # Each task is a job of its own: three distinct raw job ids.
    assert len({r["SLURM_JOB_ID"] for r in results}) == 3
    _wait_sacct(array_id, {job.job_id: ["COMPLETED"] for job in jobs})


def test_failing_task_returns_its_traceback_and_the_others_complete(executor):
    jobs = executor.map_array(fail_on_one, [0, 1, 2])
    for job in jobs:
        _wait_done(job)

    assert jobs[0].result() == 0
    assert jobs[2].result() == 2
    error = jobs[1].exception()
    assert isinstance(error, submitit.core.utils.FailedJobError)
    assert "ValueError: task 1 fails on purpose" in str(error)
    assert "in fail_on_one" in str(error)  # the worker's traceback, not a summary
    array_id = jobs[0].job_id.split("_")[0]
    _wait_sacct(
        array_id,
        {jobs[0].job_id: ["COMPLETED"], jobs[1].job_id: ["FAILED"], jobs[2].job_id: ["COMPLETED"]},
    )


def test_scancel_of_one_task_is_reported_cancelled(executor):
    jobs = executor.map_array(sleep_then_return, [_BLOCK_S, 0.1])
    _wait_until(f"{jobs[0].job_id} to run", lambda: _squeue_state(jobs[0].job_id) == "RUNNING")

    _run("scancel", jobs[0].job_id)

    assert jobs[1].result() == 0.1
    _wait_done(jobs[0])
    assert jobs[0].state.startswith("CANCELLED")  # submitit reads it from sacct: "CANCELLED by 0"
    array_id = jobs[0].job_id.split("_")[0]
    _wait_sacct(array_id, {jobs[1].job_id: ["COMPLETED"]})
    assert _sacct_states(array_id)[jobs[0].job_id][0].startswith("CANCELLED")
    # No result file: asking for the result raises instead of hanging. submitit first
    # waits _results_timeout_s (15 s) for a late result file; shorten it for the test.
    jobs[0]._results_timeout_s = 0
    with pytest.raises(submitit.core.utils.UncompletedJobError, match="CANCELLED"):
        jobs[0].result()


def test_scontrol_requeue_runs_the_task_again_to_completion(executor, tmp_path):
    markers = [str(tmp_path / "attempts_0"), str(tmp_path / "attempts_1")]
    jobs = executor.map_array(block_first_attempt, markers, [True, False])
    task = jobs[0]
    _wait_until("the first attempt to start", Path(markers[0]).exists)

    _run("scontrol", "requeue", task.job_id)
    # Slurm holds a requeued job for 120 s (BeginTime); release it now.
    _wait_until(f"{task.job_id} to be pending again", lambda: _squeue_state(task.job_id) == "PENDING")
    _run("scontrol", "update", f"jobid={task.job_id}", "starttime=now")

    result = task.result()
    assert result["attempts"] == 2
    assert result["SLURM_RESTART_COUNT"] == "1"
    assert result["SLURM_ARRAY_TASK_ID"] == "0"
    # The other task of the array ran once, untouched.
    other = jobs[1].result()
    assert (other["attempts"], other["SLURM_RESTART_COUNT"]) == (1, None)
    array_id = task.job_id.split("_")[0]
    # The accounting DB keeps both attempts: sacct -D lists the requeued one first.
    _wait_sacct(array_id, {task.job_id: ["REQUEUED", "COMPLETED"], jobs[1].job_id: ["COMPLETED"]}, duplicates=True)


def test_preempted_checkpointable_task_requeues_itself_and_completes(executor, tmp_path):
    markers = [str(tmp_path / "attempts_0"), str(tmp_path / "attempts_1")]
    jobs = executor.map_array(CountAttempts(), markers, [True, False])
    task = jobs[0]
    _wait_until("the first attempt to start", Path(markers[0]).exists)

    # What Slurm does on preemption: SIGTERM, then SIGUSR2 (submitit's own test hook;
    # with timeout=True it simulates the time limit instead, same requeue path).
    task._interrupt()
    _wait_until(f"{task.job_id} to be pending again", lambda: _squeue_state(task.job_id) == "PENDING")
    _run("scontrol", "update", f"jobid={task.job_id}", "starttime=now")

    result = task.result()
    assert (result["attempts"], result["SLURM_RESTART_COUNT"]) == (2, "1")
    other = jobs[1].result()
    assert (other["attempts"], other["SLURM_RESTART_COUNT"]) == (1, None)
    array_id = task.job_id.split("_")[0]
    _wait_sacct(array_id, {task.job_id: ["REQUEUED", "COMPLETED"], jobs[1].job_id: ["COMPLETED"]}, duplicates=True)


def test_gpus_per_node_is_scheduled_through_the_fake_gres(executor):
    executor.update_parameters(gpus_per_node=1)
    job = executor.submit(gpu_env)
    env = job.result()

    assert env["SLURM_JOB_GPUS"] == "0"
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert env["SLURM_GPUS_ON_NODE"] == "1"
    # The accounting DB records the GPU too (AccountingStorageTRES=gres/gpu); it may lag.
    alloc = _wait_until(
        f"sacct to record the allocation of {job.job_id}",
        lambda: _run("sacct", "-X", "-n", "-P", "-j", job.job_id, "-o", "AllocTRES").strip(),
        timeout=30,
    )
    assert "gres/gpu=1" in alloc.split(",")


def test_more_gpus_than_the_node_has_are_refused_at_submission(executor):
    # The GRES is enforced, not ignored: the node has one GPU.
    executor.update_parameters(gpus_per_node=2)
    refused = "Requested node configuration is not available"
    with pytest.raises(submitit.core.utils.FailedJobError, match=refused):
        executor.submit(gpu_env)


def _git(repo: Path, *args: str) -> None:
    who = {
        f"GIT_{role}_{field}": value
        for role in ("AUTHOR", "COMMITTER")
        for field, value in (("NAME", "test"), ("EMAIL", "test@localhost"))
    }
    env = {**os.environ, **who}
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env=env, timeout=30)


def test_rsync_snapshot_keeps_queued_jobs_on_the_submitted_code(executor, tmp_path, monkeypatch):
    # A repository with one module; jobs import it from their working directory.
    repo = tmp_path / "repo"
    repo.mkdir()
    module = "stateaware_snapshot_probe"
    (repo / f"{module}.py").write_text('VALUE = "as submitted"\n')
    _git(repo, "init", "-q")
    _git(repo, "add", f"{module}.py")
    _git(repo, "commit", "-q", "-m", "probe")
    monkeypatch.chdir(repo)
    # Held jobs stay queued while the file is edited, as on a busy cluster.
    executor.update_parameters(slurm_additional_parameters={"hold": True})

    snapshot = tmp_path / "snapshot"
    with submitit.helpers.RsyncSnapshot(snapshot_dir=snapshot, root_dir=repo):
        snap_job = executor.submit(read_module_value, module)
    # The control: the same job without a snapshot runs whatever the file holds at start.
    live_job = executor.submit(read_module_value, module)

    (repo / f"{module}.py").write_text('VALUE = "edited after submission"\n')
    for job in (snap_job, live_job):
        assert _squeue_state(job.job_id) == "PENDING"
        _run("scontrol", "release", job.job_id)

    assert snap_job.result() == ("as submitted", str(snapshot / f"{module}.py"))
    assert live_job.result() == ("edited after submission", str(repo / f"{module}.py"))
