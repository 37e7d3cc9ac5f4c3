"""Slurm through submitit: one job array per launch, throttled by ``array_parallelism``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig

from stateaware.launch.spec import ProcessSpec
from stateaware.launch.worker import ProcessResult, run_one_process

__all__ = ["slurm_executor", "slurm_parameters", "run_array"]

# Our launcher field -> submitit SlurmExecutor parameter.
_FIELDS = {
    "partition": "partition",
    "account": "account",
    "qos": "qos",
    "cpus_per_task": "cpus_per_task",
    "gpus_per_node": "gpus_per_node",
    "constraint": "constraint",
    "exclusive": "exclusive",
    "array_parallelism": "array_parallelism",
}


def slurm_parameters(cfg: DictConfig, timing: bool) -> dict[str, Any]:
    """submitit SlurmExecutor parameters for ``cfg.launcher`` (unset fields left to the cluster).

    Timing cohorts default to an exclusive node per process, so timed processes never
    share a device or cores.
    """
    launcher = cfg.launcher
    params: dict[str, Any] = {"time": max(1, int(round(launcher.timeout_min)))}
    for ours, theirs in _FIELDS.items():
        if launcher[ours] is not None:
            params[theirs] = launcher[ours]
    if launcher.mem_gb is not None:
        params["mem"] = f"{int(launcher.mem_gb * 1024)}M"
    if timing and launcher.exclusive is None:
        params["exclusive"] = True
    if launcher.additional_parameters:
        params["additional_parameters"] = dict(launcher.additional_parameters)
    return params


def slurm_executor(cfg: DictConfig, folder: Path, timing: bool) -> Any:
    import submitit

    executor = submitit.SlurmExecutor(folder=folder)
    executor.update_parameters(**slurm_parameters(cfg, timing))
    return executor


def run_array(executor: Any, pending: list[ProcessSpec],
              on_result: Callable[[ProcessResult], None], *, poll_s: float) -> None:
    """Submit ``pending`` as one job array and report each process as it ends."""
    from stateaware.launch.launcher import collect

    jobs = executor.map_array(run_one_process, pending)
    running = dict(zip(jobs, pending))
    while running:
        finished = [job for job in running if job.done()]
        for job in finished:
            on_result(collect(job, running.pop(job)))
        if running and not finished:
            time.sleep(max(poll_s, 1.0))  # sacct is polled by submitit; do not hammer it
