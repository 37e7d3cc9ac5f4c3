"""Every timing cohort at a tiny scale: counts, semantic checks, infeasible plans, measured peaks.

The cohorts' own YAML files are loaded and run through ``expand`` and ``run`` with a tiny
hardware profile (the CPU profile's structure at a few KiB), so the tests exercise exactly
what ``python -m stateaware cohort=NAME`` runs, in seconds.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest
import stateaware.conf
from omegaconf import OmegaConf
from stateaware.cohorts import timing

from stateaware.cost_runtime.cells import cells_of, shape_of
from stateaware.cost_runtime.frozen_cards import freeze
from stateaware.cost_runtime.measure import PEAK_SOURCES
from stateaware.cost_runtime.profile import profile_card
from stateaware.launch.spec import ProcessSpec
from stateaware.records.writer import Identity, RecordWriter

COHORTS = Path(stateaware.conf.__file__).parent / "cohort"

LARGE = {"workload": "feature_queue", "buffer_bytes": 65536, "live_segments": 8, "width": 128, "batch": 128, "rank": 4}
SMALL = {**LARGE, "width": 4, "batch": 2, "rank": 1}


def tiny_hardware(cards_dir: Path, frozen: dict | None = None) -> dict:
    return {
        "name": "cpu",
        "device": "cpu",
        "scale": 1 / 2048,
        "params": {
            "cost_runtime": {
                "byte_scale": 1 / 2048,
                "granularity_bytes": 256,
                "threads": None,
                "budget_rule": "relative",
                "profile_repeats": 1,
                "cards_dir": str(cards_dir),
                "cells": {
                    "large_sparse": {**LARGE, "write_fraction": 0.001},
                    "large_dense": {**LARGE, "write_fraction": 1.0},
                    "small_sparse": {**SMALL, "write_fraction": 0.001},
                    "small_dense": {**SMALL, "write_fraction": 1.0},
                },
                "calibration": {"buffers": {64: 1024, 1024: 4096}, "width": 4, "batch": 2, "rank": 1},
                "three_workload": {
                    "buffer_bytes": 4096,
                    "write_fraction": 0.001,
                    "live_segments": 6,
                    "width": 4,
                    "batch": 2,
                    "rank": 1,
                },
                "frozen_cards": frozen or {},
                "overrides": {"three_workload": {"warmup": 1, "steps": 2}},
            }
        },
    }


def cohort(name: str, **params) -> dict:
    doc = OmegaConf.to_container(OmegaConf.load(COHORTS / f"{name}.yaml"), resolve=True)
    doc["params"].update({"warmup": 1, "steps": 2, **params})
    return doc


def freeze_tiny_cards(folder: Path) -> dict[str, str]:
    """Profile and freeze the tiny cards of large_sparse and the three three_workload cells
    under ``folder``: ``{cell: digest}`` (the session's ``tiny_timing_cards`` runs this once)."""
    hardware = tiny_hardware(folder)
    frozen = {}
    cells = {c["cell"]: c for c in cells_of({"cells": ["large_sparse"]}, hardware)}
    cells.update({c["cell"]: c for c in cells_of({"grid": "three_workload"}, hardware)})
    for name, cell in cells.items():
        doc = profile_card(shape_of(cell), seed=0, repeats=1, provenance={"cell": name})
        _, frozen[name] = freeze(doc, name, folder)
    return frozen


@pytest.fixture(scope="module")
def cards(tiny_timing_cards, tmp_path_factory):
    """Frozen tiny cards: large_sparse and the three three_workload cells, in a folder of this
    module's own (a copy of the session's, profiled once)."""
    folder, frozen = tiny_timing_cards
    return Path(shutil.copytree(folder, tmp_path_factory.mktemp("cards"), dirs_exist_ok=True)), dict(frozen)


def run_processes(tmp_path: Path, doc: dict, hardware: dict, processes: int, indices) -> duckdb.DuckDBPyConnection:
    extra = timing.expand(doc, hardware, processes)
    assert len(extra) == processes
    for i in indices:
        spec = ProcessSpec(
            run_id="r",
            cohort=doc["name"],
            kind="timing",
            process_index=i,
            processes=processes,
            seed=int(doc["seed"]) + i,
            source_hash="test",
            out=str(tmp_path),
            launcher="inline",
            timing=True,
            hardware=hardware,
            params={**doc["params"], **extra[i]},
        )
        timing.run(spec, RecordWriter(tmp_path, Identity("r", doc["name"], i, "test", "cpu", 1 / 2048)))
    con = duckdb.connect()
    for table in ("timings", "policies", "records", "profiles"):
        files = list(tmp_path.glob(f"{table}/**/*.parquet"))
        if files:
            con.execute(
                f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{tmp_path}/{table}/**/*.parquet', "
                "hive_partitioning=false, union_by_name=true)"
            )
    return con


def check_common(con, methods: int, timed: int, steps: int, processes: int):
    assert con.execute("SELECT count(*) FROM policies").fetchone()[0] == methods * processes
    # semantic checks: each executable method in FP32 and FP64, plus the negative control
    outcomes = dict(
        con.execute("SELECT check_name, list(DISTINCT outcome) FROM records GROUP BY check_name").fetchall()
    )
    assert outcomes["semantic"] == ["match"]
    assert (
        con.execute("SELECT count(*) FROM records WHERE check_name = 'semantic'").fetchone()[0] == 2 * timed * processes
    )
    # timings: (warmup + steps) rows per timed method per process, measured peaks only
    assert con.execute("SELECT count(*) FROM timings").fetchone()[0] == timed * steps * processes
    sources = {r[0] for r in con.execute("SELECT DISTINCT peak_source FROM timings").fetchall()}
    assert sources <= set(PEAK_SOURCES) and sources == {"torch_profiler"}
    assert (
        con.execute(
            "SELECT count(*) FROM timings WHERE peak_allocated_bytes IS NULL OR peak_allocated_bytes <= 0 "
            "OR step_ms IS NULL OR budget_bytes IS NULL"
        ).fetchone()[0]
        == 0
    )


@pytest.mark.slow
def test_fair44_runs_seven_methods_on_the_frozen_card(tmp_path, cards):
    folder, frozen = cards
    hardware = tiny_hardware(folder, frozen)
    con = run_processes(tmp_path, cohort("fair44"), hardware, 1, [0])
    check_common(con, methods=7, timed=7, steps=3, processes=1)
    digests = {r[0] for r in con.execute("SELECT DISTINCT card_digest FROM policies").fetchall()}
    assert digests == {frozen["large_sparse"]}
    # the budget lies below the measured eager anchor and every planned policy is feasible
    assert con.execute("SELECT bool_and(feasible) FROM policies").fetchone()[0]
    control = con.execute(
        "SELECT list(DISTINCT outcome) FROM records WHERE check_name = 'semantic_control'"
    ).fetchone()[0]
    assert control == ["diverge"]


def test_confirm32_records_eager_whole_infeasible_and_never_runs_it(tmp_path, cards):
    folder, frozen = cards
    hardware = tiny_hardware(folder, frozen)
    con = run_processes(tmp_path, cohort("confirm32"), hardware, 2, [0, 1])
    row = con.execute(
        "SELECT bool_or(feasible), count(*), bool_and(policy IS NULL), bool_and(predicted_peak_bytes IS NULL) "
        "FROM policies WHERE method = 'eager_whole'"
    ).fetchone()
    assert row == (False, 2, True, True)
    assert con.execute("SELECT count(*) FROM timings WHERE method = 'eager_whole'").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM records WHERE method = 'eager_whole'").fetchone()[0] == 0
    assert con.execute("SELECT feasible FROM policies WHERE method = 'joint' LIMIT 1").fetchone()[0]
    check_common(con, methods=7, timed=6, steps=3, processes=2)


def test_confirm_cohorts_refuse_a_missing_or_edited_frozen_card(tmp_path, cards):
    # Refused when the run is planned (the kind's expand: cells.check_references), before any process.
    folder, frozen = cards
    with pytest.raises(ValueError, match="names no frozen card for cell 'large_sparse'"):
        run_processes(tmp_path / "a", cohort("confirm44"), tiny_hardware(folder, {}), 1, [0])
    edited = tmp_path / "edited"
    edited.mkdir()
    source = next(folder.glob(f"large_sparse-{frozen['large_sparse'][:12]}.json"))
    (edited / source.name).write_text(source.read_text().replace('"ms": ', '"ms": 1', 1))
    hardware = tiny_hardware(edited, frozen)
    with pytest.raises(ValueError, match="edited after freezing"):
        run_processes(tmp_path / "b", cohort("confirm44"), hardware, 1, [0])


def test_confirm44_declares_its_prespecified_comparisons():
    doc = cohort("confirm44")
    assert [(c["numerator"], c["denominator"], c["metric"]) for c in doc["comparisons"]] == [
        ("joint", "eager_whole", "step_ms"),
        ("joint", "eager_whole", "peak_allocated_bytes"),
    ]
    assert doc["processes"] == 50 and doc["params"]["methods"] == [
        "eager",
        "whole",
        "regions",
        "functional",
        "agnostic",
        "eager_whole",
        "joint",
    ]


def test_pressure_measures_each_cells_card_and_shares_one_budget(tmp_path, cards):
    folder, frozen = cards
    hardware = tiny_hardware(folder, frozen)
    con = run_processes(tmp_path, cohort("pressure"), hardware, 4, [1, 2])
    budgets = con.execute("SELECT DISTINCT budget_bytes FROM policies").fetchall()
    assert len(budgets) == 1
    assert con.execute("SELECT count(DISTINCT cell) FROM profiles").fetchone()[0] == 2
    assert sorted(r[0] for r in con.execute("SELECT DISTINCT cell FROM policies").fetchall()) == [
        "large_sparse",
        "small_dense",
    ]
    timed = con.execute("SELECT count(*) FROM policies WHERE feasible").fetchone()[0]
    assert con.execute("SELECT count(*) FROM timings").fetchone()[0] == timed * 3


def test_calibration_expands_to_the_24_shapes_and_runs_one(tmp_path, cards):
    folder, _ = cards
    hardware = tiny_hardware(folder)
    doc = cohort("calibration")
    extra = timing.expand(doc, hardware, 24)
    cells = [e["cell"]["cell"] for e in extra]
    assert len(set(cells)) == 24
    assert {e["cell"]["live_segments"] for e in extra} == {1, 64}
    assert {e["cell"]["write_fraction"] for e in extra} == {0.001, 1.0}
    con = run_processes(tmp_path, doc, hardware, 24, [0])
    check_common(
        con,
        methods=6,
        timed=con.execute("SELECT count(*) FROM policies WHERE feasible").fetchone()[0],
        steps=3,
        processes=1,
    )
    # a scaled selection budget: 20 GiB times the profile's byte scale
    assert con.execute("SELECT DISTINCT budget_bytes FROM policies").fetchone()[0] == int(20 * 2**30 / 2048)


def test_three_workload_assigns_blocks_of_processes_and_applies_the_profiles_reduction(tmp_path, cards):
    folder, frozen = cards
    hardware = tiny_hardware(folder, frozen)
    doc = cohort("three_workload", warmup=50, steps=1000)
    extra = timing.expand(doc, hardware, 6)
    assert [e["cell"]["workload"] for e in extra] == ["feature_queue"] * 2 + ["prototype_memory"] * 2 + [
        "unrolled_recurrence"
    ] * 2
    assert extra[0]["steps"] == 2 and extra[0]["reduced_from"] == {"warmup": 50, "steps": 1000}
    con = run_processes(tmp_path, doc, hardware, 6, [2])
    check_common(con, methods=6, timed=6, steps=3, processes=1)
    assert con.execute("SELECT DISTINCT workload FROM timings").fetchall() == [("prototype_memory",)]


def test_timing_report_prints_ours_beside_the_papers_columns(tmp_path, cards):
    from stateaware.analysis.sections.timing import method_rows, render
    from stateaware.analysis.store.views import connect

    folder, frozen = cards
    hardware = tiny_hardware(folder, frozen)
    run_processes(tmp_path, cohort("confirm32"), hardware, 2, [0, 1])
    con = connect(tmp_path)
    rows = {r["method"]: r for r in method_rows(con)}
    assert list(rows) == ["eager", "whole", "regions", "functional", "agnostic", "eager_whole", "joint"]
    assert rows["eager_whole"]["processes"] == 0 and rows["eager_whole"]["mean_step_ms"] is None
    assert rows["joint"]["processes"] == 2 and rows["joint"]["fits"] == 2  # the plan fits when measured
    assert rows["eager"]["fits"] == 0  # eager exceeds the budget
    text = render(con)
    assert "| eager_whole | — | no (not run) |" in text
    assert "paper ms (wall, H100) | paper peak GiB | paper fits" in text and "| 3704.54 | 29.936 | 50/50 |" in text


def test_table8_rows_show_the_comparisons_they_are_given(tmp_path, cards):
    """The command's summary computes the comparisons before any report persisted them:
    render() takes them, and Table 8's interval column shows each workload's own."""
    from stateaware.analysis.sections.timing import render
    from stateaware.analysis.store.views import connect

    folder, frozen = cards
    hardware = tiny_hardware(folder, frozen)
    run_processes(tmp_path, cohort("three_workload"), hardware, 3, [0])  # process 0: feature_queue
    con = connect(tmp_path)
    given = [
        {
            "cohort": "three_workload",
            "subset": '{"workload": "feature_queue"}',
            "metric": "step_ms",
            "comparison": "regions/whole step time queue",
            "estimate": 0.5,
            "lower": 0.4,
            "upper": 0.625,
            "confidence": 0.99,
            "processes": 1,
        }
    ]
    row = next(
        line for line in render(con, ["three_workload"], given).splitlines() if line.startswith("| feature_queue |")
    )
    assert "| step_ms 0.5000 [0.4000,0.6250] |" in row
    bare = next(line for line in render(con, ["three_workload"]).splitlines() if line.startswith("| feature_queue |"))
    assert "| — |" in bare  # no report has persisted comparisons here


def test_an_inline_timing_process_leaves_the_callers_thread_count(tmp_path, cards):
    import torch

    folder, frozen = cards
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        hardware = tiny_hardware(folder, frozen)
        hardware["params"]["cost_runtime"]["threads"] = 1  # as the CPU profile declares
        run_processes(tmp_path, cohort("fair44"), hardware, 1, [0])
        assert torch.get_num_threads() == 2  # the profile's one thread applied inside the process only
    finally:
        torch.set_num_threads(before)


def test_a_method_whose_check_errors_is_recorded_as_error_not_timed_and_fails_verification(
    tmp_path, cards, monkeypatch
):
    # A broken method (here: a policy of the wrong length, as a planner bug would produce)
    # raises an unexpected ValueError in its semantic check. That is an `error` with its
    # type and message — not a `reject`, which would read as a refusal by design — and the
    # run must not verify: the method was declared, but never timed.
    from omegaconf import OmegaConf as OC
    from stateaware.analysis.store.verify import VerificationError, verify
    from stateaware.analysis.store.views import connect

    from stateaware.cost_runtime import method_steps as runner

    real = runner.semantic_checks

    def with_a_broken_method(shape, policies, **kwargs):
        return real(shape, {**policies, "regions": ("eager",)}, **kwargs)

    monkeypatch.setattr(runner, "semantic_checks", with_a_broken_method)
    folder, frozen = cards
    hardware = tiny_hardware(folder, frozen)
    doc = cohort("fair44")
    con = run_processes(tmp_path, doc, hardware, 1, [0])
    rows = con.execute(
        "SELECT precision, outcome, exception_type, exception_message FROM records "
        "WHERE method = 'regions' ORDER BY precision"
    ).fetchall()
    assert rows == [(p, "error", "ValueError", "policy has 1 entries for 8 segments") for p in ("fp32", "fp64")]
    assert con.execute("SELECT count(*) FROM timings WHERE method = 'regions'").fetchone()[0] == 0
    assert con.execute("SELECT count(DISTINCT method) FROM timings").fetchone()[0] == 6

    manifest = RecordWriter(tmp_path, Identity("r", doc["name"], -1, "test", "cpu", 1 / 2048))
    manifest.write(
        "runs",
        [
            {
                "launcher": "inline",
                "processes": 1,
                "config_yaml": OC.to_yaml(OC.create({"cohort": {**doc, "timing": True}})),
            }
        ],
        part="manifest",
    )
    RecordWriter(tmp_path, Identity("r", doc["name"], 0, "test", "cpu", 1 / 2048)).write(
        "processes", [{"status": "completed", "attempt": 1}], part="a001"
    )
    with pytest.raises(VerificationError) as raised:
        verify(connect(tmp_path))
    assert (
        "run 'r': 1 declared process x method cell(s) were not timed and have no infeasible plan (methods declared: "
        "eager, whole, regions, functional, agnostic, eager_whole, joint): process 0 method 'regions': semantic "
        "check error (fp32): ValueError: policy has 1 entries for 8 segments"
    ) in str(raised.value)
