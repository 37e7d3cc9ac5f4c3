"""Inputs read to a bound: the one reader for every input a command reads itself.

``read_bounded`` reads at most ``bound + 1`` bytes of a file, a FIFO, a device or
standard input, so ``/dev/zero`` or a multi-gigabyte file given as ``--file`` ends in one
line instead of filling memory, and a FIFO that no writer opens ends after ``wait`` seconds
instead of hanging. A refusal is ``InputError`` (a ``ValueError``): one line naming
the input and the bound, which every command reports as invalid input (exit 2).

# NOTE [ Never block on a path ]
# A path is opened with O_NONBLOCK: opening a FIFO for reading otherwise waits for a
# writer, forever. Anything but a regular file is then read through ``poll`` with the
# ``wait`` limit between chunks (a FIFO that no writer ever opened shows no hang-up on
# Linux, so poll is what waits). Standard input is the user's: it is never made
# non-blocking (that flag is shared with the shell) and it waits as long as the user does;
# Ctrl-C stops it.
"""

from __future__ import annotations

import os
import select
import stat
import sys

__all__ = ["InputError", "read_bounded", "STDIN", "WAIT_SECONDS"]

#: The name of standard input as an argument (``sql -``).
STDIN = "-"
#: How long a FIFO or device given by path may stay silent before it is refused.
WAIT_SECONDS = 5.0

_CHUNK = 1 << 16


class InputError(ValueError):
    """An input that cannot be read within its bound; the message names the input.

    ``too_big``: refused for holding more than the bound (not for being unreadable)."""

    def __init__(self, message: str, *, too_big: bool = False):
        super().__init__(message)
        self.too_big = too_big


def read_bounded(
    source: str | os.PathLike[str], *, what: str, bound: int, wait: float = WAIT_SECONDS, regular_only: bool = False
) -> bytes:
    """The bytes of ``source`` (a path, or ``STDIN``), at most ``bound`` of them.

    ``what`` names the input in messages (``--file q.sql``, ``standard input``). Raises
    ``InputError`` when the input holds more than ``bound`` bytes (read: at most
    ``bound + 1``), is a folder, cannot be opened or read, or — given by path and not a
    regular file — stays silent for ``wait`` seconds (NOTE [ Never block on a path ]).
    ``regular_only``: refuse anything but a regular file once it is open, never reading it.
    """
    if os.fspath(source) == STDIN:
        return _read(sys.stdin.buffer.fileno(), what, bound, None, regular_only)
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputError(f"{what}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{what}: a directory, not a file") from None
    except OSError as exc:
        raise InputError(f"{what}: cannot be opened ({exc.strerror or exc})") from None
    try:
        return _read(fd, what, bound, wait, regular_only)
    finally:
        os.close(fd)


def _read(fd: int, what: str, bound: int, wait: float | None, regular_only: bool) -> bytes:
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode):
        raise InputError(f"{what}: a directory, not a file")
    regular = stat.S_ISREG(mode)
    if regular_only and not regular:
        raise InputError(f"{what}: not a regular file")
    if regular and os.fstat(fd).st_size > bound:
        raise _too_big(what, bound)
    chunks: list[bytes] = []
    size = 0
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    while size <= bound:
        if not regular and not poller.poll(None if wait is None else int(wait * 1000)):
            raise InputError(
                f"{what}: no data for {wait:g} s (a FIFO no writer opened?); write to it from another "
                "process while the command runs, or pass a regular file"
            )
        try:
            chunk = os.read(fd, min(_CHUNK, bound + 1 - size))
        except BlockingIOError:
            continue
        except OSError as exc:
            raise InputError(f"{what}: cannot be read ({exc.strerror or exc})") from None
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > bound:
        raise _too_big(what, bound)
    return b"".join(chunks)


def _too_big(what: str, bound: int) -> InputError:
    return InputError(f"{what}: more than {bound:,} bytes; an input is read to at most {bound:,} bytes", too_big=True)
