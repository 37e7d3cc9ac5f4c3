"""Forwarding module: ``sql`` lives in ``stateaware.analysis.store.sql``.

Kept so that imports of ``stateaware.analysis.sql`` written before the move (scripts, the
benchmarks) keep working, with every public name.
"""

from stateaware.analysis.store import sql as _moved
from stateaware.analysis.store.sql import *  # noqa: F403
from stateaware.analysis.store.sql import __all__  # noqa: F401


def __getattr__(name: str) -> object:
    """Any other name of the module (one outside ``__all__`` a script reached for), from its new home."""
    return getattr(_moved, name)
