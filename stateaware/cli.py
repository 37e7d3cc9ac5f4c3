"""The entry point: ``python -m stateaware cohort=NAME [key=value ...]``.

Hydra composes the config (``--cfg job`` prints it, ``--help`` lists the groups), then
:func:`run` validates it, writes the run manifest and launches the pending processes.
Useful overrides::

    processes=3              fewer or more processes than the cohort's default
    out=DIR                  results directory (default: results/)
    launcher=inline|local|slurm   launcher.max_parallel=1
    hardware=cpu|h100        default auto: h100 on a CUDA device with >= 80 GiB, else cpu
    run_id=NAME              a fresh run instead of resuming the default one
    dry_run=true             print the process specs that would launch, and exit

Exit status: 0 when every process completed, 1 when any did not (or the disk filled up:
one line names the file and the space it needed), 2 for invalid input or a run that
another launcher is running now (one launcher per run: see stateaware.launch.runlock).
"""

from __future__ import annotations

import dataclasses
import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from stateaware.config import ConfigError, available_cohorts, register_configs, resolve_hardware, validate

__all__ = ["main", "run"]

register_configs()


def run(cfg: DictConfig, *, progress: bool = True) -> int:
    """Validate ``cfg``, then plan and launch its run; the process exit status."""
    from stateaware.launch.launcher import plan_run
    from stateaware.launch.runlock import RunLocked, run_lock
    from stateaware.launch.snapshot import SnapshotError
    from stateaware.records.writer import as_disk_full, disk_full
    from stateaware.source import source_hash

    if OmegaConf.is_missing(cfg, "cohort"):
        print(f"error: no cohort chosen: pass cohort=NAME, one of {', '.join(available_cohorts())}", file=sys.stderr)
        return 2
    try:
        cfg = resolve_hardware(cfg)
        validate(cfg)
        code = source_hash()
        plan = plan_run(cfg, code)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    if cfg.dry_run:
        print(_dry_run_table(plan))
        return 0
    try:
        with run_lock(plan.out, plan.cohort, plan.run_id, on_takeover=_say):
            return _launch_locked(cfg, plan, code, progress)
    except RunLocked as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SnapshotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if not disk_full(exc):
            raise
        print(f"error: {as_disk_full(exc)}", file=sys.stderr)
        return 1


def _launch_locked(cfg: DictConfig, plan, code: str, progress: bool) -> int:
    """Launch ``plan`` while this process holds the run's lock: nothing else launches it now."""
    from stateaware.launch.launcher import Summary, describe, latest_statuses, launch, quarantine_damaged
    from stateaware.launch.manifest import collect_manifest, write_manifest
    from stateaware.records.writer import DiskFullError

    try:
        # Read the records again under the lock: a launch that just ended may have completed
        # processes, and damaged parts are moved aside only by the run's one launcher.
        for line in quarantine_damaged(plan):
            _say(line)
        plan = dataclasses.replace(plan, statuses=latest_statuses(plan.out, plan.cohort, plan.run_id))
        write_manifest(plan.out, collect_manifest(cfg, plan.run_id, code, len(plan.specs)), say=_say)
    except DiskFullError as exc:  # nothing started: the summary says so
        summary = Summary(plan.run_id, plan.cohort, skipped=len(plan.specs) - len(plan.pending), disk_full=str(exc),
                          not_started=[s.process_index for s in plan.pending])
    else:
        pending = plan.pending
        if len(pending) < len(plan.specs):
            print(f"{plan.cohort}: resuming run {plan.run_id}: {len(plan.specs) - len(pending)} of "
                  f"{len(plan.specs)} processes already completed, launching {len(pending)}", file=sys.stderr)
        summary = launch(cfg, plan, progress=progress)
    if summary.disk_full:
        _say(f"error: {summary.disk_full}")
    if not cfg.wait and not summary.disk_full:
        print(f"{plan.cohort}: run {plan.run_id}: {len(summary.submitted)} processes queued or running on Slurm "
              f"(jobs {', '.join(summary.submitted)}); follow them with: python -m stateaware.analysis status "
              f"--results {plan.out}; re-run this command to collect and resubmit what is missing")
        return 0
    print(describe(summary, plan))
    if plan.specs and plan.specs[0].timing:
        from stateaware.analysis.stability import run_summary

        stable = run_summary(plan.out, plan.run_id)
        if stable:
            print(stable)
    if summary.exit_code == 0:
        from stateaware.cohorts import load_kind

        summarize = getattr(load_kind(cfg.cohort.kind), "summary", None)
        if summarize is not None:
            print(summarize(str(plan.out), plan.cohort))
    return summary.exit_code


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def _dry_run_table(plan) -> str:
    """The processes that would launch: parameters shared by every process once, then per
    process only the ones that vary (its seed, method, cell...)."""
    every = [spec.params for spec in plan.specs]
    shared = {k: v for k, v in every[0].items() if all(k in p and p[k] == v for p in every)} if every else {}

    def flat(params: dict) -> str:
        return OmegaConf.to_yaml(OmegaConf.create(params), sort_keys=True).strip().replace("\n", "; ") if params else ""

    lines = [f"run {plan.run_id} (cohort {plan.cohort}, source {plan.source_hash[:12]}, out {plan.out})",
             f"shared params: {', '.join(sorted(shared)) or '(none)'}",
             f"{'index':>5}  {'seed':>8}  {'state':<10}  params"]
    for spec in plan.specs:
        state = plan.statuses.get(spec.process_index, "pending")
        action = "skip" if state == "completed" else "launch"
        own = flat({k: v for k, v in spec.params.items() if k not in shared})
        lines.append(f"{spec.process_index:>5}  {spec.seed:>8}  {action + ' (' + state + ')' if state != 'pending' else action:<10}  {own}")
    lines.append(f"{len(plan.pending)} of {len(plan.specs)} processes would launch")
    return "\n".join(lines)


@hydra.main(version_base="1.3", config_path="pkg://stateaware.conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    code = run(cfg)
    if code:
        sys.exit(code)


def main() -> None:
    """Console entry point (``python -m stateaware`` and the ``stateaware`` script)."""
    _hydra_main()
