"""Run a command line's ``main`` in this process, as a user's shell would run it, and see what it did.

The fuzz and bad-input tests drive hundreds of command lines; a fresh interpreter each
(~2 s with torch and Hydra) would cost minutes, so they call the entry points in-process:
``sys.argv`` patched, ``SystemExit`` caught, stdout and stderr captured.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Outcome", "run_main", "run_stateaware_in", "listing", "STATEAWARE", "ANALYSIS", "PLAN"]


@dataclass(frozen=True)
class Outcome:
    status: int
    stdout: str
    stderr: str

    @property
    def traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.stderr + self.stdout

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def _stateaware() -> None:
    from stateaware.cli import main

    main()


def _analysis() -> None:
    from stateaware.analysis.__main__ import main

    from stateaware.exits import run_main

    run_main(main)


def _plan() -> None:
    from stateaware.exits import run_main
    from stateaware.plan import main

    run_main(main)


STATEAWARE: Callable[[], None] = _stateaware
ANALYSIS: Callable[[], None] = _analysis
PLAN: Callable[[], None] = _plan


def run_main(main: Callable[[], None], argv: list[str], *, prog: str = "stateaware") -> Outcome:
    """``main()`` with ``sys.argv = [prog, *argv]``; its exit status and output.

    An exception escaping ``main`` is a traceback, as the user would have seen it."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv
    sys.argv = [prog, *argv]
    status = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException as exc:  # noqa: BLE001 - what a user would see as a traceback
                import traceback

                err.write("Traceback (most recent call last):\n" + "".join(traceback.format_exception(exc)))
                status = 1
    finally:
        sys.argv = saved
    return Outcome(status, out.getvalue(), err.getvalue())


def listing(*folders: Path | str, skip: tuple[Path, ...] = ()) -> dict[str, tuple[int, int]]:
    """Every path under ``folders`` (recursively) with its size and mtime, except under ``skip``:
    compare two listings to see what a command created or changed."""
    seen: dict[str, tuple[int, int]] = {}
    skipped = [Path(s).resolve() for s in skip]
    for folder in folders:
        for root, dirs, files in os.walk(folder):
            here = Path(root).resolve()
            if any(here == s or s in here.parents for s in skipped):
                dirs[:] = []
                continue
            dirs[:] = [d for d in dirs if (here / d) not in skipped]
            for name in dirs + files:
                path = here / name
                if path in skipped:
                    continue
                try:
                    st = path.lstat()
                except OSError:
                    continue
                seen[str(path)] = (st.st_size if name in files else 0, st.st_mtime_ns if name in files else 0)
    return seen


def run_stateaware_in(tmp_path: Path, argv: list[str]) -> Outcome:
    """``python -m stateaware cohort=demo out=… launcher=inline *argv`` in-process, from
    ``tmp_path/cwd`` with ``out`` at ``tmp_path/parent/out``; asserts it printed no traceback
    and created or changed nothing under ``tmp_path`` outside ``out``."""
    cwd, out = tmp_path / "cwd", tmp_path / "parent" / "out"
    cwd.mkdir(exist_ok=True)
    out.parent.mkdir(exist_ok=True)
    before = listing(tmp_path, skip=(out,))
    here = os.getcwd()
    os.chdir(cwd)
    try:
        outcome = run_main(_stateaware, ["cohort=demo", f"out={out}", "launcher=inline", *argv])
    finally:
        os.chdir(here)
    assert not outcome.traceback, outcome.stderr
    assert listing(tmp_path, skip=(out,)) == before  # nothing created or changed outside out
    return outcome
