"""Cohort kind ``semantic``: the Torch/JAX replay-semantics cohort (paper §5, Table 2).

Each process runs a contiguous block of seed keys (``expand``), and writes one records
part per seed key (``seed=<key>``), so a resumed process replaces, never duplicates,
a key's 118 rows. Processes import torch and jax once and reuse their compiled kernels
across keys; that warm-up, not the programs, dominates a process on CPU, which is why
the default is a few processes with several keys each rather than one per key.
"""

from __future__ import annotations

from typing import Any

from stateaware.launch.spec import ProcessSpec
from stateaware.launch.params import Param
from stateaware.records.writer import RecordWriter

#: Checked when the run is planned (stateaware.launch.params).
PARAMS = {
    "seed_keys": Param(int, minimum=1),  # consecutive seed keys from the cohort's seed
    "backends": Param(list, item=str, choices=("torch", "jax")),
}

__all__ = ["expand", "run"]


def expand(cohort: dict[str, Any], hardware: dict[str, Any], processes: int) -> list[dict[str, Any]]:
    """Split seed keys ``seed .. seed + seed_keys - 1`` into ``processes`` contiguous blocks."""
    params = cohort.get("params") or {}
    keys = int(params.get("seed_keys", 50))
    if processes < 1 or processes > keys:
        raise ValueError(f"cohort {cohort.get('name')!r}: processes={processes}; valid values are 1..{keys} "
                         f"(params.seed_keys={keys}: every process needs at least one seed key)")
    base = int(cohort["seed"])
    bounds = [round(i * keys / processes) for i in range(processes + 1)]
    return [{"seeds": list(range(base + lo, base + hi))} for lo, hi in zip(bounds, bounds[1:])]


def run(spec: ProcessSpec, writer: RecordWriter) -> None:
    """Write every record of this process's seed keys, one part per key."""
    from stateaware.semantic import run_seed

    seeds = spec.params.get("seeds") or [spec.seed]
    backends = tuple(spec.params.get("backends", ("torch", "jax")))
    for seed in seeds:
        part = f"seed={seed}"
        writer.write("records", run_seed(int(seed), backends), part=part)
