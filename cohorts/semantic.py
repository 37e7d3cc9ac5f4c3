"""Cohort kind ``semantic``: the Torch/JAX replay-semantics cohort (paper §5, Table 2).

Each process runs a contiguous block of seed keys (``expand``), and writes one records
part per seed key (``seed=<key>``), so a resumed process replaces, never duplicates,
a key's 118 rows. Processes import torch and jax once and reuse their compiled kernels
across keys; that warm-up (≈ 14 s of CPU: imports 3 s, torch 2 s, JAX's first compiles
9 s) costs more than ten keys' work (≈ 1.35 s per key), which is why the default is one
process per core of a 2-core machine, each with many keys, rather than one per key. The
run's processes share JAX's persistent compilation cache (``<out>/.cache/jax``), so a
process beyond the first ones, or a resumed run, loads compiled kernels instead of
compiling them again.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from stateaware.kinds import Param, ProcessSpec
from stateaware.records.write_paths import make_folder
from stateaware.records.writer import RecordWriter
from stateaware.semantic_programs import run_seed

#: Checked when the run is planned (stateaware.launch.params).
PARAMS = {
    "seed_keys": Param(int, minimum=1, maximum=100_000),  # consecutive seed keys from the cohort's seed
    "backends": Param(list, item=str, choices=("torch", "jax"), unique=True),
}

__all__ = ["expand", "run"]

#: The report section that renders this kind (cohorts/__init__.py, REPORT).
REPORT = ("stateaware.analysis.sections.replay_semantics",)


def expand(cohort: dict[str, Any], hardware: dict[str, Any], processes: int) -> list[dict[str, Any]]:
    """Split seed keys ``seed .. seed + seed_keys - 1`` into ``processes`` contiguous blocks."""
    params = cohort.get("params") or {}
    keys = int(params.get("seed_keys", 50))
    if processes < 1 or processes > keys:
        raise ValueError(
            f"cohort {cohort.get('name')!r}: processes={processes}; valid values are 1..{keys} "
            f"(params.seed_keys={keys}: every process needs at least one seed key)"
        )
    base = int(cohort["seed"])
    bounds = [round(i * keys / processes) for i in range(processes + 1)]
    return [{"seeds": list(range(base + lo, base + hi))} for lo, hi in itertools.pairwise(bounds)]


def run(spec: ProcessSpec, writer: RecordWriter) -> None:
    """Write every record of this process's seed keys, one part per key."""
    seeds = spec.params.get("seeds") or [spec.seed]
    backends = tuple(spec.params.get("backends", ("torch", "jax")))
    if "jax" in backends and spec.launcher != "inline":
        _share_jax_compilations(Path(spec.out), Path(spec.out) / ".cache" / "jax")
    for seed in seeds:
        part = f"seed={seed}"
        writer.write("records", run_seed(int(seed), backends), part=part)


def _share_jax_compilations(out: Path, folder: Path) -> None:
    """Point JAX's persistent compilation cache at ``folder`` (shared by a run's processes).

    Why: a fresh process's first seed key compiles ~180 small XLA programs (≈ 9 s of CPU
    on a laptop core), more than ten keys of actual work; with the cache, every later
    process of the run (and a resumed run) loads them instead (≈ 4 s). The cache holds
    XLA executables keyed by the program, its options and the JAX version, so what runs —
    and every record — is the same either way (tests/cohorts/test_semantic.py compares
    records against ones written before the cache existed). Only in a fresh process: JAX
    fixes its cache when it first compiles, so an inline run would leave the caller's
    interpreter writing into this run's folder for the rest of its life.
    """
    make_folder(folder, out)  # JAX writes there: no link below out may send it elsewhere
    import jax  # lazy: JAX loads only in the worker that runs this kind

    jax.config.update("jax_compilation_cache_dir", str(folder))
    # Every program here compiles in well under JAX's defaults (1 s, and a minimum entry
    # size): without lowering them nothing would be cached.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
