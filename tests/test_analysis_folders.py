"""Entries of a results directory that are not tables never break the views.

Only the record tables and the result tables become views (every identifier quoted); a folder
named like an SQL keyword, a case variant of a table or a reserved name gets one warning line
from ``sql``, ``status`` and ``views`` and is otherwise ignored — ``report`` and ``check`` run as
if it were not there. A file where a table's folder should be, a link loop, or a folder that
cannot be listed is named in one line, never a traceback.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from stateaware.analysis.__main__ import main
from stateaware.analysis.store.verify import verify
from stateaware.analysis.store.views import VIEWS, connect

from tests.conftest import launch_small_run

RUN = "r1"
PART = Path("cohort=demo") / f"run_id={RUN}" / "p000000-main.parquet"


pytestmark = pytest.mark.usefixtures("fresh_part_cache")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pristine") / "results"
    launch_small_run(out, RUN, "cohort.params.steps=2")
    return out


@pytest.fixture
def results(pristine, tmp_path) -> Path:
    return Path(shutil.copytree(pristine, tmp_path / "results"))


#: Folders that are not tables, each holding a copy of a real records part.
NOT_TABLES = ["select", "Records", "damaged_parts", "attempts", "_parts_records", "group by", 'we"ird']


def _not_a_table(results: Path, name: str) -> Path:
    folder = results / name
    (folder / PART).parent.mkdir(parents=True)
    shutil.copyfile(results / "records" / PART, folder / PART)
    return folder


def _commands(results: Path, capsys) -> dict[str, tuple[int, list[str]]]:
    """Exit status and stderr lines of ``sql``, ``status`` and ``views`` over ``results``."""
    ran = {}
    for name, argv in {
        "sql": ["sql", "--results", str(results), "--format", "csv", "SELECT count(*) FROM records"],
        "status": ["status", "--results", str(results)],
        "views": ["views", "--results", str(results)],
    }.items():
        code = main(argv)
        captured = capsys.readouterr()
        ran[name] = (code, captured.err.splitlines())
        if name == "sql":
            assert captured.out.splitlines()[1:] == ["2"]
        if name == "views":
            assert {line.split(":")[0] for line in captured.out.splitlines()} == set(VIEWS)
    return ran


def test_folders_that_are_not_tables_get_one_warning_line_each_and_are_ignored(results, capsys):
    folders = [_not_a_table(results, name) for name in NOT_TABLES]
    (results / "notes").mkdir()  # no Parquet inside (a report's figures, say): passed over silently
    (results / "README").write_text("not a table either")
    (results / "loop").symlink_to(".")  # a link loop at the top: never followed
    for command, (code, err) in _commands(results, capsys).items():
        assert code == 0, command
        assert len(err) == len(folders), (command, err)
        for line, folder in zip(err, sorted(folders), strict=True):
            assert line.startswith(f"warning: skipped {folder.as_posix()}: a folder that is not a table"), line
    assert "names are case-sensitive: the table is 'records'" in next(line for line in err if "/Records:" in line)
    assert verify(connect(results), run_id=RUN).label == "complete (2 of 2 processes)"


def test_report_and_check_read_past_every_folder_that_is_not_a_table(results, pristine, capsys):
    from stateaware.analysis.report import main as report_main
    from stateaware.analysis.stats.stability import main as check_main

    for name in NOT_TABLES:
        _not_a_table(results, name)
    clean = check_main(["--results", str(pristine)])
    capsys.readouterr()
    assert report_main(["--results", str(results)]) == 0
    assert (results / "report" / "report.md").read_text().startswith("# stateaware report")
    assert check_main(["--results", str(results)]) == clean


def _unreadable(monkeypatch, folder: Path) -> None:
    """Make ``folder`` unlistable (as ``chmod 000`` would for anyone but root)."""
    real = os.scandir

    def scandir(path="."):
        if Path(os.fsdecode(path)) == folder:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)


def _table_is_a_file(results: Path, monkeypatch) -> Path:
    (results / "peaks").write_text("a file where the peaks table's folder should be")
    return results / "peaks"


def _table_is_a_link_loop(results: Path, monkeypatch) -> Path:
    (results / "peaks").symlink_to("peaks")
    return results / "peaks"


def _loop_inside_a_table(results: Path, monkeypatch) -> Path:
    link = results / "timings" / "cohort=demo" / "loop"
    link.symlink_to(".")
    return link


def _unreadable_inside_a_table(results: Path, monkeypatch) -> Path:
    folder = results / "timings" / "cohort=demo" / f"run_id={RUN}"
    _unreadable(monkeypatch, folder)
    return folder


def _unreadable_not_a_table(results: Path, monkeypatch) -> Path:
    folder = results / "select" / "hidden"
    folder.mkdir(parents=True)
    _unreadable(monkeypatch, folder)
    return results / "select"


#: broken entry -> (make it, what its one line says, whether verification fails for it)
BROKEN = {
    "a file where a table's folder should be": (_table_is_a_file, "not a folder, where the table's folder", True),
    "a link loop where a table's folder should be": (_table_is_a_link_loop, "a link that leads nowhere", True),
    "a link loop inside a table": (_loop_inside_a_table, "a link to a folder: not followed", True),
    "an unreadable folder inside a table": (_unreadable_inside_a_table, "unreadable folder (Permission denied)", True),
    "an unreadable folder that is not a table": (_unreadable_not_a_table, "a folder that is not a table", False),
}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_broken_entry_is_named_in_one_line_without_a_traceback(results, capsys, monkeypatch, broken):
    make, said, fails = BROKEN[broken]
    path = make(results, monkeypatch)
    for command, (code, err) in _commands(results, capsys).items():
        assert code == 0, command
        assert len(err) == 1 and err[0].startswith(f"warning: skipped {path.as_posix()}: {said}"), err
    from stateaware.analysis.report import main as report_main

    assert report_main(["--results", str(results), "--out", str(results.parent / "report")]) == (2 if fails else 0)
    err = capsys.readouterr().err
    if fails:  # verification names it as it names a damaged part: by its path under the results
        inside = path.relative_to(results)
        assert f"damaged part {inside.as_posix() if len(inside.parts) > 1 else path.as_posix()}: {said}" in err, err
    else:
        assert err == ""
