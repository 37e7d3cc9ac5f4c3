"""Forwarding module: ``views`` lives in ``stateaware.analysis.store.views``.

Kept so that ``from stateaware.analysis.views import connect`` (and every public name of
the views) keeps working.
"""

from stateaware.analysis.store import views as _moved
from stateaware.analysis.store.views import *  # noqa: F403
from stateaware.analysis.store.views import __all__  # noqa: F401


def __getattr__(name: str) -> object:
    """Any other name of the module (one outside ``__all__`` a script reached for), from its new home."""
    return getattr(_moved, name)
