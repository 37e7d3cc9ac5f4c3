"""Property-based fuzzing of path shapes under a results folder: whatever shape, an honest ending.

A finished demo run is copied, then one generated change is made to it — an entry below
``out`` replaced by a link to a folder outside ``out`` or inside it, a folder replaced by a
file, a file replaced by a folder, a folder nested deep — and ``out`` itself is spelled
directly, through a link, or through a linked folder above it (both allowed). A command
(a resume, ``sql``, ``status``, ``report``) then runs in-process. Each case must exit 0, 1
or 2, print no traceback, say a refusal in one line, and change nothing outside ``out``'s
real path (the link targets outside it included).

Bounded for CI like tests/contracts/test_fuzz_cli.py: fixed examples, ``derandomize=True``, no
example database, and a wall budget past which the remaining examples are skipped.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli_inprocess import ANALYSIS, STATEAWARE, listing, run_main
from tests.conftest import launch_small_run

#: Seconds the generated cases may take in all (the first case's imports included).
WALL_BUDGET_S = 25.0

#: Entries of a finished demo run, as found under ``out`` (folders, then files).
_FOLDERS = [
    "report",
    ".multirun",
    ".compare",
    ".quarantine",
    ".snapshots",
    "runs",
    "timings",
    "timings/cohort=demo",
    "timings/cohort=demo/run_id=a",
    "processes/cohort=demo/run_id=a",
    "runs/cohort=demo/run_id=a",
]
_FILES = [
    "runs/cohort=demo/run_id=a/manifest.json",
    "timings/cohort=demo/run_id=a/p000000-matmul.parquet",
    "processes/cohort=demo/run_id=a/p000001-a001.parquet",
]
_SHAPES = ["link outside", "link inside", "a file", "deep"]
_COMMANDS = {
    "resume": (STATEAWARE, ["cohort=demo", "launcher=inline", "processes=2", "run_id=a", "min_free_mib=0"]),
    "sql": (ANALYSIS, ["sql", "--timeout", "20", "SELECT count(*) FROM timings"]),
    "status": (ANALYSIS, ["status"]),
    "report": (ANALYSIS, ["report"]),
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("finished") / "out"
    launch_small_run(out, "a")
    (out / "report").mkdir()  # every folder of _FOLDERS exists, to be replaced
    for name in (".multirun", ".compare", ".quarantine"):
        (out / name).mkdir(exist_ok=True)
    return out


def _reshape(out: Path, entry: str, shape: str, depth: int, elsewhere: Path) -> None:
    """Make ``out/entry`` take ``shape`` (its old content moved to ``elsewhere`` for a link out)."""
    path = out / entry
    path.parent.mkdir(parents=True, exist_ok=True)
    if shape == "deep":
        folder = path if path.is_dir() else path.parent
        os.chdir(folder)  # relative steps: the deep path itself may be longer than PATH_MAX
        for _ in range(depth):
            os.mkdir("d")
            os.chdir("d")
        return
    if os.path.lexists(path):
        shutil.move(path, elsewhere / "moved") if shape == "link outside" else _remove(path)
    if shape == "link outside":
        path.symlink_to(elsewhere / "moved" if os.path.lexists(elsewhere / "moved") else elsewhere)
    elif shape == "link inside":
        (out / "inside").mkdir(exist_ok=True)
        path.symlink_to(out / "inside")
    elif entry in _FILES:
        path.mkdir()  # a folder where a file belongs
    else:
        path.write_text("not a folder")


def _remove(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def test_generated_path_shapes_end_in_one_line_and_write_only_inside_out(finished, tmp_path_factory, capsys):
    start, cases, by_status = time.monotonic(), 0, {0: 0, 1: 0, 2: 0}
    here = os.getcwd()

    @settings(
        max_examples=40,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(
        entry=st.sampled_from(_FOLDERS + _FILES),
        shape=st.sampled_from(_SHAPES),
        depth=st.sampled_from([3, 60, 400]),
        spelled=st.sampled_from(["direct", "out a link", "a folder above a link"]),
        command=st.sampled_from(sorted(_COMMANDS)),
    )
    def case(entry, shape, depth, spelled, command):
        nonlocal cases
        if time.monotonic() - start > WALL_BUDGET_S:
            return
        scratch = tmp_path_factory.mktemp("shape")
        real = scratch / "scratch" / "out"
        shutil.copytree(finished, real, symlinks=True)
        (scratch / "elsewhere").mkdir()
        (scratch / "cwd").mkdir()
        if spelled == "out a link":
            out = scratch / "out"
            out.symlink_to(real)
        elif spelled == "a folder above a link":
            (scratch / "above").symlink_to(scratch / "scratch")
            out = scratch / "above" / "out"
        else:
            out = real
        try:
            _reshape(real, entry, shape, depth, scratch / "elsewhere")
            os.chdir(scratch / "cwd")
            before = listing(scratch, skip=(real, scratch / "cache"))
            main, argv = _COMMANDS[command]
            argv = [*argv, f"out={out}"] if main is STATEAWARE else [*argv, "--results", str(out)]
            outcome = run_main(main, argv)
        finally:
            os.chdir(here)
        what = (entry, shape, depth, spelled, command)
        assert outcome.status in (0, 1, 2), (what, outcome)
        assert not outcome.traceback, (what, outcome.stderr[-3000:])
        if outcome.status != 0:  # said, not crashed (verification lists its problems one per line)
            assert outcome.stderr.strip() or outcome.stdout.strip(), what
        refused = [line for line in outcome.error_lines if "is a symbolic link" in line]
        if refused:  # a link below out: one line, exit 2, the command said nothing else wrong
            assert outcome.status == 2 and len([e for e in outcome.error_lines if e.startswith("error")]) == 1, what
        if shape == "link outside" and command == "resume" and entry in _FOLDERS[5:]:
            assert refused and f"{real / entry} is a symbolic link" in refused[0], (what, outcome.stderr)
        after = listing(scratch, skip=(real, scratch / "cache"))
        assert after == before, (what, sorted(set(after) ^ set(before))[:5])
        cases += 1
        by_status[outcome.status] += 1
        shutil.rmtree(scratch, ignore_errors=True)

    old = os.environ.get("STATEAWARE_CACHE")
    os.environ["STATEAWARE_CACHE"] = str(tmp_path_factory.getbasetemp() / "fuzz-paths-cache")
    try:
        case()
    finally:
        if old is None:
            os.environ.pop("STATEAWARE_CACHE")
        else:
            os.environ["STATEAWARE_CACHE"] = old
    with capsys.disabled():
        counts = ", ".join(f"exit {k}: {v}" for k, v in by_status.items())
        print(f"\nfuzz path shapes: {cases} cases run in {time.monotonic() - start:.0f} s ({counts})")
    assert cases >= 5  # even on a busy machine, the budget covers a few
