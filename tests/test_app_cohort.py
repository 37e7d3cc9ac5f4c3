"""cohort=cifar on CPU with a generated archive: 7 methods x 2 seeds, byte-identical test
scores within a seed, different across seeds, every table written."""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
import pytest
import yaml

from stateaware.app import data, scores
from stateaware.launch.spec import ProcessSpec
from stateaware.records.writer import Identity, RecordWriter

REPO = Path(__file__).resolve().parent.parent
TINY = {"verify_checksum": False, "seeds": 2, "threads": 1, "fit": 72, "validation": 16, "test": 24, "split_seed": 0,
        "image": 12, "width": 4, "dim": 16, "queue_size": 64, "batch": 16, "encoder_epochs": 2, "probe_epochs": 2,
        "probe_batch": 32, "lr": 0.06, "probe_lr": 0.05, "budget_position": 0.5,
        "peaks": "epoch"}  # fit 72 at batch 16: every epoch ends with a short batch of 8


@pytest.fixture(scope="module")
def cohort_run(tmp_path_factory):
    from stateaware.cohorts import cifar

    tmp = tmp_path_factory.mktemp("cifar")
    archive = data.write_archive(tmp / data.ARCHIVE_NAME, train=100, test=30, seed=1)
    cohort = yaml.safe_load((REPO / "conf/cohort/cifar.yaml").read_text())
    cohort["params"]["archive"] = str(archive)
    cohort["params"]["protocols"]["cpu"] = TINY
    hardware = {"name": "cpu", "scale": 0.001953125, "device": "cpu"}
    per = cifar.expand(cohort, hardware, cohort["processes"])
    out = tmp / "results"
    for i, extra in enumerate(per):
        spec = ProcessSpec(run_id="r1", cohort="cifar", kind="cifar", process_index=i, processes=len(per),
                           seed=cohort["seed"] + i, source_hash="x", out=str(out), launcher="inline", timing=True,
                           hardware=hardware, params={**cohort["params"], **extra})
        cifar.run(spec, RecordWriter(out, Identity("r1", "cifar", i, "x", "cpu", hardware["scale"])))
    return out, cohort


def _q(out: Path, sql: str):
    con = duckdb.connect()
    for table in ("records", "artifacts", "epochs", "peaks", "policies", "profiles"):
        if not (out / table).is_dir():
            continue
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{out}/{table}/**/*.parquet')")
    return con.execute(sql).fetchall()


def test_expand_is_seed_major_and_checks_the_process_count():
    from stateaware.cohorts import cifar

    cohort = yaml.safe_load((REPO / "conf/cohort/cifar.yaml").read_text())
    per = cifar.expand(cohort, {"name": "cpu"}, 14)
    assert [p["train_seed"] for p in per] == [2701] * 7 + [2702] * 7
    assert [p["method"] for p in per[:7]] == ["eager", "whole", "regions", "functional", "deferred", "agnostic", "joint"]
    assert len(cifar.expand(cohort, {"name": "h100"}, 42)) == 42
    with pytest.raises(ValueError, match="7 x the number of seeds"):
        cifar.expand(cohort, {"name": "cpu"}, 21)  # three seeds on a two-seed profile
    with pytest.raises(ValueError, match="valid entries are: h100, cpu"):
        cifar.expand(cohort, {"name": "a100"}, 14)


def test_seven_methods_give_byte_identical_score_files_within_a_seed(cohort_run):
    out, _ = cohort_run
    rows = _q(out, "SELECT seed, method, sha256, encoder_sha256, checksum_verified, test_accuracy FROM records "
                   "ORDER BY seed, method")
    assert len(rows) == 14
    by_seed: dict[int, set] = {}
    for seed, method, sha, enc, verified, acc in rows:
        by_seed.setdefault(seed, set()).add((sha, enc))
        assert verified is False and 0.0 <= acc <= 1.0
    assert sorted(by_seed) == [2701, 2702]
    assert all(len(v) == 1 for v in by_seed.values()), by_seed  # one score file (and encoder) per seed
    assert by_seed[2701] != by_seed[2702]  # and the seeds differ
    # The recorded hashes are the files' bytes; the score file has one record per test image.
    for name, path, size, sha in _q(out, "SELECT name, path, bytes, sha256 FROM artifacts"):
        blob = (out / path).read_bytes()
        assert len(blob) == size and hashlib.sha256(blob).hexdigest() == sha
        if name == "test_scores":
            assert len(scores.read_scores(out / path)) == 24


def test_epochs_peaks_and_policies_are_recorded(cohort_run):
    out, _ = cohort_run
    assert _q(out, "SELECT phase, count(*) FROM epochs GROUP BY phase ORDER BY phase") == [("encoder", 28), ("probe", 28)]
    # One peak before each of the two epoch resets and one at exit, per process.
    assert _q(out, "SELECT event, count(*) FROM peaks GROUP BY event ORDER BY event") == [("before_reset", 28),
                                                                                         ("exit", 14)]
    assert _q(out, "SELECT count(*) FROM peaks WHERE peak_allocated_bytes > 0 AND peak_source = 'torch_profiler' "
                   "AND checksum_verified = false") == [(42,)]
    plans = _q(out, "SELECT method, policy, budget_bytes, predicted_peak_bytes FROM policies ORDER BY method")
    assert len(plans) == 14
    for method, policy, budget, predicted in plans:
        if method == "functional":  # out-of-place queue: no per-segment policy, no prediction
            assert policy is None and predicted is None
            continue
        assert len(policy) == 7
        if method in ("agnostic", "joint"):
            assert predicted <= budget
        if method == "regions":
            assert policy == ["whole"] * 6 + ["region"]
    assert _q(out, "SELECT count(DISTINCT segment) FROM profiles") == [(7,)]


def test_report_renders_table9_beside_the_papers_and_figure3c(cohort_run, tmp_path):
    from stateaware.analysis import application
    from stateaware.analysis.views import connect

    out, _ = cohort_run
    con = connect(out)
    rows = application.table9_rows(con)
    assert [r["method"] for r in rows] == ["eager", "whole", "regions", "functional", "deferred", "agnostic", "joint"]
    assert all(r["seeds"] == 2 and r["min_allocated_mib"] > 0 for r in rows)
    # Eager and deferred eager run the same segments eagerly: the same observed peaks.
    by = {r["method"]: r for r in rows}
    assert by["eager"]["max_allocated_mib"] == by["deferred"]["max_allocated_mib"]
    comps = {c["comparison"]: c for c in application.comparison_rows(con)}
    assert sorted(comps) == ["joint/deferred", "joint/whole"] and comps["joint/whole"]["seeds"] == 2
    text = application.render(con)
    assert "| paper allocated MiB |" in text and "| 2701 | 7 | 1 |" in text and "| 2702 | 7 | 1 |" in text
    assert f"{application.PAPER_T9['joint'][0]:.2f}" in text  # in the paper's column only
    assert len(application.process_rows(con)) == 14
    png = application.figure3c(con, tmp_path / "fig3c.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in application.figures(con, tmp_path)] == ["figure3c-cifar.png"]  # what the report embeds


def test_an_infeasible_plan_is_recorded_and_never_executed(tmp_path):
    from stateaware.cohorts import cifar

    archive = data.write_archive(tmp_path / data.ARCHIVE_NAME, train=100, test=30, seed=1)
    cohort = yaml.safe_load((REPO / "conf/cohort/cifar.yaml").read_text())
    params = {**cohort["params"], "archive": str(archive), "train_seed": 2701, "method": "joint",
              "protocols": {"cpu": {**TINY, "budget_mib": 0.001}}}  # 1 KiB: below every policy
    hardware = {"name": "cpu", "scale": 0.001953125, "device": "cpu"}
    out = tmp_path / "results"
    spec = ProcessSpec(run_id="r2", cohort="cifar", kind="cifar", process_index=6, processes=7, seed=2707,
                       source_hash="x", out=str(out), launcher="inline", timing=True, hardware=hardware, params=params)
    cifar.run(spec, RecordWriter(out, Identity("r2", "cifar", 6, "x", "cpu", hardware["scale"])))
    assert sorted(p.name for p in out.iterdir()) == ["policies"]
    assert _q(out, "SELECT method, feasible, policy FROM policies") == [("joint", False, None)]
