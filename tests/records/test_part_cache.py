"""The part-check cache keeps a passed part's footer answer: no footer is read again until the
file changes, and any change (bytes, size, times, a replacement) is read and judged afresh."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from stateaware.analysis.store.views import connect, snapshot

from stateaware.records import check, part_cache

pytestmark = pytest.mark.usefixtures("fresh_part_cache")


@pytest.fixture
def results(demo_results, tmp_path) -> Path:
    return Path(shutil.copytree(demo_results, tmp_path / "results"))


@pytest.fixture
def footers(monkeypatch) -> list[Path]:
    # Parts copied a moment ago are "racily clean" (part_cache.SETTLE_NS) and never cached;
    # these tests change files on purpose right after, so the settling time is taken as zero.
    monkeypatch.setattr(part_cache, "SETTLE_NS", 0)
    read: list[Path] = []
    original = check.part_footer

    def counting(path, *args, **kwargs):
        read.append(Path(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(check, "part_footer", counting)
    return read


def _timings_part(results: Path) -> Path:
    (part,) = sorted((results / "timings").rglob("p000000-*.parquet"))
    return part


def test_a_second_scan_of_unchanged_parts_reads_no_footer(results, footers):
    snapshot(results)
    assert footers  # the first scan reads every footer
    footers.clear()
    snapshot(results)
    assert footers == []


def test_a_part_rewritten_with_its_size_and_mtime_kept_is_read_and_found_damaged(results, footers):
    snapshot(results)
    part = _timings_part(results)
    stat = part.stat()
    part.write_bytes(os.urandom(stat.st_size))  # same size ...
    os.utime(part, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # ... same mtime: only ctime moved
    footers.clear()
    con = connect(results)
    assert part in footers
    damaged = [Path(p) for (p,) in con.execute("SELECT path FROM damaged_parts").fetchall()]
    assert part.resolve() in [d.resolve() for d in damaged]


def test_a_part_replaced_by_another_file_is_read_again(results, footers):
    snapshot(results)
    part = _timings_part(results)
    copy = part.with_name(".copy")
    shutil.copy2(part, copy)
    os.replace(copy, part)  # same bytes, a new inode
    footers.clear()
    snapshot(results)
    assert footers == [part]
