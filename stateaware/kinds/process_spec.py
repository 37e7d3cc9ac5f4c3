"""What one fresh process is asked to do: a frozen, picklable process spec.

NOTE [ The pickled name of ProcessSpec ]
A spec is pickled by the submitting process and unpickled by each worker, and a pickle names
a class by its module and qualified name. ``compare_to=REV`` starts workers of ANOTHER
revision — possibly one from before this module existed — and each of them unpickles specs
made here, looking the class up at ``stateaware.launch.spec.ProcessSpec``. So the class keeps
that name (``__module__``, set after the class is made: ``dataclass`` reads the defining
module while it builds the class) and ``stateaware/launch/spec.py`` re-exports it, in every
revision. cloudpickle (submitit's pickler) pickles a class by name only when its module is
already imported; the launcher's modules import ``ProcessSpec`` from ``stateaware.launch.spec``
for that reason, so the submitting process always has it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ProcessSpec"]


@dataclass(frozen=True)
class ProcessSpec:
    """Everything a worker needs to run one process of a cohort, and nothing it must guess.

    A spec is pickled by submitit and unpickled in a fresh interpreter, so it holds only
    plain data. ``params`` is the cohort's ``params`` mapping merged with what the cohort
    kind's ``expand`` assigned to this process (a shape, a workload, a list of seeds).
    """

    run_id: str
    cohort: str  # the cohort's name (conf/cohort/<name>.yaml)
    kind: str  # the cohort kind: a module in stateaware.cohorts, or a dotted module path
    process_index: int
    processes: int  # how many processes the cohort has in all
    seed: int  # this process's seed: the cohort's base seed plus the process index
    source_hash: str  # computed by the launcher at submission
    out: str  # the results directory, absolute
    launcher: str  # inline | local | slurm
    timing: bool  # a timing cohort: one process per node unless told otherwise
    hardware: dict[str, Any] = field(default_factory=dict)  # the resolved hardware profile
    params: dict[str, Any] = field(default_factory=dict)
    # CPUs the worker pins itself to before the kind runs (launcher.cpus); None: not pinned
    cpus: tuple[int, ...] | None = None

    @property
    def hardware_name(self) -> str:
        return str(self.hardware.get("name", "cpu"))

    @property
    def scale(self) -> float:
        return float(self.hardware.get("scale", 1.0))

    def to_json(self) -> str:
        """The spec as canonical JSON (sorted keys), as stored in ``processes.spec_json``."""
        return json.dumps(asdict(self), sort_keys=True, default=str)


ProcessSpec.__module__ = "stateaware.launch.spec"  # the name pickles carry: see the NOTE above
