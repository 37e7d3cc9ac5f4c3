"""Stability flags, the declared clock of the comparisons and `check` / `report --strict`, on
synthetic records written through the RecordWriter."""

from __future__ import annotations

import statistics
from datetime import UTC, datetime
from pathlib import Path

import pytest
from stateaware.analysis.__main__ import main as analysis_main
from stateaware.analysis.report import build_report
from stateaware.analysis.stats import stability
from stateaware.analysis.stats.comparisons import compute_comparisons, declared_clock_of
from stateaware.analysis.store.views import connect

from stateaware.records.writer import Identity, RecordWriter

HASH = "c" * 64
STEPS = 10


def config_yaml(clock: str | None = None, device: str = "cpu", threads: int | None = 1, **limits: float) -> str:
    stab = "".join(f"\n    {k}: {v}" for k, v in limits.items())
    return (
        f"cohort:\n  name: confirm44\n  comparisons_clock: {clock or 'null'}\n"
        "  comparisons:\n  - {name: joint/eager_whole step time, numerator: joint, denominator: eager_whole, "
        "metric: step_ms}\n"
        f"hardware:\n  name: cpu\n  device: {device}\n"
        f"  params:\n    cost_runtime:\n      threads: {threads or 'null'}\n"
        f"analysis:\n  stability:{stab or ' {}'}\n"
    )


def wall_cpu(process: int, method: str, step: int) -> tuple[float, float]:
    """Quiet steps: joint's CPU time 0.8 of eager_whole's; wall 5 % above CPU, +-1 % per step."""
    cpu = (8.0 if method == "joint" else 10.0) * (1 + 0.01 * (step % 3 - 1)) * (1 + 0.02 * process)
    return cpu * 1.05, cpu


def write_run(
    out: Path,
    *,
    processes: int = 4,
    run_id: str = "r1",
    config: str | None = None,
    other_share: dict[int, float] | None = None,
    noisy: dict[int, str] | None = None,
    waited: dict[int, str] | None = None,
    slow_wall: float = 1.0,
) -> None:
    """A completed timing run; ``noisy``/``waited`` give one method of a process wild or
    waiting steps, ``other_share`` a process's loaded context, ``slow_wall`` multiplies
    joint's wall time (not its CPU time) in every process."""
    other_share, noisy, waited = other_share or {}, noisy or {}, waited or {}
    RecordWriter(out, Identity(run_id, "confirm44", 0, HASH, "cpu", 0.001)).write(
        "runs",
        [
            {
                "launcher": "local",
                "processes": processes,
                "config_yaml": config or config_yaml(),
                "started_at": datetime(2026, 12, 1, tzinfo=UTC),
            }
        ],
        part="manifest",
    )
    for p in range(processes):
        w = RecordWriter(out, Identity(run_id, "confirm44", p, HASH, "cpu", 0.001))
        w.write(
            "processes",
            [
                {
                    "status": "completed",
                    "attempt": 1,
                    "other_cpu_share": other_share.get(p, 0.01),
                    "load_before": 0.3,
                    "load_after": 0.4,
                    "affinity": "0",
                }
            ],
            part="a001",
        )
        for method in ("joint", "eager_whole"):
            rows = []
            for s in range(STEPS):
                wall, cpu = wall_cpu(p, method, s)
                if method == "joint":
                    wall *= slow_wall
                if noisy.get(p) == method and s % 2:
                    wall, cpu = wall * 2, cpu * 2
                if waited.get(p) == method:
                    wall *= 1.5
                rows.append(
                    {
                        "method": method,
                        "step": s,
                        "warmup": False,
                        "step_ms": wall,
                        "cpu_ms": cpu,
                        "device": "cpu",
                        "seed": p,
                        "workload": "feature_queue",
                        "cell": "large_sparse",
                        "peak_allocated_bytes": 1 << 20,
                        "peak_source": "torch_profiler",
                    }
                )
            rows.append(
                {
                    "method": method,
                    "step": 0,
                    "warmup": True,
                    "step_ms": 500.0,
                    "cpu_ms": 1.0,
                    "device": "cpu",
                    "seed": p,
                    "workload": "feature_queue",
                    "cell": "large_sparse",
                    "peak_allocated_bytes": 1 << 20,
                    "peak_source": "torch_profiler",
                }
            )
            w.write("timings", rows, part=f"method={method}")
            w.write(
                "policies",
                [
                    {
                        "method": method,
                        "planner": method,
                        "feasible": True,
                        "card_digest": "card0",
                        "plan_digest": f"plan-{method}",
                        "workload": "feature_queue",
                        "cell": "large_sparse",
                        "budget_bytes": 1 << 30,
                    }
                ],
                part=f"method={method}",
            )


def kinds(out: Path, **overrides) -> list[tuple[int, str | None, str]]:
    return [(f.process_index, f.method, f.kind) for f in stability.flags(connect(out), overrides)]


def test_a_quiet_run_has_no_flags_and_check_exits_0(tmp_path, capsys):
    write_run(tmp_path)
    assert kinds(tmp_path) == []
    assert analysis_main(["check", "--results", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == "stability: ok (no unstable method, no loaded process)"


def test_an_unstable_method_is_flagged_on_the_declared_clock(tmp_path, capsys):
    write_run(tmp_path, noisy={2: "joint"})
    assert kinds(tmp_path) == [(2, "joint", "unstable")]
    (flag,) = stability.flags(connect(tmp_path))
    cpu = [wall_cpu(2, "joint", s)[1] * (2 if s % 2 else 1) for s in range(STEPS)]  # steps alternate x1 and x2
    assert flag.clock == "cpu" and flag.value == pytest.approx(statistics.stdev(cpu) / statistics.mean(cpu), rel=1e-9)
    assert analysis_main(["check", "--results", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"confirm44 (r1) process 2 method joint: unstable: step-time CV (cpu clock) {flag.value:.3f} > 0.1" in out


def test_a_waiting_thread_is_flagged_wall_over_cpu_only_on_the_cpu_clock(tmp_path):
    write_run(tmp_path, waited={1: "eager_whole"})
    assert kinds(tmp_path) == [(1, "eager_whole", "waited")]
    (flag,) = stability.flags(connect(tmp_path))
    assert flag.value == pytest.approx(1.05 * 1.5)
    # on a wall-clock run (a GPU profile) the host thread's ratio says nothing: no flag
    other = tmp_path / "gpu"
    write_run(other, waited={1: "eager_whole"}, config=config_yaml(device="cuda", threads=None))
    assert kinds(other) == []


def test_a_loaded_process_is_flagged_and_thresholds_come_from_the_run_or_the_command(tmp_path, capsys):
    write_run(tmp_path, other_share={3: 0.48})
    assert kinds(tmp_path) == [(3, None, "loaded")]
    assert kinds(tmp_path, max_other_share=0.5) == []
    assert analysis_main(["check", "--results", str(tmp_path), "--max-other-share", "0.5"]) == 0
    lenient = tmp_path / "lenient"
    write_run(lenient, other_share={3: 0.48}, config=config_yaml(max_other_share=0.6))
    assert kinds(lenient) == []
    capsys.readouterr()
    assert analysis_main(["check", "--results", str(tmp_path), "--run-id", "nope"]) == 2
    assert "--run-id ['nope'] not in" in capsys.readouterr().err


def test_report_strict_refuses_a_flagged_run_naming_every_flag(tmp_path, capsys):
    write_run(tmp_path, other_share={0: 0.5}, noisy={1: "eager_whole"})
    assert analysis_main(["report", "--results", str(tmp_path), "--strict", "--draws", "200"]) == 1
    err = capsys.readouterr().err
    assert "refusing a strict report: stability: 2 flag(s) — 1 unstable, 1 loaded" in err
    assert "process 0: loaded: CPU share taken by other processes 0.500 > 0.1" in err
    assert "process 1 method eager_whole: unstable" in err
    assert not (tmp_path / "report" / "report.md").exists()
    # without --strict the report is written: its stability section counts the flags per run
    # and links the file beside it that lists every one
    report = build_report(tmp_path, draws=200)
    text = report.read_text()
    assert "## Stability of the timings" in text and "**Stability:** 2 flag(s)" in text
    assert "[stability.csv](stability.csv)" in text and "process 0: loaded" not in text
    section = text.split("## Stability of the timings", 1)[1]
    row = next(line for line in section.splitlines() if line.startswith("| confirm44 | `r1` |"))
    assert row.startswith("| confirm44 | `r1` | cpu | 4 | 1 | 0 | 1 | ")  # unstable, waited, loaded
    listed = (report.parent / "stability.csv").read_text().splitlines()
    assert listed[0] == "cohort,run_id,process_index,method,kind,clock,value,threshold"
    assert listed[1:] == ["confirm44,r1,0,,loaded,,0.5,0.1", listed[2]] and listed[2].startswith(
        "confirm44,r1,1,eager_whole,unstable,cpu,"
    )


def test_report_strict_accepts_a_quiet_run(tmp_path):
    write_run(tmp_path)
    assert analysis_main(["report", "--results", str(tmp_path), "--strict", "--draws", "200"]) == 0
    assert "**Stability:** ok" in (tmp_path / "report" / "report.md").read_text()


def test_comparisons_use_the_declared_clock_and_show_the_other(tmp_path):
    # joint's wall time is 1.0625x its CPU time: the clocks disagree about the ratio (0.80 vs 0.85)
    write_run(tmp_path, slow_wall=1.0625)
    spec = [
        {"name": "joint/eager_whole step time", "numerator": "joint", "denominator": "eager_whole", "metric": "step_ms"}
    ]
    con = connect(tmp_path)
    _, (cpu,) = compute_comparisons(con, "r1", spec, clock="cpu", draws=200)
    assert cpu.clock == "cpu" and cpu.comparison.metric == "cpu_ms"
    assert cpu.ratio.estimate == pytest.approx(0.8)
    assert cpu.other.clock == "wall" and cpu.other.ratio.estimate == pytest.approx(0.85)
    row = cpu.row()
    assert (row["clock"], row["other_clock"]) == ("cpu", "wall") and row["other_estimate"] == pytest.approx(0.85)
    _, (wall,) = compute_comparisons(con, "r1", spec, clock="wall", draws=200)
    assert wall.ratio.estimate == pytest.approx(0.85) and wall.other.ratio.estimate == pytest.approx(0.8)
    _, (plain,) = compute_comparisons(con, "r1", spec, draws=200)
    assert plain.clock is None and plain.ratio.estimate == pytest.approx(0.85)  # as written: step_ms
    text = build_report(tmp_path, draws=200).read_text()
    assert "| joint/eager_whole step time | cpu | 0.8000 | [0.8000, 0.8000] |" in text
    assert "| wall: 0.8500 [0.8500, 0.8500] |" in text
    assert "**Stability:** ok" in text


def test_records_without_cpu_times_fall_back_to_wall(tmp_path):
    write_run(tmp_path)
    import pyarrow as pa
    import pyarrow.parquet as pq

    # Parts as schema 3's writer left them: no cpu_ms column, and version 3 stamped on the
    # rows and the file (a part with no version stamp that lacks a column is foreign).
    for part in (tmp_path / "timings").rglob("*.parquet"):
        table = pq.read_table(part).drop_columns(["cpu_ms"])
        table = table.set_column(
            table.schema.get_field_index("schema_version"),
            "schema_version",
            pa.array([3] * table.num_rows, table.schema.field("schema_version").type),
        )
        metadata = {**(table.schema.metadata or {}), b"stateaware.schema_version": b"3"}
        pq.write_table(table.replace_schema_metadata(metadata), part)
    spec = [("joint", "eager_whole", "step_ms")]
    _, (result,) = compute_comparisons(connect(tmp_path), "r1", spec, clock="cpu", draws=200)
    assert result.clock == "wall" and result.other is None


@pytest.mark.parametrize(
    "clock, device, threads, want",
    [
        (None, "cpu", 1, "cpu"),
        (None, "cpu", 2, "wall"),
        (None, "cuda", None, "wall"),
        ("wall", "cpu", 1, "wall"),
        ("cpu", "cuda", None, "cpu"),
    ],
)
def test_the_declared_clock_of_a_recorded_config(clock, device, threads, want):
    assert declared_clock_of(config_yaml(clock, device, threads)) == want


def test_an_unknown_clock_is_refused_by_name():
    with pytest.raises(ValueError, match=r"comparisons_clock='gpu'; allowed values are wall, cpu or auto"):
        declared_clock_of(config_yaml("gpu"))


def test_the_end_of_run_summary_of_a_timing_cohort_names_its_flags(compose, tmp_path, capsys):
    from stateaware.cli import run

    # tests.kinds.clock writes steps of 0, 1, 2 ms (CV 1.0) and no CPU times: flagged on the wall clock
    cfg = compose(
        "cohort=demo",
        "processes=1",
        "launcher=inline",
        f"out={tmp_path}",
        "cohort.kind=tests.kinds.clock",
        "cohort.timing=true",
        "++cohort.params={rows:3}",
        "hardware=cpu",
        "analysis.stability.max_other_share=1.0",
    )  # the test machine's own load is not the point here
    assert run(cfg, progress=False) == 0
    out = capsys.readouterr().out
    assert "stability: 1 flag(s) — 1 unstable;" in out
    assert "process 0 method m: unstable: step-time CV (wall clock) 1.000 > 0.1" in out
    # a cohort that is not a timing cohort prints no stability lines
    assert run(compose("cohort=demo", "processes=1", "launcher=inline", f"out={tmp_path / 'b'}"), progress=False) == 0
    assert "stability" not in capsys.readouterr().out
