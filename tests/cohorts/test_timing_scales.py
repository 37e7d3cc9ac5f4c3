"""Each timing cohort's byte scale on the CPU profile: chosen once, carried everywhere.

The CPU profile gives a cohort its own byte scale through ``hardware.scales`` where a
cohort's conclusion depends on how a whole-state copy weighs against a segment's fixed
cost (``three_workload`` and ``calibration`` at 1/256, measured with ``bench/regime.py``);
the others keep the profile's 1/2048. The scale chosen must be the one the shapes use,
the one the frozen cards were measured at, the one every record carries and the one the
report's header prints.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import stateaware.conf
from omegaconf import OmegaConf

from stateaware.config import hardware_file
from stateaware.cost_runtime.cells import cells_of, effective_params
from stateaware.cost_runtime.frozen_cards import load_frozen

COHORTS = Path(stateaware.conf.__file__).parent / "cohort"

#: The timing cohorts and the byte scale each runs at on the CPU profile (docs/cohorts.md).
EXPECTED = {
    "calibration": 1 / 256,
    "three_workload": 1 / 256,
    "pressure": 1 / 2048,
    "fair44": 1 / 2048,
    "confirm44": 1 / 2048,
    "confirm32": 1 / 2048,
}

_MIB = 1 << 20


def _cohort(name: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(COHORTS / f"{name}.yaml"), resolve=True)


def _paper_mib(cell: dict) -> int:
    """The paper's buffer for a cell: Table 10's cells name theirs (``...-64MiB-...``); every
    other timing cell is the paper's 1 GiB feature queue (§9-§11)."""
    parts = cell["cell"].split("-")
    return int(parts[1].removesuffix("MiB")) if len(parts) == 4 else 1024


def test_every_timing_cohort_has_its_expected_scale():
    timing = sorted(p.stem for p in COHORTS.glob("*.yaml") if OmegaConf.load(p).get("kind") == "timing")
    assert timing == sorted(EXPECTED)  # a new timing cohort must choose its scale here
    for name, scale in EXPECTED.items():
        hardware = hardware_file("cpu", name)
        assert hardware["scale"] == scale, name
        assert hardware["params"]["cost_runtime"]["byte_scale"] == scale, name  # budgets follow it


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_shapes_and_frozen_cards_are_at_the_cohorts_scale(name):
    hardware = hardware_file("cpu", name)
    section = hardware["params"]["cost_runtime"]
    cells = cells_of(effective_params(_cohort(name), hardware), hardware)
    assert cells
    for cell in cells:
        assert cell["buffer_bytes"] == _paper_mib(cell) * _MIB * EXPECTED[name], cell["cell"]
        digest = (section.get("frozen_cards") or {}).get(cell["cell"])
        if digest:  # a card measured at another scale would price another shape
            card = load_frozen(str(digest), section.get("cards_dir"))
            assert card.provenance["scale"] == EXPECTED[name], cell["cell"]
            assert card.provenance["shape"]["buffer_bytes"] == cell["buffer_bytes"], cell["cell"]


@pytest.mark.slow
def test_each_timing_cohorts_records_and_report_header_carry_its_scale(tmp_path):
    # One process of every timing cohort, launched as `python -m stateaware` launches it on
    # the CPU profile (two methods, one warm-up-free measured step, to keep it short), into one results
    # folder; then every table's rows and the report's header for each cohort.
    import duckdb
    from stateaware.analysis.sections.timing import render
    from stateaware.analysis.store.views import connect

    from tests.conftest import launch_small_run

    out = tmp_path / "out"
    for name in sorted(EXPECTED):
        launch_small_run(
            out,
            f"{name}-scale",
            "hardware=cpu",
            "cohort.params.warmup=0",
            "cohort.params.steps=1",
            "cohort.params.methods=[eager,regions]",
            "cohort.comparisons=[]",  # one process: nothing to bootstrap
            cohort=name,
            processes=1,
        )
    con = duckdb.connect()
    seen: dict[str, set[float]] = {}
    for table in ("records", "timings", "policies", "processes"):
        rows = con.execute(
            f"SELECT cohort, list(DISTINCT scale) FROM read_parquet('{out}/{table}/**/*.parquet', "
            "hive_partitioning=false, union_by_name=true) GROUP BY cohort"
        ).fetchall()
        assert sorted(c for c, _ in rows) == sorted(EXPECTED), table
        for cohort, scales in rows:
            assert scales == [EXPECTED[cohort]], (table, cohort)
            seen.setdefault(cohort, set()).update(scales)
    timings = dict(
        con.execute(
            f"SELECT cohort, list(DISTINCT buffer_bytes) FROM read_parquet('{out}/timings/**/*.parquet', "
            "hive_partitioning=false, union_by_name=true) GROUP BY cohort"
        ).fetchall()
    )
    # Process 0 of calibration is its 64 MiB cell; every other cohort's first cell a 1 GiB queue.
    assert timings == {n: [int((64 if n == "calibration" else 1024) * _MIB * s)] for n, s in EXPECTED.items()}
    manifests = [json.loads(p.read_text()) for p in out.glob("runs/cohort=*/run_id=*/manifest.json")]
    assert {m["cohort"]: m["scale"] for m in manifests} == EXPECTED and len(manifests) == len(EXPECTED)

    report = render(connect(out))
    for name, scale in EXPECTED.items():
        section = report.split(f"### {name}\n", 1)[1].split("\n### ", 1)[0]
        header = next(line for line in section.splitlines() if line.startswith("Profile `cpu`"))
        assert f"(declared scale {scale:g}; cost-runtime byte scale {scale})" in header, header
