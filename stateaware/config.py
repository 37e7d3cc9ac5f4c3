"""The configuration schema (Hydra structured configs) and the checks made before launch.

Hydra composes ``conf/config.yaml`` with one option from each group (``cohort/``,
``launcher/``, ``hardware/``) onto these dataclasses, so a value of the wrong type fails at
composition. ``stateaware.run_spec.RunSpec.from_config`` then checks everything else (keys
added with ``+``, ranges, names, a writable ``out``, an importable cohort kind), once,
before anything launches, with a message that names the field and the allowed values.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import II, MISSING, DictConfig, OmegaConf

from stateaware import conf as packaged_conf
from stateaware.hardware import choose_profile
from stateaware.thresholds import MAX_CV, MAX_OTHER_SHARE, MAX_WALL_OVER_CPU

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
    "packaged_conf_dir",
    "fields_of_type",
    "conf_file",
    "hardware_file",
    "cohort_scale",
    "resolve_hardware",
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
    gres: str | None = None  # sbatch --gres, e.g. "gpu:1" or "gpu:a100:2"
    constraint: str | None = None
    exclusive: bool | None = None
    array_parallelism: int | None = None
    # The Slurm job name; null: "stateaware-<cohort>". Follows the name rule (stateaware.names).
    job_name: str | None = None
    additional_parameters: dict[str, Any] = field(default_factory=dict)  # extra sbatch flags
    snapshot: bool = True  # run a copy of the code taken at submission (queued jobs)
    # Pin every process to these CPUs (local and inline launchers): "1", "2-3", "0,2-3" or a
    # list. Checked against this process's own affinity at plan time; recorded in
    # processes.affinity. null: not pinned. With max_parallel=N the set is cut into N
    # disjoint groups, one per process running at once (LauncherSpec.cpu_slots).
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
    # Thresholds of the stability flags (stateaware.thresholds, where each default
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
    # An interleaved comparison: also run the cohort on this code (a git revision or a
    # source tree's path), process i of each side in turn (stateaware.launch.pair).
    compare_to: str | None = None
    wait: bool = True  # false: submit and return (launcher=slurm only)
    # Free space `out` must have at start-up, in MiB (0: no check). A full disk later still
    # ends the launch cleanly (one line, exit 1, nothing half-written); this catches the
    # common case before any process starts.
    min_free_mib: float = 256.0


def fields_of_type(kind: type, schema: type = Config, prefix: str = "") -> list[str]:
    """The dotted keys of ``schema`` whose type is ``kind`` (or ``kind | None``), nested configs walked.

    ``fields_of_type(str)``: the text fields (``run_id``, ``compare_to``, ``out``, ...), whose
    values the command line keeps as the text typed (``stateaware.cli``)."""
    found = []
    for name, hint in typing.get_type_hints(schema).items():
        options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            found += fields_of_type(kind, hint, f"{prefix}{name}.")
        elif kind in options and all(option in (kind, type(None)) for option in options):
            found.append(f"{prefix}{name}")
    return found


def register_configs() -> None:
    """Register the schema with Hydra's ConfigStore (idempotent)."""
    # lazy: the analysis reads stored configs through this module and Hydra is no part of the analysis extra
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="base_config", node=Config)


def packaged_conf_dir() -> Path:
    """The folder of the packaged ``conf/`` (``stateaware.conf``), where Hydra composes from."""
    return Path(packaged_conf.__file__).parent


def available_cohorts() -> list[str]:
    """The cohort names ``cohort=NAME`` accepts: files under conf/cohort/, and under the
    ``cohort/`` of every ``--config-dir`` when Hydra composed this run (a user's own cohorts)."""
    folders = [packaged_conf_dir()] + _config_dirs()
    return sorted({p.stem for folder in folders for p in (folder / "cohort").glob("*.yaml")})


def _config_dirs() -> list[Path]:
    """The file-system config folders Hydra searched for this run (``--config-dir``); none outside a Hydra run."""
    # lazy: the analysis reads stored configs through this module and Hydra is no part of the analysis extra
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

    Its ``scale`` is ``cohort_scale``'s, set before the file's interpolations resolve,
    so a field that follows it (``byte_scale: ${...scale}``) does as in a run
    (``resolve_hardware``). A missing file is a ``ConfigError`` as ``conf_file``'s.
    """
    _, node = _conf_node("hardware", name, conf_dir)
    node.scale = cohort_scale(node, cohort)
    return OmegaConf.to_container(node, resolve=True)


def _conf_node(group: str, name: str, conf_dir: str | os.PathLike[str] | None) -> tuple[Path, Any]:
    folder = Path(conf_dir) if conf_dir is not None else packaged_conf_dir()
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
    ``hardware.scale`` (1.0 when absent). A run records it (``resolve_hardware``), and so
    does a card frozen for the cohort (``python -m stateaware.cost_runtime.freeze --cohort``)."""
    scales = hardware.get("scales") or {}
    if cohort is not None and cohort in scales:
        return float(scales[cohort])
    return float(hardware.get("scale", 1.0))


def resolve_hardware(cfg: DictConfig) -> DictConfig:
    """``cfg`` with ``hardware=auto`` replaced by the profile this machine gets, and
    ``hardware.scale`` set to the cohort's (``cohort_scale``)."""
    resolved = cfg
    if cfg.hardware.name == "auto":
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
