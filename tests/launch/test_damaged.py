"""Resume with damaged or foreign parts: no traceback; the file is moved to OUT/.quarantine/
(one line per file), its process runs again, and the views hold exactly one copy of every row."""

from __future__ import annotations

import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stateaware.cli import run


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    """The part-check cache of these tests' own (never the user's)."""
    monkeypatch.setenv("STATEAWARE_CACHE", str(tmp_path / "cache"))


def _clock(compose, out, *extra):
    return compose(
        "cohort=demo",
        "cohort.kind=tests.kinds.clock",
        "++cohort.params={sleep_s:0.0,rows:3}",
        f"out={out}",
        "launcher=inline",
        "processes=3",
        *extra,
    )


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _zero(path):
    path.write_bytes(b"")


def _random(path):
    path.write_bytes(os.urandom(max(64, path.stat().st_size)))


def _foreign(path):
    # A Parquet file of another schema: process_index turned to text, and a column no table has.
    pq.write_table(pa.table({"process_index": ["1"], "run_id": ["x"], "foo": [1.5]}), path)


def _middle(path):
    # Bytes overwritten inside the data, the footer intact: only reading the data finds it.
    data = bytearray(path.read_bytes())
    start = 4
    data[start : start + 200] = os.urandom(200)
    path.write_bytes(bytes(data))


DAMAGES = {"truncated": _truncate, "zero-byte": _zero, "random-bytes": _random, "foreign-schema": _foreign}
PARTS = {"processes": "p000001-a001.parquet", "timings": "p000001-m.parquet", "records": "p000001-main.parquet"}


@pytest.mark.slow
@pytest.mark.parametrize("table", sorted(PARTS))
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_resume_quarantines_a_damaged_part_and_reruns_its_process(compose, tmp_path, sql, capsys, damage, table):
    out = tmp_path / "out"
    assert run(_clock(compose, out), progress=False) == 0
    part = out / table / "cohort=demo" / next((out / table / "cohort=demo").iterdir()).name / PARTS[table]
    DAMAGES[damage](part)
    capsys.readouterr()

    assert run(_clock(compose, out), progress=False) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("quarantined")]
    assert len(lines) == 1, err
    moved = next((out / ".quarantine").rglob(f"{PARTS[table]}.*"))
    assert moved.relative_to(out / ".quarantine").parent == part.parent.relative_to(out)
    assert re.fullmatch(
        rf"quarantined damaged part {re.escape(str(part))}: .+; moved to {re.escape(str(moved))}; "
        r"process 1 will run again",
        lines[0],
    ), lines[0]
    assert "1 of 3" not in err and "2 of 3 processes already completed, launching 1" in err
    # Exactly one copy of every row; process 1 completed again, under a new attempt number.
    assert sql(out, "SELECT process_index, status FROM processes ORDER BY 1") == [(i, "completed") for i in range(3)]
    assert sql(out, "SELECT process_index, count(*) FROM timings GROUP BY 1 ORDER BY 1") == [(0, 3), (1, 3), (2, 3)]
    assert sql(out, "SELECT process_index, count(*) FROM records GROUP BY 1 ORDER BY 1") == [(0, 1), (1, 1), (2, 1)]
    # Attempt 2 records the damage (the reason it ran again), attempt 3 the re-run.
    assert sql(out, "SELECT attempt, status FROM attempts WHERE process_index = 1 AND attempt > 1 ORDER BY 1") == [
        (2, "damaged"),
        (3, "completed"),
    ]

    # A third launch finds nothing damaged and nothing to do.
    assert run(_clock(compose, out), progress=False) == 0
    assert "quarantined" not in capsys.readouterr().err


def test_a_part_damaged_inside_its_data_is_found_too(compose, tmp_path, sql, capsys):
    from stateaware.launch.launcher import damaged_parts, latest_statuses

    out = tmp_path / "out"
    assert run(_clock(compose, out, "++cohort.params.rows=2000"), progress=False) == 0
    part = next((out / "timings").rglob("p000002-m.parquet"))
    _middle(part)
    run_id = part.parent.name.removeprefix("run_id=")
    ((found, problem),) = damaged_parts(out, "demo", run_id)
    assert found == part and problem
    assert latest_statuses(out, "demo", run_id) == {0: "completed", 1: "completed", 2: "damaged"}


def test_dry_run_shows_a_damaged_process_as_relaunched_and_moves_nothing(compose, tmp_path, capsys):
    out = tmp_path / "out"
    assert run(_clock(compose, out), progress=False) == 0
    part = next((out / "records").rglob("p000000-main.parquet"))
    _zero(part)
    capsys.readouterr()
    assert run(_clock(compose, out, "dry_run=true"), progress=False) == 0
    printed = capsys.readouterr().out
    assert "launch (damaged)" in printed and "1 of 3 processes would launch" in printed
    assert part.exists() and not (out / ".quarantine").exists()


def test_a_foreign_file_with_no_process_is_quarantined_and_the_run_completes(compose, tmp_path, sql, capsys):
    out = tmp_path / "out"
    assert run(_clock(compose, out), progress=False) == 0
    folder = next((out / "timings" / "cohort=demo").iterdir())
    stray = folder / "stray.parquet"
    _foreign(stray)
    capsys.readouterr()
    assert run(_clock(compose, out), progress=False) == 0
    err = capsys.readouterr().err
    assert f"quarantined damaged part {stray}: " in err and "will run again" not in err
    assert not stray.exists()
    assert sql(out, "SELECT count(*) FROM timings") == [(9,)]


def test_a_damaged_manifest_is_quarantined_and_written_afresh(compose, tmp_path, sql, capsys):
    from stateaware.launch.manifest import manifest_path

    out = tmp_path / "out"
    assert run(_clock(compose, out), progress=False) == 0
    manifest = next((out / "runs").rglob("manifest.json"))
    manifest.write_text('{"run_id": "tru')
    capsys.readouterr()
    assert run(_clock(compose, out), progress=False) == 0
    err = capsys.readouterr().err
    assert f"quarantined damaged manifest {manifest}: " in err and "Traceback" not in err
    assert manifest.read_text().startswith("{") and '"launches": 1' in manifest.read_text()
    assert len(list((out / ".quarantine").rglob("manifest.json.*"))) == 1
    assert manifest_path(out, "demo", manifest.parent.name.removeprefix("run_id=")) == manifest


def _comparison_part(out, run_id):
    """A valid ``comparisons`` part of the run, as a report writes it."""
    from stateaware.records.schema import RESULT_TABLES
    from stateaware.records.writer import write_atomic

    schema = RESULT_TABLES["comparisons"]
    row = {f.name: (1 if pa.types.is_integer(f.type) else 0.5 if pa.types.is_floating(f.type) else "x") for f in schema}
    row.update(run_id=run_id, cohort="demo", partial=False)
    path = out / "comparisons" / "cohort=demo" / f"run_id={run_id}" / "comparisons.parquet"
    return write_atomic(pa.Table.from_pylist([row] * 50, schema=schema), path)


def _flip_a_page(path):
    meta = pq.ParquetFile(path).metadata.row_group(0).column(7)  # `estimate`: a data page of doubles
    start = meta.dictionary_page_offset if meta.has_dictionary_page else meta.data_page_offset
    data = bytearray(path.read_bytes())
    data[start + meta.total_compressed_size - 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_zero, _flip_a_page], ids=["zero-byte", "a flipped page"])
def test_a_damaged_part_of_a_result_table_is_quarantined_and_no_process_reruns(compose, tmp_path, sql, capsys, damage):
    out = tmp_path / "out"
    assert run(_clock(compose, out), progress=False) == 0
    run_id = next((out / "timings" / "cohort=demo").iterdir()).name.removeprefix("run_id=")
    part = _comparison_part(out, run_id)
    damage(part)
    capsys.readouterr()
    assert run(_clock(compose, out), progress=False) == 0
    err = capsys.readouterr().err
    [line] = [line for line in err.splitlines() if line.startswith("quarantined")]
    assert line.startswith(f"quarantined damaged part {part}: ") and "will run again" not in line
    assert not part.exists() and len(list((out / ".quarantine" / "comparisons").rglob("comparisons.parquet.*"))) == 1
    assert sql(out, "SELECT count(*) FROM attempts") == [(3,)]  # nothing ran again
