"""One launch of a run, start to end: lock, quarantine, statuses, manifest, launch, describe.

The launch sequence is the same for a single run and for an interleaved pair
(``compare_to=``): take the run's lock (one launcher per run, ``records.runlock``), move its
damaged parts aside (``records.run_scan``), read its statuses again under the lock, write its
manifest, launch what is pending and describe the outcome. ``launch_single`` and
``launch_compared`` differ only in how many runs they hold and how they start the
processes; both share ``_prepare``. Errors propagate: the command line
(``stateaware.cli``) turns each into its one line and exit status.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable, Iterable

from omegaconf import OmegaConf

from stateaware.launch.interrupt import workers_stop_with_launcher
from stateaware.launch.launcher import RunPlan, Summary, describe, launch, launch_pair, plan_run, quarantine_damaged
from stateaware.launch.manifest import collect_manifest, write_manifest
from stateaware.launch.pair import other_code, pair_id, run_ids
from stateaware.records.run_scan import latest_statuses
from stateaware.records.runlock import run_lock
from stateaware.records.writer import DiskFullError
from stateaware.run_spec import RunSpec

__all__ = ["dry_run_table", "launch_compared", "launch_single"]


def launch_single(
    spec: RunSpec,
    plan: RunPlan,
    code: str,
    *,
    progress: bool = True,
    after_launch: Callable[[RunSpec, RunPlan, Summary], Iterable[str]] = lambda spec, plan, summary: (),
) -> int:
    """Launch ``plan``'s pending processes under the run's lock; the exit status (0 all completed,
    1 any did not or the disk filled up). ``RunLocked`` when another live launcher holds it.

    ``after_launch``: lines printed after the summary of a launch that waited for its
    processes (the command line passes the stability summary and the kind's own, which are
    the analysis' to compute)."""
    with run_lock(plan.out, plan.cohort, plan.run_id, on_takeover=_say):
        try:
            plan = _prepare(spec, plan, code)
        except DiskFullError as exc:  # nothing started: the summary says so
            summary = Summary(
                plan.run_id,
                plan.cohort,
                skipped=len(plan.specs) - len(plan.pending),
                disk_full=str(exc),
                not_started=[s.process_index for s in plan.pending],
            )
        else:
            pending = plan.pending
            if len(pending) < len(plan.specs):
                print(
                    f"{plan.cohort}: resuming run {plan.run_id}: {len(plan.specs) - len(pending)} of "
                    f"{len(plan.specs)} processes already completed, launching {len(pending)}",
                    file=sys.stderr,
                )
            with workers_stop_with_launcher():
                summary = launch(spec, plan, progress=progress)
    if summary.disk_full:
        _say(f"error: {summary.disk_full}")
    if not spec.wait and not summary.disk_full:
        print(
            f"{plan.cohort}: run {plan.run_id}: {len(summary.submitted)} processes queued or running on Slurm "
            f"(jobs {', '.join(summary.submitted)}); follow them with: python -m stateaware.analysis status "
            f"--results {plan.out}; re-run this command to collect and resubmit what is missing"
        )
        return 0
    print(describe(summary, plan))
    for line in after_launch(spec, plan, summary):
        print(line)
    return summary.exit_code


def launch_compared(spec: RunSpec, plan: RunPlan, code: str, *, progress: bool = True) -> int:
    """``compare_to=``: the cohort on this code (side A) and on the code named (side B), their
    processes alternating (``launch.pair``), both runs locked for the whole launch; then how
    to compare them. The exit status is the worse side's."""
    other = other_code(str(spec.compare_to), spec.out, spec.cohort)
    base = plan.run_id
    pair = pair_id(base, code, other.source_hash)
    sides = [
        plan_run(dataclasses.replace(spec, run_id=run_id), source)
        for run_id, source in zip(run_ids(base), (code, other.source_hash), strict=True)
    ]
    if spec.dry_run:
        for side in sides:
            print(dry_run_table(side))
        return 0
    with contextlib.ExitStack() as locks:
        for side in sides:
            locks.enter_context(run_lock(side.out, side.cohort, side.run_id, on_takeover=_say))
        sides = [_prepare(spec, side, side.source_hash, pair=(pair, "ab"[i])) for i, side in enumerate(sides)]
        with workers_stop_with_launcher():
            summaries = launch_pair(spec, sides[0], sides[1], other.files, progress=progress)
    for summary, side in zip(summaries, sides, strict=True):
        print(describe(summary, side))
    print(
        f"{spec.cohort}: interleaved comparison {pair}: side a = this code ({code[:12]}), side b = "
        f"{other.label} ({other.source_hash[:12]}); compare them with: python -m stateaware.analysis compare "
        f"{sides[0].run_id} {sides[1].run_id} --results {spec.out}"
    )
    return max(s.exit_code for s in summaries)


def _prepare(spec: RunSpec, plan: RunPlan, code: str, *, pair: tuple[str, str] | None = None) -> RunPlan:
    """Under the run's lock: move damaged parts aside, read the statuses again, write the manifest.

    The records are read again under the lock: a launch that just ended may have completed
    processes, and damaged parts are moved aside only by the run's one launcher. Returns the
    plan with the statuses read now. ``DiskFullError`` when the manifest cannot be written.
    """
    for line in quarantine_damaged(plan):
        _say(line)
    plan = dataclasses.replace(plan, statuses=latest_statuses(plan.out, plan.cohort, plan.run_id))
    manifest = collect_manifest(
        spec, plan.run_id, code, len(plan.specs), report_sections=plan.report_sections, pair=pair
    )
    write_manifest(plan.out, manifest, say=_say)
    return plan


def dry_run_table(plan: RunPlan) -> str:
    """The processes that would launch (``dry_run=true``): parameters shared by every process once, then per
    process only the ones that vary (its seed, method, cell...)."""
    every = [spec.params for spec in plan.specs]
    shared = {k: v for k, v in every[0].items() if all(k in p and p[k] == v for p in every)} if every else {}

    def flat(params: dict) -> str:
        return OmegaConf.to_yaml(OmegaConf.create(params), sort_keys=True).strip().replace("\n", "; ") if params else ""

    lines = [
        f"run {plan.run_id} (cohort {plan.cohort}, source {plan.source_hash[:12]}, out {plan.out})",
        f"shared params: {', '.join(sorted(shared)) or '(none)'}",
        f"{'index':>5}  {'seed':>8}  {'state':<10}  params",
    ]
    for spec in plan.specs:
        state = plan.statuses.get(spec.process_index, "pending")
        action = "skip" if state == "completed" else "launch"
        own = flat({k: v for k, v in spec.params.items() if k not in shared})
        shown = f"{action} ({state})" if state != "pending" else action
        lines.append(f"{spec.process_index:>5}  {spec.seed:>8}  {shown:<10}  {own}")
    lines.append(f"{len(plan.pending)} of {len(plan.specs)} processes would launch")
    return "\n".join(lines)


def _say(line: str) -> None:
    print(line, file=sys.stderr)
