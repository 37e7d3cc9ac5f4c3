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

REPO = Path(__file__).resolve().parents[2]
TINY = {
    "verify_checksum": False,
    "threads": 1,
    "fit": 72,
    "validation": 16,
    "test": 24,
    "split_seed": 0,
    "image": 12,
    "width": 4,
    "dim": 16,
    "queue_size": 64,
    "batch": 16,
    "encoder_epochs": 2,
    "probe_epochs": 2,
    "probe_batch": 32,
    "lr": 0.06,
    "probe_lr": 0.05,
    "budget_position": 0.5,
    "peaks": "epoch",
}  # fit 72 at batch 16: every epoch ends with a short batch of 8


HARDWARE = {"name": "cpu", "scale": 0.001953125, "device": "cpu"}


def _freeze_tiny_card(directory: Path, **shape) -> str:
    """Freeze the card of ``TINY`` (with ``shape`` overrides) under ``directory``; its digest."""
    import dataclasses

    from stateaware.app import encoder_card as card
    from stateaware.app.protocol import protocol_from
    from stateaware.cost_runtime.frozen_cards import freeze

    proto = protocol_from({**TINY, **shape})
    c = card.profile_protocol(proto, seed=0, repeats=1, provenance={"protocol": dataclasses.asdict(proto)})
    return freeze(c.to_dict(), "cifar-test", directory)[1]


def _run_process(out: Path, params: dict, index: int, run_id: str = "r1") -> None:
    from stateaware.cohorts import cifar

    spec = ProcessSpec(
        run_id=run_id,
        cohort="cifar",
        kind="cifar",
        process_index=index,
        processes=14,
        seed=2701 + index,
        source_hash="x",
        out=str(out),
        launcher="inline",
        timing=True,
        hardware=HARDWARE,
        params=params,
    )
    cifar.run(spec, RecordWriter(out, Identity(run_id, "cifar", index, "x", "cpu", HARDWARE["scale"])))


@pytest.fixture(scope="module")
def cohort_run(tmp_path_factory):
    """14 processes on one frozen card (as the CPU profile's own protocol runs)."""
    from stateaware.cohorts import cifar

    tmp = tmp_path_factory.mktemp("cifar")
    archive = data.write_archive(tmp / data.ARCHIVE_NAME, train=100, test=30, seed=1)
    cohort = yaml.safe_load((REPO / "conf/cohort/cifar.yaml").read_text())
    cohort["params"]["archive"] = str(archive)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("stateaware.cost_runtime.frozen_cards.CARDS_DIR", tmp / "cards")
        cohort["params"]["protocols"]["cpu"] = {**TINY, "card": _freeze_tiny_card(tmp / "cards")}
        out = tmp / "results"
        for i, extra in enumerate(cifar.expand(cohort, HARDWARE, 14)):
            _run_process(out, {**cohort["params"], **extra}, i)
    return out, cohort


def _q(out: Path, sql: str):
    con = duckdb.connect()
    for table in ("records", "artifacts", "epochs", "peaks", "policies", "profiles"):
        if not (out / table).is_dir():
            continue
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{out}/{table}/**/*.parquet')")
    return con.execute(sql).fetchall()


def test_expand_is_seed_major_and_checks_the_process_count(tmp_path, monkeypatch):
    from stateaware.cohorts import cifar

    cohort = yaml.safe_load((REPO / "conf/cohort/cifar.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    cohort["params"]["archive"] = "here.tar.gz"
    with pytest.raises(
        ValueError,
        match=r"cohort.params.archive=here.tar.gz: no file at .*here.tar.gz; put the "
        r"official .* python -m stateaware.app.data ",
    ):
        cifar.expand(cohort, {"name": "cpu"}, 14)
    (tmp_path / "here.tar.gz").write_bytes(b"")  # expand checks presence; the process checks the contents
    per = cifar.expand(cohort, {"name": "cpu"}, 14)
    assert [p["train_seed"] for p in per] == [2701] * 7 + [2702] * 7
    assert {p["archive"] for p in per} == {str(tmp_path / "here.tar.gz")}  # absolute: any working directory
    assert [p["method"] for p in per[:7]] == [
        "eager",
        "whole",
        "regions",
        "functional",
        "deferred",
        "agnostic",
        "joint",
    ]
    assert len(cifar.expand(cohort, {"name": "h100"}, 42)) == 42
    assert [p["train_seed"] for p in cifar.expand(cohort, {"name": "cpu"}, 21)][-1] == 2703
    for bad in (15, 49, 0):  # not 7 x seeds; seven seeds of six; none
        with pytest.raises(ValueError, match="7 x the number of seeds"):
            cifar.expand(cohort, {"name": "cpu"}, bad)
    with pytest.raises(ValueError, match="valid entries are: h100, cpu"):
        cifar.expand(cohort, {"name": "a100"}, 14)


@pytest.mark.slow
def test_seven_methods_give_byte_identical_score_files_within_a_seed(cohort_run):
    out, _ = cohort_run
    rows = _q(
        out,
        "SELECT seed, method, sha256, encoder_sha256, checksum_verified, test_accuracy FROM records "
        "ORDER BY seed, method",
    )
    assert len(rows) == 14
    by_seed: dict[int, set] = {}
    for seed, _method, sha, enc, verified, acc in rows:
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
    assert _q(out, "SELECT phase, count(*) FROM epochs GROUP BY phase ORDER BY phase") == [
        ("encoder", 28),
        ("probe", 28),
    ]
    # One peak before each of the two epoch resets and one at exit, per process.
    assert _q(out, "SELECT event, count(*) FROM peaks GROUP BY event ORDER BY event") == [
        ("before_reset", 28),
        ("exit", 14),
    ]
    assert _q(
        out,
        "SELECT count(*) FROM peaks WHERE peak_allocated_bytes > 0 AND peak_source = 'torch_profiler' "
        "AND checksum_verified = false",
    ) == [(42,)]
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
    from stateaware.analysis.sections import cifar_application as application
    from stateaware.analysis.store.views import connect

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
    assert "| paper allocated MiB |" in text and "| 2701 | yes | 7 | 1 |" in text and "| 2702 | yes | 7 | 1 |" in text
    assert f"{application.PAPER_T9['joint'][0]:.2f}" in text  # in the paper's column only
    # The paper's joint/whole: allocated ratio from its Table 9 column, time ratio and range from §12.
    assert "| 1.2241 | 1.008024 | 0.984483–1.019058 |" in text and "| 0.8851 | 1.007065 |" in text
    assert len(application.process_rows(con)) == 14
    png = application.figure3c(con, tmp_path / "fig3c.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in application.figures(con, tmp_path)] == ["figure3c-cifar.png"]  # what the report embeds


def _params(tmp_path: Path, method: str, **protocol) -> dict:
    archive = data.write_archive(tmp_path / data.ARCHIVE_NAME, train=100, test=30, seed=1)
    cohort = yaml.safe_load((REPO / "conf/cohort/cifar.yaml").read_text())
    return {
        **cohort["params"],
        "archive": str(archive),
        "train_seed": 2701,
        "method": method,
        "protocols": {"cpu": {**TINY, **protocol}},
    }


def test_processes_default_to_the_hardware_profiles_protocol(compose):
    from stateaware.config import resolve_hardware

    assert resolve_hardware(compose("cohort=cifar", "hardware=cpu")).processes == 14  # two seeds
    assert resolve_hardware(compose("cohort=cifar", "hardware=h100")).processes == 42  # the paper's six
    assert resolve_hardware(compose("cohort=cifar", "hardware=h100", "processes=7")).processes == 7


def test_every_process_uses_the_one_frozen_card(cohort_run):
    out, _ = cohort_run
    assert _q(out, "SELECT DISTINCT card_source FROM records") == [("frozen",)]
    assert _q(out, "SELECT count(DISTINCT card_digest) FROM policies") == [(1,)]
    # One card, so each planned method chose one policy for both seeds.
    assert _q(
        out,
        "SELECT method, count(DISTINCT seed), count(DISTINCT policy) FROM policies "
        "WHERE method IN ('agnostic', 'joint') GROUP BY method ORDER BY method",
    ) == [("agnostic", 2, 1), ("joint", 2, 1)]
    assert _q(out, "SELECT count(*) FROM records WHERE observed") == [(14,)]


def test_a_frozen_card_of_other_shapes_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr("stateaware.cost_runtime.frozen_cards.CARDS_DIR", tmp_path / "cards")
    digest = _freeze_tiny_card(tmp_path / "cards", width=6)
    with pytest.raises(ValueError, match=r"profiled at width=6; the protocol has width=4: freeze a card"):
        _run_process(tmp_path / "results", _params(tmp_path, "eager", card=digest), 0)


def test_a_quality_only_seed_runs_unobserved_and_stays_out_of_table9(tmp_path):
    from stateaware.analysis.sections import cifar_application as application
    from stateaware.analysis.store.views import connect

    out = tmp_path / "results"
    _run_process(out, _params(tmp_path, "eager", quality_only_seeds=[2701]), 0)
    assert not (out / "peaks").exists()  # no allocator reads at all
    assert _q(out, "SELECT seed, observed, card_source FROM records") == [(2701, False, "measured_in_process")]
    assert _q(out, "SELECT count(*) FROM epochs WHERE phase = 'encoder' AND peak_allocated_bytes IS NULL") == [(2,)]
    con = connect(out)
    assert application.table9_rows(con) == [] and application.comparison_rows(con) == []
    text = application.render(con)
    assert "| 2701 | no (quality only) | 1 | 1 |" in text and "quality-only (unobserved) seeds 2701" in text
    assert application.figures(con, tmp_path) == []


def test_an_infeasible_plan_is_recorded_and_never_executed(tmp_path):
    out = tmp_path / "results"
    _run_process(out, _params(tmp_path, "joint", budget_mib=0.001), 6, run_id="r2")  # 1 KiB: below every policy
    assert sorted(p.name for p in out.iterdir()) == ["policies"]
    assert _q(out, "SELECT method, seed, feasible, policy FROM policies") == [("joint", 2701, False, None)]


def test_split_sizes_shrink_in_the_protocols_ratio_on_a_small_archive(capsys):
    from stateaware.app.protocol import split_sizes

    assert split_sizes(40000, 10000, 50000) == (40000, 10000)  # the paper's split of the official archive
    assert split_sizes(None, None, 100) == (100, 0) and split_sizes(80, None, 100) == (80, 20)
    assert capsys.readouterr().err == ""
    assert split_sizes(1024, 256, 512) == (409, 103)  # 4:1 kept, and said so
    assert "fewer than fit=1024 + validation=256: using 409 + 103" in capsys.readouterr().err


def test_dry_run_lists_each_process_seed_and_method(compose, tmp_path, capsys):
    from stateaware.cli import run
    from stateaware.config import resolve_hardware

    archive = data.write_archive(tmp_path / "in" / data.ARCHIVE_NAME, train=20, test=10)
    cfg = resolve_hardware(
        compose(
            "cohort=cifar",
            "hardware=cpu",
            "dry_run=true",
            f"out={tmp_path / 'out'}",
            f"cohort.params.archive={archive}",
        )
    )
    assert run(cfg, progress=False) == 0
    printed = capsys.readouterr().out
    assert "shared params: archive, protocols, seeds" in printed
    assert "launch      method: joint; train_seed: 2702" in printed and "14 of 14 processes would launch" in printed
    assert not any((tmp_path / "out").rglob("*"))  # nothing written


def test_the_card_command_profiles_the_cohorts_protocol_and_records_the_cohorts_scale(tmp_path, capsys):
    import dataclasses
    import json

    from stateaware.app.protocol import protocol_from
    from stateaware.commands.encoder_card import main

    conf = tmp_path / "conf"
    (conf / "hardware").mkdir(parents=True)
    (conf / "cohort").mkdir()
    (conf / "hardware" / "lab.yaml").write_text("name: lab\ndevice: cpu\nscale: 1.0\nscales: {mine: 0.125}\n")
    (conf / "hardware" / "bare.yaml").write_text("name: bare\ndevice: cpu\n")
    (conf / "cohort" / "mine.yaml").write_text(
        yaml.safe_dump({"name": "mine", "kind": "cifar", "params": {"protocols": {"lab": TINY}}})
    )
    cards = tmp_path / "cards"
    assert (
        main(
            ["--conf", str(conf), "--hardware", "lab", "--cohort", "mine", "--repeats", "1", "--directory", str(cards)]
        )
        == 0
    )
    (path,) = cards.glob("cifar-lab-*.json")
    digest = capsys.readouterr().out.split()[1]
    assert path.name == f"cifar-lab-{digest[:12]}.json"
    provenance = json.loads(path.read_text())["provenance"]
    assert provenance["scale"] == 0.125  # the cohort's entry of scales, as a run of it records
    assert provenance["protocol"] == dataclasses.asdict(protocol_from(TINY))
    with pytest.raises(SystemExit) as exit_:
        main(["--conf", str(conf), "--hardware", "bare", "--cohort", "mine"])
    assert exit_.value.code == 2
    assert "no entry for hardware 'bare'; valid entries are: lab" in capsys.readouterr().err
