"""Ctrl-C during a local launch: the launcher stops its workers, and only it says so.

A terminal sends Ctrl-C to its whole foreground process group: the launcher, and every
local worker submitit started (its ``submitit.local._local`` controller and the task under
it). Left alone, each controller dies printing its own ``KeyboardInterrupt`` traceback
on the launcher's terminal, and a worker interrupted only through its launcher keeps
running as an orphan. So, while :func:`workers_stop_with_launcher` is active:

- every controller starts with SIGINT ignored (a disposition a child inherits through
  ``exec``; its task inherits it in turn), so Ctrl-C reaches the launcher alone;
- on ``KeyboardInterrupt`` the launcher kills each controller it started, and the tasks
  under it, before the interrupt goes on to print its one line.

A killed worker wrote no status row, so re-running the same command launches it again;
its parts are written atomically, so nothing half-written is ever read. Slurm jobs are
the scheduler's and keep running (re-running the command collects them).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

__all__ = ["workers_stop_with_launcher"]


@contextlib.contextmanager
def workers_stop_with_launcher() -> Iterator[None]:
    """Within this block, local workers ignore Ctrl-C and die with an interrupted launcher."""
    from submitit.local import local

    original = local.start_controller
    started = []

    def start_immune(*args, **kwargs):
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            controller = original(*args, **kwargs)
        finally:
            signal.signal(signal.SIGINT, previous)
        started.append(controller)
        return controller

    local.start_controller = start_immune
    try:
        yield
    except KeyboardInterrupt:
        for controller in started:
            if controller.poll() is None:
                _kill_tree(controller.pid)
                controller.wait()
        raise
    finally:
        local.start_controller = original


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process under it (children first read from /proc)."""
    for child in _children(pid):
        _kill_tree(child)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError, ValueError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found
