"""A cohort larger than the cluster's MaxArraySize, on the real local Slurm of slurm/start_cluster.sh.

The test cluster sets ``MaxArraySize=4`` (slurm/start_cluster.sh), so the 10 processes
of the ``noop`` cohort become three arrays (4, 4, 2) in CI time: each task is a fresh
interpreter, so the size sets the test's time, and three arrays, the last one shorter,
are the shape the split must get right. ``STATEAWARE_SLURM_PROCESSES=300`` runs the same
test on 300 (75 arrays, several minutes on 2 cores). ``sacct`` and
``squeue`` are shims on ``PATH`` that log each call before running the real command, so
the test counts how often the launcher asked the controller while it waited.

Skipped, with the reason shown, where no Slurm node is up (`.ci/run` starts one).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stateaware.launch.slurm import MAX_SACCT_INTERVAL_S, array_limits
from tests.launch.slurm_cluster import cluster_down_reason

# One small cluster: under pytest-xdist every Slurm test runs on one worker, in order.
pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm")]

REPO = Path(__file__).resolve().parents[2]
#: 10 in CI; the environment variable runs the same test at another size (300 for a large cohort).
PROCESSES = int(os.environ.get("STATEAWARE_SLURM_PROCESSES", "10"))


if cluster_down_reason():
    pytest.skip(cluster_down_reason(), allow_module_level=True)


def _shims(folder: Path, log: Path) -> Path:
    """``sacct`` and ``squeue`` that append their name to ``log``, then run the real one."""
    folder.mkdir()
    for name in ("sacct", "squeue"):
        real = shutil.which(name)
        assert real is not None
        shim = folder / name
        shim.write_text(f'#!/bin/sh\necho {name} >> "{log}"\nexec "{real}" "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return folder


def test_a_cohort_past_max_array_size_runs_as_several_arrays_with_bounded_polling(tmp_path, sql):
    limits = array_limits()
    assert limits.max_array_size == 4, "slurm/start_cluster.sh sets MaxArraySize=4 for this test (run it again)"
    out, log = tmp_path / "out", tmp_path / "calls.log"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PATH": f"{_shims(tmp_path / 'bin', log)}{os.pathsep}{os.environ['PATH']}",
    }
    command = [
        sys.executable,
        "-m",
        "stateaware",
        "cohort=noop",
        f"processes={PROCESSES}",
        "launcher=slurm",
        f"out={out}",
        "run_id=noop-arrays",
        "launcher.poll_s=1",
        "launcher.mem_gb=0.25",
        "launcher.cpus_per_task=1",
    ]
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=300 + 2 * PROCESSES)
    finally:
        subprocess.run(["scancel", "--name=stateaware-noop"], capture_output=True, timeout=30)
    waited = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr

    rows = sql(out, "SELECT process_index, status, attempt, slurm_job_id FROM attempts ORDER BY 1")
    assert [r[:3] for r in rows] == [(i, "completed", 1) for i in range(PROCESSES)]  # every process once
    arrays: dict[str, list[int]] = {}
    for *_, job in rows:
        array, _, task = job.partition("_")
        arrays.setdefault(array, []).append(int(task))
    size = limits.max_array_size  # one array per MaxArraySize processes, the last one shorter
    split = [list(range(min(size, PROCESSES - start))) for start in range(0, PROCESSES, size)]
    assert sorted(map(sorted, arrays.values()), key=len, reverse=True) == split
    # Polling: one sacct call for every job at once, spaced from poll_s doubling up to
    # MAX_SACCT_INTERVAL_S (1, 2, 4, 8, 15, 15, ... s): at most 5 + waited / 15 calls,
    # however many tasks; squeue only to confirm a job sacct says ended without a result.
    calls = log.read_text().split() if log.exists() else []
    bound = 5 + waited / MAX_SACCT_INTERVAL_S
    sacct, squeue = calls.count("sacct"), calls.count("squeue")
    print(f"{PROCESSES} processes in {waited:.1f} s: {sacct} sacct, {squeue} squeue calls (bound {bound:.1f})")
    assert sacct <= bound
    assert squeue <= sacct
