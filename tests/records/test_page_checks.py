"""Page checks: damage inside a valid footer is found, once per version of a part, through a cache
that lives outside the results directory and is never trusted when damaged; part paths stay inside
``out`` and part names follow the name rule."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stateaware.names import InvalidName, PathOutsideError
from stateaware.records import check, part_cache
from stateaware.records.check import content_problem, part_problem
from stateaware.records.damage import quarantine
from stateaware.records.part_cache import PartChecks, cache_file, checked_problem
from stateaware.records.writer import PAGE_CHECKSUMS, Identity, RecordWriter, part_path

ROWS = 500


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    """Every test's own cache folder (never the user's)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("STATEAWARE_CACHE", str(folder))
    part_cache._MEMORY.clear()
    return folder


@pytest.fixture
def out(tmp_path) -> Path:
    return tmp_path / "out"


def _write(out: Path, process: int = 1, run_id: str = "r1", part: str = "m") -> Path:
    writer = RecordWriter(out, Identity(run_id, "demo", process, "h" * 64, "cpu", 1.0))
    return writer.write(
        "timings",
        {
            "method": ["joint"] * ROWS,
            "step": list(range(ROWS)),
            "step_ms": [i * 1.000001 for i in range(ROWS)],
            "peak_allocated_bytes": [i * 7919 for i in range(ROWS)],
        },
        part=part,
    )


def _data_page(path: Path, column: str = "step_ms") -> tuple[int, int]:
    """``(first, end)`` byte of the data pages of ``column``'s chunk, from the footer."""
    meta = pq.ParquetFile(path).metadata
    group = meta.row_group(0)
    chunk = next(group.column(c) for c in range(group.num_columns) if group.column(c).path_in_schema == column)
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    return chunk.data_page_offset, start + chunk.total_compressed_size


def _flip(path: Path, at: int, width: int = 1) -> None:
    data = bytearray(path.read_bytes())
    for i in range(at, at + width):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _settled(monkeypatch) -> None:
    """Cache every check, however fresh the file (tests then change a file's key explicitly)."""
    monkeypatch.setattr(part_cache, "SETTLE_NS", -(10**18))


def test_our_parts_carry_page_checksums_and_pass(out):
    path = _write(out)
    assert pq.read_schema(path).metadata[PAGE_CHECKSUMS[0]] == PAGE_CHECKSUMS[1]
    assert content_problem(path) == check.Content(None, True)
    assert checked_problem(out, path, "timings") is None


#: Damage inside a data page (the footer stays valid), each spelling its own.
PAGE_DAMAGE = {
    "last byte of a page": lambda first, end: (end - 2, 1),
    "middle of a page": lambda first, end: ((first + end) // 2, 1),
    "a run of bytes": lambda first, end: ((first + end) // 2 - 8, 16),
}


@pytest.mark.parametrize("damage", sorted(PAGE_DAMAGE))
@pytest.mark.parametrize("column", ["step_ms", "peak_allocated_bytes"])
def test_a_damaged_page_inside_a_valid_footer_is_named(out, damage, column):
    path = _write(out)
    at, width = PAGE_DAMAGE[damage](*_data_page(path, column))
    _flip(path, at, width)
    assert part_problem(path, "timings") is None  # the footer alone still vouches for it
    problem = checked_problem(out, path, "timings")
    assert problem is not None and problem.startswith(("a page fails its checksum", "data does not decode")), problem


def test_a_cut_out_of_the_middle_is_named(out):
    path = _write(out)
    data = path.read_bytes()
    first, end = _data_page(path)
    path.write_bytes(data[:first] + data[end:])  # a page gone, the footer kept
    assert checked_problem(out, path, "timings") is not None


def test_a_part_written_before_checksums_gets_a_full_decode_once(out, monkeypatch):
    _settled(monkeypatch)
    path = _write(out)
    table = pq.read_table(path)
    meta = {k: v for k, v in table.schema.metadata.items() if k != PAGE_CHECKSUMS[0]}
    pq.write_table(table.replace_schema_metadata(meta), path, compression="zstd")  # no checksums, as before
    reads = _count_reads(monkeypatch)
    with PartChecks(out) as checks:
        assert checks.problem(path, "timings") is None
        assert checks.content(path) == check.Content(None, False)
    assert checked_problem(out, path, "timings") is None
    assert len(reads) == 1  # cached the same way


def _count_reads(monkeypatch) -> list[Path]:
    reads: list[Path] = []
    real = check.content_problem
    monkeypatch.setattr(check, "content_problem", lambda path: reads.append(Path(path)) or real(path))
    return reads


@pytest.mark.parametrize(
    "move, expected",
    [
        (("r2", 1), "its run_id column says 'r2', but it lies under run_id=r1"),
        (("r1", 0), "its process_index column says 0, but its name says p000001"),
    ],
)
def test_a_part_copied_from_another_run_or_process_is_named(out, tmp_path, move, expected):
    run_id, process = move
    other = _write(tmp_path / "elsewhere", process=process, run_id=run_id)
    target = _write(out, process=1, run_id="r1")
    target.write_bytes(other.read_bytes())
    assert checked_problem(out, target, "timings").startswith(expected)


def test_a_checked_part_is_read_once_until_it_changes(out, monkeypatch):
    _settled(monkeypatch)
    path = _write(out)
    reads = _count_reads(monkeypatch)
    for _ in range(3):
        assert checked_problem(out, path, "timings") is None
    assert len(reads) == 1
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # same bytes, another mtime_ns: read again
    assert checked_problem(out, path, "timings") is None
    _flip(path, _data_page(path)[1] - 2)  # same size, new content: read again, and found
    assert checked_problem(out, path, "timings").startswith("a page fails its checksum")
    assert len(reads) == 3


@pytest.mark.parametrize("field", ["st_size", "st_mtime_ns", "st_ino", "st_ctime_ns"])
def test_each_field_of_the_key_alone_sends_the_part_to_be_read_again(out, monkeypatch, field):
    _settled(monkeypatch)
    path = _write(out)
    stat = path.stat()
    key = {name: getattr(stat, name) for name in ("st_size", "st_mtime_ns", "st_ino", "st_ctime_ns")}
    reads = _count_reads(monkeypatch)
    with PartChecks(out) as checks:
        checks.content(path, SimpleNamespace(**key))
        checks.content(path, SimpleNamespace(**key))
        assert len(reads) == 1
        # A stat differing in this one field (what the file system reports after such a change).
        checks.content(path, SimpleNamespace(**{**key, field: key[field] + 1}))
    assert len(reads) == 2


def test_a_part_changed_just_now_is_not_cached(out, monkeypatch):
    path = _write(out)  # file times are coarse: a second write in the same tick would keep the key
    reads = _count_reads(monkeypatch)
    checked_problem(out, path, "timings")
    checked_problem(out, path, "timings")
    assert len(reads) == 2


def test_the_cache_lives_outside_the_results_and_leaves_them_unchanged(out, cache, monkeypatch):
    _settled(monkeypatch)
    path = _write(out)
    before = _tree(out)
    assert checked_problem(out, path, "timings") is None
    assert _tree(out) == before
    [folder] = (cache / "part-checks").iterdir()
    [written] = folder.iterdir()  # the run's own file
    key = "timings/cohort=demo/run_id=r1/p000001-m.parquet"
    assert written == cache_file(out, key) != cache_file(out)
    entries = json.loads(written.read_text())["entries"]
    stat = path.stat()
    [(name, entry)] = entries.items()
    assert name == key
    # size, mtime, inode, ctime; the page check's problem (none) and checksums (present);
    # then (once the file had settled) the footer's answer per table schema digest: passed, no
    # columns under old names, none missing.
    assert entry[:6] == [stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns, None, True]
    assert len(entry) in (6, 7) and all(list(answers.values()) == [[{}, []]] for answers in entry[6:])


def test_the_default_cache_folder_is_the_users(monkeypatch, tmp_path):
    monkeypatch.delenv("STATEAWARE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_file(tmp_path / "out").parent.parent == tmp_path / "xdg" / "stateaware" / "part-checks"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_file(tmp_path / "out").parent.parent == tmp_path / "home" / ".cache" / "stateaware" / "part-checks"


def test_a_cache_folder_inside_the_results_is_never_written(out, monkeypatch):
    _settled(monkeypatch)
    path = _write(out)
    monkeypatch.setenv("STATEAWARE_CACHE", str(out / "cache"))
    before = _tree(out)
    reads = _count_reads(monkeypatch)
    assert checked_problem(out, path, "timings") is None
    assert checked_problem(out, path, "timings") is None
    assert _tree(out) == before and len(reads) == 1  # kept in memory instead


def test_an_unwritable_cache_folder_costs_only_re_reads(out, cache, monkeypatch):
    _settled(monkeypatch)
    path = _write(out)
    cache.write_text("a file where the cache folder should be")
    assert checked_problem(out, path, "timings") is None
    _flip(path, _data_page(path)[1] - 2)
    assert checked_problem(out, path, "timings").startswith("a page fails its checksum")


#: A damaged cache file, each spelling its own; each must be ignored whole.
CACHE_DAMAGE = {
    "random bytes": lambda text: os.urandom(64),
    "cut short": lambda text: text[: len(text) // 2].encode(),
    "an entry edited": lambda text: text.replace('"a page fails', '"no page fails').encode(),
    "entries forged, digest dropped": lambda text: _forge(
        text, lambda e: {k: [*v[:4], None, True] for k, v in e.items()}
    ),
    "another directory's": lambda text: _forge(text, None, results="/elsewhere"),
    "another run's": lambda text: _forge(text, None, run="cohort=demo/run_id=r2"),
    "entries of the wrong shape": lambda text: _forge(text, lambda e: {k: v[:4] for k, v in e.items()}),
    "empty": lambda text: b"",
}


def _forge(text: str, entries, results: str | None = None, run: str | None = None) -> bytes:
    """The cache file with its entries changed and its digest dropped (or its directory or run changed)."""
    data = json.loads(text)
    if entries is not None:
        data["entries"] = entries(data["entries"])
        if "sha256" in data:
            del data["sha256"]  # forged without knowing the digest rule: must not be trusted
    if results is not None:
        data["results"] = results
    if run is not None:
        data["run"] = run
    return json.dumps(data).encode()


@pytest.mark.parametrize("damage", sorted(CACHE_DAMAGE))
def test_a_damaged_cache_file_is_never_trusted_and_is_rebuilt(out, monkeypatch, damage):
    _settled(monkeypatch)
    path = _write(out)
    _flip(path, _data_page(path)[1] - 2)
    assert checked_problem(out, path, "timings").startswith("a page fails its checksum")
    file = cache_file(out, path.relative_to(out).as_posix())
    file.write_bytes(CACHE_DAMAGE[damage](file.read_text()))
    part_cache._MEMORY.clear()  # a fresh process: only the file speaks
    reads = _count_reads(monkeypatch)
    assert checked_problem(out, path, "timings").startswith("a page fails its checksum")
    assert len(reads) == 1
    assert json.loads(file.read_text())["entries"]  # rebuilt


def test_two_scans_saving_at_once_keep_both_answers(out, monkeypatch):
    _settled(monkeypatch)
    first, second = _write(out, process=0), _write(out, process=1)
    one, two = PartChecks(out), PartChecks(out)
    one.problem(first, "timings")
    two.problem(second, "timings")
    one.save()
    two.save()  # merged with what the first saved, not over it
    key = first.relative_to(out).as_posix()
    assert cache_file(out, key) == cache_file(out, second.relative_to(out).as_posix())  # one run, one file
    assert len(json.loads(cache_file(out, key).read_text())["entries"]) == 2


def test_each_run_has_its_own_cache_file_and_a_scan_of_one_reads_only_its_own(out, monkeypatch):
    _settled(monkeypatch)
    first, second = _write(out, run_id="r1"), _write(out, run_id="r2")
    with PartChecks(out) as checks:
        assert checks.problem(first, "timings") is None and checks.problem(second, "timings") is None
    files = {cache_file(out, p.relative_to(out).as_posix()) for p in (first, second)}
    assert len(files) == 2 and all(len(json.loads(f.read_text())["entries"]) == 1 for f in files)
    part_cache._MEMORY.clear()  # a fresh process: only the files speak
    opened: list[str] = []
    real_read = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: opened.append(self.name) or real_read(self))
    reads = _count_reads(monkeypatch)
    with PartChecks(out) as checks:
        assert checks.problem(first, "timings") is None
    assert opened == [cache_file(out, first.relative_to(out).as_posix()).name] and reads == []


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("part", ["main", "method=joint", "cell=q1024-f0.001-l64-method=joint", "a" * 160])
def test_part_names_the_cohorts_use_are_valid(out, part):
    assert part_path(out, "timings", "demo", "r1", 0, part).name == f"p000000-{part}.parquet"


@pytest.mark.parametrize("part", ["", "a/b", ".hidden", "-x", "a b", "é", "x\n", "..", "a" * 161, "a\\b"])
def test_other_part_names_are_refused_in_one_line(out, part):
    with pytest.raises(InvalidName, match=r"^invalid part name .*; a part name is 1 to 160 characters") as raised:
        RecordWriter(out, Identity("r1", "demo", 0, "h", "cpu", 1.0)).write("timings", {"step": [0]}, part=part)
    assert "\n" not in str(raised.value).replace("\\n", "")
    assert not out.exists() or not list(out.rglob("*.parquet"))


@pytest.mark.parametrize("field, value", [("cohort", "../x"), ("run_id", "a/b"), ("table", "..")])
def test_names_in_a_part_path_follow_the_name_rule(out, field, value):
    names = {"table": "timings", "cohort": "demo", "run_id": "r1", field: value}
    with pytest.raises(InvalidName, match=rf"^invalid {field}="):
        part_path(out, names["table"], names["cohort"], names["run_id"], 0, "main")


def test_a_link_planted_in_out_never_redirects_a_write(out, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out.mkdir()
    (out / "timings").symlink_to(elsewhere)
    with pytest.raises(PathOutsideError, match="timings is a symbolic link .* inside the results directory"):
        _write(out)
    assert list(elsewhere.rglob("*")) == []


def test_quarantine_never_moves_a_part_out_of_out(out, tmp_path):
    path = _write(out)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / ".quarantine").symlink_to(elsewhere)
    with pytest.raises(PathOutsideError):
        quarantine(out, path)
    assert path.exists() and list(elsewhere.rglob("*")) == []


def test_a_zero_row_part_with_the_right_identity_passes_the_part_check(out):
    # Its rows are counted by verification instead (tests/analysis/test_verify_row_counts.py).
    path = RecordWriter(out, Identity("r1", "demo", 1, "h", "cpu", 1.0)).write("records", [])
    assert pq.read_metadata(path).num_rows == 0 and checked_problem(out, path, "records") is None
    assert pa.types.is_string(pq.read_schema(path).field("run_id").type)


#: A second process writing parts of run r1 and saving its own checks of them, as a launch
#: resuming beside a reader does.
_CONCURRENT_WRITER = """
import sys
from pathlib import Path
from stateaware.records import part_cache
from stateaware.records.part_cache import PartChecks
from tests.records.test_page_checks import _write

part_cache.SETTLE_NS = -(10**18)
out, parts = Path(sys.argv[1]), int(sys.argv[2])
for process in range(parts):
    path = _write(out, process=process)
    with PartChecks(out) as checks:
        assert checks.problem(path, "timings") is None
"""


def test_the_cache_survives_a_concurrent_writer(out, cache, monkeypatch):
    import subprocess
    import sys

    _settled(monkeypatch)
    parts = 30
    script = [sys.executable, "-c", _CONCURRENT_WRITER, str(out), str(parts)]
    writer = subprocess.Popen(script, cwd=Path(__file__).parents[2])
    scans = 0
    while writer.poll() is None or scans == 0:
        with PartChecks(out) as checks:  # what a reader sees meanwhile: every landed part passes
            listed = sorted(out.rglob("p*.parquet"))
            assert all(checks.problem(p, "timings") is None for p in listed)
        scans += 1
    assert writer.returncode == 0
    files = list((cache / "part-checks").rglob("*.json"))
    assert len(files) == 1  # one run: one file, never a temporary one left behind
    part_cache._MEMORY.clear()  # a fresh process: only the file speaks
    entries = json.loads(files[0].read_text())["entries"]
    assert entries  # a whole file, its digest good (or the next scan would re-read every part)
    reads = _count_reads(monkeypatch)
    listed = sorted(out.rglob("p*.parquet"))
    with PartChecks(out) as checks:
        assert [checks.problem(p, "timings") for p in listed] == [None] * parts
    # Two savers racing may lose one's newest answers: those parts, and only those, are read again.
    assert sorted(reads) == [p for p in listed if p.relative_to(out).as_posix() not in entries]
    damaged = _write(out, process=3)  # rewritten in place, then damaged: its key changed
    _flip(damaged, _data_page(damaged)[1] - 2)
    assert checked_problem(out, damaged, "timings").startswith("a page fails its checksum")
