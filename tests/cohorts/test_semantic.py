"""The semantic cohort at 2 seed keys: exact record counts, outcomes, phases and Table 2 SQL."""

from __future__ import annotations

import gzip
import json
import math
import re
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from stateaware.cohorts import semantic as kind

from stateaware.launch.spec import ProcessSpec
from stateaware.records.writer import Identity, RecordWriter
from stateaware.semantic_programs import records_per_seed

SEEDS = 2
BASE = 420000


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("semantic")
    (params,) = kind.expand({"name": "semantic", "seed": BASE, "params": {"seed_keys": SEEDS}}, {}, 1)
    spec = ProcessSpec(
        run_id="t",
        cohort="semantic",
        kind="semantic",
        process_index=0,
        processes=1,
        seed=BASE,
        source_hash="abc",
        out=str(out),
        launcher="inline",
        timing=False,
        hardware={"name": "cpu", "scale": 1.0, "device": "cpu"},
        params={"seed_keys": SEEDS, **params},
    )
    kind.run(spec, RecordWriter(out, Identity("t", "semantic", 0, "abc", "cpu", 1.0)))
    return out


@pytest.fixture(scope="module")
def table(results):
    return pq.read_table(results / "records", partitioning=None).to_pylist()


def test_expand_splits_the_fifty_seed_keys():
    params = kind.expand({"name": "semantic", "seed": BASE, "params": {"seed_keys": 50}}, {}, 5)
    assert [p["seeds"] for p in params] == [list(range(BASE + 10 * i, BASE + 10 * i + 10)) for i in range(5)]
    one_each = kind.expand({"name": "semantic", "seed": BASE, "params": {}}, {}, 50)
    assert [p["seeds"] for p in one_each] == [[BASE + i] for i in range(50)]
    with pytest.raises(ValueError, match="valid values are 1..50"):
        kind.expand({"name": "semantic", "seed": BASE, "params": {}}, {}, 51)


def test_record_count_follows_the_paper_structure(table):
    assert records_per_seed() == {"torch": 70, "jax": 48}  # x 50 keys = 3,500 + 2,400
    assert len(table) == SEEDS * 118
    assert Counter(r["backend"] for r in table) == {"torch": SEEDS * 70, "jax": SEEDS * 48}
    assert {r["seed"] for r in table} == {BASE, BASE + 1}


def test_outcomes_per_method(table):
    got = Counter((r["backend"], r["method"], r["outcome"]) for r in table)
    per_seed = {  # per seed key: 5 families x 2 precisions; hidden = 4, local = 4, raw copy = 2
        ("torch", "functional", "match"): 10,
        ("torch", "eager", "match"): 8,
        ("torch", "eager", "reject"): 2,
        ("torch", "reentrant", "match"): 4,
        ("torch", "reentrant", "reject"): 2,
        ("torch", "reentrant", "diverge"): 4,
        ("torch", "nonreentrant", "match"): 4,
        ("torch", "nonreentrant", "reject"): 2,
        ("torch", "nonreentrant", "diverge"): 4,
        ("torch", "reentrant_norng", "reject"): 2,
        ("torch", "reentrant_norng", "diverge"): 8,
        ("torch", "nonreentrant_norng", "reject"): 2,
        ("torch", "nonreentrant_norng", "diverge"): 8,
        ("torch", "transactional", "match"): 8,
        ("torch", "transactional", "reject"): 2,
        ("jax", "functional", "match"): 10,
        ("jax", "checkpoint", "match"): 10,
        ("jax", "inplace_eager", "reject"): 10,
        ("jax", "inplace_checkpoint", "reject"): 10,
        ("jax", "holder_eager", "match"): 4,
        ("jax", "holder_checkpoint", "reject"): 4,
    }
    assert got == {k: v * SEEDS for k, v in per_seed.items()}


def test_phases_exceptions_and_invocations(table):
    for r in table:
        if r["backend"] == "torch" and r["outcome"] == "reject":
            assert r["family"] == "raw_copy" and r["phase"] == "forward"
            assert "refer to a single memory location" in r["exception_message"]
        if r["backend"] == "torch" and r["outcome"] == "diverge":
            assert r["phase"] == "backward1" and r["exception_type"] is None
        if r["method"] == "holder_checkpoint":
            assert (r["phase"], r["exception_type"]) == ("state_readback", "UnexpectedTracerError")
        if r["method"].startswith("inplace"):
            assert (r["phase"], r["exception_type"]) == ("forward", "TypeError")
        if r["method"] == "transactional" and r["outcome"] == "match":
            assert (r["forward_calls"], r["recompute_calls"], r["backward_calls"]) == (3, 2, 2)
        if r["method"] == "functional":
            assert r["detail"] == "vs float64 oracle" and r["max_error"] <= r["tolerance"]


def test_hidden_families_decide_native_divergence(table):
    diverged = {
        (r["family"]) for r in table if r["method"] in ("reentrant", "nonreentrant") and r["outcome"] == "diverge"
    }
    assert diverged == {"hidden_strided", "hidden_views"}


def test_table2_sql_and_render(results):
    from stateaware.analysis.sections.replay_semantics import render, rows
    from stateaware.analysis.store.views import connect

    con = connect(results)
    got = rows(con)
    assert got[("torch", "transactional")]["m"] == 8 * SEEDS
    assert got[("jax", "holder_checkpoint")]["r"] == 4 * SEEDS
    text = render(con)
    assert "| Torch transactional nonreentrant | 16 | 4 | 0 | 20 | 2 | 400 | 100 | 0 |" in text
    assert "paper M" in text and f"Records: {118 * SEEDS} ({70 * SEEDS} Torch, {48 * SEEDS} JAX)" in text
    assert "Rows whose counts differ from the paper's" in text  # 2 keys, not the paper's 50


GOLDEN = Path(__file__).resolve().parents[1] / "data" / "semantic-records-420000.json.gz"
#: The columns a records row carries that describe the run, not the outcome.
_IDENTITY = {"run_id", "cohort", "process_index", "source_hash", "schema_version", "hardware", "scale"}


def _golden() -> list[dict]:
    """Seed key 420000's 118 records as the code wrote them before the cohort shared JAX's
    compilation cache and ran as two processes (written by that code, not by this test)."""
    from stateaware.records.schema import RENAMED

    with gzip.open(GOLDEN, "rt") as handle:  # written before columns were renamed: read under today's names
        return [{RENAMED.get(k, (k,))[0]: v for k, v in row.items()} for row in json.load(handle)]


def _located(value):
    """JAX's leaked-tracer messages name the file the code ran from (a checkout, or the run's
    snapshot) and module (``semantic`` before it was renamed ``semantic_programs``): where
    the code was, not what it recorded — so the path up to the module is replaced by a
    placeholder on both sides, and so are the line and column numbers after it (a
    reformatted or edited file moves them; the frames named stay compared)."""
    if not isinstance(value, str):
        return value
    value = re.sub(r"<package>/semantic(_programs)?/", "<programs>/", re.sub(r"\S*/stateaware/", "<package>/", value))
    return re.sub(r"(<programs>/\w+\.py)(:\d+)+", r"\1:<line>", value)


def _same_records(got: list[dict], want: list[dict]) -> None:
    """Column by column, every column but identity; floats exactly (NaN equal to NaN)."""
    key = lambda r: (r["backend"], r["family"], r["precision"], r["method"])  # noqa: E731
    got = [{k: _located(v) for k, v in r.items()} for r in got]
    want = [{k: _located(v) for k, v in r.items()} for r in want]
    got, want = sorted(got, key=key), sorted(want, key=key)
    assert [key(r) for r in got] == [key(r) for r in want]
    columns = set(want[0])
    assert {c for c in got[0] if got[0][c] is not None} - _IDENTITY <= columns
    for column in sorted(columns):
        a, b = [r.get(column) for r in got], [r[column] for r in want]
        same = [
            x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
            for x, y in zip(a, b, strict=True)
        ]
        differing = [(key(r), x, y) for r, x, y, s in zip(got, a, b, same, strict=True) if not s]
        assert all(same), f"column {column!r} differs: {differing[:3]}"


def test_records_are_those_the_code_wrote_before_it_was_made_cheaper(table):
    _same_records([r for r in table if r["seed"] == BASE], _golden())


@pytest.mark.slow
def test_fresh_processes_sharing_the_jax_cache_write_the_same_records(compose, tmp_path, sql):
    """Two runs of one key in fresh processes: the first fills the run folder's JAX
    compilation cache, the second loads from it; both write the golden records."""
    from stateaware.cli import run

    for run_id in ("cold", "warm"):
        cfg = compose(
            "cohort=semantic",
            "processes=1",
            "launcher=local",
            f"out={tmp_path}",
            f"run_id={run_id}",
            "cohort.params.seed_keys=1",
        )
        assert run(cfg, progress=False) == 0
        if run_id == "cold":
            assert any((tmp_path / ".cache" / "jax").iterdir())  # the cache was written
    for run_id in ("cold", "warm"):
        table = pq.read_table(tmp_path / "records" / "cohort=semantic" / f"run_id={run_id}", partitioning=None)
        _same_records(table.to_pylist(), _golden())
