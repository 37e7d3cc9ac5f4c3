"""``analysis compact``: one file per table per finished run, exact, idempotent, safe against a kill.

One real run (``cohort=demo``, two processes: the session's ``demo_results``) is built once;
each test copies it. Exactness is judged through the views themselves (every view's rows
before and after, as multisets), and verification must still pass; a kill at each step of
the swap (``STATEAWARE_COMPACT_KILL_AT``) must leave the views with exactly the original
rows, and a re-run must finish the job.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from stateaware.analysis.compact import KILL_ENV, ROW_GROUP_ROWS, STAGING, STEPS
from stateaware.analysis.store.verify import VerificationError, verify
from stateaware.analysis.store.views import VIEWS, connect

from stateaware.records.check import COMPACTED
from stateaware.records.runlock import lock_path, run_lock
from stateaware.records.schema import TABLES
from stateaware.records.writer import write_atomic
from tests.cli_inprocess import ANALYSIS, listing, run_main
from tests.conftest import launch_small_run

RUN = "r1"
ARGS = ("cohort=demo", "launcher=inline", f"run_id={RUN}", "cohort.params.steps=2", "cohort.params.warmup=1")
PARTITION = Path("cohort=demo") / f"run_id={RUN}"
#: The demo's tables with per-process parts; ``runs`` (the manifest) is left as it is.
COMPACTED_TABLES = ("processes", "records", "timings")

pytestmark = pytest.mark.usefixtures("fresh_part_cache")


def _launch(out: Path, processes: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STATEAWARE_CACHE": str(out.parent / "launch-cache")}
    done = subprocess.run(
        [sys.executable, "-m", "stateaware", *ARGS, f"processes={processes}", f"out={out}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture
def results(demo_results, tmp_path) -> Path:
    return Path(shutil.copytree(demo_results, tmp_path / "results"))


def _rows(results: Path) -> dict[str, Counter[str]]:
    """Every view's rows as a multiset (``repr`` of each row: lists and NaN compare as written)."""
    con = connect(results)
    assert con.execute("SELECT count(*) FROM damaged_parts").fetchone() == (0,)
    return {view: Counter(repr(row) for row in con.execute(f'SELECT * FROM "{view}"').fetchall()) for view in VIEWS}


def _files(results: Path, table: str) -> list[str]:
    return sorted(p.name for p in (results / table / PARTITION).glob("*.parquet"))


def _compact(results: Path, *more: str):
    return run_main(ANALYSIS, ["compact", "--results", str(results), *more], prog="python -m stateaware.analysis")


def _verified(results: Path) -> None:
    (run,) = verify(connect(results)).runs
    assert not run.partial


def _without_lock(results: Path) -> dict[str, tuple[int, int]]:
    """A listing of ``results`` but the run lock, which taking the lock rewrites (empty again after)."""
    return listing(results, skip=(lock_path(results, "demo", RUN),))


def test_compaction_is_exact_one_file_per_table_and_verifies(results):
    before = _rows(results)
    sizes = {t: sum(p.stat().st_size for p in (results / t / PARTITION).glob("*.parquet")) for t in TABLES}
    done = _compact(results)
    assert done.status == 0, done.stderr
    assert "compacted 6 files" in done.stdout and "saved 3 files" in done.stdout
    assert _rows(results) == before
    for table in COMPACTED_TABLES:
        (name,) = _files(results, table)
        assert name.startswith("compacted-")
        with pq.ParquetFile(results / table / PARTITION / name) as part:
            assert part.schema_arrow.remove_metadata() == TABLES[table].remove_metadata()  # every type exactly
            assert all(part.metadata.row_group(g).num_rows <= ROW_GROUP_ROWS for g in range(part.num_row_groups))
            record = json.loads(part.schema_arrow.metadata[COMPACTED])
        assert sorted((p["process"], p["file"]) for p in record["parts"]) == [
            (0, p) for p in sorted(record["sources"]) if p.startswith("p000000")
        ] + [(1, p) for p in sorted(record["sources"]) if p.startswith("p000001")]
        assert all(p["metadata"]["stateaware.source_hash"] for p in record["parts"])  # each part's footer kept
        assert record["rows"] == sum(p["rows"] for p in record["parts"])
    assert _files(results, "runs") == ["p-00001-manifest.parquet"]  # rewritten by name on a resume: left
    assert sum(sizes.values()) > sum(p.stat().st_size for p in results.glob("*/cohort=demo/*/*.parquet"))
    assert not (results / STAGING).exists()
    _verified(results)


def test_the_parts_a_compaction_replaced_leave_the_part_check_cache(results, monkeypatch):
    """A run's cache file keeps the entries of its parts still there: after compacting, the
    next scan that saves it drops the replaced parts (a query would else load them all)."""
    from stateaware.records import part_cache

    monkeypatch.setattr(part_cache, "SETTLE_NS", -(10**18))  # cache every check, however fresh
    part_cache._MEMORY.clear()
    _rows(results)  # checks every part: the run's cache file holds them all
    cache = part_cache.cache_file(results, f"timings/{PARTITION.as_posix()}/x.parquet")

    def entries() -> set[str]:
        return set(json.loads(cache.read_text())["entries"])

    def present() -> set[str]:
        return {p.relative_to(results).as_posix() for p in results.glob(f"*/{PARTITION.as_posix()}/*.parquet")}

    assert entries() == present() and len(entries()) == 7  # six parts of two processes and the manifest
    assert _compact(results).status == 0
    part_cache._MEMORY.clear()  # a fresh process: only the file speaks
    _rows(results)
    assert entries() == present() and len(entries()) == 4  # three compacted files and the manifest


def test_compaction_reads_each_original_part_once_to_check_it(results, monkeypatch):
    """Deciding whether the run may be compacted (statuses and damage) is one scan: every
    part's pages are checked once, not once per question (parts just written are not
    cached yet, so a second scan would read them all again)."""
    from stateaware.records import check, part_cache

    part_cache._MEMORY.clear()
    originals = {p.as_posix() for p in results.glob(f"*/{PARTITION.as_posix()}/*.parquet")}
    checked: list[str] = []
    content_problem = check.content_problem

    def counted(path):
        checked.append(Path(path).as_posix())
        return content_problem(path)

    monkeypatch.setattr(check, "content_problem", counted)
    monkeypatch.setattr(part_cache, "SETTLE_NS", 10**18)  # nothing settles: no answer from the cache
    assert _compact(results).status == 0
    assert Counter(p for p in checked if p in originals) == Counter(originals)  # each exactly once


def test_second_compaction_is_a_no_op_saying_so(results):
    assert _compact(results).status == 0
    first = _without_lock(results)
    again = _compact(results)
    assert again.status == 0, again.stderr
    assert "already compacted; nothing to do" in again.stdout
    assert _without_lock(results) == first


def test_dry_run_changes_nothing_and_says_what_it_saves(results):
    before = listing(results)
    done = _compact(results, "--dry-run")
    assert done.status == 0, done.stderr
    assert "would compact 6 files" in done.stdout and "would save 3 files" in done.stdout
    assert listing(results) == before


def test_a_live_launch_is_refused(results):
    before = _without_lock(results)
    with run_lock(results, "demo", RUN):  # as the launcher holds it while a launch runs
        for more in ((), ("--dry-run",)):
            done = _compact(results, *more)
            assert done.status == 1 and not done.traceback
            (line,) = done.error_lines[-1:]
            assert line.startswith("error: run r1 (cohort demo): refused: a live launch holds")
    assert _without_lock(results) == before


def test_an_incomplete_run_is_refused_unless_asked_and_a_resume_then_adds_no_duplicate(results, tmp_path):
    (results / "processes" / PARTITION / "p000001-a001.parquet").unlink()  # process 1 never recorded its end
    before = _without_lock(results)
    done = _compact(results)
    assert done.status == 1
    assert done.error_lines[-1].startswith("error: run r1 (cohort demo): refused: incomplete, process(es) 1 of 2")
    assert _without_lock(results) == before

    rows = _rows(results)
    done = _compact(results, "--include-incomplete")
    assert done.status == 0, done.stderr
    assert "process(es) 1 not completed: their parts are left as they are" in done.stderr
    assert _rows(results) == rows
    assert _files(results, "records") == [n for n in _files(results, "records") if not n.startswith("p000000")]
    assert "p000001-main.parquet" in _files(results, "records")  # replaced by name when process 1 runs again

    _launch(results, 2)  # the resume runs process 1 again, beside the compacted rows of process 0
    _verified_but_for_source(results)
    assert _compact(results).status == 0
    _verified_but_for_source(results)


def _verified_but_for_source(results: Path) -> None:
    """Verification of the run, where the only problem allowed is two source hashes: two launches
    in this shared checkout may see different code. Duplicated or missing rows always fail."""
    try:
        _verified(results)
    except VerificationError as exc:
        assert all("source hashes" in p for p in exc.problems), exc.problems


def test_a_resume_with_new_processes_adds_parts_beside_the_compacted_file(results):
    assert _compact(results).status == 0
    rows = _rows(results)
    _launch(results, 3)
    assert "p000002-main.parquet" in _files(results, "records")
    con = connect(results)
    per_process = dict(con.execute("SELECT process_index, count(*) FROM timings GROUP BY ALL").fetchall())
    old = Counter(r for r in rows["timings"])
    assert per_process[0] + per_process[1] == sum(old.values()) and per_process[2] == per_process[0]
    _verified_but_for_source(results)
    assert _compact(results).status == 0
    assert len(_files(results, "timings")) == 1
    _verified_but_for_source(results)


def test_an_edited_compacted_file_is_damaged(results):
    assert _compact(results).status == 0
    (name,) = _files(results, "records")
    path = results / "records" / PARTITION / name
    write_atomic(pq.read_table(path).slice(1), path)  # one row less, the footer's list kept
    con = connect(results)
    ((problem,),) = con.execute("SELECT problem FROM damaged_parts").fetchall()
    assert "are not those its footer lists" in problem


def _rows_per_process(results: Path) -> dict[str, list[tuple[int, int]]]:
    con = connect(results)
    query = 'SELECT process_index, count(*) FROM "{}" GROUP BY ALL ORDER BY ALL'
    return {view: con.execute(query.format(view)).fetchall() for view in COMPACTED_TABLES}


@pytest.mark.parametrize("table", COMPACTED_TABLES)
def test_a_damaged_compacted_file_runs_its_processes_again_leaving_no_row_twice(results, table):
    assert _compact(results).status == 0
    counts = _rows_per_process(results)
    compacted = sorted(name for t in COMPACTED_TABLES for name in _files(results, t))
    path = results / table / PARTITION / _files(results, table)[0]
    write_atomic(pq.read_table(path).slice(1), path)  # one row less, the footer's list kept
    launched = _launch(results, 2)
    # The damaged file goes, and so do the run's other compacted files: both processes run
    # again, and rows of theirs left in a compacted file would be there twice.
    moved = sorted(p.name.partition(".parquet")[0] + ".parquet" for p in (results / ".quarantine").rglob("compacted-*"))
    assert moved == compacted
    assert launched.stderr.count("processes 0, 1 will run again") == len(COMPACTED_TABLES)
    assert not [name for t in COMPACTED_TABLES for name in _files(results, t) if name.startswith("compacted-")]
    assert _rows_per_process(results) == counts
    _verified_but_for_source(results)
    attempts = connect(results).execute("SELECT process_index, attempt FROM attempts ORDER BY ALL").fetchall()
    # Attempt 1's rows went aside with the compacted file; the numbers go on after it: the
    # damaged row, then the new attempt.
    assert attempts == [(0, 2), (0, 3), (1, 2), (1, 3)]


def test_attempt_numbers_a_compacted_file_holds_stay_used_once_it_is_moved_aside(results):
    from stateaware.launch.spec import ProcessSpec
    from stateaware.launch.worker import highest_recorded_attempt
    from stateaware.records.damage import quarantine

    fields = {"run_id": RUN, "cohort": "demo", "kind": "demo", "processes": 2, "seed": 0}
    specs = [
        ProcessSpec(**fields, process_index=i, source_hash="h", out=str(results), launcher="inline", timing=False)
        for i in (0, 1)
    ]
    assert [highest_recorded_attempt(s) for s in specs] == [1, 1]
    assert _compact(results).status == 0
    assert [highest_recorded_attempt(s) for s in specs] == [1, 1]  # from the compacted file's footer
    (name,) = _files(results, "processes")
    quarantine(results, results / "processes" / PARTITION / name)
    assert [highest_recorded_attempt(s) for s in specs] == [1, 1]  # from the moved file's footer


@pytest.mark.parametrize("step", STEPS)
def test_a_kill_at_any_step_leaves_old_or_new_never_both_nor_neither(results, step):
    before = _rows(results)
    env = {**os.environ, KILL_ENV: step}
    killed = subprocess.run(
        [sys.executable, "-m", "stateaware.analysis", "compact", "--results", str(results)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert killed.returncode == 9, killed.stderr  # the hook fired: killed at that step
    assert _rows(results) == before
    done = _compact(results)
    assert done.status == 0, done.stderr
    assert _rows(results) == before
    assert all(len(_files(results, t)) == 1 for t in COMPACTED_TABLES)
    assert not (results / STAGING).exists()
    assert not list(results.glob("*/cohort=demo/*/.compaction-staging"))
    _verified(results)


@pytest.fixture(scope="module")
def three_runs(demo_results, tmp_path_factory) -> Path:
    """The pristine run r1 and two more real runs, r2 and r3, in one results folder."""
    out = Path(shutil.copytree(demo_results, tmp_path_factory.mktemp("three") / "results"))
    for run in ("r2", "r3"):
        launch_small_run(out, run, "cohort.params.steps=2", "cohort.params.warmup=1")
    return out


def test_runs_compacted_in_parallel_end_as_one_at_a_time_in_the_same_order(three_runs, tmp_path, monkeypatch):
    """--jobs 2 over three runs, one of them held by a live launch: the same lines in run order,
    the same refusal and exit status, the same rows in every view, as --jobs 1; and the runs
    were compacted in worker processes (this process's compact_run is broken for the second)."""
    from stateaware.analysis import compact

    outcomes = []
    for jobs in ("1", "2"):
        results = Path(shutil.copytree(three_runs, tmp_path / f"jobs{jobs}"))
        before = _rows(results)
        if jobs == "2":
            monkeypatch.setattr(compact, "compact_run", None)
        with run_lock(results, "demo", "r2"):
            outcomes.append(_compact(results, "--jobs", jobs))
        assert _rows(results) == before
        for run, names in (("r1", ["compacted-"]), ("r3", ["compacted-"]), ("r2", ["p000000-", "p000001-"])):
            for table in COMPACTED_TABLES:
                files = sorted(p.name for p in (results / table / "cohort=demo" / f"run_id={run}").glob("*.parquet"))
                assert [f[: len(n)] for f, n in zip(files, names, strict=True)] == names, (run, table, files)
    one, two = outcomes
    assert one.status == two.status == 1 and not two.traceback
    assert [line.split(":")[0] for line in one.stdout.splitlines()] == ["run r1 (cohort demo)", "run r3 (cohort demo)"]
    assert two.stdout == one.stdout
    for outcome in outcomes:  # the line names its own folder and the lock's holder and time
        (refusal,) = [line for line in outcome.error_lines if line.startswith("error:")]
        holder = f"a live launch holds it — run r2 (cohort demo) is being launched by pid {os.getpid()}"
        assert refusal.startswith(f"error: run r2 (cohort demo): refused: {holder}")


def test_jobs_below_one_is_invalid_input(results):
    done = _compact(results, "--jobs", "0")
    assert done.status == 2 and not done.traceback
    assert done.error_lines[-1] == (
        "python -m stateaware.analysis compact: error: argument --jobs: allowed values are an integer in "
        "[1, 1024], got '0'; see python -m stateaware.analysis compact --help"
    )
