"""The name every pickled process spec carries: ``stateaware.launch.spec.ProcessSpec``.

The class lives in ``stateaware.kinds.process_spec`` (the contract a cohort kind shares with
the launcher); this module re-exports it, so specs pickled by any revision unpickle in any
other (see the NOTE there). Keep it.
"""

from stateaware.kinds.process_spec import ProcessSpec

__all__ = ["ProcessSpec"]
