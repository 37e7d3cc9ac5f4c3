"""The report command: run selection, verification, sections for the cohorts present."""

from __future__ import annotations

import pytest

from stateaware.analysis.report import build_report, main
from stateaware.cli import run


def test_report_of_a_complete_run(compose, tmp_path):
    assert run(compose("cohort=demo", "processes=2", "launcher=inline", f"out={tmp_path}"), progress=False) == 0
    text = build_report(tmp_path).read_text()
    assert "| demo | `demo-" in text and "| 2 | complete (2 of 2 processes) |" in text
    assert "Partial analysis" not in text


def test_an_unfinished_run_stops_the_report_unless_partial(compose, tmp_path, capsys):
    cfg = compose("cohort=demo", "processes=3", "launcher=inline", f"out={tmp_path}", "cohort.kind=tests.kinds.clock",
                  "++cohort.params={fail_index:2}")
    assert run(cfg, progress=False) == 1
    assert main(["--results", str(tmp_path)]) == 2
    assert "process 2 ended 'failed'" in capsys.readouterr().err
    text = build_report(tmp_path, allow_partial=True).read_text()
    assert "partial (2 of 3 processes)" in text and "**Partial analysis:**" in text


def test_unknown_run_ids_are_named(compose, tmp_path):
    assert run(compose("cohort=demo", "processes=1", "launcher=inline", f"out={tmp_path}"), progress=False) == 0
    with pytest.raises(ValueError, match=r"--run-id \['nope'\] not in the results"):
        build_report(tmp_path, run_ids=["nope"])
