"""The entry point: ``python -m stateaware cohort=NAME [key=value ...]``.

Hydra composes the config (``--cfg job`` prints it, ``--help`` lists the groups), then
``run`` validates it, writes the run manifest and launches the pending processes.
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
stateaware.records.runlock), 130 after Ctrl-C (re-running the same command resumes).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import hydra
from hydra._internal.utils import get_args_parser
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from stateaware.bounded_input import InputError
from stateaware.commands.arguments import version_text
from stateaware.config import ConfigError, fields_of_type, packaged_conf_dir, register_configs
from stateaware.config_files import check_config_files
from stateaware.exits import fail, run_main
from stateaware.kinds import load_kind, user_code
from stateaware.names import PathOutsideError
from stateaware.records.runlock import RunLocked, TamperedPath
from stateaware.records.write_paths import writable
from stateaware.run_spec import RunSpec
from stateaware.source import UserCodeError, source_hash

if TYPE_CHECKING:
    from stateaware.launch.launcher import RunPlan, Summary

__all__ = ["main", "run"]

register_configs()


def run(cfg: DictConfig, *, progress: bool = True) -> int:
    """Check ``cfg`` once (``stateaware.run_spec.RunSpec.from_config``), then plan and launch its run
    (``stateaware.launch.session``); the process exit status: 0, 1 or 2 (see ``_invalid_input``)."""
    # lazy: the launcher and writer bring pyarrow, numpy, submitit: --help and a config error need none
    from stateaware.launch.launcher import plan_run
    from stateaware.launch.session import dry_run_table, launch_compared, launch_single
    from stateaware.records.writer import as_disk_full, disk_full

    spec = None
    try:
        spec = RunSpec.from_config(cfg)
        code = source_hash(user_code(spec.kind))  # a user's own kind counts as code too
        plan = plan_run(spec, code)
        if spec.compare_to is not None:
            return launch_compared(spec, plan, code, progress=progress)
        if spec.dry_run:
            print(dry_run_table(plan))
            return 0
        return launch_single(spec, plan, code, progress=progress, after_launch=_after_launch)
    except _invalid_input() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if spec is None or not disk_full(exc):
            raise
        print(f"error: {as_disk_full(exc, under=spec.out)}", file=sys.stderr)
        return 1


def _after_launch(spec: RunSpec, plan: RunPlan, summary: Summary) -> Iterator[str]:
    """What the command line prints after a launch's summary: the stability flags of a timing
    run, and the kind's own ``summary`` of a run that completed."""
    if plan.specs and plan.specs[0].timing:
        # lazy: only a timing run reads its stability: the analysis (numpy) is no part of other launches
        from stateaware.analysis.stats.stability import run_summary

        stable = run_summary(plan.out, plan.run_id)
        if stable:
            yield stable
    if summary.exit_code == 0:
        kind = load_kind(spec.kind)
        summarize = getattr(kind, "summary", None)
        section = getattr(kind, "SUMMARY", None)
        if isinstance(section, str):  # a section summarizes the kind
            summarize = importlib.import_module(section).summary
        if summarize is not None:
            yield summarize(str(plan.out), plan.cohort)


def _invalid_input() -> tuple[type[BaseException], ...]:
    """The errors a launch reports in one line with exit status 2 (invalid input, or a run
    that another launcher holds now); a full disk is 1; anything else is a bug and raises.

    Imported here, not at module level: ``--help`` and Hydra's composition never need the
    launcher's modules."""
    from stateaware.launch.snapshot import SnapshotError  # lazy: pyarrow and numpy; --help needs neither

    return (ConfigError, UserCodeError, PathOutsideError, TamperedPath, RunLocked, SnapshotError)


#: Hydra's own variable: set, its run_and_report re-raises composition errors (instead of
#: printing a trimmed traceback and exiting 1), so ``_compose_error`` can say them in
#: one line with exit 2. Restored before the run starts, so processes never inherit it;
#: a user who set it gets Hydra's full trace, as Hydra documents.
_FULL_ERROR = "HYDRA_FULL_ERROR"
_HELP_TIP = "python -m stateaware --help lists the groups; --cfg job prints the composed config"


def _under_out(out: str, below: str) -> str:
    """``out/below`` once ``writable`` allows it, for Hydra's
    own folders (``hydra.sweep.dir``): Hydra resolves the setting right before it makes the
    folder, so a link below ``out`` on the way ends the command in one line before Hydra writes."""
    try:
        return os.fspath(writable(out, os.path.join(out, below)))
    except PathOutsideError as exc:
        fail(f"error: {exc}")
    except (ValueError, OSError) as exc:  # an out that is no path (a NUL), or unreadable: RunSpec names it too
        fail(f"error: invalid out={out!r}: {exc}; pass out=DIR with a writable DIR")


OmegaConf.register_new_resolver("stateaware_under_out", _under_out, replace=True)


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
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    first = lines[0] if lines else type(exc).__name__
    if isinstance(exc, MissingConfigException) and exc.options is not None:
        return (
            f"error: {first.removeprefix('In ' + repr('config') + ': ')}; allowed values are: {', '.join(exc.options)}"
        )
    cause = exc.__cause__
    if isinstance(cause, OmegaConfBaseException):
        return _unknown_key(cause) or f"error: {_omegaconf_line(cause)} ({first}); {_HELP_TIP}"
    if isinstance(exc, OmegaConfBaseException):
        return f"error: {_omegaconf_line(exc)}; {_HELP_TIP}"
    given = " ".join(a for a in sys.argv[1:] if not a.startswith("-"))
    return (
        f"error: invalid overrides {given!r}: {first}; "
        f"each override is key=value, group=option or +key=value; {_HELP_TIP}"
    )


def _unknown_key(exc: OmegaConfBaseException) -> str | None:
    """One line for an override of a key the composed config lacks, naming the keys it has
    there; ``None`` for any other error.

    Under ``cohort.params`` the valid keys are the kind's parameters (its ``PARAMS``), named as
    the run spec's check names them; a parameter the kind declares but the cohort's file
    leaves out is added with ``+``, which the line says.
    """
    parent, full_key = getattr(exc, "parent_node", None), getattr(exc, "full_key", None)
    if not isinstance(exc, (ConfigAttributeError, ConfigKeyError)) or not isinstance(parent, DictConfig):
        return None
    if not full_key:
        return None
    where, _, key = str(full_key).rpartition(".")
    if where == "cohort.params":
        line = _unknown_param(parent, key)
        if line is not None:
            return line
    valid = ", ".join(str(k) for k in parent.keys()) or "(none)"
    return f"error: unknown key {full_key}; valid keys of {where or 'the config'} are: {valid}"


def _unknown_param(params: DictConfig, key: str) -> str | None:
    """The line for ``cohort.params.KEY``, from the cohort's kind; ``None`` when the kind
    cannot be loaded (its own error comes later, from the run spec's check)."""
    cohort = params._get_parent()  # the cohort node; OmegaConf has no public parent accessor
    kind, name = (cohort.get("kind"), cohort.get("name")) if isinstance(cohort, DictConfig) else (None, None)
    try:
        declared = getattr(load_kind(str(kind)), "PARAMS", None) if kind else None
    except (ValueError, ImportError):
        return None
    if declared is None:
        return None
    if key in declared:
        return (
            f"error: cohort {name!r}: params.{key} is a parameter of kind {kind!r} that the cohort's file "
            f"leaves out; add it with +cohort.params.{key}=VALUE"
        )
    return (
        f"error: cohort {name!r}: unknown parameter params.{key}; valid parameters are: "
        f"{', '.join(declared) or '(none)'}"
    )


def _check_flags(argv: list[str]) -> None:
    """Hydra's own flags, parsed first by Hydra's parser, so an unknown ``--flag`` is one line too."""
    parser = get_args_parser()
    parser.error = lambda message: fail(f"error: {message}; {_HELP_TIP}")  # type: ignore[method-assign]
    parser.formatter_class = argparse.RawTextHelpFormatter  # the version's two lines stay two lines
    for action in parser._actions:  # --version: ours first, then Hydra's, which is all Hydra says
        if "--version" in action.option_strings:
            action.version = f"{version_text()}\nHydra {hydra.__version__}"  # type: ignore[attr-defined]
    # Overrides are Hydra's positional arguments; --version prints and exits.
    known, unknown = parser.parse_known_args(argv)
    if unknown:
        fail(f"error: unrecognized arguments: {' '.join(unknown)}; {_HELP_TIP}")
    if known.experimental_rerun is not None:  # Hydra would unpickle that file: code, unchecked
        fail("error: --experimental-rerun is not supported: a run resumes by its run_id (python -m stateaware runs)")
    _check_hydra_overrides(known.overrides)
    given = (folder for folder in (known.config_dir, known.config_path) if folder and not folder.startswith("pkg://"))
    try:
        check_config_files([packaged_conf_dir(), *given])
    except InputError as exc:
        fail(f"error: {exc}")


#: The ``hydra.*`` settings a command line may change. Every other one is refused before
#: Hydra runs: ``hydra.run.dir``, ``hydra.sweep.dir``, ``hydra/job_logging`` and the like make
#: Hydra write folders and files wherever they point, and conf/config.yaml keeps Hydra's
#: own outputs inside ``out`` (a sweep's ``multirun.yaml``) or nowhere.
HYDRA_ALLOWED = ("hydra.verbose", "hydra.mode")


def _check_hydra_overrides(overrides: list[str]) -> None:
    """Refuse an override of Hydra's own settings outside ``HYDRA_ALLOWED`` (one line, exit 2).

    An override that does not parse is left to Hydra, whose message says why."""
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


def literal_text(argv: list[str]) -> list[str]:
    """``argv`` with every override of a text field kept as the text typed.

    A run id, a git revision, a path or a name is text, but Hydra's grammar reads
    ``run_id=1e3`` as the float 1000.0 (stored as ``"1000.0"``), ``run_id=true`` as ``True``,
    ``compare_to=0123abc``'s digits-only cousins as numbers, and refuses ``compare_to=HEAD~3``,
    ``main^`` or ``HEAD@{1}`` outright (``~``, ``^``, ``@{`` are its syntax). So an override of
    a field the schema types as text (``stateaware.config.fields_of_type``) whose value
    Hydra would not read as that very text is passed on quoted; ``null``, a sweep
    (``run_id=a,b``), an interpolation and text already quoted are left as they are. In a
    YAML file, quote such a value yourself (``run_id: "1e3"``).
    """
    text_fields = set(fields_of_type(str))
    parser = OverridesParser.create()

    def reads_as(override: str) -> Any:
        try:
            parsed = parser.parse_override(override)
        except HydraException:
            return _UNREADABLE
        return None if parsed.is_sweep_override() else parsed.value()

    kept = []
    for arg in argv:
        key, equals, value = arg.partition("=")
        read = reads_as(arg) if equals and key.lstrip("+") in text_fields and value else None
        if read is None or isinstance(read, str):
            kept.append(arg)
            continue
        quoted = [f"{key}={q}{value}{q}" for q in ("'", '"') if q not in value and not value.endswith("\\")]
        kept.append(next((q for q in quoted if reads_as(q) == value), arg))
    return kept


_UNREADABLE = object()  # an override Hydra's grammar refuses


def _main() -> int:
    sys.argv[1:] = literal_text(sys.argv[1:])
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
