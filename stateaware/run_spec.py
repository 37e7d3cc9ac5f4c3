"""The run description: the composed Hydra config, checked once at the door and frozen.

``python -m stateaware`` composes a config with Hydra, and ``RunSpec.from_config``
turns it into a ``RunSpec`` — every field, name and path checked there, each error a
``ConfigError`` naming the field and what is allowed. The launcher
plans the run's processes from a ``RunSpec`` and hands each worker only its
``ProcessSpec``; nothing after the door reads a live config
again. (The analysis reads a run's stored ``config_yaml``, not a live config.)

What is checked, in order:

- **no unknown key**, however it was spelled (``bogus=1``, ``+bogus=1``, ``++bogus=1``,
  ``+cohort.bogus=1``): every key must be a field of the schema
  (``stateaware.config``), except inside the free-form mappings (``cohort.params``,
  ``hardware.params``, ``hardware.scales``, ``launcher.additional_parameters``), whose keys
  the cohort's kind checks (``PARAMS``) or Slurm does;
- **names are never paths**: ``run_id``, ``cohort.name`` and each part of ``cohort.kind``
  follow ``stateaware.names.check_name``; Slurm settings hold no control characters;
- every numeric field by one rule (``NUMBERS``: integral where it
  counts, finite, in range; the seeds within 64 bits), then choices (launcher, hardware),
  sizes of every ``*budget*`` key, the comparisons' clock, pinned CPUs;
- the cohort's kind importable and its ``params`` as its ``PARAMS`` declare them;
- ``out`` creatable, writable and with ``min_free_mib`` MiB free.

What refers to the cohort's own world (a cell, an anchor, a card) is checked next, when
the run is planned (``stateaware.launch.launcher.plan_run``, by the kind's ``expand``),
still before anything launches.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from stateaware.clocks import declared_clock
from stateaware.config import (
    HARDWARE_PROFILES,
    LAUNCHERS,
    MAX_PROCESSES,
    Config,
    ConfigError,
    available_cohorts,
    resolve_hardware,
)
from stateaware.kinds import Param, check_params, load_kind
from stateaware.names import InvalidName, check_name
from stateaware.text import format_cpus, parse_cpus
from stateaware.units import FORMS, format_bytes, parse_bytes

__all__ = ["RunSpec", "LauncherSpec", "NUMBERS", "MAX_SEED", "check_numbers"]

#: Schema fields whose values are free-form mappings: their keys are not the schema's.
_FREE_FORM = ("cohort.params", "hardware.params", "hardware.scales", "launcher.additional_parameters")
#: The longest ``out`` accepted, in bytes (Linux's PATH_MAX).
_MAX_PATH = 4096


#: The largest seed a process may get: records store seeds as 64-bit signed integers.
MAX_SEED = 2**63 - 1


def _numbers() -> dict[str, Param]:
    positive = Param(float, above=0, maximum=1e6)  # ratios and scales: finite and > 0
    return {
        "processes": Param(int, minimum=1, maximum=MAX_PROCESSES),
        "cohort.processes": Param(int, minimum=1, maximum=MAX_PROCESSES),
        "cohort.seed": Param(int, minimum=0, maximum=MAX_SEED),
        "launcher.max_parallel": Param(int, minimum=1, maximum=MAX_PROCESSES, nullable=True),
        "launcher.array_parallelism": Param(int, minimum=1, maximum=MAX_PROCESSES, nullable=True),
        "launcher.cpus_per_task": Param(int, minimum=1, maximum=1_000_000, nullable=True),
        "launcher.gpus_per_node": Param(int, minimum=0, maximum=1_024, nullable=True),
        "launcher.timeout_min": Param(float, above=0, maximum=525_600),  # minutes: at most a year
        "launcher.poll_s": Param(float, above=0, maximum=3_600),
        "launcher.mem_gb": Param(float, above=0, maximum=2**20, nullable=True),  # at most a PiB
        "hardware.scale": positive,
        "hardware.scales.*": positive,
        "hardware.min_gpu_gib": Param(float, minimum=0, maximum=2**20),
        "analysis.stability.max_cv": positive,
        "analysis.stability.max_wall_over_cpu": positive,
        "analysis.stability.max_other_share": positive,
        "min_free_mib": Param(float, minimum=0, maximum=2**40),  # MiB: at most an EiB
    }


#: Every numeric field of the schema (``*``: each value of that mapping) → its type and range,
#: as a cohort kind declares its params (``Param``): an ``int``
#: integral, a ``float`` finite, neither a boolean. ``check_numbers`` checks them all.
NUMBERS: dict[str, Param] = _numbers()


def check_numbers(data: dict[str, Any]) -> None:
    """Every field of ``NUMBERS`` in the resolved config ``data`` within its type and range, and
    the last process's seed (``cohort.seed + processes - 1``) within ``MAX_SEED``; else
    ``ConfigError`` naming the field, the value and the allowed values, in one line."""
    for key, param in NUMBERS.items():
        path = key.removesuffix(".*")
        node: Any = data
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if key.endswith(".*"):
            values = {f"{path}.{k}": v for k, v in node.items()} if isinstance(node, dict) else {}
        else:
            values = {path: node}
        for name, value in values.items():
            if not param.accepts(value):
                raise ConfigError(f"invalid {name}={value!r}: allowed values are {param.allowed()}")
    seed, processes = data["cohort"]["seed"], data["processes"]
    if seed + processes - 1 > MAX_SEED:
        raise ConfigError(
            f"invalid cohort.seed={seed!r}: allowed values are an integer in [0, {MAX_SEED - processes + 1}] "
            f"with processes={processes} (process i gets seed + i, at most {MAX_SEED})"
        )


@dataclass(frozen=True)
class LauncherSpec:
    """How the run's processes are executed (``launcher.*``), checked.

    The fields are those of ``stateaware.config.LauncherConfig``; ``cpus`` is parsed
    into a sorted tuple of CPUs this process may use (``None``: not pinned).
    """

    name: str
    max_parallel: int | None
    timeout_min: float
    poll_s: float
    partition: str | None
    account: str | None
    qos: str | None
    cpus_per_task: int | None
    mem_gb: float | None
    gpus_per_node: int | None
    gres: str | None
    constraint: str | None
    exclusive: bool | None
    array_parallelism: int | None
    job_name: str | None
    additional_parameters: dict[str, Any]
    snapshot: bool
    cpus: tuple[int, ...] | None

    def parallel(self, timing: bool) -> int:
        """Processes at once: ``max_parallel`` when set, else 1 for a timing cohort (timing
        hygiene), else every CPU this process may use."""
        if self.max_parallel is not None:
            return self.max_parallel
        if timing:
            return 1
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

    def cpu_slots(self, timing: bool) -> list[tuple[int, ...]] | None:
        """``cpus`` cut into one disjoint group per process running at once (``None``: not pinned).

        With ``max_parallel=2 cpus=0-3`` the two processes at a time get ``0-1`` and ``2-3``;
        with ``cpus=0,2`` (one CPU of each of two physical cores) they get ``0`` and ``2``.
        Consecutive listed CPUs stay together and the groups differ in size by at most one.
        More processes at once than CPUs (a non-timing cohort only; ``RunSpec.from_config``
        refuses it for a timing one) makes groups of one CPU, shared by the fewest.
        """
        if not self.cpus:
            return None
        groups = min(self.parallel(timing), len(self.cpus))
        size, extra = divmod(len(self.cpus), groups)
        bounds = [i * size + min(i, extra) for i in range(groups + 1)]
        return [self.cpus[bounds[i] : bounds[i + 1]] for i in range(groups)]


@dataclass(frozen=True)
class RunSpec:
    """One run, as the command line asked for it: every field checked, nothing left to guess.

    Made once, by ``from_config``, in the CLI; the launcher, the manifest and the
    Slurm executor take only this. ``cohort_config`` and ``hardware`` are plain, resolved
    data (a kind's ``expand`` takes them); ``config`` is the whole resolved config, as the
    run's manifest and ``runs.config_yaml`` record it. The mappings are copies the spec
    owns: do not mutate them.
    """

    cohort: str
    kind: str
    timing: bool
    processes: int
    seed: int
    cohort_config: dict[str, Any]
    hardware: dict[str, Any]
    launcher: LauncherSpec
    out: Path  # absolute
    run_id: str | None  # None: the default, <cohort>-<digest> (stateaware.launch.launcher.plan_run)
    dry_run: bool
    wait: bool
    min_free_mib: float
    config: dict[str, Any] = field(repr=False)
    compare_to: str | None = None  # side B of an interleaved comparison (stateaware.launch.pair)

    @property
    def params(self) -> dict[str, Any]:
        """The cohort's ``params``."""
        return cast(dict[str, Any], self.cohort_config.get("params") or {})

    @classmethod
    def from_config(cls, cfg: DictConfig) -> RunSpec:
        """Check the composed config ``cfg`` and freeze it; ``ConfigError`` naming the first bad field.

        ``cfg`` is what Hydra composed (``hardware=auto`` is resolved here, to the profile
        this machine gets). Creates ``out`` if absent (it must be writable).
        """
        if OmegaConf.is_missing(cfg, "cohort") or cfg.get("cohort") is None:
            raise ConfigError(f"no cohort chosen: pass cohort=NAME, one of {', '.join(available_cohorts())}")
        unknown = list(_unknown_keys(cfg, Config))
        if unknown:
            raise ConfigError(
                f"unknown key(s) {', '.join(unknown)} (however spelled: key=, +key= or ++key=); "
                "python -m stateaware --cfg job prints every key there is"
            )
        removed = list(_removed_keys(cfg, Config))
        if removed:
            raise ConfigError(
                f"missing key(s) {', '.join(removed)} (removed with ~KEY?): every setting needs a value; "
                "set it with KEY=VALUE instead"
            )
        # Every numeric field (its type, finite, in range) as given — hardware=auto reads
        # hardware.min_gpu_gib to resolve — and as resolved, with the profile's own numbers.
        check_numbers(cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True)))
        cfg = resolve_hardware(cfg)
        data = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True))
        cohort, hardware, launcher = data["cohort"], data["hardware"], data["launcher"]

        _names(data)
        check_numbers(data)
        processes = data["processes"]
        _check(
            hardware["name"] in HARDWARE_PROFILES,
            "hardware.name",
            hardware["name"],
            f"one of {', '.join(HARDWARE_PROFILES)}",
        )
        _check(
            data["wait"] or launcher["name"] == "slurm",
            "wait",
            data["wait"],
            "true, unless launcher=slurm (local processes need a waiting launcher)",
        )
        _clock(cohort, hardware)
        _budgets(data)
        _kind_params(cohort)
        out = _out(data["out"], data["min_free_mib"])
        launcher_spec = _launcher(launcher)
        _check(
            not (cohort["timing"] and launcher_spec.cpus and launcher_spec.parallel(True) > len(launcher_spec.cpus)),
            "launcher.max_parallel",
            launcher_spec.max_parallel,
            f"at most {len(launcher_spec.cpus or ())} (the CPUs of launcher.cpus) for a timing cohort: each timed "
            "process runs on CPUs of its own",
        )
        return cls(
            cohort=cohort["name"],
            kind=cohort["kind"],
            timing=bool(cohort["timing"]),
            processes=processes,
            seed=int(cohort["seed"]),
            cohort_config=cohort,
            hardware=hardware,
            launcher=launcher_spec,
            out=out,
            run_id=data["run_id"],
            dry_run=bool(data["dry_run"]),
            wait=bool(data["wait"]),
            min_free_mib=float(data["min_free_mib"]),
            config=data,
            compare_to=_compare_to(data.get("compare_to"), launcher["name"]),
        )


def _compare_to(value: Any, launcher: str) -> str | None:
    if value is None:
        return None
    _check(isinstance(value, str) and value.strip() != "", "compare_to", value, "a git revision or a path")
    _check(
        launcher == "local",
        "launcher",
        launcher,
        "local with compare_to= (the two sides alternate process by process on this machine)",
    )
    return str(value)


def _check(ok: bool, name: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"invalid {name}={value!r}: allowed values are {allowed}")


def _unknown_keys(node: DictConfig, schema: type, prefix: str = "") -> Iterator[str]:
    """The dotted keys of ``node`` that ``schema`` (a config dataclass) has no field for."""
    hints = typing.get_type_hints(schema)
    for key in map(str, node.keys()):
        path = f"{prefix}{key}"
        if key not in hints:
            yield path
            continue
        child = node._get_node(key)  # the node itself: reading the value would resolve interpolations
        if dataclasses.is_dataclass(hints[key]) and isinstance(child, DictConfig) and path not in _FREE_FORM:
            yield from _unknown_keys(child, cast(type, hints[key]), f"{path}.")


def _removed_keys(node: DictConfig, schema: type, prefix: str = "") -> Iterator[str]:
    """The dotted keys of ``schema`` that ``node`` lacks (``~key`` deletes one)."""
    hints = typing.get_type_hints(schema)
    for key, hint in hints.items():
        path = f"{prefix}{key}"
        if key not in node:
            yield path
            continue
        child = node._get_node(key)
        if dataclasses.is_dataclass(hint) and isinstance(child, DictConfig) and not child._is_missing():
            yield from _removed_keys(child, cast(type, hint), f"{path}.")


def _names(data: dict[str, Any]) -> None:
    """Every value that becomes a file or folder name, or a line of a Slurm batch script."""
    try:
        check_name("cohort.name", data["cohort"]["name"])
        if data["run_id"] is not None:
            check_name("run_id", data["run_id"])
        kind = data["cohort"]["kind"]
        check_name("cohort.kind", kind)
    except InvalidName as exc:
        raise ConfigError(str(exc)) from None
    if not all(part.isidentifier() for part in kind.split(".")):
        raise ConfigError(
            f"invalid cohort.kind={kind!r}: allowed values are a module name (dotted Python identifiers, "
            "e.g. demo or mylab.kinds.fast)"
        )
    launcher = data["launcher"]
    for key in ("partition", "account", "qos", "constraint", "gres"):
        _no_control("launcher." + key, launcher[key])
    if launcher.get("job_name") is not None:
        try:
            check_name("launcher.job_name", launcher["job_name"])
        except InvalidName as exc:
            raise ConfigError(str(exc)) from None
    for key, value in (launcher["additional_parameters"] or {}).items():
        _no_control("launcher.additional_parameters", key)
        _no_control(f"launcher.additional_parameters.{key}", value)


def _no_control(name: str, value: Any) -> None:
    if isinstance(value, str) and (not value.isprintable() or not value):
        raise ConfigError(
            f"invalid {name}={value!r}: allowed values are a non-empty text of printable characters "
            "(it becomes a line of the Slurm batch script)"
        )


def _clock(cohort: dict[str, Any], hardware: dict[str, Any]) -> None:
    try:
        declared_clock(cohort, hardware)
    except ValueError as exc:
        raise ConfigError(
            f"{exc}; set it in conf/cohort/{cohort['name']}.yaml or pass cohort.comparisons_clock=cpu"
        ) from None


def _budgets(data: dict[str, Any]) -> None:
    """Every ``*budget*`` key a size. A key ending in ``budget`` takes budget text (its
    unit written, or ``P%``), read by the planner's one reader,
    ``parse_budget_text``: a unitless number there below
    1 MiB is refused naming the key (NOTE [ Unitless budgets ]). ``…budget_bytes`` and
    ``…budget_gib`` name their unit in the key and take a non-negative size."""
    # lazy: numpy (through the planner) only when a budget is checked: the command line imports this module at start-up
    from stateaware.planner.budget import UnitlessBudget, parse_budget_text

    for path, value in _budget_values(data):
        if str(path).endswith("budget"):
            try:
                parse_budget_text(_as_text(value), field=path)
            except UnitlessBudget as exc:
                raise ConfigError(f"invalid {exc}") from None
            except ValueError as exc:  # the reader's own words, as the API and the command line give them
                raise ConfigError(f"invalid {path}={value!r}: {exc}, or P% between the card's anchors") from None
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            _check(value >= 0, path, value, f"a non-negative size: {FORMS}")
        else:
            try:
                parse_bytes(value)
                ok = True
            except ValueError:
                ok = False
            _check(ok, path, value, f"a non-negative size: {FORMS}")


def _as_text(value: Any) -> str:
    """A config value as the text a user wrote for it: Hydra reads ``budget=50`` as the int 50."""
    if isinstance(value, float) and not isinstance(value, bool):
        if value.is_integer():
            return str(int(value))
        text = repr(value)
        return format(value, "f") if "e" in text else text
    return str(value)


def _budget_values(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted key, value)`` of every scalar whose key ends in ``budget``, ``budget_bytes`` or ``budget_gib``."""
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if str(key).endswith(("budget", "budget_bytes", "budget_gib")) and not isinstance(value, (dict, list)):
                yield path, value
            else:
                yield from _budget_values(value, path)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _budget_values(value, f"{prefix}[{i}]")


def _kind_params(cohort: dict[str, Any]) -> None:
    """The kind importable, and the cohort's ``params`` as the kind's ``PARAMS`` declare them."""
    try:
        kind = load_kind(cohort["kind"])
    except ValueError as exc:
        raise ConfigError(f"cohort.kind={cohort['kind']!r} (cohort {cohort['name']!r}): {exc}") from None
    declared = getattr(kind, "PARAMS", None)
    if declared is not None:
        try:
            check_params(cohort["params"], declared, cohort["name"])
        except ValueError as exc:
            raise ConfigError(f"{exc}; set it with cohort.params.KEY=VALUE") from None


def _launcher(launcher: dict[str, Any]) -> LauncherSpec:
    name = launcher["name"]
    _check(name in LAUNCHERS, "launcher.name", name, f"one of {', '.join(LAUNCHERS)}")
    fields = {f.name for f in dataclasses.fields(LauncherSpec)}
    return LauncherSpec(**{**{k: v for k, v in launcher.items() if k in fields}, "cpus": _cpus(launcher)})


def _cpus(launcher: dict[str, Any]) -> tuple[int, ...] | None:
    """``launcher.cpus`` as a sorted CPU tuple, or ``None`` when unset.

    Refused: a value that does not parse, a launcher other than local or inline (Slurm binds
    CPUs itself: ``launcher.cpus_per_task``), and CPUs this process may not use (the message
    lists the allowed ones).
    """
    value = launcher.get("cpus")
    if value is None:
        return None
    if not hasattr(os, "sched_getaffinity"):
        raise ConfigError(
            "invalid launcher.cpus: this OS cannot pin processes to CPUs (no sched_setaffinity); drop launcher.cpus"
        )
    allowed = sorted(os.sched_getaffinity(0))
    try:
        cpus = parse_cpus(value)
    except ValueError as exc:
        raise ConfigError(
            f"invalid launcher.cpus={value!r}: {exc}; allowed CPUs are {format_cpus(allowed)} "
            f'(e.g. launcher.cpus="{allowed[-1]}")'
        ) from None
    _check(
        launcher["name"] in ("local", "inline"),
        "launcher.cpus",
        value,
        "null with launcher=slurm (the cluster binds CPUs: use launcher.cpus_per_task)",
    )
    outside = sorted(set(cpus) - set(allowed))
    if outside:
        raise ConfigError(
            f"invalid launcher.cpus={value!r}: CPU(s) {format_cpus(outside)} are not available to this "
            f"process; allowed CPUs are {format_cpus(allowed)}"
        )
    return cpus


def _out(value: Any, min_free_mib: Any) -> Path:
    """``out`` made absolute, after checking it is a path that can be created, written, and has room."""
    _check(
        isinstance(value, str) and bool(value.strip()) and "\0" not in value and len(value.encode()) <= _MAX_PATH,
        "out",
        value,
        f"a directory path of at most {_MAX_PATH} bytes, without NUL (default: $STATEAWARE_RESULTS or results)",
    )
    out = Path(value).absolute()
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise ConfigError(
            f"invalid out={value!r}: the results directory must be creatable and writable "
            f"({exc.strerror or exc}); pass out=DIR with a writable DIR"
        ) from None
    if not os.access(out, os.W_OK):
        raise ConfigError(f"invalid out={value!r}: not writable; pass out=DIR with a writable DIR")
    free = shutil.disk_usage(out).free
    if free < min_free_mib * 2**20:
        raise ConfigError(
            f"invalid out={value!r}: only {format_bytes(free)} free there, below min_free_mib={min_free_mib:g} "
            f"({format_bytes(int(min_free_mib * 2**20))}); free some space, pass out=DIR on a disk with room, "
            f"or min_free_mib=0 to skip this check"
        )
    return out.resolve()
