"""Full disks: at every write site the command prints one line naming the file and the space it
needed, exits 1, leaves nothing half-written, names the processes that did not start, and a
re-run after space is freed completes with every row exactly once."""

from __future__ import annotations

import errno
import io
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from stateaware.cli import run
from tests.conftest import REPO

LINE = re.compile(
    r"error: disk full writing (?P<path>\S+): needed (?P<needed>[\d.]+ [KMG]?i?B), "
    r"(?P<free>[\d.]+ [KMG]?i?B) free there; free some space and re-run the same command to resume"
)


def _clock(compose, out, *extra, **params):
    body = ",".join(f"{k}:{v}" for k, v in {"sleep_s": 0.0, "rows": 3, **params}.items())
    return compose(
        "cohort=demo",
        "cohort.kind=tests.kinds.clock",
        f"++cohort.params={{{body}}}",
        f"out={out}",
        "processes=3",
        *extra,
    )


class _FullFile(io.FileIO):
    """A file on a disk that fills up after 10 bytes."""

    def write(self, data):
        room = max(0, 10 - self.tell())
        if len(data) > room:  # what fits is written (a half file), then the disk is full
            super().write(bytes(data)[:room])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(data)


def _fill_disk_at(monkeypatch, matches):
    """Make every atomic write whose final path ``matches`` run out of space part-way."""
    import stateaware.records.writer as writer

    real = writer._open_temporary

    def fake(tmp: Path):
        final = tmp.parent / tmp.name[1:].rsplit(".tmp-", 1)[0]
        return _FullFile(tmp, "w") if matches(final) else real(tmp)

    monkeypatch.setattr(writer, "_open_temporary", fake)


def _no_debris(out: Path):
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name or ".stale-" in p.name]


SITES = {
    "manifest file": (lambda p: p.name == "manifest.json", [0, 1, 2], "runs/"),
    "manifest row": (lambda p: p.name.endswith("-manifest.parquet"), [0, 1, 2], "runs/"),
    "a part": (lambda p: p.name == "p000001-m.parquet", [2], "timings/"),
    "a status row": (lambda p: p.name == "p000001-a001.parquet", [2], "processes/"),
}


@pytest.mark.parametrize("site", sorted(SITES))
def test_a_full_disk_at_each_write_site_ends_in_one_line_and_resumes(compose, tmp_path, sql, capsys, site):
    matches, not_started, where = SITES[site]
    out = tmp_path / "out"
    cfg = _clock(compose, out, "launcher=inline")
    full = pytest.MonkeyPatch()  # its own, so undoing it leaves the conftest's environment alone
    _fill_disk_at(full, matches)
    assert run(cfg, progress=False) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and LINE.fullmatch(errors[0]), captured.err
    path = Path(LINE.fullmatch(errors[0])["path"])
    assert matches(path) and where in path.as_posix()
    assert f"{len(not_started)} processes not started (the disk filled up): " in captured.out
    assert not path.exists()
    _no_debris(out)

    full.undo()  # space freed
    assert run(cfg, progress=False) == 0
    assert sql(out, "SELECT process_index, status FROM processes ORDER BY 1") == [(i, "completed") for i in range(3)]
    assert sql(out, "SELECT process_index, count(*) FROM timings GROUP BY 1 ORDER BY 1") == [(0, 3), (1, 3), (2, 3)]
    assert sql(out, "SELECT process_index, count(*) FROM records GROUP BY 1 ORDER BY 1") == [(0, 1), (1, 1), (2, 1)]
    assert sql(out, "SELECT count(*) FROM runs") == [(1,)]
    _no_debris(out)


def test_a_full_disk_while_snapshotting_starts_nothing_and_leaves_no_partial_snapshot(compose, tmp_path, sql, capsys):
    import shutil

    import stateaware.launch.snapshot as snapshot

    out = tmp_path / "out"
    copied = []

    def copyfile(src, dst):
        if len(copied) >= 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        copied.append(dst)
        return shutil.copyfile(src, dst)

    full = pytest.MonkeyPatch()
    full.setattr(snapshot.shutil, "copyfile", copyfile)
    cfg = _clock(compose, out)
    assert run(cfg, progress=False) == 1
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and LINE.fullmatch(errors[0]) and "Traceback" not in captured.err
    assert Path(LINE.fullmatch(errors[0])["path"]) == out / ".snapshots"
    assert "3 processes not started (the disk filled up): 0-2" in captured.out
    assert list((out / ".snapshots").iterdir()) == []
    assert not (out / "processes").exists()

    full.undo()
    assert run(cfg, progress=False) == 0
    assert sql(out, "SELECT count(*) FROM processes WHERE status = 'completed'") == [(3,)]


def test_a_full_disk_while_writing_the_report_leaves_no_half_report(compose, tmp_path, capsys):
    from stateaware.analysis.__main__ import main

    results, report = tmp_path / "results", tmp_path / "report"
    assert run(compose("cohort=demo", f"out={results}", "launcher=inline", "processes=2"), progress=False) == 0
    capsys.readouterr()
    full = pytest.MonkeyPatch()
    _fill_disk_at(full, lambda p: p.name == "report.md")
    assert main(["report", "--results", str(results), "--out", str(report)]) == 1
    err = capsys.readouterr().err.strip()
    assert (
        len(err.splitlines()) == 1 and LINE.fullmatch(err) and LINE.fullmatch(err)["path"] == str(report / "report.md")
    )
    assert not (report / "report.md").exists() and not list(report.glob(".*tmp*"))
    full.undo()
    assert main(["report", "--results", str(results), "--out", str(report)]) == 0
    assert (report / "report.md").read_text().startswith("# stateaware report")


def test_out_without_the_minimum_free_space_is_refused_at_start(compose, tmp_path, capsys):
    cfg = compose("cohort=demo", f"out={tmp_path / 'out'}", "min_free_mib=1e12")
    assert run(cfg, progress=False) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: invalid out='{tmp_path / 'out'}': only ") and "below min_free_mib=1e+12" in err
    assert "min_free_mib=0 to skip this check" in err and len(err.splitlines()) == 1


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 3 MiB tmpfs (root only); skipped where mounting is not permitted."""
    mount = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_real_full_disk_stops_the_queue_and_a_rerun_after_freeing_space_completes(small_tmpfs, sql):
    out = small_tmpfs / "out"
    args = [
        sys.executable,
        "-m",
        "stateaware",
        "cohort=demo",
        "cohort.kind=tests.kinds.clock",
        "++cohort.params={sleep_s:0.0,rows:3,pad_kib:1200}",
        "processes=8",
        f"out={out}",
        "launcher=inline",
        "min_free_mib=0",
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    first = subprocess.run(args, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert first.returncode == 1, (first.stdout, first.stderr)
    assert "Traceback" not in first.stderr + first.stdout
    errors = [line for line in first.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and LINE.fullmatch(errors[0]), first.stderr
    assert Path(LINE.fullmatch(errors[0])["path"]).is_relative_to(out)
    assert "processes not started (the disk filled up): " in first.stdout
    _no_debris(out)

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_tmpfs)], check=True)  # space freed
    again = subprocess.run(args, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert sql(out, "SELECT process_index, status FROM processes ORDER BY 1") == [(i, "completed") for i in range(8)]
    assert sql(out, "SELECT process_index, count(*) FROM timings GROUP BY 1 ORDER BY 1") == [(i, 3) for i in range(8)]
    assert sql(out, "SELECT process_index, count(*) FROM records GROUP BY 1 ORDER BY 1") == [(i, 1) for i in range(8)]
    _no_debris(out)
