"""The printed end-of-run summary of a timing kind reads the run's stored config only."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

STORED = [
    {"name": "stored joint/eager_whole time", "numerator": "joint", "denominator": "eager_whole", "metric": "step_ms"}
]


def _write_run(out, comparisons, processes: int = 4):
    """A two-method timing run of ``confirm44`` (four processes) whose recorded config declares ``comparisons``."""
    import yaml

    from stateaware.records.writer import Identity, RecordWriter

    rng = np.random.default_rng(3)
    ident = dict(run_id="r1", cohort="confirm44", source_hash="c" * 64, hardware="cpu", scale=0.001)
    config = yaml.safe_dump(
        {
            "cohort": {"name": "confirm44", "kind": "timing", "comparisons": comparisons},
            "hardware": {"name": "cpu", "params": {}},
        }
    )
    RecordWriter(out, Identity(process_index=0, **ident)).write(
        "runs",
        [
            {
                "launcher": "inline",
                "processes": processes,
                "config_yaml": config,
                "started_at": datetime(2026, 1, 1, tzinfo=UTC),
            }
        ],
        part="manifest",
    )
    for p in range(processes):
        w = RecordWriter(out, Identity(process_index=p, **ident))
        w.write("processes", [{"status": "completed", "attempt": 1}], part="a001")
        cell = {"workload": "feature_queue", "cell": "large_sparse", "budget_bytes": 44 << 20}
        w.write(
            "policies",
            [
                {"method": m, "planner": m, "feasible": True, "policy": ["eager"], **cell}
                for m in ("joint", "eager_whole")
            ],
            part="cell=large_sparse",
        )
        for method, factor in (("joint", 0.8), ("eager_whole", 1.0)):
            rows = [
                {
                    "method": method,
                    "step": s,
                    "warmup": False,
                    "step_ms": float(10 * factor * rng.uniform(0.97, 1.03)),
                    "peak_allocated_bytes": 42 << 20,
                    **cell,
                }
                for s in range(3)
            ]
            w.write("timings", rows, part=f"method={method}")


def test_the_summary_keeps_the_runs_comparisons_when_the_yaml_changes_after_the_run(tmp_path, monkeypatch):
    import stateaware.conf
    from stateaware.analysis.sections.timing import summary

    out = tmp_path / "results"
    _write_run(out, STORED)
    # Today's config folder: the cohort's YAML now declares another comparison.
    conf = tmp_path / "conf"
    (conf / "cohort").mkdir(parents=True)
    monkeypatch.setattr(stateaware.conf, "__file__", str(conf / "__init__.py"))
    yaml_file = conf / "cohort" / "confirm44.yaml"
    yaml_file.write_text(
        "name: confirm44\nkind: timing\ncomparisons:\n"
        "  - {name: edited peak, numerator: joint, denominator: eager_whole, "
        "metric: peak_allocated_bytes}\n"
    )
    before = summary(out, "confirm44", draws=200)
    yaml_file.write_text("name: confirm44\nkind: timing\ncomparisons: []\n")
    after = summary(out, "confirm44", draws=200)
    assert before == after
    assert "stored joint/eager_whole time" in before and "edited peak" not in before


def test_a_run_that_declared_no_comparisons_prints_none(tmp_path):
    from stateaware.analysis.sections.timing import summary

    out = tmp_path / "results"
    _write_run(out, [])
    assert "stored joint/eager_whole time" not in summary(out, "confirm44", draws=200)


def test_a_one_process_run_says_its_comparisons_need_more_processes_instead_of_failing(tmp_path):
    """The launch succeeded; its end-of-run summary must not turn that into a traceback."""
    from stateaware.analysis.sections.timing import summary

    out = tmp_path / "results"
    _write_run(out, STORED, processes=1)
    text = summary(out, "confirm44", draws=200)
    assert "Prespecified comparisons not computed: a paired process bootstrap needs at least 2 processes" in text
    assert "joint" in text  # the per-method table is still there
