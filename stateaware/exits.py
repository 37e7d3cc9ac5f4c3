"""How every command line ends: one line for an error, 130 for Ctrl-C, quiet on a closed pipe.

The three entry points (``python -m stateaware``, ``python -m stateaware.analysis``,
``python -m stateaware.plan``) run their ``main`` through ``run_main``, and parse
arguments with ``OneLineParser``, so

- invalid input ends in ONE line on stderr naming the field or file (exit 2, ``INVALID``);
- Ctrl-C prints ``interrupted; re-run the same command to resume`` (exit 130): records
  are written atomically per part, so re-running resumes where it stopped;
- a reader that closes the pipe early (``… | head -1``) ends the command quietly.

Genuine bugs still raise with a traceback: hiding one would hide where to look.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import NoReturn

__all__ = ["INVALID", "INTERRUPTED", "INTERRUPTED_MESSAGE", "OneLineParser", "int_at_least", "run_main", "fail"]

#: Exit status for invalid input (a bad argument, value, path or file).
INVALID = 2
#: Exit status after Ctrl-C: 128 + SIGINT, what a shell reports for an interrupted command.
INTERRUPTED = 130
#: Exit status after the reader of standard output went away: 128 + SIGPIPE, as for any
#: tool a closed pipe stops.
CLOSED_PIPE = 141
INTERRUPTED_MESSAGE = "interrupted; re-run the same command to resume"


class OneLineParser(argparse.ArgumentParser):
    """``argparse`` whose errors are one line (``PROG: error: …; see PROG --help``), exit 2."""

    def error(self, message: str) -> NoReturn:
        fail(f"{self.prog}: error: {message}; see {self.prog} --help")


def int_at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An ``argparse`` type: an integer >= ``minimum`` (and <= ``maximum`` where given); anything
    else, a huge number included, is refused by name before it reaches code with a fixed width."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum or (maximum is not None and value > maximum):
            allowed = f"in [{minimum:,}, {maximum:,}]" if maximum is not None else f">= {minimum}"
            raise argparse.ArgumentTypeError(f"must be an integer {allowed}, got {text!r}")
        return value

    return parse


def fail(message: str, status: int = INVALID) -> NoReturn:
    """Print ``message`` (made one line) to stderr and exit with ``status``."""
    print(" ".join(message.split("\n")).strip(), file=sys.stderr)
    sys.exit(status)


def run_main(main: Callable[[], int | None], *, skip_teardown: bool = False) -> NoReturn:
    """Run ``main`` and exit with its status, ending Ctrl-C and a closed pipe as documented above.

    ``skip_teardown``: once ``main`` has returned and standard output and error are flushed,
    end the process at once (``os._exit``) instead of tearing the interpreter down, which
    takes ~20 ms with DuckDB loaded (a tenth of a small query). Only for a command that
    leaves nothing open but those two streams: no atexit handler, buffered file or other
    thread runs after this.
    """
    try:
        status = main() or 0
        sys.stdout.flush()  # a closed pipe shows here for output still buffered
        if skip_teardown:
            sys.stderr.flush()
            os._exit(status)
    except KeyboardInterrupt:
        print(INTERRUPTED_MESSAGE, file=sys.stderr)
        status = INTERRUPTED
    except BrokenPipeError:
        # Python flushes stdout again at exit; point it at /dev/null so that flush is silent.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        status = CLOSED_PIPE
    sys.exit(status)
