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

Exit status: 0 when every process completed, 1 when any did not, 2 for invalid input.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from stateaware.config import ConfigError, available_cohorts, register_configs, resolve_hardware, validate

__all__ = ["main", "run"]

register_configs()


def run(cfg: DictConfig, *, progress: bool = True) -> int:
    """Validate ``cfg``, then plan and launch its run; the process exit status."""
    from stateaware.launch.launcher import describe, launch, plan_run
    from stateaware.launch.manifest import collect_manifest, write_manifest
    from stateaware.launch.snapshot import SnapshotError
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

    write_manifest(plan.out, collect_manifest(cfg, plan.run_id, code, len(plan.specs)))
    pending = plan.pending
    if len(pending) < len(plan.specs):
        print(f"{plan.cohort}: resuming run {plan.run_id}: {len(plan.specs) - len(pending)} of "
              f"{len(plan.specs)} processes already completed, launching {len(pending)}", file=sys.stderr)
    try:
        summary = launch(cfg, plan, progress=progress)
    except SnapshotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not cfg.wait:
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
