"""One progress line, with an ETA, while ``stateaware.auto`` profiles a model and keeps a budget.

Profiling runs every segment under every option and then measures whole steps; on a real
model that takes seconds to minutes, and a silent call looks hung. ``Progress`` counts
those measurements on stderr: through ``tqdm`` where it is installed (it is no core
dependency), else one line rewritten in place with ``\\r``.

NOTE [ When auto talks ]
    ``progress=None`` (the default of every call that profiles) shows the line only when
    stderr is a terminal, so logs, pipes, CI and notebooks capturing stderr stay as
    they were; ``progress=True`` shows it anyway, ``progress=False`` never. The line is
    drawn between measurements, never inside a measured window (the CPU windows capture
    fd 2), and is finished with a newline when the call returns or raises.
"""

from __future__ import annotations

import sys
import time
from typing import Any

__all__ = ["Progress", "progress_line"]


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    """``total`` measurements counted on stderr as they end, with an ETA (module docstring).

    ``enabled``: None shows the line only when stderr is a terminal. ``add(n)`` grows the
    total (the work a later phase adds once it is known), ``at(note)`` names the
    measurement running, ``step()`` counts one done, ``reach(n)`` counts up to ``n`` done
    (work found unnecessary), ``close()`` ends the line. Disabled, every method does
    nothing and nothing is written.
    """

    def __init__(self, total: int, what: str, enabled: bool | None = None) -> None:
        stream = sys.stderr
        if enabled is None:
            enabled = stream is not None and hasattr(stream, "isatty") and stream.isatty()
        self.enabled = bool(enabled) and stream is not None
        self.what, self.total, self.done, self.note = what, total, 0, ""
        self.start = time.monotonic()
        self.width = 0
        self.closed = False
        self.bar: Any = None
        if self.enabled:
            try:
                # lazy: tqdm is optional: without it the line is drawn by hand (the ImportError below)
                from tqdm import tqdm
            except ImportError:
                self.bar = None
            else:
                self.bar = tqdm(total=total, desc=what, unit="step", file=stream, dynamic_ncols=True, mininterval=0)
            self._draw()

    def add(self, n: int) -> None:
        """Grow the total by ``n`` measurements."""
        self.total += n
        if self.bar is not None:
            self.bar.total = self.total
        self._draw()

    def at(self, note: str) -> None:
        """Name the measurement running now."""
        self.note = note
        self._draw()

    def step(self) -> None:
        """One measurement done."""
        self.reach(self.done + 1)

    def reach(self, done: int) -> None:
        """Count ``done`` measurements done (at most the total; never fewer than before)."""
        done = max(min(done, self.total), self.done)
        if self.bar is not None:
            self.bar.update(done - self.done)
        self.done = done
        self._draw()

    def close(self, complete: bool = False) -> None:
        """End the line; ``complete``: the work left was not needed (count it done)."""
        if self.closed:
            return
        self.closed = True
        if complete:
            self.reach(self.total)
        if self.done >= self.total and self.note:  # all done: the last line names nothing running
            self.note = ""
            self._draw()
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()

    def _draw(self) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(self.note, refresh=True)
            return
        elapsed = time.monotonic() - self.start
        eta = _clock(elapsed / self.done * (self.total - self.done)) if self.done else "?"
        line = f"{self.what}: {self.done}/{self.total} [{_clock(elapsed)} elapsed, ETA {eta}]"
        line += f" {self.note}" if self.note else ""
        sys.stderr.write("\r" + line.ljust(self.width))
        sys.stderr.flush()
        self.width = len(line)


def progress_line(progress: Any, total: int, what: str) -> tuple[Progress, bool]:
    """``(line, owned)`` for a ``progress`` keyword: ``progress`` itself when it is a
    ``Progress`` a caller shares (grown by ``total``), else a new line of ``total`` that
    the caller owns and closes. ``ValueError`` naming the keyword for anything but None,
    True, False or a ``Progress``."""
    if isinstance(progress, Progress):
        progress.add(total)
        return progress, False
    if progress is not None and not isinstance(progress, bool):
        raise ValueError(f"progress={progress!r}; valid values are None (shown when stderr is a terminal), True, False")
    return Progress(total, what, progress), True
