"""The report command: run selection, verification, sections for the cohorts present."""

from __future__ import annotations

import pytest
from stateaware.analysis.__main__ import main
from stateaware.analysis.report import build_report

from stateaware.cli import run


def test_report_of_a_complete_run(compose, tmp_path):
    assert run(compose("cohort=demo", "processes=2", "launcher=inline", f"out={tmp_path}"), progress=False) == 0
    text = build_report(tmp_path).read_text()
    assert "| demo | `demo-" in text and "| 2 | complete (2 of 2 processes) |" in text
    assert "Partial analysis" not in text


def test_an_unfinished_run_stops_the_report_unless_partial(compose, tmp_path, capsys):
    cfg = compose(
        "cohort=demo",
        "processes=3",
        "launcher=inline",
        f"out={tmp_path}",
        "cohort.kind=tests.kinds.clock",
        "++cohort.params={fail_index:2}",
    )
    assert run(cfg, progress=False) == 1
    assert main(["report", "--results", str(tmp_path)]) == 2
    assert "process 2 ended 'failed'" in capsys.readouterr().err
    text = build_report(tmp_path, allow_partial=True).read_text()
    assert "partial (2 of 3 processes)" in text and "**Partial analysis:**" in text


def test_unknown_run_ids_are_named(compose, tmp_path):
    assert run(compose("cohort=demo", "processes=1", "launcher=inline", f"out={tmp_path}"), progress=False) == 0
    with pytest.raises(ValueError, match=r"--run-id \['nope'\] not in the results"):
        build_report(tmp_path, run_ids=["nope"])


# --- Sections come from the recorded kind ------------------------------------------------------

_TIMED_KIND = """
from stateaware.clocks import StepTime, time_step, timing_rows


def run(spec, writer):
    for method, n in (("slow", 40000), ("fast", 400)):
        times = [StepTime(i < 1, i if i < 1 else i - 1, *time_step(lambda: sum(range(n)))) for i in range(4)]
        writer.write("timings", timing_rows(times, method=method, precision="fp64", device="cpu", seed=spec.seed,
                                            peak_allocated_bytes=1000 + n, peak_source="tracemalloc"), part=method)
"""

_SECTIONED_KIND = """
REPORT = ("{section}",)


def run(spec, writer):
    writer.write("records", [{{"method": "m", "outcome": "match", "check_name": "mine"}}], part="main")
"""

_SECTION = """
from pathlib import Path

TITLE = "A section of my own"


def render(con):
    (n,) = con.execute("SELECT count(*) FROM records WHERE check_name = 'mine'").fetchone()
    return f"{n} rows of my own check"


def figures(con, out):
    path = Path(out) / "mine.png"
    path.write_bytes(b"not really a picture")
    return [path]
"""

_PLAIN_KIND = """
def run(spec, writer):
    writer.write("records", [{"method": "m", "outcome": "match"}] * 3, part="main")
"""


def _kind_dir(tmp_path, monkeypatch, name: str, kind_source: str, yaml_text: str, **modules: str) -> str:
    """Package ``name`` (its ``kind`` module and ``modules``) and cohort ``conf/cohort/<name>.yaml``,
    written outside the repository and importable from there; the Hydra search-path override."""
    import os
    import sys

    where = tmp_path / "mine"
    (where / "conf" / "cohort").mkdir(parents=True)
    (where / name).mkdir()
    (where / name / "__init__.py").write_text("")
    (where / name / "kind.py").write_text(kind_source)
    for module, source in modules.items():
        (where / name / f"{module}.py").write_text(source)
    (where / "conf" / "cohort" / f"{name}.yaml").write_text(yaml_text)
    monkeypatch.syspath_prepend(str(where))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(where), os.environ.get("PYTHONPATH", "")]))
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        sys.modules.pop(module)
    return f"hydra.searchpath=[file://{where / 'conf'}]"


def _yaml(name: str, kind: str, processes: int, comparisons: str = "[]") -> str:
    return (
        f"name: {name}\nkind: {kind}\ntiming: false\nprocesses: {processes}\nseed: 7\nparams: {{}}\n"
        f"comparisons: {comparisons}\n"
    )


def test_a_kind_added_with_its_yaml_renders_the_section_it_declares(compose, tmp_path, monkeypatch, sql):
    search = _kind_dir(
        tmp_path,
        monkeypatch,
        "tsa_sectioned_kind",
        _SECTIONED_KIND.format(section="tsa_sectioned_kind.section"),
        _yaml("tsa_sectioned_kind", "tsa_sectioned_kind.kind", 2),
        section=_SECTION,
    )
    out = tmp_path / "out"
    assert run(compose(search, "cohort=tsa_sectioned_kind", "launcher=inline", f"out={out}"), progress=False) == 0
    assert sql(out, "SELECT kind, report_sections FROM runs") == [
        ("tsa_sectioned_kind.kind", ["tsa_sectioned_kind.section"])
    ]
    text = build_report(out).read_text()
    assert "\n## A section of my own\n\n2 rows of my own check\n\n![mine](mine.png)\n" in text
    assert "## Cost runtime" not in text and "Cohorts without" not in text


def test_a_timing_kind_without_a_section_gets_the_generic_one_with_its_comparisons(compose, tmp_path, monkeypatch, sql):
    comparisons = '[{name: "fast/slow step time", numerator: fast, denominator: slow, metric: step_ms}]'
    search = _kind_dir(
        tmp_path,
        monkeypatch,
        "tsa_timed_kind",
        _TIMED_KIND,
        _yaml("tsa_timed_kind", "tsa_timed_kind.kind", 2, comparisons),
    )
    out = tmp_path / "out"
    assert (
        run(
            compose(search, "cohort=tsa_timed_kind", "launcher=inline", f"out={out}", "cohort.comparisons_clock=cpu"),
            progress=False,
        )
        == 0
    )
    assert sql(out, "SELECT kind, report_sections FROM runs") == [("tsa_timed_kind.kind", [])]
    text = build_report(out, draws=500).read_text()
    section = text.split("\n## tsa_timed_kind (cohort kind `tsa_timed_kind.kind`)\n", 1)[1]
    lines = section.splitlines()
    assert (
        "| method | processes | measured steps | median cpu ms | median wall ms | max peak allocated MiB | "
        "peak source |" in lines
    )
    fast = next(line for line in lines if line.startswith("| fast |"))
    assert fast.startswith("| fast | 2 | 6 |") and fast.endswith("| 0.001 | tracemalloc |")  # 1,400 bytes
    row = next(line for line in lines if line.startswith("| fast/slow step time |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "cpu" and float(cells[2]) < 1 and cells[6] == "yes"  # 100x less work: the interval is below 1
    lower, upper = (float(v) for v in cells[3].strip("[]").split(","))
    assert lower <= float(cells[2]) <= upper < 1


def test_a_generic_report_leads_with_how_sure_it_is(compose, tmp_path, monkeypatch, sql):
    """Flags beside the headline, an exact interval called exact, peaks in MiB, a figure of the
    table's step times, and no absolute path of this machine."""
    from stateaware.analysis import figures as figures_module
    from stateaware.analysis import generic

    comparisons = (
        '[{name: "fast/slow step time", numerator: fast, denominator: slow, metric: step_ms}, '
        '{name: "fast/slow peak", numerator: fast, denominator: slow, metric: peak_allocated_bytes}]'
    )
    search = _kind_dir(
        tmp_path,
        monkeypatch,
        "tsa_sure_kind",
        _TIMED_KIND,
        _yaml("tsa_sure_kind", "tsa_sure_kind.kind", 2, comparisons),
    )
    out = tmp_path / "out"
    # every process's step times vary (CV > 0), and nothing else can be flagged: unstable, 2 of 2
    strict = ["analysis.stability.max_cv=1e-9", "analysis.stability.max_wall_over_cpu=1e6"]
    strict.append("analysis.stability.max_other_share=1e6")
    cfg = compose(
        search, "cohort=tsa_sure_kind", "launcher=inline", f"out={out}", "cohort.comparisons_clock=cpu", *strict
    )
    assert run(cfg, progress=False) == 0
    ((run_id,),) = sql(out, "SELECT run_id FROM runs")
    drawn = []
    real = figures_module.step_times
    monkeypatch.setattr(generic, "step_times", lambda *a, **k: drawn.append(real(*a, **k)) or drawn[-1])
    text = build_report(out, draws=500).read_text()
    lines = text.splitlines()
    assert "Results: `..` (relative to this report)" in lines and str(tmp_path) not in text
    caveat = "2 of 2 processes flagged unstable: read with care"
    assert f"- **tsa_sure_kind** (`{run_id}`): {caveat} (every flag: the stability section)" in lines
    assert f"**Stability:** {caveat}; every flag in the stability section." in lines
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
        for line in lines
        if line.startswith("| ")
    }
    # every process's peak ratio is 1,400 / 41,000: a point interval, exact, with no confidence level
    assert rows["fast/slow peak"][2:5] == [f"{1400 / 41000:.4f}", f"exact: {1400 / 41000:.4f} in every process", "—"]
    assert rows["fast/slow step time"][4] == "0.9750" and rows["fast/slow step time"][3].startswith("[")
    assert rows["slow"][5:7] == [f"{41000 / 2**20:.3f}", "tracemalloc"]  # MiB, as every peak in the report
    (figure,) = drawn
    medians = dict(sql(out, "SELECT method, median(cpu_ms) FROM timings WHERE NOT warmup GROUP BY method"))
    assert figure.methods == ("fast", "slow") and figure.time_unit == "ms"
    assert figure.times == pytest.approx([medians["fast"], medians["slow"]], rel=1e-12)
    assert figure.labels == tuple(f"{medians[m]:.4g} ms" for m in ("fast", "slow"))
    assert rows["fast"][3] == f"{medians['fast']:.3f}"  # the table's median, the bar's length
    caption = f"tsa_sure_kind ({run_id}), 2 processes: median step time per method (cpu clock)"
    assert f"![{caption}](steps-tsa_sure_kind-{run_id}.png)" in lines and figure.path.exists()


def test_a_kind_with_no_section_and_no_timings_gets_one_line_of_counts(compose, tmp_path, monkeypatch):
    search = _kind_dir(
        tmp_path, monkeypatch, "tsa_plain_kind", _PLAIN_KIND, _yaml("tsa_plain_kind", "tsa_plain_kind.kind", 2)
    )
    out = tmp_path / "out"
    assert run(compose(search, "cohort=tsa_plain_kind", "launcher=inline", f"out={out}"), progress=False) == 0
    text = build_report(out).read_text()
    assert "\n## tsa_plain_kind (cohort kind `tsa_plain_kind.kind`)\n" in text
    assert "6 rows in tables `records` (6)." in text


def test_a_kind_whose_report_is_not_a_tuple_is_refused_when_planned(compose, tmp_path, monkeypatch):
    from stateaware.config import ConfigError
    from stateaware.launch.launcher import plan_run
    from stateaware.run_spec import RunSpec

    search = _kind_dir(
        tmp_path,
        monkeypatch,
        "tsa_bad_kind",
        'REPORT = "stateaware.analysis.sections.timing"\n' + _PLAIN_KIND,
        _yaml("tsa_bad_kind", "tsa_bad_kind.kind", 1),
    )
    with pytest.raises(ConfigError, match=r"cohort kind 'tsa_bad_kind.kind': REPORT must be a tuple of section"):
        plan_run(RunSpec.from_config(compose(search, "cohort=tsa_bad_kind", f"out={tmp_path / 'out'}")), "h" * 64)


def test_two_runs_of_one_cohort_render_one_section_each(compose, tmp_path, capsys):
    for run_id in ("first", "second"):
        assert (
            run(
                compose(
                    "cohort=demo",
                    "processes=1",
                    "launcher=inline",
                    f"out={tmp_path}",
                    f"run_id={run_id}",
                    "cohort.params.size=8",
                    "cohort.params.steps=2",
                    "cohort.params.warmup=0",
                ),
                progress=False,
            )
            == 0
        )
    assert main(["report", "--results", str(tmp_path), "--run-id", "first", "--run-id", "second"]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    assert "| demo | `first` |" in text and "| demo | `second` |" in text
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[:2] == [
        "## demo (cohort kind `demo`) — runs `first`",
        "## demo (cohort kind `demo`) — runs `second`",
    ]
    for run_id in ("first", "second"):
        section = text.split(f"— runs `{run_id}`\n", 1)[1].split("\n## ", 1)[0]
        assert f"### demo (`{run_id}`, 1 process)" in section and section.count("| matmul | 1 | 2 |") == 1
    # Without --run-id: the latest run only, under the plain heading; the other is listed with
    # the option that renders it.
    text = build_report(tmp_path).read_text()
    assert "## demo (cohort kind `demo`)\n" in text and "### demo (`first`" not in text
    assert "Rendered the latest complete run of each cohort" in text
    assert "| demo | `first` |" in text.split("Other runs in these results (not rendered):", 1)[1]
    assert "| `--run-id first` |" in text


def test_a_finite_suite_that_did_not_run_is_named_not_shown_as_zero(compose, tmp_path):
    assert (
        run(
            compose(
                "cohort=derivative", "processes=1", "launcher=inline", f"out={tmp_path}", "cohort.params.programs=3"
            ),
            progress=False,
        )
        == 0
    )
    text = build_report(tmp_path).read_text()
    section = text.split("## Independent derivative", 1)[1]
    assert "| §6 derivative programs | 3 | 1,024 | differs |" in section
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert [r.split(" | ")[0] for r in rows[1:]] == [
        "| §6 derivative programs",
        "| §6 version graph: exact output and gradient within tolerance",
        "| §6 max gradient disagreement (version graph vs forward Jacobian)",
        "| §6 final-storage control detected",
    ]
    assert (
        "Not run in these results: the byte suite (§6), the engine and complex-step suite (§7, Table 3), "
        "the joint-alias suite (Table 3, §7)."
    ) in section
    assert "### Engines by write density" not in section and "## Cost runtime" not in text


def test_a_report_checks_each_part_once_before_and_once_after_its_comparisons(compose, tmp_path, monkeypatch):
    """Parts are checked per scan, not per connection: the runs listed, the chosen runs' parts
    once, the comparisons once more after they were written, however many sections."""
    from stateaware.records.part_cache import PartChecks

    for run_id in ("first", "second"):
        assert (
            run(
                compose(
                    "cohort=demo",
                    "processes=2",
                    "launcher=inline",
                    f"out={tmp_path}",
                    f"run_id={run_id}",
                    "cohort.params.size=8",
                    "cohort.params.steps=2",
                    "cohort.params.warmup=0",
                ),
                progress=False,
            )
            == 0
        )
    before = sorted(p for p in tmp_path.rglob("*.parquet") if "report" not in p.relative_to(tmp_path).parts)
    checked = []
    real = PartChecks.inspect
    monkeypatch.setattr(
        PartChecks, "inspect", lambda self, path, *a, **k: checked.append(path) or real(self, path, *a, **k)
    )
    build_report(tmp_path, run_ids=["first", "second"], draws=200)
    after = sorted(p for p in tmp_path.rglob("*.parquet") if "report" not in p.relative_to(tmp_path).parts)
    listing = [p for p in before if p.relative_to(tmp_path).parts[0] in ("runs", "processes")]
    comparisons = [p for p in after if p.relative_to(tmp_path).parts[0] == "comparisons"]
    assert sorted(checked) == sorted(listing + before + comparisons)


def test_a_report_of_one_run_reads_no_other_runs_parts_but_their_listing(compose, tmp_path, monkeypatch):
    """Pruned: the other run costs its `runs` and `processes` parts (listed as not rendered), nothing more."""
    from stateaware.records.part_cache import PartChecks

    for run_id in ("first", "second"):
        overrides = ["cohort=demo", "processes=2", "launcher=inline", f"out={tmp_path}", f"run_id={run_id}"]
        overrides += ["cohort.params.size=8", "cohort.params.steps=2", "cohort.params.warmup=0"]
        assert run(compose(*overrides), progress=False) == 0
    checked = []
    real = PartChecks.inspect
    monkeypatch.setattr(
        PartChecks, "inspect", lambda self, path, *a, **k: checked.append(path) or real(self, path, *a, **k)
    )
    report = build_report(tmp_path, run_ids=["first"], draws=200).read_text()
    others = {p.relative_to(tmp_path).parts[0] for p in checked if "run_id=second" in p.parts}
    assert others == {"runs", "processes"}
    assert "`second`" in report  # still listed among the runs not rendered


# --- Explicit run choice ------------------------------------------------------------------------


def test_the_latest_complete_run_is_rendered_and_the_others_are_listed_with_their_run_id(compose, tmp_path):
    demo = ["cohort=demo", "launcher=inline", f"out={tmp_path}", "cohort.params.size=8", "cohort.params.steps=2"]
    assert run(compose(*demo, "processes=1", "run_id=good"), progress=False) == 0
    # A later run of the same cohort whose process 1 fails: the latest run, but not complete.
    failing = ["cohort.kind=tests.kinds.clock", "++cohort.params={fail_index:1}"]
    assert run(compose(*demo, "processes=2", "run_id=broken", *failing), progress=False) == 1
    text = build_report(tmp_path).read_text()
    head = text.split("\n## ", 1)[0]
    assert "| demo | `good` | 1 | complete (1 of 1 processes) |" in head
    assert "Rendered the latest complete run of each cohort" in head
    others = head.split("Other runs in these results (not rendered):", 1)[1]
    row = next(line for line in others.splitlines() if line.startswith("| demo | `broken` |"))
    assert row.endswith("| 2 | incomplete (1 of 2 processes completed) | `--run-id broken` |")
    # The listed option renders it (partially, since it did not complete), and `good` is listed.
    text = build_report(tmp_path, run_ids=["broken"], allow_partial=True).read_text()
    head = text.split("\n## ", 1)[0]
    assert "Rendered the runs named with `--run-id`." in head and "| demo | `broken` | 2 | partial" in head
    assert "| `--run-id good` |" in head


def test_a_cohort_without_a_complete_run_renders_its_latest_and_says_so(compose, tmp_path):
    failing = ["cohort.kind=tests.kinds.clock", "++cohort.params={fail_index:1}"]
    for run_id in ("older", "newer"):
        cfg = compose("cohort=demo", "launcher=inline", f"out={tmp_path}", "processes=2", f"run_id={run_id}", *failing)
        assert run(cfg, progress=False) == 1
    text = build_report(tmp_path, allow_partial=True).read_text()
    head = text.split("\n## ", 1)[0]
    assert "- demo: no complete run; rendered the latest, `newer`" in head
    assert "| demo | `newer` | 2 | partial (1 of 2 processes) |" in head and "| `--run-id older` |" in head
