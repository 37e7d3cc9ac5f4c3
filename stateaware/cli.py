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
one line names the file and the space it needed), 2 for invalid input (one line on stderr
naming the override and what is allowed — Hydra's own parse and composition errors
included) or a run that another launcher is running now (one launcher per run: see
stateaware.launch.runlock), 130 after Ctrl-C (re-running the same command resumes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from typing import TYPE_CHECKING

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from stateaware.config import ConfigError, register_configs

if TYPE_CHECKING:
    from stateaware.launch.launcher import RunPlan
    from stateaware.run import RunSpec

__all__ = ["main", "run"]

register_configs()


def run(cfg: DictConfig, *, progress: bool = True) -> int:
    """Check ``cfg`` once (:meth:`stateaware.run.RunSpec.from_config`), then plan and launch its
    run; the process exit status."""
    from stateaware.cohorts import user_code
    from stateaware.launch.launcher import plan_run
    from stateaware.launch.runlock import RunLocked, TamperedPath, run_lock
    from stateaware.launch.snapshot import SnapshotError
    from stateaware.names import PathOutsideError
    from stateaware.records.writer import as_disk_full, disk_full
    from stateaware.run import RunSpec
    from stateaware.source import UserCodeError, source_hash

    try:
        spec = RunSpec.from_config(cfg)
        code = source_hash(user_code(spec.kind))  # a user's own kind counts as code too
        plan = plan_run(spec, code)
        if spec.compare_to is not None:
            return _run_pair(spec, plan, code, progress)
    except (ConfigError, UserCodeError, PathOutsideError, TamperedPath) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    if spec.dry_run:
        print(_dry_run_table(plan))
        return 0
    try:
        with run_lock(plan.out, plan.cohort, plan.run_id, on_takeover=_say):
            return _launch_locked(spec, plan, code, progress)
    except (RunLocked, SnapshotError, PathOutsideError, TamperedPath) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if not disk_full(exc):
            raise
        print(f"error: {as_disk_full(exc, under=plan.out)}", file=sys.stderr)
        return 1


def _run_pair(spec: RunSpec, plan: RunPlan, code: str, progress: bool) -> int:
    """``compare_to=``: the cohort on this code (side A) and on the code named (side B), their
    processes alternating (:mod:`stateaware.launch.pair`); then how to compare them."""
    from stateaware.launch.interrupt import workers_stop_with_launcher
    from stateaware.launch.launcher import describe, latest_statuses, launch_pair, plan_run, quarantine_damaged
    from stateaware.launch.manifest import collect_manifest, write_manifest
    from stateaware.launch.pair import other_code, pair_id, run_ids
    from stateaware.launch.runlock import RunLocked, run_lock
    from stateaware.launch.snapshot import SnapshotError

    other = other_code(str(spec.compare_to), spec.out, spec.cohort)
    base = plan.run_id
    pair = pair_id(base, code, other.source_hash)
    sides = [
        plan_run(dataclasses.replace(spec, run_id=run_id), source)
        for run_id, source in zip(run_ids(base), (code, other.source_hash), strict=True)
    ]
    if spec.dry_run:
        for side in sides:
            print(_dry_run_table(side))
        return 0
    try:
        with contextlib.ExitStack() as locks:
            for side in sides:
                locks.enter_context(run_lock(side.out, side.cohort, side.run_id, on_takeover=_say))
            for i, side in enumerate(sides):
                for line in quarantine_damaged(side):
                    _say(line)
                sides[i] = side = dataclasses.replace(
                    side, statuses=latest_statuses(side.out, side.cohort, side.run_id)
                )
                manifest = collect_manifest(
                    spec, side.run_id, side.source_hash, len(side.specs), report_sections=side.report_sections,
                    pair=(pair, "ab"[i]),
                )  # fmt: skip
                write_manifest(side.out, manifest, say=_say)
            with workers_stop_with_launcher():
                summaries = launch_pair(spec, sides[0], sides[1], other.files, progress=progress)
    except (RunLocked, SnapshotError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for summary, side in zip(summaries, sides, strict=True):
        print(describe(summary, side))
    print(
        f"{spec.cohort}: interleaved comparison {pair}: side a = this code ({code[:12]}), side b = "
        f"{other.label} ({other.source_hash[:12]}); compare them with: python -m stateaware.analysis compare "
        f"{sides[0].run_id} {sides[1].run_id} --results {spec.out}"
    )
    return max(s.exit_code for s in summaries)


def _launch_locked(spec: RunSpec, plan: RunPlan, code: str, progress: bool) -> int:
    """Launch ``plan`` while this process holds the run's lock: nothing else launches it now."""
    from stateaware.launch.interrupt import workers_stop_with_launcher
    from stateaware.launch.launcher import Summary, describe, latest_statuses, launch, quarantine_damaged
    from stateaware.launch.manifest import collect_manifest, write_manifest
    from stateaware.records.writer import DiskFullError

    try:
        # Read the records again under the lock: a launch that just ended may have completed
        # processes, and damaged parts are moved aside only by the run's one launcher.
        for line in quarantine_damaged(plan):
            _say(line)
        plan = dataclasses.replace(plan, statuses=latest_statuses(plan.out, plan.cohort, plan.run_id))
        write_manifest(
            plan.out,
            collect_manifest(spec, plan.run_id, code, len(plan.specs), report_sections=plan.report_sections),
            say=_say,
        )
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
    if plan.specs and plan.specs[0].timing:
        from stateaware.analysis.stability import run_summary

        stable = run_summary(plan.out, plan.run_id)
        if stable:
            print(stable)
    if summary.exit_code == 0:
        from stateaware.cohorts import load_kind

        summarize = getattr(load_kind(spec.kind), "summary", None)
        if summarize is not None:
            print(summarize(str(plan.out), plan.cohort))
    return summary.exit_code


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def _dry_run_table(plan: RunPlan) -> str:
    """The processes that would launch: parameters shared by every process once, then per
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


#: Hydra's own variable: set, its run_and_report re-raises composition errors (instead of
#: printing a trimmed traceback and exiting 1), so :func:`_compose_error` can say them in
#: one line with exit 2. Restored before the run starts, so processes never inherit it;
#: a user who set it gets Hydra's full trace, as Hydra documents.
_FULL_ERROR = "HYDRA_FULL_ERROR"
_HELP_TIP = "python -m stateaware --help lists the groups; --cfg job prints the composed config"


class _Started:
    """Whether Hydra got as far as calling our task: errors before that are bad input."""

    value = False
    full_error: str | None = None


@hydra.main(version_base="1.3", config_path="pkg://stateaware.conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    _Started.value = True
    _restore_full_error()
    try:
        code = run(cfg)
    except OmegaConfBaseException as exc:  # a key the config lacks (``~out``) or cannot hold
        print(f"error: {_omegaconf_line(exc)}; {_HELP_TIP}", file=sys.stderr)
        code = 2
    if code:
        sys.exit(code)


def _restore_full_error() -> None:
    if _Started.full_error is None:
        os.environ.pop(_FULL_ERROR, None)
    else:
        os.environ[_FULL_ERROR] = _Started.full_error


def _omegaconf_line(exc: BaseException) -> str:
    key = getattr(exc, "full_key", None)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"invalid {key}: {first}" if key else first


def _compose_error(exc: BaseException) -> str:
    """One line for an error Hydra raised while parsing or composing the overrides."""
    from hydra.errors import MissingConfigException

    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    first = lines[0] if lines else type(exc).__name__
    if isinstance(exc, MissingConfigException) and exc.options is not None:
        return (
            f"error: {first.removeprefix('In ' + repr('config') + ': ')}; allowed values are: {', '.join(exc.options)}"
        )
    cause = exc.__cause__
    if isinstance(cause, OmegaConfBaseException):
        return f"error: {_omegaconf_line(cause)} ({first}); {_HELP_TIP}"
    if isinstance(exc, OmegaConfBaseException):
        return f"error: {_omegaconf_line(exc)}; {_HELP_TIP}"
    given = " ".join(a for a in sys.argv[1:] if not a.startswith("-"))
    return (
        f"error: invalid overrides {given!r}: {first}; "
        f"each override is key=value, group=option or +key=value; {_HELP_TIP}"
    )


def _check_flags(argv: list[str]) -> None:
    """Hydra's own flags, parsed first by Hydra's parser, so an unknown ``--flag`` is one line too."""
    from hydra._internal.utils import get_args_parser

    from stateaware.exits import fail

    parser = get_args_parser()
    parser.error = lambda message: fail(f"error: {message}; {_HELP_TIP}")  # type: ignore[method-assign]
    # Overrides are Hydra's positional arguments; --version prints and exits as Hydra would.
    known, unknown = parser.parse_known_args(argv)
    if unknown:
        fail(f"error: unrecognized arguments: {' '.join(unknown)}; {_HELP_TIP}")
    _check_hydra_overrides(known.overrides)


#: The ``hydra.*`` settings a command line may change. Every other one is refused before
#: Hydra runs: ``hydra.run.dir``, ``hydra.sweep.dir``, ``hydra/job_logging`` and the like make
#: Hydra write folders and files wherever they point, and conf/config.yaml keeps Hydra's
#: own outputs inside ``out`` (a sweep's ``multirun.yaml``) or nowhere.
HYDRA_ALLOWED = ("hydra.verbose", "hydra.mode")


def _check_hydra_overrides(overrides: list[str]) -> None:
    """Refuse an override of Hydra's own settings outside :data:`HYDRA_ALLOWED` (one line, exit 2).

    An override that does not parse is left to Hydra, whose message says why."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from stateaware.exits import fail

    parser = OverridesParser.create()
    for text in overrides:
        try:
            override = parser.parse_override(text)
        except HydraException:
            continue
        key, package = override.key_or_group, override.package or ""
        if any(name == "hydra" or name.startswith(("hydra.", "hydra/")) for name in (key, package)):
            if key not in HYDRA_ALLOWED or package:
                fail(
                    f"error: override {text!r} changes Hydra's own settings; only {', '.join(HYDRA_ALLOWED)} "
                    "may be changed (Hydra's outputs stay inside out); results go to out=DIR"
                )


def _main() -> int:
    _check_flags(sys.argv[1:])
    _Started.value, _Started.full_error = False, os.environ.get(_FULL_ERROR)
    os.environ[_FULL_ERROR] = "1"
    try:
        _hydra_main()
    except Exception as exc:
        if _Started.value or _Started.full_error:
            raise  # our own code failed (a bug: its traceback says where), or the user asked for the trace
        print(_compose_error(exc), file=sys.stderr)
        return 2
    finally:
        _restore_full_error()
    return 0


def main() -> None:
    """Console entry point (``python -m stateaware`` and the ``stateaware`` script)."""
    from stateaware.exits import run_main

    _working_directory_importable()
    run_main(_main)


def _working_directory_importable() -> None:
    """Let a cohort's ``kind:`` name a module in the working directory from either entry point.

    ``python -m stateaware`` puts the working directory first on ``sys.path``; the
    ``stateaware`` script puts its own folder there instead. Both resolve kinds alike this
    way — unless the user asked Python not to (``PYTHONSAFEPATH``/``-P``).
    """
    if sys.flags.safe_path:
        return
    here = os.getcwd()
    if not any(os.path.abspath(entry or ".") == here for entry in sys.path):
        sys.path.insert(0, here)
