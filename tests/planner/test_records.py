"""Cards and plans as record rows: schema column names, and a round trip through Parquet."""

from __future__ import annotations

from pathlib import Path

import pytest

from stateaware.planner import load_card, plan
from stateaware.planner.records import card_from_profile_rows, policy_row, profile_rows
from stateaware.records.schema import IDENTITY, schema_for

HANDWRITTEN = Path(__file__).resolve().parents[1] / "data" / "cards" / "handwritten_large_sparse.json"


def _columns(table):
    identity = {f.name for f in IDENTITY}
    return {f.name for f in schema_for(table)} - identity


def test_profile_rows_use_schema_columns_and_rebuild_the_card():
    card = load_card(HANDWRITTEN)
    rows = profile_rows(card, workload="feature_queue", cell="large_sparse", live_segments=16)
    assert len(rows) == 48
    assert all(set(row) <= _columns("profiles") for row in rows)
    assert {row["card_digest"] for row in rows} == {card.digest}
    again = card_from_profile_rows(rows)
    assert again == card and again.digest == card.digest and dict(again.provenance) == dict(card.provenance)


def test_policy_rows_use_schema_columns_for_feasible_and_infeasible_plans():
    card = load_card(HANDWRITTEN)
    for budget in (1 << 30, 32 << 30):
        result = plan(card, budget, "joint")
        row = policy_row(result, method="joint", workload="feature_queue")
        assert set(row) <= _columns("policies")
        assert row["feasible"] == result.feasible and row["plan_digest"] == result.digest
        assert row["budget_bytes"] == budget
        assert row["policy"] == (list(result.policy) if result.feasible else None)  # never executed: no policy


def test_unknown_workload_columns_are_refused():
    card = load_card(HANDWRITTEN)
    with pytest.raises(ValueError, match="valid columns are: workload, cell"):
        profile_rows(card, shape="big")


def test_rows_write_through_the_record_writer_and_read_back(tmp_path):
    import pyarrow.parquet as pq

    from stateaware.records.writer import Identity, RecordWriter

    card = load_card(HANDWRITTEN)
    identity = Identity(
        run_id="r", cohort="planner-test", process_index=0, source_hash="0" * 64, hardware="cpu", scale=1.0
    )
    writer = RecordWriter(tmp_path, identity)
    writer.write("profiles", profile_rows(card, workload="feature_queue"), part="card")
    writer.write("policies", [policy_row(plan(card, b << 30, "joint")) for b in (1, 32)], part="plans")
    (profiles,) = tmp_path.glob("profiles/**/*.parquet")
    (policies,) = tmp_path.glob("policies/**/*.parquet")
    table = pq.read_table(profiles)
    assert table.num_rows == 48 and {f.name for f in IDENTITY} <= set(table.column_names)
    assert card_from_profile_rows(table.to_pylist()).digest == card.digest
    assert pq.read_table(policies).column("feasible").to_pylist() == [False, True]


def test_a_fixed_policys_plan_columns_make_a_row_and_unknown_or_disagreeing_columns_are_refused():
    from stateaware.cost_runtime.plans import fixed_plan, predict

    card = load_card(HANDWRITTEN)
    eager = ["eager"] * card.n_segments
    row = policy_row(fixed_plan(card, eager), "eager", seed=3, workload="feature_queue", budget_bytes=5)
    assert set(row) <= _columns("policies")
    assert (row["method"], row["planner"], row["feasible"], row["seed"], row["budget_bytes"]) == (
        "eager",
        None,
        True,
        3,
        5,
    )
    assert row["policy"] == eager and (row["predicted_peak_bytes"], row["predicted_ms"]) == predict(card, eager)
    assert row["plan_digest"] is None and row["frontier_size"] is None and row["card_digest"] == card.digest
    functional = policy_row(fixed_plan(card, None), "functional")
    assert functional["policy"] is None and functional["predicted_peak_bytes"] is None and functional["seed"] is None
    with pytest.raises(ValueError, match=r"unknown plan column\(s\) shape; valid columns are: planner, feasible"):
        policy_row({"shape": 1}, "eager")
    with pytest.raises(ValueError, match="budget_bytes=5 disagrees with the plan's budget 1073741824"):
        policy_row(plan(card, 1 << 30, "joint"), budget_bytes=5)
