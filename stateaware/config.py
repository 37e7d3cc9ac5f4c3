"""The configuration schema (Hydra structured configs) and the checks made before launch.

Hydra composes ``conf/config.yaml`` with one option from each group (``cohort/``,
``launcher/``, ``hardware/``) onto these dataclasses, so an unknown key or a value of the
wrong type fails at composition. :func:`validate` then checks what types cannot express
(ranges, a writable ``out``, an importable cohort kind), always before anything launches,
with a message that names the field and the allowed values.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import II, MISSING, DictConfig, OmegaConf

from stateaware.analysis.stability import MAX_CV, MAX_OTHER_SHARE, MAX_WALL_OVER_CPU

__all__ = [
    "CohortConfig",
    "LauncherConfig",
    "HardwareConfig",
    "StabilityConfig",
    "AnalysisConfig",
    "Config",
    "ConfigError",
    "LAUNCHERS",
    "MAX_PROCESSES",
    "HARDWARE_PROFILES",
    "register_configs",
    "available_cohorts",
    "conf_file",
    "hardware_file",
    "cohort_scale",
    "resolve_hardware",
    "launcher_cpus",
    "validate",
]

LAUNCHERS = ("inline", "local", "slurm")
#: The most processes one run may have. The paper's largest cohort has 150; a bound far
#: above it is checked before any per-process list is built, so a typo
#: (``processes=1000000000``) fails at once instead of exhausting memory in the planner.
MAX_PROCESSES = 100_000
HARDWARE_PROFILES = ("auto", "cpu", "h100")


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field and what is allowed."""


@dataclass
class CohortConfig:
    name: str = MISSING  # equals the file name under conf/cohort/
    kind: str = MISSING  # module stateaware.cohorts.<kind>, or a dotted module path
    timing: bool = False  # timing cohorts run one process at a time per node by default
    processes: int = 1  # default process count; the top-level `processes` overrides it
    seed: int = 0  # base seed; process i gets seed + i
    params: dict[str, Any] = field(default_factory=dict)  # passed to the kind's expand/run
    comparisons: list[Any] = field(default_factory=list)  # prespecified, for the analysis
    # The clock of the comparisons' step times: cpu | wall | null (auto: cpu on a CPU device
    # with one thread, else wall). See stateaware.clocks, NOTE [ The declared clock ].
    comparisons_clock: str | None = None


@dataclass
class LauncherConfig:
    name: str = "local"  # inline | local | slurm
    # Processes running at once. None: 1 for timing cohorts (timing hygiene), else the
    # number of CPUs available to this process.
    max_parallel: int | None = None
    timeout_min: float = 24 * 60.0  # per process; submitit kills a process past it
    poll_s: float = 0.05  # how often the launcher polls running processes
    # Slurm (launcher=slurm); null means "the cluster's default".
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    cpus_per_task: int | None = None
    mem_gb: float | None = None
    gpus_per_node: int | None = None
    constraint: str | None = None
    exclusive: bool | None = None
    array_parallelism: int | None = None
    additional_parameters: dict[str, Any] = field(default_factory=dict)  # extra sbatch flags
    snapshot: bool = True  # run a copy of the code taken at submission (queued jobs)
    # Pin every process to these CPUs (local and inline launchers): "1", "2-3", "0,2-3" or a
    # list. Checked against this process's own affinity at plan time; recorded in
    # processes.affinity. null: not pinned.
    cpus: Any | None = None


@dataclass
class HardwareConfig:
    name: str = "auto"  # auto | cpu | h100 (auto picks h100 on a CUDA device >= min_gpu_gib)
    device: str = "cpu"  # cpu | cuda
    scale: float = 1.0  # declared shape scale relative to the paper's (1.0 = paper)
    # Cohorts whose shapes on this profile use another byte scale ({cohort: scale}); the
    # run's hardware.scale (and every record's scale) is then that one (resolve_hardware).
    scales: dict[str, float] = field(default_factory=dict)
    min_gpu_gib: float = 80.0
    description: str = ""
    params: dict[str, Any] = field(default_factory=dict)  # shapes and budgets per cohort


@dataclass
class StabilityConfig:
    # Thresholds of the stability flags (stateaware.analysis.stability, where each default
    # says why): a method's step-time CV, its wall/CPU ratio, the CPU share other
    # processes took from a process's CPUs. Recorded with the run; `analysis check` and
    # `report --strict` apply them.
    max_cv: float = MAX_CV
    max_wall_over_cpu: float = MAX_WALL_OVER_CPU
    max_other_share: float = MAX_OTHER_SHARE


@dataclass
class AnalysisConfig:
    stability: StabilityConfig = field(default_factory=StabilityConfig)


@dataclass
class Config:
    cohort: CohortConfig = MISSING
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    out: str = "results"  # results directory (Parquet parts, manifests, submitit logs)
    run_id: str | None = None  # default: <cohort>-<digest of config and source>
    processes: int = II("cohort.processes")
    dry_run: bool = False  # print the process specs that would launch, then exit
    wait: bool = True  # false: submit and return (launcher=slurm only)
    # Free space `out` must have at start-up, in MiB (0: no check). A full disk later still
    # ends the launch cleanly (one line, exit 1, nothing half-written); this catches the
    # common case before any process starts.
    min_free_mib: float = 256.0


def register_configs() -> None:
    """Register the schema with Hydra's ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="base_config", node=Config)


def _conf_dir() -> Path:
    import stateaware.conf

    return Path(stateaware.conf.__file__).parent


def available_cohorts() -> list[str]:
    """The cohort names ``cohort=NAME`` accepts: files under conf/cohort/, and under the
    ``cohort/`` of every ``--config-dir`` when Hydra composed this run (a user's own cohorts)."""
    folders = [_conf_dir()] + _config_dirs()
    return sorted({p.stem for folder in folders for p in (folder / "cohort").glob("*.yaml")})


def _config_dirs() -> list[Path]:
    """The file-system config folders Hydra searched for this run (``--config-dir``); none outside a Hydra run."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    sources = HydraConfig.get().runtime.config_sources
    return [Path(source.path) for source in sources if source.schema == "file"]


def conf_file(group: str, name: str, key: str | None = None, conf_dir: str | os.PathLike[str] | None = None) -> Any:
    """``<conf>/<group>/<name>.yaml`` (or its ``key`` section) as plain, resolved Python data.

    The one way a command outside Hydra's composition (``python -m
    stateaware.cost_runtime.freeze``, ``python -m stateaware.app.encoder_card``) reads a
    config file, so the library they call takes dicts and never reads ``conf/`` itself.
    ``conf_dir`` defaults to the packaged ``conf/``. Only ``key`` is resolved: a cohort's
    other fields may interpolate the composed config (``${hardware.name}``). A missing file
    is a ``ConfigError`` naming the group's files.
    """
    path, node = _conf_node(group, name, conf_dir)
    if key is not None:
        if key not in node:
            raise ConfigError(f"{path} has no {key!r} section; add one")
        node = node[key]
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def hardware_file(
    name: str, cohort: str | None = None, conf_dir: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """``<conf>/hardware/<name>.yaml`` as plain data, as a run of cohort ``cohort`` gets it.

    Its ``scale`` is :func:`cohort_scale`'s, set before the file's interpolations resolve,
    so a field that follows it (``byte_scale: ${...scale}``) does as in a run
    (:func:`resolve_hardware`). A missing file is a ``ConfigError`` as :func:`conf_file`'s.
    """
    _, node = _conf_node("hardware", name, conf_dir)
    node.scale = cohort_scale(node, cohort)
    return OmegaConf.to_container(node, resolve=True)


def _conf_node(group: str, name: str, conf_dir: str | os.PathLike[str] | None) -> tuple[Path, Any]:
    folder = Path(conf_dir) if conf_dir is not None else _conf_dir()
    path = folder / group / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (folder / group).glob("*.yaml"))
        raise ConfigError(
            f"{group}={name}: no file {path}; valid names are: {', '.join(known) or '(none)'} "
            "(pass --conf DIR for another config folder)"
        )
    return path, OmegaConf.load(path)


def cohort_scale(hardware: Any, cohort: str | None) -> float:
    """The byte scale of cohort ``cohort``'s shapes on hardware profile ``hardware`` (a dict
    or ``DictConfig``): its entry of ``hardware.scales`` when it has one, else
    ``hardware.scale`` (1.0 when absent). A run records it (:func:`resolve_hardware`), and so
    does a card frozen for the cohort (``python -m stateaware.cost_runtime.freeze --cohort``)."""
    scales = hardware.get("scales") or {}
    if cohort is not None and cohort in scales:
        return float(scales[cohort])
    return float(hardware.get("scale", 1.0))


def resolve_hardware(cfg: DictConfig) -> DictConfig:
    """``cfg`` with ``hardware=auto`` replaced by the profile this machine gets, and
    ``hardware.scale`` set to the cohort's (:func:`cohort_scale`)."""
    resolved = cfg
    if cfg.hardware.name == "auto":
        from stateaware.hardware import choose_profile

        chosen = choose_profile(cfg.hardware.min_gpu_gib)
        profile = OmegaConf.merge(OmegaConf.structured(HardwareConfig), _conf_node("hardware", chosen, None)[1])
        resolved = cfg.copy()
        with _writable(resolved):
            resolved.hardware = profile
    scale = cohort_scale(resolved.hardware, resolved.cohort.get("name") if "cohort" in resolved else None)
    if scale != float(resolved.hardware.scale):
        resolved = resolved.copy() if resolved is cfg else resolved
        with _writable(resolved):
            resolved.hardware.scale = scale
    return resolved


class _writable:
    def __init__(self, cfg: DictConfig):
        self.cfg = cfg

    def __enter__(self) -> None:
        self.readonly = OmegaConf.is_readonly(self.cfg)
        self.struct = OmegaConf.is_struct(self.cfg)
        OmegaConf.set_readonly(self.cfg, False)
        OmegaConf.set_struct(self.cfg, False)

    def __exit__(self, *exc: object) -> None:
        OmegaConf.set_struct(self.cfg, self.struct)
        OmegaConf.set_readonly(self.cfg, self.readonly)


def validate(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` for any value the launch cannot honour.

    Checked: ``1 <= processes <= MAX_PROCESSES``; ``out`` not empty; ``launcher.name`` and
    ``hardware.name`` among the known ones; ``launcher.max_parallel`` and ``launcher.array_parallelism`` >= 1 when set;
    ``launcher.timeout_min`` > 0; ``wait=false`` only with ``launcher=slurm``; every
    config value whose key ends in ``budget``/``budget_bytes``/``budget_gib`` non-negative;
    the cohort kind importable, and the cohort's ``params`` as its kind declares them
    (``PARAMS``, :mod:`stateaware.launch.params`); ``out`` creatable, writable and with at
    least ``min_free_mib`` MiB free.
    """
    _check(
        1 <= cfg.processes <= MAX_PROCESSES,
        "processes",
        cfg.processes,
        f"an integer >= 1 and <= {MAX_PROCESSES:,} (MAX_PROCESSES)",
    )
    _check(bool(str(cfg.out).strip()), "out", cfg.out, "a directory path (default: $STATEAWARE_RESULTS or results)")
    _check(cfg.launcher.name in LAUNCHERS, "launcher.name", cfg.launcher.name, f"one of {', '.join(LAUNCHERS)}")
    _check(
        cfg.hardware.name in HARDWARE_PROFILES,
        "hardware.name",
        cfg.hardware.name,
        f"one of {', '.join(HARDWARE_PROFILES)}",
    )
    for key in ("max_parallel", "array_parallelism"):
        value = cfg.launcher[key]
        _check(value is None or value >= 1, f"launcher.{key}", value, "null or an integer >= 1")
    _check(cfg.launcher.timeout_min > 0, "launcher.timeout_min", cfg.launcher.timeout_min, "minutes > 0")
    for key in ("max_cv", "max_wall_over_cpu", "max_other_share"):
        value = cfg.analysis.stability[key]
        _check(value > 0, f"analysis.stability.{key}", value, "a number > 0")
    launcher_cpus(cfg)
    from stateaware.clocks import declared_clock

    try:
        declared_clock(
            OmegaConf.to_container(cfg.cohort, resolve=True), OmegaConf.to_container(cfg.hardware, resolve=True)
        )
    except ValueError as exc:
        raise ConfigError(
            f"{exc}; set it in conf/cohort/{cfg.cohort.name}.yaml or pass cohort.comparisons_clock=cpu"
        ) from None
    _check(
        cfg.wait or cfg.launcher.name == "slurm",
        "wait",
        cfg.wait,
        "true, unless launcher=slurm (local processes need a waiting launcher)",
    )
    from stateaware.units import FORMS

    for path, value in _budget_values(OmegaConf.to_container(cfg, resolve=True)):
        _check(_is_size(value), path, value, f"a non-negative size: {FORMS}")
    from stateaware.cohorts import load_kind

    try:
        kind = load_kind(cfg.cohort.kind)
    except ValueError as exc:
        raise ConfigError(f"cohort.kind={cfg.cohort.kind!r} (cohort {cfg.cohort.name!r}): {exc}") from None
    declared = getattr(kind, "PARAMS", None)
    if declared is not None:
        from stateaware.launch.params import check_params

        try:
            check_params(OmegaConf.to_container(cfg.cohort.params, resolve=True), declared, cfg.cohort.name)
        except ValueError as exc:
            raise ConfigError(f"{exc}; set it with cohort.params.KEY=VALUE") from None
    _check(cfg.min_free_mib >= 0, "min_free_mib", cfg.min_free_mib, "MiB >= 0 (0 turns the free-space check off)")
    _check_writable(Path(cfg.out), cfg.min_free_mib)


def launcher_cpus(cfg: DictConfig) -> tuple[int, ...] | None:
    """``launcher.cpus`` as a sorted CPU tuple, or ``None`` when unset.

    Raises :class:`ConfigError` when the value does not parse, when the launcher is not
    local or inline (Slurm binds CPUs itself: use ``launcher.cpus_per_task``), or when it
    names CPUs this process may not use (the message lists the allowed ones).
    """
    value = cfg.launcher.get("cpus")
    if value is None:
        return None
    from stateaware.launch.context import format_cpus, parse_cpus

    if not hasattr(os, "sched_getaffinity"):
        raise ConfigError(
            "invalid launcher.cpus: this OS cannot pin processes to CPUs (no sched_setaffinity); drop launcher.cpus"
        )
    if isinstance(value, (list, tuple)) or OmegaConf.is_list(value):
        value = list(value)
    allowed = sorted(os.sched_getaffinity(0))
    try:
        cpus = parse_cpus(value)
    except ValueError as exc:
        raise ConfigError(
            f"invalid launcher.cpus={value!r}: {exc}; allowed CPUs are {format_cpus(allowed)} "
            f'(e.g. launcher.cpus="{allowed[-1]}")'
        ) from None
    _check(
        cfg.launcher.name in ("local", "inline"),
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


def _check(ok: bool, name: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"invalid {name}={value!r}: allowed values are {allowed}")


def _is_size(value: Any) -> bool:
    """Whether ``value`` is a non-negative number of bytes or a size string like ``44GiB``."""
    from stateaware.units import parse_bytes

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value >= 0
    try:
        parse_bytes(value)
    except ValueError:
        return False
    return True


def _budget_values(node: Any, prefix: str = ""):
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


def _check_writable(out: Path, min_free_mib: float = 0.0) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise ConfigError(
            f"invalid out={str(out)!r}: the results directory must be creatable and writable "
            f"({exc.strerror or exc}); pass out=DIR with a writable DIR"
        ) from None
    if not os.access(out, os.W_OK):
        raise ConfigError(f"invalid out={str(out)!r}: not writable; pass out=DIR with a writable DIR")
    free = shutil.disk_usage(out).free
    if free < min_free_mib * 2**20:
        from stateaware.units import format_bytes

        raise ConfigError(
            f"invalid out={str(out)!r}: only {format_bytes(free)} free there, below min_free_mib={min_free_mib:g} "
            f"({format_bytes(int(min_free_mib * 2**20))}); free some space, pass out=DIR on a disk with room, "
            f"or min_free_mib=0 to skip this check"
        )
