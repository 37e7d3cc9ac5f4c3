"""Ctrl-C during a local launch: the launcher stops its workers, and only it says so.

A terminal sends Ctrl-C to its whole foreground process group: the launcher, and every
local worker submitit started (its ``submitit.local._local`` controller and the task under
it). Left alone, each controller dies printing its own ``KeyboardInterrupt`` traceback
on the launcher's terminal, and a worker interrupted only through its launcher keeps
running as an orphan. So, while ``workers_stop_with_launcher`` is active:

- every controller starts with SIGINT blocked (a signal mask a child inherits through
  ``fork`` and keeps through ``exec``; its task inherits it in turn), so Ctrl-C reaches
  the launcher alone. While the launcher starts one, a Ctrl-C is caught and deferred
  until the controller is counted, so it is neither lost nor leaves an uncounted worker;
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

from submitit.local import local

__all__ = ["workers_stop_with_launcher"]


@contextlib.contextmanager
def workers_stop_with_launcher() -> Iterator[None]:
    """Within this block, local workers ignore Ctrl-C and die with an interrupted launcher."""
    original = local.start_controller
    started = []

    def start_immune(*args, **kwargs):
        with _sigint_held():
            controller = original(*args, **kwargs)
            started.append(controller)  # before a held Ctrl-C can arrive
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


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """Children started within never see Ctrl-C; one that reaches this process arrives on leaving.

    SIGINT is blocked in this thread, whose mask a child inherits. Blocking alone is not
    enough: the kernel may hand the signal to another thread (tqdm's monitor, a BLAS pool),
    whose handler makes Python raise in this one at once — in the middle of starting the
    child. So a handler that only notes the signal stands in, and the one it replaced runs
    on leaving. (Ignoring the signal instead, which ``exec`` also keeps, would drop a Ctrl-C
    delivered to another thread.) A process started with SIGINT ignored (``nohup``, ``cmd &``)
    keeps ignoring it, and so do its children.
    """
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    caught: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    # Ignored: children inherit that. None: a handler installed outside Python, left alone.
    standing_in = previous is not signal.SIG_IGN and previous is not None
    if standing_in:
        signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one pending for this thread is noted now
        if standing_in:
            signal.signal(signal.SIGINT, previous)
        if caught:
            if callable(previous):
                previous(signal.SIGINT, None)  # Python's own raises KeyboardInterrupt
            else:
                signal.raise_signal(signal.SIGINT)  # SIG_DFL: end as an uncaught Ctrl-C would


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
