"""The timing section and the command's summary read what the run recorded, not today's files."""

from __future__ import annotations

from stateaware.analysis.sections.timing import summary

from stateaware.launch.manifest import write_manifest
from stateaware.records.writer import Identity, RecordWriter
from tests.cohorts.test_timing import cards, cohort, run_processes, tiny_hardware  # noqa: F401 (fixture)


def test_the_summary_computes_the_comparisons_stored_with_the_run(tmp_path, cards):  # noqa: F811
    folder, frozen = cards
    hardware = tiny_hardware(folder, frozen)
    doc = cohort("confirm32")
    # The run was launched with a comparison today's conf/cohort/confirm32.yaml does not have.
    doc["comparisons"] = [
        {"name": "stored: whole/eager step time", "numerator": "whole", "denominator": "eager", "metric": "step_ms"}
    ]
    run_processes(tmp_path, doc, hardware, 2, [0, 1])
    for i in (0, 1):  # as the worker records a completed process
        RecordWriter(tmp_path, Identity("r", "confirm32", i, "test", "cpu", 1 / 2048)).write(
            "processes", [{"status": "completed", "attempt": 1}], part="a001"
        )
    write_manifest(
        tmp_path,
        {
            "run_id": "r",
            "cohort": "confirm32",
            "kind": "timing",
            "report_sections": ["stateaware.analysis.sections.timing"],
            "source_hash": "test",
            "processes": 2,
            "launcher": "inline",
            "hardware": "cpu",
            "scale": 1 / 2048,
            "git_commit": None,
            "git_dirty": None,
            "host": "h",
            "python": None,
            "torch": None,
            "jax": None,
            "cuda": None,
            "driver": None,
            "launches": 1,
            "started_at": "2026-01-01T00:00:00+00:00",
            "config": {"cohort": doc, "hardware": hardware},
        },
    )
    rows = [line for line in summary(tmp_path, "confirm32", draws=200).splitlines() if line.startswith("| stored")]
    assert len(rows) == 1 and rows[0].startswith("| stored: whole/eager step time | ")
    assert "joint/regions step time" not in summary(tmp_path, "confirm32", draws=200)  # today's YAML's is not used
