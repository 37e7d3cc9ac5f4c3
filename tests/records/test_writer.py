"""The part writer: schemas enforced, identity filled, atomic replacement, no partial files."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from stateaware.records.schema import IDENTITY, SCHEMA_VERSION, TABLES
from stateaware.records.writer import Identity, RecordWriter

ID = Identity(run_id="r1", cohort="c", process_index=7, source_hash="ab" * 32, hardware="cpu", scale=0.5)


def test_identity_and_schema_version_lead_every_row(tmp_path):
    path = RecordWriter(tmp_path, ID).write("records", [{"method": "m", "outcome": "match"}, {"method": "n"}])
    table = pq.read_table(path)
    assert table.schema == TABLES["records"].with_metadata(table.schema.metadata)
    assert table.column_names[: len(IDENTITY)] == [f.name for f in IDENTITY]
    assert table.column("process_index").to_pylist() == [7, 7]
    assert table.column("schema_version").to_pylist() == [SCHEMA_VERSION] * 2
    assert table.column("outcome").to_pylist() == ["match", None]
    meta = table.schema.metadata
    assert meta[b"stateaware.run_id"] == b"r1" and meta[b"stateaware.table"] == b"records"
    assert meta[b"stateaware.schema_version"] == str(SCHEMA_VERSION).encode()
    assert path == tmp_path / "records" / "cohort=c" / "run_id=r1" / "p000007-main.parquet"


def test_unknown_columns_are_refused_with_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match=r"no column\(s\) \['stepms'\]; valid columns are: method, precision, step"):
        RecordWriter(tmp_path, ID).write("timings", [{"stepms": 1.0}])
    with pytest.raises(ValueError, match="identity column"):
        RecordWriter(tmp_path, ID).write("timings", [{"run_id": "x"}])
    with pytest.raises(KeyError, match="valid tables are: runs, processes"):
        RecordWriter(tmp_path, ID).write("timing", [{}])
    with pytest.raises(ValueError, match="column 'step'"):
        RecordWriter(tmp_path, ID).write("timings", {"step": ["three"]})


def test_rewriting_a_part_replaces_it(tmp_path):
    writer = RecordWriter(tmp_path, ID)
    writer.write("timings", {"step": [0, 1, 2]}, part="m")
    writer.write("timings", {"step": [0, 1]}, part="m")
    files = list((tmp_path / "timings").rglob("*.parquet"))
    assert len(files) == 1 and pq.read_table(files[0]).num_rows == 2
    assert writer.exists("timings", "m") and not writer.exists("timings", "other")


@pytest.mark.parametrize("bad", ["", "a/b", ".hidden"])
def test_part_names_are_file_name_fragments(tmp_path, bad):
    with pytest.raises(ValueError, match="part name"):
        RecordWriter(tmp_path, ID).write("timings", {"step": [0]}, part=bad)


_STALLED_WRITER = """
import io, sys, time
from stateaware.records import writer as records_writer
from stateaware.records.writer import Identity, RecordWriter

class StallsAfterItsFirstBytes(io.FileIO):
    def write(self, data):
        written = super().write(data)  # unbuffered: the bytes are in the file now
        time.sleep(3600)  # until the parent's SIGKILL
        return written

records_writer._open_temporary = lambda tmp: StallsAfterItsFirstBytes(tmp, "wb")
writer = RecordWriter(sys.argv[1], Identity("r1", "c", 3, "h", "cpu", 1.0))
writer.write("timings", {"step": range(1000), "step_ms": [0.5] * 1000}, part="big")
"""


@pytest.mark.slow
def test_a_process_killed_mid_write_leaves_no_readable_part(tmp_path, sql):
    # The writer stalls inside its write once the temporary file has bytes (the seam the
    # disk-full tests use), so the kill lands mid-write on any machine, however loaded,
    # without a table large enough to take seconds to build and write.
    proc = subprocess.Popen([sys.executable, "-c", _STALLED_WRITER, str(tmp_path)])
    folder = tmp_path / "timings" / "cohort=c" / "run_id=r1"
    while not any(p.stat().st_size > 0 for p in folder.glob(".*.tmp-*")):
        assert proc.poll() is None, "the writer ended before it could be killed"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert list(folder.glob(".*.tmp-*")), "expected the interrupted temporary file to remain"
    assert not list(folder.glob("*.parquet"))
    assert sql(tmp_path, "SELECT count(*) FROM timings") == [(0,)]

    # The next attempt of that process removes the debris before it starts.
    from stateaware.launch.spec import ProcessSpec
    from stateaware.launch.worker import run_one_process

    spec = ProcessSpec(
        run_id="r1",
        cohort="c",
        kind="tests.kinds.clock",
        process_index=3,
        processes=4,
        seed=3,
        source_hash="stale",
        out=str(tmp_path),
        launcher="inline",
        timing=False,
    )
    run_one_process(spec)
    assert not list(folder.glob(".*.tmp-*"))
