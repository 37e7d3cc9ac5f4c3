"""No link below ``out`` leads a write or a move elsewhere (stateaware/records/write_paths.py).

``out`` itself and the folders above it may be links; a link anywhere below ``out`` on the
way to a written or moved path ends the command in one line naming it, exit 2, before
anything is written or moved: the report folder, Hydra's ``.multirun``, the exported source
of ``compare_to``, a run's or a table's folder on resume.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stateaware.names import PathOutsideError
from stateaware.records import writer
from stateaware.records.write_paths import LinkBelowOut, make_folder, writable, writing_under
from stateaware.records.writer import write_bytes_atomic
from tests.conftest import launch_small_run

REPOSITORY = Path(__file__).resolve().parents[2]


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (links not followed) with its bytes: what a command changed."""
    return {
        os.path.relpath(os.path.join(top, n), folder): Path(top, n).read_bytes()
        for top, _dirs, names in os.walk(folder)
        for n in names
    }


def _command(*args: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "STATEAWARE_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


def _refused(done: subprocess.CompletedProcess, link: Path) -> None:
    """Exit 2 with exactly one line on stderr, naming ``link`` as a link below the results."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1, done.stderr
    assert f"{link} is a symbolic link" in lines[0] and "only out itself or a folder above it" in lines[0]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished two-process demo run ``a`` (copied per test: one launch for the module)."""
    out = tmp_path_factory.mktemp("finished") / "out"
    launch_small_run(out, "a")
    return out


@pytest.fixture
def store(finished, tmp_path) -> tuple[Path, Path]:
    """``(out, elsewhere)``: a copy of the finished run, and an empty folder outside it."""
    out = tmp_path / "out"
    shutil.copytree(finished, out, symlinks=True)
    (tmp_path / "elsewhere").mkdir()
    return out, tmp_path / "elsewhere"


# The rule itself.


def test_links_at_or_above_out_are_allowed(tmp_path):
    (tmp_path / "scratch" / "real").mkdir(parents=True)
    (tmp_path / "above").symlink_to(tmp_path / "scratch")
    out = tmp_path / "above" / "real"  # a folder above out is a link
    assert writable(out, out / "runs" / "x.json") == out / "runs" / "x.json"
    (tmp_path / "outlink").symlink_to(out)  # out itself is a link
    target = tmp_path / "outlink" / "report" / "report.md"
    assert make_folder(target.parent, tmp_path / "outlink") == target.parent
    write_bytes_atomic(b"x", target, out=tmp_path / "outlink")
    assert (tmp_path / "scratch" / "real" / "report" / "report.md").read_bytes() == b"x"


@pytest.mark.parametrize("depth", [0, 1, 2, 3])  # out's child, deeper folders, the written file itself
def test_a_link_below_out_is_refused_at_every_depth(tmp_path, depth):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    names = ["timings", "cohort=demo", "run_id=a", "p000000-main.parquet"]
    path = out.joinpath(*names)
    link = out.joinpath(*names[: depth + 1])
    link.parent.mkdir(parents=True)
    elsewhere.mkdir()
    link.symlink_to(elsewhere)
    with pytest.raises(LinkBelowOut, match=f"{link} is a symbolic link \\(to {elsewhere}\\) inside the results"):
        writable(out, path)
    with pytest.raises(LinkBelowOut):
        write_bytes_atomic(b"x", path, out=out)
    assert list(elsewhere.iterdir()) == []


def test_a_link_inside_out_to_inside_out_is_refused_too(tmp_path):
    out = tmp_path / "out"
    (out / "real").mkdir(parents=True)
    (out / "report").symlink_to(out / "real")
    with pytest.raises(LinkBelowOut, match=r"report is a symbolic link"):
        writable(out, out / "report" / "report.md")


def test_a_file_where_a_folder_must_be_is_named(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report").write_text("x")
    with pytest.raises(LinkBelowOut, match=f"^refusing to write .*: {out / 'report'} is a file where a folder must be"):
        write_bytes_atomic(b"x", out / "report" / "report.md", out=out)
    with pytest.raises(LinkBelowOut, match="a file where a folder must be"):
        make_folder(out / "report", out)


def test_a_path_outside_out_is_refused(tmp_path):
    with pytest.raises(PathOutsideError, match="outside the results directory"):
        writable(tmp_path / "out", tmp_path / "out" / ".." / "x")


def test_a_link_made_during_the_write_is_refused_before_the_rename(tmp_path, monkeypatch):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    (out / "report").mkdir(parents=True)
    elsewhere.mkdir()
    opened = writer._open_temporary

    def swap_then_open(tmp: Path):  # the report folder becomes a link while the file is written
        (out / "report").rename(tmp_path / "moved")
        (out / "report").symlink_to(elsewhere)
        return opened(tmp_path / "moved" / tmp.name)

    monkeypatch.setattr(writer, "_open_temporary", swap_then_open)
    with writing_under(out), pytest.raises(LinkBelowOut, match="report is a symbolic link"):
        write_bytes_atomic(b"x", out / "report" / "report.md")
    assert list(elsewhere.iterdir()) == []


# Each writer the commands reach.


def test_report_folder_a_link(store):
    out, elsewhere = store
    (out / "report").symlink_to(elsewhere)
    done = _command("stateaware.analysis", "report", "--results", str(out), cwd=out.parent, cache=out.parent / "c")
    _refused(done, out / "report")
    assert _tree(elsewhere) == {}


def test_multirun_folder_a_link(store):
    out, elsewhere = store
    (out / ".multirun").symlink_to(elsewhere)
    done = _command(
        "stateaware", "-m", "cohort=demo", "launcher=inline", "processes=1", f"out={out}", "run_id=b,c",
        cwd=out.parent, cache=out.parent / "c",
    )  # fmt: skip
    _refused(done, out / ".multirun")
    assert _tree(elsewhere) == {}
    assert not (out / "runs" / "cohort=demo" / "run_id=b").exists()


@pytest.mark.skipif(not (REPOSITORY / ".git").exists(), reason="compare_to=REV needs the git checkout")
def test_compare_folder_a_link(store):
    out, elsewhere = store
    (out / ".compare").symlink_to(elsewhere)
    done = _command(
        "stateaware", "cohort=demo", "launcher=local", "processes=1", f"out={out}", "run_id=cmp",
        "compare_to=HEAD", "dry_run=true", cwd=REPOSITORY, cache=out.parent / "c",
    )  # fmt: skip
    _refused(done, out / ".compare")
    assert _tree(elsewhere) == {}


@pytest.mark.parametrize("level", ["run", "table"])
def test_resume_through_a_linked_folder_moves_nothing(store, level):
    out, elsewhere = store
    run = out / "timings" / "cohort=demo" / "run_id=a"
    moved = run if level == "run" else out / "timings"
    shutil.move(moved, elsewhere / moved.name)
    moved.symlink_to(elsewhere / moved.name)
    before, inside = _tree(elsewhere), _tree(out)
    done = _command(
        "stateaware", "cohort=demo", "launcher=inline", "processes=2", f"out={out}", "run_id=a",
        cwd=out.parent, cache=out.parent / "c",
    )  # fmt: skip
    _refused(done, moved)
    assert _tree(elsewhere) == before and len(before) == 2  # both healthy parts where they were
    assert _tree(out) == inside and not (out / ".quarantine").exists()


@pytest.mark.parametrize("where", ["out", "above"])
def test_demo_with_out_or_a_folder_above_it_a_link(tmp_path, where):
    real = tmp_path / "scratch" / "results"
    real.mkdir(parents=True)
    if where == "out":
        out = tmp_path / "out"
        out.symlink_to(real)
    else:
        (tmp_path / "link").symlink_to(tmp_path / "scratch")
        out = tmp_path / "link" / "results"
    done = _command(
        "stateaware", "cohort=demo", "launcher=inline", "processes=2", f"out={out}", "run_id=a",
        cwd=tmp_path, cache=tmp_path / "c",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "2/2 processes completed" in done.stderr + done.stdout
    parts = sorted(p.relative_to(real).as_posix() for p in real.rglob("*.parquet"))
    assert "timings/cohort=demo/run_id=a/p000001-matmul.parquet" in parts
    assert set(os.listdir(tmp_path)) <= {"c", "scratch", out.parts[len(tmp_path.parts)]}  # nothing beside


def test_compact_through_a_linked_run_folder_changes_nothing(store):
    out, elsewhere = store
    run = out / "timings" / "cohort=demo" / "run_id=a"
    shutil.move(run, elsewhere / run.name)
    run.symlink_to(elsewhere / run.name)
    before, inside = _tree(elsewhere), _tree(out)
    done = _command(
        "stateaware.analysis", "compact", "--results", str(out), "--run-id", "a", cwd=out.parent, cache=out.parent / "c"
    )
    _refused(done, run)
    assert _tree(elsewhere) == before and _tree(out) == inside


def test_the_jax_compilation_cache_folder_is_checked_like_every_write(tmp_path):
    from stateaware.cohorts.semantic import _share_jax_compilations

    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / ".cache").symlink_to(elsewhere)
    with pytest.raises(LinkBelowOut, match=r"\.cache is a symbolic link"):
        _share_jax_compilations(out, out / ".cache" / "jax")
    assert list(elsewhere.iterdir()) == []
