"""From a composed config to finished processes: plan, resume, launch, summarise.

The launcher knows process specs, executors and record files — never what a cohort
computes. It drives submitit itself rather than handing it the whole array, because
submitit's local executor would start every job at once and hide the GPU:

- ``inline``: submitit's DebugExecutor, in this process, one after another (debugging);
- ``local``: submitit's LocalExecutor, each process a fresh interpreter, at most
  ``max_parallel`` at once (1 for timing cohorts, so timed processes never share cores
  or a device), the machine's GPUs left visible;
- ``slurm``: submitit's SlurmExecutor, job arrays of the cluster's ``MaxArraySize``,
  ``array_parallelism`` at once (``stateaware.launch.slurm``).

A failed process never stops the others; a full disk stops the queue (nothing more can be
recorded), and the summary names the processes that did not start. Resume is by records,
not by memory: a process counts as done only if its latest ``processes`` row says
``completed`` and none of its parts is damaged. Resume never trusts a part it cannot read:
a damaged or foreign part makes its process count as not completed, and
``quarantine_damaged`` moves it aside before the relaunch writes it again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import submitit
from tqdm import tqdm

from stateaware.config import ConfigError
from stateaware.hardware import visible_gpus
from stateaware.kinds import load_kind, report_sections, user_code
from stateaware.launch.bootstrap import FromSnapshot, RequeueableFromSnapshot
from stateaware.launch.collect import collect
from stateaware.launch.slurm import run_array, slurm_executor
from stateaware.launch.snapshot import started_clean, take_snapshot
from stateaware.launch.spec import ProcessSpec
from stateaware.launch.worker import (
    ProcessResult,
    attempts_so_far,
    record_status,
    run_one_process,
    run_or_raise,
    status_row,
)
from stateaware.records.run_scan import DAMAGED, damaged_parts, latest_statuses, quarantine_run, run_state
from stateaware.records.write_paths import writable
from stateaware.records.writer import DiskFullError, as_disk_full, disk_full
from stateaware.run_spec import RunSpec
from stateaware.text import index_ranges

__all__ = [
    "RunPlan",
    "Summary",
    "plan_run",
    "latest_statuses",
    "damaged_parts",
    "run_state",
    "quarantine_damaged",
    "launch",
]


@dataclass(frozen=True)
class RunPlan:
    """The processes of one run, and which of them still need to run."""

    run_id: str
    cohort: str
    source_hash: str
    out: Path
    specs: tuple[ProcessSpec, ...]
    statuses: dict[int, str]  # latest recorded status per process index, if any
    report_sections: tuple[str, ...] = ()  # the kind's REPORT, recorded in the runs row

    @property
    def pending(self) -> list[ProcessSpec]:
        return [s for s in self.specs if self.statuses.get(s.process_index) != "completed"]


@dataclass
class Summary:
    run_id: str
    cohort: str
    results: list[ProcessResult] = field(default_factory=list)
    skipped: int = 0  # already completed in an earlier launch
    submitted: list[str] = field(default_factory=list)  # Slurm job ids in flight (launcher=slurm)
    disk_full: str = ""  # the one-line message of the first full-disk error; the queue stopped there
    not_started: list[int] = field(default_factory=list)  # process indices left in the queue by it

    @property
    def counts(self) -> Counter:
        return Counter(r.status for r in self.results)

    @property
    def unsuccessful(self) -> list[ProcessResult]:
        return sorted((r for r in self.results if r.status != "completed"), key=lambda r: r.process_index)

    @property
    def exit_code(self) -> int:
        return 1 if self.unsuccessful or self.disk_full or self.not_started else 0


def _default_run_id(cohort: dict, processes: int, hardware: dict, launcher: str, source: str) -> str:
    """``<cohort>-<10 hex>``: same cohort, process count, hardware, launcher and code → same run.

    So re-running a command resumes it, while editing the code or the cohort starts a new
    run instead of mixing source hashes in one. The launcher's name counts: a cohort
    launched on Slurm after the same cohort ran locally is a run of its own (it would
    otherwise find the local run complete and launch nothing); its other settings and
    ``out`` do not, since they change how a run is executed, not what it measures. An
    explicit ``run_id=`` resumes that run whichever launcher made it.
    """
    identity = json.dumps(
        {"cohort": cohort, "processes": processes, "hardware": hardware, "launcher": launcher, "source_hash": source},
        sort_keys=True,
        default=str,
    )
    return f"{cohort['name']}-{hashlib.sha256(identity.encode()).hexdigest()[:10]}"


def quarantine_damaged(plan: RunPlan) -> list[str]:
    """Move every damaged part of ``plan``'s run to ``OUT/.quarantine/``; one line per part named.

    ``records.run_scan.quarantine_run`` with this run's processes: each process that had a
    damaged part first gets a ``damaged`` status row (naming the parts), recorded by the
    process's own status writer, then its parts are moved.
    """
    specs = {spec.process_index: spec for spec in plan.specs}

    def mark_damaged(index: int, message: str) -> None:
        spec = specs[index]
        row = status_row(spec, DAMAGED, attempts_so_far(spec) + 1, datetime.now(UTC), pid=os.getpid(), message=message)
        record_status(spec, row)

    return quarantine_run(plan.out, plan.cohort, plan.run_id, specs.keys(), mark_damaged)


def plan_run(run: RunSpec, source_hash: str) -> RunPlan:
    """Expand the cohort into process specs and read which ones already completed.

    The kind's ``expand`` checks what the cohort's params refer to (cells, anchors, cards);
    its ``ValueError`` becomes a ``ConfigError``, before anything launches.
    """

    cohort, hardware, processes = run.cohort_config, run.hardware, run.processes
    run_id = run.run_id or _default_run_id(cohort, processes, hardware, run.launcher.name, source_hash)
    kind = load_kind(run.kind)
    try:
        sections = report_sections(run.kind, kind)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    expand: Callable[..., list[dict]] | None = getattr(kind, "expand", None)
    try:
        per_process = expand(cohort, hardware, processes) if expand else [{} for _ in range(processes)]
    except ValueError as exc:  # a kind's expand() says what in its params is invalid
        raise ConfigError(str(exc)) from exc
    if not isinstance(per_process, list) or len(per_process) != processes:
        count = len(per_process) if isinstance(per_process, list) else type(per_process).__name__
        raise ConfigError(
            f"cohort {run.cohort!r}: expand() gave {count} process parameter sets for processes={processes}"
        )
    specs = tuple(
        ProcessSpec(
            run_id=run_id,
            cohort=run.cohort,
            kind=run.kind,
            process_index=i,
            processes=processes,
            seed=run.seed + i,
            source_hash=source_hash,
            out=str(run.out),
            launcher=run.launcher.name,
            timing=run.timing,
            hardware=hardware,
            params={**run.params, **extra},
            cpus=run.launcher.cpus,
        )
        for i, extra in enumerate(per_process)
    )
    return RunPlan(
        run_id, run.cohort, source_hash, run.out, specs, latest_statuses(run.out, run.cohort, run_id), sections
    )


def _executor(run: RunSpec, folder: Path, timing: bool, snapshot: Path | None, run_id: str) -> Any:
    launcher = run.launcher
    writable(run.out, folder)  # submitit makes it and writes its logs there
    if launcher.name == "inline":
        return submitit.DebugExecutor(folder)
    if launcher.name == "local":
        executor = submitit.LocalExecutor(folder)
        gpus = [g.index for g in visible_gpus()]
        # submitit sets CUDA_VISIBLE_DEVICES to the first gpus_per_node GPUs (none by
        # default): pass them all, so a local GPU stays visible to the processes.
        executor.update_parameters(timeout_min=launcher.timeout_min, gpus_per_node=len(gpus), visible_gpus=tuple(gpus))
        return executor
    return slurm_executor(launcher, folder, timing, snapshot, cohort=run.cohort, run_id=run_id)


def launch(run: RunSpec, plan: RunPlan, *, progress: bool = True) -> Summary:
    """Run every pending process of ``plan``; return how each ended. Never raises for a process.

    Unless ``launcher.snapshot=false`` (or ``launcher=inline``), processes import the code
    from a snapshot taken now (``stateaware.launch.snapshot``; a user's own kind
    module included), so edits made while processes wait do not change what they run.
    Raises ``SnapshotError`` before launching anything if the code changes while the
    snapshot is taken. A full disk stops the queue: ``summary.disk_full`` says where,
    ``summary.not_started`` lists what did not start. The caller holds the run's lock
    (``stateaware.records.runlock``).
    """

    summary = Summary(plan.run_id, plan.cohort, skipped=len(plan.specs) - len(plan.pending))
    pending = plan.pending
    if not pending:
        return summary
    timing = pending[0].timing
    snapshot = None
    if run.launcher.snapshot and run.launcher.name != "inline":
        try:
            snapshot = take_snapshot(plan.out, plan.source_hash, user_code=user_code(pending[0].kind), say=_say)
        except DiskFullError as exc:
            summary.disk_full, summary.not_started = str(exc), [s.process_index for s in pending]
            return summary
    executor = _executor(run, plan.out / ".submitit" / plan.run_id, timing, snapshot, plan.run_id)
    # Local processes inherit this environment (nothing of the snapshot on their path: each
    # checks it, then imports from it; stateaware.launch.bootstrap); Slurm jobs get the same
    # from their batch script instead (see slurm_executor), which a requeue re-runs.
    code = started_clean() if snapshot is not None else contextlib.nullcontext()
    bar = _progress(len(pending), plan.cohort, enabled=progress)
    with code:
        try:
            if run.launcher.name == "slurm":
                task = RequeueableFromSnapshot(str(snapshot), plan.source_hash) if snapshot else None
                summary.submitted = run_array(
                    executor,
                    pending,
                    lambda result, in_flight: _advance(bar, summary, result, running=in_flight),
                    poll_s=run.launcher.poll_s,
                    out=plan.out,
                    run_id=plan.run_id,
                    wait=run.wait,
                    task=task,
                    on_queued=lambda in_flight: _postfix(bar, summary, in_flight),
                )
            else:
                _run_throttled(
                    executor,
                    pending,
                    summary,
                    bar,
                    limit=run.launcher.parallel(timing),
                    slots=run.launcher.cpu_slots(timing),
                    inline=run.launcher.name == "inline",
                    poll_s=run.launcher.poll_s,
                    task=FromSnapshot(str(snapshot), plan.source_hash) if snapshot is not None else run_or_raise,
                )
        finally:
            bar.close()
    return summary


def launch_pair(
    run: RunSpec, plan_a: RunPlan, plan_b: RunPlan, files_b: Sequence[tuple[str, Path]], *, progress: bool = True
) -> tuple[Summary, Summary]:
    """Run the pending processes of both sides of an interleaved comparison, alternately:
    process i of A, then process i of B, one at a time (``stateaware.launch.pair``).

    Each side runs from its own code snapshot (``files_b``: side B's files, hashed as
    ``plan_b.source_hash``). One process at a time, so the two sides never share the
    machine; a full disk stops both queues. The caller holds both runs' locks.
    """

    summaries = tuple(Summary(p.run_id, p.cohort, skipped=len(p.specs) - len(p.pending)) for p in (plan_a, plan_b))
    pending = [{s.process_index: s for s in p.pending} for p in (plan_a, plan_b)]
    if not pending[0] and not pending[1]:
        return summaries[0], summaries[1]
    first = next(iter((pending[0] or pending[1]).values()))
    try:
        snapshots = (
            take_snapshot(plan_a.out, plan_a.source_hash, user_code=user_code(first.kind), say=_say),
            take_snapshot(plan_b.out, plan_b.source_hash, files=files_b, say=_say),
        )
    except DiskFullError as exc:
        for summary, left in zip(summaries, pending, strict=True):
            summary.disk_full, summary.not_started = str(exc), sorted(left)
        return summaries[0], summaries[1]
    executors = [
        _executor(run, p.out / ".submitit" / p.run_id, first.timing, snap, p.run_id)
        for p, snap in zip((plan_a, plan_b), snapshots, strict=True)
    ]
    indices = sorted({*pending[0], *pending[1]})
    order = [(side, pending[side][i]) for i in indices for side in (0, 1) if i in pending[side]]
    bar = _progress(len(order), f"{plan_a.cohort} (a/b)", enabled=progress)
    both = Summary(f"{plan_a.run_id}+{plan_b.run_id}", plan_a.cohort)
    try:
        for position, (side, spec) in enumerate(order):
            summary = summaries[side]
            if any(s.disk_full for s in summaries):  # nothing more can be recorded: start nothing else
                for which, stopped in enumerate(summaries):
                    stopped.not_started = [x.process_index for t, x in order[position:] if t == which]
                break
            with started_clean():  # the process checks its side's snapshot, then imports from it
                job = executors[side].submit(FromSnapshot(str(snapshots[side]), spec.source_hash), spec)
            _postfix(bar, both, 1)  # shown while it runs
            result = collect(job, spec)
            summary.results.append(result)
            summary.disk_full = summary.disk_full or result.disk_full
            _advance(bar, both, result, running=0)  # the bar counts both sides
    finally:
        bar.close()
    return summaries[0], summaries[1]


def _run_throttled(
    executor: Any,
    pending: list[ProcessSpec],
    summary: Summary,
    bar: Any,
    *,
    limit: int,
    slots: Sequence[tuple[int, ...]] | None = None,
    inline: bool,
    poll_s: float,
    task: Callable[[ProcessSpec], ProcessResult] = run_or_raise,
) -> None:
    """At most ``limit`` processes at once; with ``slots`` (``launcher.cpus`` cut by
    ``cpu_slots``), each starts pinned to the group fewest
    running processes hold, so processes running side by side never share a CPU. ``task``: what a
    fresh process runs (``FromSnapshot`` on a snapshot)."""
    queue = deque(pending)
    running: dict[Any, ProcessSpec] = {}
    while queue or running:
        while queue and len(running) < limit and not summary.disk_full:
            spec = queue.popleft()
            if slots:
                held = Counter(s.cpus for s in running.values())
                spec = dataclasses.replace(spec, cpus=min(slots, key=lambda slot: held[slot]))
            try:
                # A fresh process exits non-zero when it fails (run_or_raise); inline, a raising
                # job would stop in submitit's debugger.
                job = executor.submit(run_one_process if inline else task, spec)
            except OSError as exc:  # submitit could not write the job's files
                if not disk_full(exc):
                    raise
                summary.disk_full = str(as_disk_full(exc, under=Path(spec.out) / ".submitit"))
                queue.appendleft(spec)
                break
            if inline:
                _postfix(bar, summary, 1)  # shown while it runs, in this process
                _advance(bar, summary, collect(job, spec), running=0)
            else:
                running[job] = spec
        if summary.disk_full and queue:  # nothing more can be recorded: start nothing else
            summary.not_started.extend(s.process_index for s in queue)
            queue.clear()
        _postfix(bar, summary, len(running))
        finished = [job for job in running if job.done()]
        for job in finished:
            result = collect(job, running.pop(job))
            _advance(bar, summary, result, running=len(running))
        if running and not finished:
            time.sleep(poll_s)


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def _progress(total: int, cohort: str, *, enabled: bool) -> Any:
    return tqdm(
        total=total, desc=cohort, unit="proc", file=sys.stderr, disable=not enabled, mininterval=0.5, dynamic_ncols=True
    )


def _advance(bar: Any, summary: Summary, result: ProcessResult, *, running: int) -> None:
    """Count ``result`` and move the bar; ``running``: the processes still running (or, on
    Slurm, queued) after it. The counts shown move first, so the line the bar draws, the
    last one included, counts every finished process (not ``6/6 done=5 running=1``)."""
    summary.results.append(result)
    if result.disk_full and not summary.disk_full:
        summary.disk_full = result.disk_full
    _postfix(bar, summary, running, draw=False)  # update() draws it
    bar.update(1)


def _postfix(bar: Any, summary: Summary, running: int, *, draw: bool = True) -> None:
    """Show the counts ``done=… failed=… running=…``; ``draw``: redraw the line now when they
    changed (a process started), since the bar itself redraws only when one ends."""
    counts = summary.counts
    text = f"done={counts['completed']} failed={len(summary.results) - counts['completed']} running={running}"
    if text != getattr(bar, "postfix", None):  # a disabled bar has none
        bar.set_postfix_str(text, refresh=draw)


def describe(summary: Summary, plan: RunPlan) -> str:
    """The final summary: counts, and every unsuccessful process with its message."""
    counts = summary.counts
    total = len(plan.specs)
    done = summary.skipped + counts["completed"]
    lines = [
        f"{plan.cohort}: run {plan.run_id}: {done}/{total} processes completed"
        + (f" ({summary.skipped} from earlier launches)" if summary.skipped else "")
        + f"; results in {plan.out}"
    ]
    for result in summary.unsuccessful:
        first = (result.message or "").strip().splitlines()
        lines.append(
            f"  process {result.process_index} {result.status} (attempt {result.attempt}): {first[0] if first else ''}"
        )
    if summary.not_started:
        lines.append(
            f"  {len(summary.not_started)} processes not started (the disk filled up): "
            f"{index_ranges(summary.not_started)}; free some space and re-run the same command to resume"
        )
    if summary.unsuccessful and not summary.disk_full:
        lines.append(
            "  re-run the same command to retry only these; details: "
            f"python -m stateaware.analysis sql --results {plan.out} "
            '"SELECT process_index, status, exception_type, traceback '
            f"FROM processes WHERE run_id = '{plan.run_id}' AND status <> 'completed'\""
        )
    return "\n".join(lines)
