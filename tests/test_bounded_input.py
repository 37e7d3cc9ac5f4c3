"""Every input a command reads itself is read to a bound (stateaware/bounded_input.py).

``sql --file``, ``sql -`` and the query argument hold at most ``MAX_QUERY_BYTES``: past it,
``/dev/zero`` included, one line and exit 2 after reading one byte more than the bound;
a FIFO no writer opens ends after ``WAIT_SECONDS``, never hangs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stateaware.analysis.store.query_input import MAX_QUERY_BYTES, query_text

from stateaware import bounded_input
from stateaware.bounded_input import InputError, read_bounded


def _sql(tmp_path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "results" / "runs").mkdir(parents=True, exist_ok=True)  # a results folder, empty
    return subprocess.run(
        [sys.executable, "-m", "stateaware.analysis", "sql", "--results", str(tmp_path / "results"), *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        env={**os.environ, "STATEAWARE_CACHE": str(tmp_path / "cache")},
    )


def _one_line(done: subprocess.CompletedProcess, *fragments: str) -> None:
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert all(f in lines[0] for f in fragments), lines[0]


@settings(max_examples=25, deadline=None)
@given(size=st.integers(0, 300), bound=st.integers(0, 300))
def test_a_file_is_read_whole_up_to_its_bound_and_refused_past_it(tmp_path_factory, size, bound):
    path = tmp_path_factory.mktemp("f") / "in"
    data = bytes(range(256)) * 2
    path.write_bytes(data[:size])
    if size <= bound:
        assert read_bounded(path, what="x", bound=bound) == data[:size]
    else:
        with pytest.raises(InputError, match=f"^x: more than {bound:,} bytes"):
            read_bounded(path, what="x", bound=bound)


def test_dev_zero_reads_one_byte_past_the_bound(monkeypatch):
    asked = []
    real_read = os.read

    def counting(fd, n):
        chunk = real_read(fd, n)
        asked.append(len(chunk))
        return chunk

    monkeypatch.setattr(bounded_input.os, "read", counting)
    with pytest.raises(InputError, match=r"^/dev/zero: more than 1,000 bytes"):
        read_bounded("/dev/zero", what="/dev/zero", bound=1000)
    assert sum(asked) == 1001


def test_a_fifo_without_a_writer_ends(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(InputError, match=r"no data for 0.3 s \(a FIFO no writer opened\?\)"):
        read_bounded(fifo, what="--file fifo", bound=100, wait=0.3)
    assert time.monotonic() - start < 5


def test_a_fifo_with_a_writer_is_read_to_its_end(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def write() -> None:
        time.sleep(0.1)
        with open(fifo, "wb") as handle:
            handle.write(b"SELECT 1")

    writer = threading.Thread(target=write)
    writer.start()
    assert read_bounded(fifo, what="fifo", bound=100, wait=10) == b"SELECT 1"
    writer.join()


def test_query_text_of_each_kind_is_bounded(tmp_path):
    big = tmp_path / "big.sql"
    big.write_bytes(b" " * MAX_QUERY_BYTES + b"x")
    with pytest.raises(InputError, match=f"^--file {big}: more than {MAX_QUERY_BYTES:,} bytes"):
        query_text(str(big), None)
    with pytest.raises(InputError, match=f"^the query: more than {MAX_QUERY_BYTES:,} bytes"):
        query_text(None, "x" * (MAX_QUERY_BYTES + 1))
    assert query_text(None, "SELECT 1") == "SELECT 1"


def test_sql_file_dev_zero_is_one_line(tmp_path):
    _one_line(_sql(tmp_path, "--file", "/dev/zero"), "--file /dev/zero: more than", f"{MAX_QUERY_BYTES:,} bytes")


def test_sql_stdin_past_the_bound_is_one_line(tmp_path):
    done = _sql(tmp_path, "-", stdin=b"-- " + b"x" * MAX_QUERY_BYTES)
    _one_line(done, "standard input: more than", f"{MAX_QUERY_BYTES:,} bytes")


def test_sql_file_a_fifo_without_a_writer_ends_in_one_line(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    start = time.monotonic()
    done = _sql(tmp_path, "--file", str(fifo))
    _one_line(done, f"--file {fifo}: no data for {bounded_input.WAIT_SECONDS:g} s")
    assert time.monotonic() - start < 60


def test_a_manifest_past_its_bound_is_quarantined_not_read_whole(tmp_path):
    from stateaware.launch.manifest import MAX_MANIFEST_BYTES
    from tests.conftest import launch_small_run

    out = tmp_path / "out"
    launch_small_run(out, "a", processes=1)
    manifest = out / "runs" / "cohort=demo" / "run_id=a" / "manifest.json"
    original = manifest.read_bytes()
    manifest.write_bytes(b" " * MAX_MANIFEST_BYTES + original)  # valid JSON, one byte per space past the bound
    done = subprocess.run(
        [sys.executable, "-m", "stateaware", "cohort=demo", "launcher=inline", "processes=1", f"out={out}", "run_id=a"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "STATEAWARE_CACHE": str(tmp_path / "cache")},
    )
    assert done.returncode == 0, done.stderr
    assert f"quarantined damaged manifest {manifest}: InputError: manifest {manifest}: more than" in done.stderr
    assert len(manifest.read_bytes()) < 100_000  # written afresh


def test_slurm_submissions_past_their_bound_count_as_damaged(tmp_path, monkeypatch):
    from stateaware.launch import slurm

    path = slurm.submissions_path(tmp_path, "r")
    path.parent.mkdir(parents=True)
    path.write_text('{"0": "123"}')
    assert slurm.read_submissions(tmp_path, "r") == {0: "123"}
    monkeypatch.setattr(slurm, "MAX_SUBMISSIONS_BYTES", 100)
    path.write_text(" " * 100 + '{"0": "123"}')  # valid JSON, past the bound: not read whole
    assert slurm.read_submissions(tmp_path, "r") == {}
