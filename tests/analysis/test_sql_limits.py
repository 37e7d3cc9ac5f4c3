"""The limits of ``python -m stateaware.analysis sql`` (NOTE [ Limits of one invocation ] in analysis/store/sql.py).

Results stream: the table format prints at most ``--max-rows`` rows and says how many it
left out, CSV and JSON of any size take bounded memory; ``--timeout`` and ``--memory-limit``
stop a query with one line and exit 1; a ``--run-id`` naming no run exits 2 in ``sql`` and
``status``. Each command runs in-process (``main([...])``) unless its memory is measured.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from stateaware.analysis.__main__ import main
from stateaware.analysis.store.sql import COUNT_CAP, DEFAULT_MEMORY_LIMIT, format_result, query, run

from stateaware.records.writer import Identity, RecordWriter

RECURSIVE = "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT count(*) FROM t"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("results")
    for index in range(2):
        writer = RecordWriter(out, Identity("r1", "demo", index, "h" * 64, "cpu", 1.0))
        writer.write("processes", [{"status": "completed", "attempt": 1}], part="a001")
        writer.write("timings", {"method": ["joint"] * 3, "step": [0, 1, 2], "step_ms": [1.0, 2.0, 3.0]})
    RecordWriter(out, Identity("r1", "demo", 0, "h" * 64, "cpu", 1.0)).write(
        "runs", [{"processes": 2, "launcher": "inline"}], part="manifest"
    )
    return out


def _sql(results: Path, *args: str) -> list[str]:
    return ["sql", "--results", str(results), *args]


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


# -- the table format: at most --max-rows rows, and how many more ---------------------------


def test_the_table_shows_max_rows_and_counts_the_rest(results, capsys):
    assert main(_sql(results, "--max-rows", "5", "SELECT * FROM range(50000)")) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["range", "-----", "    0"] and out[6] == "    4" and len(out) == 8
    assert out[7] == "(5 rows shown, 49995 more left out: raise --max-rows, or use --format csv for all of them)"


def test_a_huge_result_is_cut_and_counted_up_to_the_cap(results, capsys):
    start = time.monotonic()
    assert main(_sql(results, "--max-rows", "3", "SELECT * FROM range(50000000)")) == 0
    assert time.monotonic() - start < 30  # counts COUNT_CAP rows at most, never all 50 million
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 6 and out[-1].startswith(f"(3 rows shown, over {COUNT_CAP} more left out")


@pytest.mark.parametrize("total", [0, 1, 5])
def test_a_result_that_fits_keeps_its_row_count(results, capsys, total):
    assert main(_sql(results, "--max-rows", "5", f"SELECT * FROM range({total})")) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"({total} row{'s' if total != 1 else ''})"


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_streamed_output_is_what_the_formats_always_printed(results, fmt):
    text = (
        "SELECT NULL AS n, 1.5 AS d, 'nan'::DOUBLE AS f, [1, 2] AS l, {'a': [1]} AS s, DATE '2024-01-02' AS dt, "
        "true AS b, 'x,\"y' AS q, INTERVAL 1 DAY AS i, '\\x01'::BLOB AS bl FROM range(3); "
        "SELECT 1 AS one WHERE false; SELECT * FROM timings ORDER BY ALL"
    )
    out = io.StringIO()
    run(results, text, out, fmt=fmt)
    assert out.getvalue() == "\n\n".join(format_result(n, r, fmt) for n, r in query(results, text)) + "\n"


# -- csv and json: streamed in bounded memory -------------------------------------------------

#: 300,000 rows of 8 distinct integers: held as Python tuples they take over 90 MB (the
#: ``fetchall`` of before; its formatted text came on top: +170 MB for CSV, +650 MB for JSON
#: measured); streamed, a few chunks' worth (+20 to +30 MB measured, mostly DuckDB's buffers).
ROWS = 300_000
WIDE = "SELECT " + ", ".join(f"range + {i} AS c{i}" for i in range(8)) + " FROM range({n})"
GROWTH_MIB = 64


def _peak_rss_mib(results: Path, *args: str) -> int:
    """The peak resident memory of one ``sql`` command in a fresh process, output to /dev/null."""
    command = [sys.executable, "-m", "stateaware.analysis", *_sql(results, *args)]
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, child.stderr.read() if child.stderr else ""
    return usage.ru_maxrss // 1024  # KiB on Linux


@pytest.fixture(scope="module")
def baseline_mib(results) -> int:
    return _peak_rss_mib(results, "--format", "csv", WIDE.format(n=1000))


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_csv_and_json_stream_in_bounded_memory(results, baseline_mib, fmt):
    row = tuple(range(ROWS, ROWS + 8))
    held_mib = ROWS * (sys.getsizeof(row) + sum(map(sys.getsizeof, row))) / 2**20
    assert held_mib > GROWTH_MIB  # the test can fail: holding the rows alone would cross the bound
    assert _peak_rss_mib(results, "--format", fmt, WIDE.format(n=ROWS)) - baseline_mib < GROWTH_MIB


# -- --timeout and --memory-limit: one line, exit 1 -------------------------------------------


def test_timeout_stops_a_runaway_recursive_query(results, capsys):
    start = time.monotonic()
    assert main(_sql(results, "--timeout", "1", RECURSIVE)) == 1
    assert time.monotonic() - start < 15
    captured = capsys.readouterr()
    assert "stopped after --timeout 1 s" in _one_error_line(captured.err) and captured.out == ""


def test_timeout_stops_a_stream_and_says_so(results, capsys):
    assert main(_sql(results, "--timeout", "1", "--format", "csv", "SELECT * FROM range(10000000000)")) == 1
    captured = capsys.readouterr()
    assert "stopped after --timeout 1 s" in _one_error_line(captured.err)
    assert captured.out.startswith("range\n0\n1\n")  # what was written by then stays written


def test_timeout_stops_a_huge_cross_join(results, capsys):
    text = "SELECT count(*) FROM range(1000000) a, range(1000000) b WHERE hash(a.range + b.range) = 0"
    assert main(_sql(results, "--timeout", "1", text)) == 1
    assert "--timeout" in _one_error_line(capsys.readouterr().err)


def test_the_memory_limit_stops_a_query_with_one_line_and_spills_nothing(results, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # DuckDB's default spill folder is ./.tmp
    text = "SELECT count(*) FROM (SELECT * FROM range(30000000) ORDER BY random())"
    assert main(_sql(results, "--memory-limit", "64MB", text)) == 1
    assert "stopped at --memory-limit 64MB" in _one_error_line(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == [] and not (results / ".tmp").exists()


def test_the_memory_limit_is_duckdbs(results, capsys):
    assert main(_sql(results, "--format", "csv", "SELECT current_setting('temp_directory') AS t")) == 0
    assert capsys.readouterr().out == 't\n""\n'  # empty: no folder to spill into
    assert (
        main(_sql(results, "--memory-limit", "1GiB", "--format", "csv", "SELECT current_setting('memory_limit')")) == 0
    )
    assert capsys.readouterr().out.splitlines()[1] == "1.0 GiB"
    # The default is not read by DuckDB while parsing the arguments: it is the connection's.
    assert main(_sql(results, "--format", "csv", "SELECT current_setting('memory_limit')")) == 0
    default = duckdb.connect(":memory:", config={"memory_limit": DEFAULT_MEMORY_LIMIT})
    assert (
        capsys.readouterr().out.splitlines()[1]
        == default.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    )


# -- bad values: one line, exit 2 ---------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("--timeout", "0"),
        ("--timeout", "-5"),
        ("--timeout", "soon"),
        ("--timeout", "nan"),
        ("--timeout", "inf"),
        ("--timeout", "1e308"),
        ("--max-rows", "0"),
        ("--max-rows", "99999999999999999999999"),
        ("--max-rows", "ten"),
        ("--memory-limit", "lots"),
        ("--memory-limit", "100"),
        ("--memory-limit=-1GB",),
    ],
)
def test_bad_limit_values_are_one_line_naming_the_option(results, capsys, args):
    with pytest.raises(SystemExit) as exited:
        main(_sql(results, *args, "SELECT 1"))
    assert exited.value.code == 2
    line = _one_error_line(capsys.readouterr().err.replace("python -m stateaware.analysis sql: error:", "error:"))
    assert args[0].split("=")[0] in line


# -- --run-id naming no run: exit 2 in sql and status, as in report and check ------------------


def test_an_unknown_run_id_exits_2_in_sql(results, capsys):
    assert main(_sql(results, "--run-id", "r1", "--run-id", "nope", "SELECT count(*) FROM timings")) == 2
    captured = capsys.readouterr()
    assert "--run-id ['nope'] not in the results" in _one_error_line(captured.err) and captured.out == ""
    assert main(_sql(results, "--run-id", "r1", "--format", "csv", "SELECT count(*) AS n FROM timings")) == 0
    assert capsys.readouterr().out == "n\n6\n"


def test_an_unknown_run_id_exits_2_in_status(results, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["status", "--results", str(results), "--run-id", "nope"])
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert "--run-id ['nope'] not in the results" in _one_error_line(captured.err) and captured.out == ""
    assert main(["status", "--results", str(results), "--run-id", "r1", "--format", "csv"]) == 0
    assert capsys.readouterr().out.count("\ndemo,r1,") == 2


# -- the help says it ---------------------------------------------------------------------------


def test_the_help_names_each_limit_and_its_default(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["sql", "--help"])
    assert exited.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    for text in ("--max-rows N", "(default: 10000)", "--timeout SECONDS", "(default: 300)", "--memory-limit SIZE"):
        assert text in shown
    assert "(default: 2GB)" in shown and "50%" in shown and "exit 1" in shown and "EXPLAIN ANALYZE" in shown
    with pytest.raises(SystemExit):
        main(["status", "--help"])
    assert "a run not in the results exits 2" in " ".join(capsys.readouterr().out.split())
