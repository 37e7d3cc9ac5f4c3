"""``python -m stateaware.analysis COMMAND``: SQL and reports over a results directory.

The command line itself (one parser, one handler per command) is
``stateaware.commands.analysis``; this module is the path users type, and forwards to it.
"""

from __future__ import annotations

import sys

from stateaware.commands.analysis import create_parser, main
from stateaware.exits import run_main

__all__ = ["create_parser", "main"]

if __name__ == "__main__":
    # `sql` leaves nothing open once it has returned (its connection closed, the part checks
    # saved, its output flushed): it need not wait for the interpreter's teardown.
    run_main(main, skip_teardown=sys.argv[1:2] == ["sql"])
